"""Fleet overview, node list pages and the node export at 10,000 / 40,000 / 100,000 GPUs, against
per-node-query baselines, with how each grows.

    .venv/bin/python bench/fleet_page.py [--gpus 10000,40000,100000] [--repeat 15] [--naive-up-to 40000]

For each size builds a throwaway database (a SQLite file in a temporary folder, or a test_ copy
of the DATABASE_URL database), fills it with nodes of 8 GPUs, running workloads, cordoned nodes
and unhealthy GPUs, then requests each page N times through django.test.Client as a logged-in
operator. Prints cold and median warm server time and the SQL query count of each, beside the
baseline: the overview and list pages built the obvious way, with queries per node, and the
export beside every node in one JSON answer (the list before it was paginated)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

# Django and the apps are imported inside the functions below: the benchmark builds its own database
# (SQLite in a temporary folder, or a scratch PostgreSQL one) before django.setup() reads the settings.

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
TARGET_MS = 300


def build_fleet(nodes: int) -> None:
    from django.contrib.auth.models import Group, User
    from django.utils import timezone

    from core.roles import OPERATORS_GROUP
    from fleet.choices import GpuHealth, NodeState
    from fleet.models import Gpu, GpuFlavor, Node, Rack, Spine
    from scheduling.models import Allocation, PodSet, PriorityClass, Queue, Team, Workload

    now = timezone.now()
    flavors = GpuFlavor.objects.bulk_create(
        GpuFlavor(name=n, product=p, memory_mib=m)
        for n, p, m in [("H100-SXM-80GB", "NVIDIA H100 80GB HBM3", 81559),
                        ("A100-SXM-80GB", "NVIDIA A100-SXM4-80GB", 81920),
                        ("L40S-48GB", "NVIDIA L40S", 46068)]
    )
    spines = Spine.objects.bulk_create(Spine(name=f"s{i}") for i in range(1, 11))
    racks = Rack.objects.bulk_create(
        Rack(name=f"r{i}", spine=spines[i % len(spines)]) for i in range(1, (nodes + 7) // 8 + 1)
    )
    Node.objects.bulk_create(
        Node(
            name=f"n{i}", rack=racks[i // 8], flavor=flavors[0 if i % 10 < 6 else 1 if i % 10 < 9 else 2],
            state=NodeState.CORDONED if i % 20 == 7 else NodeState.READY,
            cordon_reason="firmware update" if i % 20 == 7 else "",
            cordoned_by="ops" if i % 20 == 7 else "", cordoned_at=now if i % 20 == 7 else None,
        )
        for i in range(nodes)
    )
    node_rows = list(Node.objects.values_list("id", "flavor__product", "flavor__memory_mib"))
    Gpu.objects.bulk_create(
        (
            Gpu(node_id=nid, index=g, uuid=f"GPU-{nid:05d}-{g}", pci_bus_id=f"0000:{0x18 + g:02x}:00.0",
                product=product, memory_mib=mib,
                health=GpuHealth.UNHEALTHY if (nid * 8 + g) % 97 == 0 else GpuHealth.HEALTHY)
            for nid, product, mib in node_rows
            for g in range(8)
        ),
        batch_size=2000,
    )
    team = Team.objects.create(name="research")
    queue = Queue.objects.create(name="research", team=team)
    prio = PriorityClass.objects.create(name="batch", value=100)
    gpu_ids = list(Gpu.objects.order_by("node_id", "index").values_list("id", flat=True))
    # Three nodes in five busy; every seventh of those only partly (5 of 8 GPUs): fragmentation.
    held = [gid for i, gid in enumerate(gpu_ids) if (i // 8) % 5 < 3 and ((i // 8) % 7 or i % 8 < 5)]
    workloads = Workload.objects.bulk_create(
        Workload(name=f"job-{i}", team=team, queue=queue, priority_class=prio, state="running")
        for i in range((len(held) + 7) // 8)
    )
    pod_sets = PodSet.objects.bulk_create(
        PodSet(workload=w, name="workers", replicas=1, gpus_per_replica=8) for w in workloads
    )
    Workload.objects.filter(pk__in=[w.pk for w in workloads]).gpus_asked_refresh()
    Allocation.objects.bulk_create(
        (Allocation(workload=workloads[i // 8], pod_set=pod_sets[i // 8], replica=0, gpu_id=gid)
         for i, gid in enumerate(held)),
        batch_size=2000,
    )
    user = User.objects.create_user("bench-ops", password="bench-ops-pw")
    user.groups.add(Group.objects.create(name=OPERATORS_GROUP))


def naive_fleet_overview():
    """The overview written the obvious way: for each node, read its GPUs, then its allocations."""
    from console import selectors
    from fleet.models import GpuFlavor, Node
    from scheduling.models import Allocation

    capacity = {f.name: selectors.FlavorCapacity(flavor=f.name) for f in GpuFlavor.objects.all()}
    racks: dict[str, selectors.RackRow] = {}
    cordoned = []
    for node in Node.objects.select_related("rack__spine", "flavor"):
        gpus = list(node.gpus.order_by("index"))
        allocated = set(
            Allocation.objects.filter(gpu__node=node, released_at__isnull=True).values_list("gpu_id", flat=True)
        )
        rows = [(g.pk, g.index, g.health) for g in gpus]
        cap = capacity[node.flavor.name]
        box = selectors._node_box(node.name, node.state, node.flavor.name, rows, allocated, {}, cap)
        racks.setdefault(node.rack.name, selectors.RackRow(node.rack.name, node.rack.spine.name)).nodes.append(box)
        if node.state not in ("ready", "unknown"):
            cordoned.append(selectors.CordonedNode(node.name, node.state, box.state_label, box.color,
                                                   node.cordon_reason, node.cordoned_by, node.cordoned_at))
    flavors = sorted(capacity.values(), key=lambda c: c.flavor)
    total = selectors.FlavorCapacity(flavor="All")
    for cap in flavors:
        total.add(cap)
    return selectors.FleetOverview(flavors, total, list(racks.values()), cordoned)


def naive_node_list(limit: int = 500) -> bytes:
    """GET /api/v1/nodes/ without select_related or annotations: every node reads its own
    rack, spine, flavor and GPU counts."""
    from fleet.models import Node

    items = []
    for node in Node.objects.order_by("name")[:limit]:
        gpus = node.gpus.all()
        items.append({
            "name": node.name, "rack": node.rack.name, "spine": node.rack.spine.name if node.rack.spine else None,
            "flavor": node.flavor.name if node.flavor else None, "state": node.state,
            "cordon_reason": node.cordon_reason, "gpu_total": gpus.count(),
            "gpu_unhealthy": gpus.filter(health="unhealthy").count(),
            "gpu_allocated": gpus.filter(allocations__released_at__isnull=True).distinct().count(),
        })
    return json.dumps({"count": Node.objects.count(), "results": items}, default=str).encode()


def all_nodes_json() -> bytes:
    """The baseline of the export: every node in one JSON answer, through the list's serializer and
    queryset (what GET /api/v1/nodes/ answered before it was paginated)."""
    from rest_framework.renderers import JSONRenderer

    from fleet.api.serializers import NodeSerializer
    from fleet.models import Node

    return JSONRenderer().render(NodeSerializer(Node.objects.with_topology().with_gpu_counts(), many=True).data)


def measure(fn: Callable[[], object], repeat: int) -> tuple[float, float, int]:
    """Cold (the first call: empty caches, a fresh connection's plans) and median warm wall time in ms
    over `repeat` runs, and the queries of one run."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    start = time.perf_counter()
    fn()
    cold = (time.perf_counter() - start) * 1000
    with CaptureQueriesContext(connection) as captured:
        fn()
    # Read now: the slice is taken lazily from the log, which later requests reset.
    queries = len(captured)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return cold, statistics.median(times), queries


def measure_size(nodes: int, repeat: int, naive: bool) -> dict[str, tuple]:
    """One fleet of `nodes` x 8 GPUs in a scratch database: each row's (ours, baseline or None)."""
    from django.db import connection
    from django.test import Client

    from console.selectors import fleet_overview
    from core.pagination import MAX_PAGE_LIMIT
    from fleet.models import Gpu, Node

    original = connection.settings_dict["NAME"]
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        started = time.perf_counter()
        build_fleet(nodes)
        print(f"\n== {nodes:,} nodes, {Gpu.objects.count():,} GPUs ({connection.vendor}, {db_name}); built in "
              f"{time.perf_counter() - started:.1f} s")
        ours = fleet_overview()
        if naive:
            check = naive_fleet_overview()
            assert (ours.total, len(ours.cordoned)) == (check.total, len(check.cordoned)), "baseline disagrees"
        print(f"   overview: {ours.total.allocatable:,} allocatable, {ours.total.allocated:,} allocated, "
              f"{ours.total.fully_free_nodes:,} fully free nodes, {len(ours.cordoned)} cordoned")

        client = Client()
        assert client.login(username="bench-ops", password="bench-ops-pw")

        def get(path: str) -> Callable[[], object]:
            def fetch():
                response = client.get(path)
                assert response.status_code == 200, (path, response.status_code)
                if response.streaming:
                    return b"".join(response.streaming_content)
                return response.content
            return fetch

        def walk_pages() -> int:
            url, rows = f"/api/v1/nodes/?limit={MAX_PAGE_LIMIT}", 0
            while url:
                body = json.loads(get(url)())
                rows += len(body["results"])
                url = body["next"]
            assert rows == Node.objects.count()
            return rows

        def first_byte() -> bytes:
            response = client.get("/api/v1/nodes/export/")
            chunk = next(iter(response.streaming_content))
            response.close()
            return chunk

        def overview_page_naive():
            with mock.patch("console.views.fleet_overview", naive_fleet_overview):
                return get("/")()

        slow = max(3, repeat // 3)
        exported = get("/api/v1/nodes/export/")().count(b"\n") - 1
        assert exported == Node.objects.count(), (exported, Node.objects.count())
        def naive_page(limit: int) -> Callable[[], object] | None:
            return (lambda: naive_node_list(limit)) if naive else None

        rows: dict[str, tuple] = {
            "fleet overview selector": (fleet_overview, naive_fleet_overview if naive else None),
            "GET / (overview page)": (get("/"), overview_page_naive if naive else None),
            "GET /api/v1/nodes/ (default page, 500)": (get("/api/v1/nodes/"), naive_page(500)),
            f"GET /api/v1/nodes/?limit={MAX_PAGE_LIMIT}": (get(f"/api/v1/nodes/?limit={MAX_PAGE_LIMIT}"),
                                                           naive_page(MAX_PAGE_LIMIT)),
            f"all nodes: every page of {MAX_PAGE_LIMIT}": (walk_pages, None),
            "all nodes: GET /api/v1/nodes/export/ CSV": (get("/api/v1/nodes/export/"), all_nodes_json),
            "export: first byte of the stream": (first_byte, None),
        }
        return {label: (measure(fn, repeat), measure(base, slow) if base else None)
                for label, (fn, base) in rows.items()}
    finally:
        # Back to the original name, so the next size's scratch database is test_<name> again.
        connection.creation.destroy_test_db(original, verbosity=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="10000,40000,100000", help="fleet sizes in GPUs (8 per node)")
    parser.add_argument("--repeat", type=int, default=15, help="timed runs of ours (the baseline gets a third)")
    parser.add_argument("--naive-up-to", type=int, default=40000,
                        help="run the per-node-query baselines (overview, list pages) up to this many GPUs (slow)")
    args = parser.parse_args()
    try:
        sizes = [int(x) // 8 for x in args.gpus.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1 or args.repeat < 1:
        print("error: --gpus must be a comma-separated list of sizes >= 8, --repeat >= 1", file=sys.stderr)
        return 2
    tmp = tempfile.TemporaryDirectory(prefix="fleetdeck-bench-")
    os.environ["FLEETDECK_VAR_DIR"] = tmp.name
    (Path(tmp.name) / "staticfiles").mkdir()  # STATIC_ROOT: WhiteNoise warns when it is missing

    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    if connection.vendor == "sqlite":
        connection.settings_dict["TEST"]["NAME"] = str(Path(tmp.name) / "bench.sqlite3")
    else:
        # A name of its own: test_<name> is the test suite's, which may be running at the same time.
        connection.settings_dict["TEST"]["NAME"] = f"{connection.settings_dict['NAME']}_bench_fleet_page_{os.getpid()}"
    print("timed: server time of each request through django.test.Client as a logged-in operator (URL routing, "
          "middleware,\nsession, queries, rendering; a streamed answer read to its end), no network. cold = the "
          f"first request, warm = median of {args.repeat}\n(baselines: a third of that, at least 3).")
    results = {}
    try:
        for nodes in sizes:
            results[nodes] = measure_size(nodes, args.repeat, naive=nodes * 8 <= args.naive_up_to)
            print(f"{'':42} {'cold ms':>9} {'warm ms':>9} {'queries':>8}   {'baseline ms':>11} {'queries':>8}")
            for label, ((cold, ms, q), base) in results[nodes].items():
                flag = "" if ms < TARGET_MS else f"  over {TARGET_MS} ms"
                other = f"{base[1]:11.1f} {base[2]:8d}" if base else f"{'-':>11} {'-':>8}"
                print(f"{label:42} {cold:9.1f} {ms:9.1f} {q:8d}   {other}{flag}")
    finally:
        tmp.cleanup()
    print("\nbaselines: the overview and the page built with queries per node (naive_fleet_overview), the list pages "
          "with\nqueries per node (naive_node_list), the export against every node in one JSON answer (the list before "
          "pagination).")
    if len(sizes) > 1:
        print("\nscaling, warm ms (growth from the size before; linear = the same factor as the GPUs)")
        print(f"{'':42}" + "".join(f"{n * 8:>10,} GPUs" + (f" ({n / sizes[i - 1]:g}x)" if i else "      ")
                                   for i, n in enumerate(sizes)))
        for label in results[sizes[0]]:
            cells = [results[n][label][0][1] for n in sizes]
            print(f"{label:42}" + "".join(f"{c:>15.1f}" + (f" ({c / cells[i - 1]:3.1f}x)" if i else "       ")
                                          for i, c in enumerate(cells)) + f"   {growth(cells, sizes)}")
    return 0


def growth(cells: list[float], sizes: list[int]) -> str:
    """Flat, linear or worse, from the first size to the last (a rough reading: the machine's noise
    moves one factor by tens of percent)."""
    grew, size = cells[-1] / cells[0], sizes[-1] / sizes[0]
    if grew < size ** 0.5:
        return "flat"
    return "linear" if grew < 1.5 * size else "worse than linear"


if __name__ == "__main__":
    sys.exit(main())
