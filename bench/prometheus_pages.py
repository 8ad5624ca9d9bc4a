"""Pages at fleet scale with Prometheus as the telemetry source, next to the built-in minute history.

    DATABASE_URL=postgres://... .venv/bin/python bench/prometheus_pages.py [--gpus 10000] [--days 7]
        [--step 15] [--history-hours H] [--repeat 5] [--backfill auto|promtool|blockwriter]
        [--builtin-fill auto|scrape|sql] [--builtin-history-hours B]

One run, one fleet (bench/fleet_page.py's: 8 GPUs a node, three in five nodes busy):

1. The built-in path: the latest reading of every GPU and the one-minute history Fleetdeck keeps
   itself (GpuReadingMinute), in a throwaway database.
   `--builtin-fill scrape` writes every minute through readings_store, as the DCGM scrape does;
   `sql` (auto above a million rows, on PostgreSQL) writes the latest readings through
   readings_store and the older minute rows, the same columns and values, with INSERT ... SELECT
   over generate_series, an hour of the fleet per statement (100 million rows at 10,000 GPUs and
   7 days would take days through the Python path).
2. The Prometheus path: a real Prometheus (Debian's `prometheus`) on a backfilled TSDB: every GPU's
   `fleetdeck:gpu_sm_active:ratio` at --step seconds over --days days (what the recording rules
   would have written), and each queue's `fleetdeck:queue_flavor_utilised_gpus:sum`, in blocks of
   24 h. `--backfill promtool` writes OpenMetrics text and runs `promtool tsdb create-blocks-from
   openmetrics`; `blockwriter` (auto above 20 million samples, when `go` is on PATH) writes the
   same samples with the same tsdb.BlockWriter that promtool uses, from bench/tsdb_backfill/ (Go,
   prometheus v0.42.0, the version of Debian's Prometheus 2.42; built once into
   $FLEETDECK_BENCH_CACHE, default /var/cache/fleetdeck-bench), without ~40 GB of text that promtool
   2.42 would parse again for every block. Prometheus runs with a 24 h maximum block duration so it
   does not compact the blocks while the pages are timed.

--builtin-history-hours B keeps only the last B hours of minute rows in the built-in store (the
Prometheus side keeps --history-hours); the output says so. The pages read the minute history only
in the idle-allocated check (its last 30 minutes, through the (gpu, minute) index); the overview
reads the latest readings and the team page's charts the usage samples, so B changes the table's
size, not what the pages read.

For each: the server time of the overview page, a team page and the idle-allocated check: the
first call (cold: Prometheus just started, PostgreSQL as the fill left it) and the median of
--repeat calls after it (warm), with the SQL and PromQL queries each sends. Then the built-in path's
database growth per day at 10,000 and 50,000 GPUs (rows, and bytes from the measured size of a row
with its indexes) next to zero for the Prometheus path, whose readings_store writes no minute row.

The default is the issue's size: seven days of 15 s samples for 10,000 GPUs (403 million samples,
about 40 GB of OpenMetrics text before backfill). --history-hours H keeps only the last H hours of
the per-GPU series in both stores (the queue series keep all --days days); the output says so."""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")
IDLE_EVERY = 13  # every 13th allocated GPU idles (SM active 1 %) for the whole history


def activity(gpu_number: int, t: int, idle: bool) -> float:
    """A GPU's SM activity at unix time t: busy ones wander between 30 and 90 %."""
    if idle:
        return 0.01
    return round(0.3 + 0.6 * (((gpu_number * 7919 + t // 60) % 101) / 100), 3)


def write_openmetrics(path: Path, *, gpus: list[tuple[str, str, int, bool]], queues: list[dict[str, str]],
                      start: int, end: int, step: int, history_start: int) -> int:
    """The backfill input: per-GPU series from history_start, per-queue series from start; returns samples."""
    samples = 0
    with path.open("w", buffering=16 * 1024 * 1024) as out:
        out.write("# HELP fleetdeck:gpu_sm_active:ratio SM activity of one GPU (recording rule)\n"
                  "# TYPE fleetdeck:gpu_sm_active:ratio gauge\n")
        times = range(history_start - history_start % step, end + 1, step)
        for number, (uuid, host, index, idle) in enumerate(gpus):
            labels = f'fleetdeck:gpu_sm_active:ratio{{UUID="{uuid}",Hostname="{host}",gpu="{index}"}} '
            if idle:
                out.write("".join(f"{labels}0.01 {t}\n" for t in times))
            else:
                out.write("".join(f"{labels}{activity(number, t, False)} {t}\n" for t in times))
            samples += len(times)
        out.write("# HELP fleetdeck:queue_flavor_utilised_gpus:sum Utilised GPUs of a queue (recording rule)\n"
                  "# TYPE fleetdeck:queue_flavor_utilised_gpus:sum gauge\n")
        queue_times = range(start - start % step, end + 1, step)
        for queue in queues:
            text = ",".join(f'{k}="{v}"' for k, v in queue.items() if k != "gpus")
            base = float(queue["gpus"]) * 0.55
            out.write("".join(f"fleetdeck:queue_flavor_utilised_gpus:sum{{{text}}} "
                              f"{round(base * (0.8 + 0.2 * ((t // 3600) % 5) / 4), 2)} {t}\n" for t in queue_times))
            samples += len(queue_times)
        out.write("# EOF\n")
    return samples


def measure(fn: Callable[[], object], repeat: int, promql: Callable[[], int]) -> tuple[float, float, int, int]:
    """The first (cold) call's ms and the median ms of `repeat` calls after it; SQL and PromQL
    queries of one call."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    started = time.perf_counter()
    fn()
    cold = (time.perf_counter() - started) * 1000
    before = promql()
    with CaptureQueriesContext(connection) as captured:
        fn()
    sql, sent = len(captured), promql() - before
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return cold, statistics.median(times), sql, sent


def fill_builtin(now: datetime, minutes: int) -> tuple[int, int]:
    """The built-in store: every GPU's latest reading and `minutes` of minute history, as the
    DCGM scrape writes them (readings_store); returns (minute rows, their bytes with indexes)."""
    from fleet.models import Gpu
    from health.models import GpuReadingMinute
    from health.services import ReadingRow, readings_store

    ids = list(Gpu.objects.order_by("node_id", "index").values_list("id", "node_id", "index"))
    idle = _idle_gpu_ids()
    before = _table_bytes()
    for minute in range(minutes, -1, -1):
        at = now - timedelta(minutes=minute)
        t = int(at.timestamp())
        rows = [ReadingRow(gpu_id=gid, sm_active=activity(n, t, gid in idle), fb_used_mib=40000.0,
                           temperature_c=55.0, power_w=500.0) for n, (gid, _node, _index) in enumerate(ids)]
        readings_store(rows=rows, source="dcgm", now=at)
    count = GpuReadingMinute.objects.count()
    return count, _table_bytes() - before


def fill_builtin_sql(now: datetime, minutes: int) -> tuple[int, int]:
    """The same store as fill_builtin, the latest minute through readings_store and the `minutes`
    before it with INSERT ... SELECT (PostgreSQL), the same values activity() gives, minute by
    minute in time order as the scrape writes them; returns (minute rows, their bytes)."""
    from django.db import connection

    from fleet.models import Gpu
    from health.models import GpuReadingMinute
    from health.services import ReadingRow, readings_store
    from health.services.readings import minute_of

    ids = list(Gpu.objects.order_by("node_id", "index").values_list("id", flat=True))
    idle = _idle_gpu_ids()
    before = _table_bytes()
    t = int(now.timestamp())
    readings_store(rows=[ReadingRow(gpu_id=gid, sm_active=activity(n, t, gid in idle), fb_used_mib=40000.0,
                                    temperature_c=55.0, power_w=500.0) for n, gid in enumerate(ids)],
                   source="dcgm", now=now)
    last = minute_of(now)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE bench_gpu_order (gpu_id bigint, n bigint, idle boolean)")
        cursor.executemany("INSERT INTO bench_gpu_order VALUES (%s, %s, %s)",
                           [(gid, n, gid in idle) for n, gid in enumerate(ids)])
        for hour_start in range(minutes, 0, -60):  # oldest hour first
            cursor.execute(
                "INSERT INTO health_gpureadingminute (gpu_id, minute, sm_active, fb_used_mib, temperature_c, power_w) "
                "SELECT g.gpu_id, m.at, CASE WHEN g.idle THEN 0.01 ELSE round((0.3 + 0.6 * (mod(g.n * 7919 + "
                "extract(epoch FROM m.at)::bigint / 60, 101) / 100.0))::numeric, 3)::float8 END, 40000, 55, 500 "
                "FROM generate_series(%s::timestamptz - make_interval(mins => %s), "
                "%s::timestamptz - make_interval(mins => %s), interval '1 minute') AS m(at) "
                "CROSS JOIN bench_gpu_order g ORDER BY m.at, g.n",
                [last, hour_start, last, max(1, hour_start - 59)])
            done = minutes - hour_start + 60
            if done % (24 * 60) < 60:
                print(f"  built-in SQL fill: {min(done, minutes) / 60:.0f} h of {minutes / 60:.0f} h in "
                      f"{time.perf_counter() - started:.0f} s", flush=True)
        cursor.execute("DROP TABLE bench_gpu_order")
        cursor.execute("ANALYZE health_gpureadingminute")
    return GpuReadingMinute.objects.count(), _table_bytes() - before


def _idle_gpu_ids() -> set[int]:
    from scheduling.models import Allocation

    held = sorted(Allocation.objects.filter(released_at__isnull=True).values_list("gpu_id", flat=True))
    return {gid for i, gid in enumerate(held) if i % IDLE_EVERY == 0}


def _table_bytes() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_total_relation_size('health_gpureadingminute')")
            return int(cursor.fetchone()[0])
        cursor.execute("PRAGMA page_count")
        pages = cursor.fetchone()[0]
        cursor.execute("PRAGMA page_size")
        return int(pages * cursor.fetchone()[0])


def usage_samples(now: datetime, days: int) -> None:
    """Five-minute quota usage samples for the team page's 30-day chart (both paths draw them)."""
    from fleet.models import GpuFlavor
    from scheduling.models import Queue, QueueUsageSample

    queue = Queue.objects.get(name="research")
    rows = [
        QueueUsageSample(queue=queue, flavor=flavor, at=now - timedelta(minutes=5 * i), nominal=4000, in_use=3600,
                         utilised=2000.0, borrowed=0, lent=0, pending_demand=0)
        for flavor in GpuFlavor.objects.all() for i in range(days * 24 * 12)
    ]
    QueueUsageSample.objects.bulk_create(rows, batch_size=5000)


def blockwriter() -> Path:
    """bench/tsdb_backfill built once per source version into the cache (like the Kubernetes
    test cluster's binaries): its key is the hash of its sources and go.sum."""
    import hashlib

    source = ROOT / "bench" / "tsdb_backfill"
    digest = hashlib.sha256(b"".join((source / f).read_bytes() for f in ("main.go", "go.mod", "go.sum")))
    cache = Path(os.environ.get("FLEETDECK_BENCH_CACHE", "/var/cache/fleetdeck-bench"))
    binary = cache / f"tsdb_backfill-prometheus-v0.42.0-{digest.hexdigest()[:12]}"
    if not binary.exists():
        cache.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        subprocess.run(["go", "build", "-o", str(binary), "."], cwd=source, check=True)
        print(f"built {binary} in {time.perf_counter() - started:.0f} s (once; cached)")
    return binary


def backfill_blockwriter(work: Path, *, gpus: list[tuple[str, str, int, bool]], queues: list[dict[str, str]],
                         start: int, end: int, step: int, history_start: int) -> tuple[int, str]:
    """The same series as write_openmetrics + promtool, written as TSDB blocks by bench/tsdb_backfill."""
    import json

    spec = {"start": start, "history_start": history_start, "end": end, "step": step, "block_hours": 24,
            "gpus": [{"uuid": u, "hostname": h, "index": i, "idle": idle} for u, h, i, idle in gpus],
            "queues": [{"labels": {k: v for k, v in q.items() if k != "gpus"}, "gpus": float(q["gpus"])}
                       for q in queues]}
    (work / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run([str(blockwriter()), "-spec", str(work / "spec.json"), "-out", str(work / "tsdb"),
                           "-parallel", "2"], check=True, capture_output=True, text=True)
    return int(done.stdout.split()[0]), done.stdout.strip()


def start_prometheus(data: Path, port: int) -> subprocess.Popen:
    import httpx

    process = subprocess.Popen(
        ["prometheus", f"--config.file={data / 'prometheus.yml'}", f"--storage.tsdb.path={data / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=60d",
         "--storage.tsdb.max-block-duration=24h", "--log.level=warn"],
        stdout=(data / "prometheus.log").open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise SystemExit(f"prometheus exited: {(data / 'prometheus.log').read_text()[-2000:]}")
        time.sleep(0.5)
    raise SystemExit("prometheus did not become ready in 5 minutes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--step", type=int, default=15, help="seconds between samples in Prometheus")
    parser.add_argument("--history-hours", type=float, default=None,
                        help="keep only the last H hours of per-GPU history (scaled down; default: --days)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backfill", choices=("auto", "promtool", "blockwriter"), default="auto",
                        help="how the TSDB is written (auto: blockwriter above 20 M samples when go is on PATH)")
    parser.add_argument("--builtin-fill", choices=("auto", "scrape", "sql"), default="auto",
                        help="how the minute history is written (auto: sql above 1 M rows on PostgreSQL)")
    parser.add_argument("--builtin-history-hours", type=float, default=None,
                        help="keep only the last B hours of built-in minute rows (default: --history-hours)")
    args = parser.parse_args()
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            raise SystemExit(f"error: {tool} not found (apt-get install prometheus)")
    hours = args.history_hours if args.history_hours is not None else args.days * 24
    scaled = hours < args.days * 24
    tmp = tempfile.TemporaryDirectory(prefix="fleetdeck-bench-prom-", dir=os.environ.get("FLEETDECK_BENCH_TMP"))
    work = Path(tmp.name)
    os.environ["FLEETDECK_VAR_DIR"] = str(work)
    (work / "staticfiles").mkdir()

    import django

    django.setup()
    # Everything below needs the apps loaded (django.setup() first), as do the helpers' imports.
    import time_machine
    from django.db import connection
    from django.db.models import Count
    from django.test import Client
    from django.test.utils import setup_test_environment

    from bench.fleet_page import build_fleet
    from fleet.models import Gpu, GpuFlavor
    from health import telemetry
    from health.models import GpuReadingMinute
    from health.services import ReadingRow, readings_store
    from integrations.prometheus.client import PrometheusClient
    from integrations.prometheus.source import PrometheusTelemetry
    from scheduling.models import Allocation, Queue

    setup_test_environment()
    if connection.vendor == "sqlite":
        connection.settings_dict["TEST"]["NAME"] = str(work / "bench.sqlite3")
    else:  # a name of its own: the default, test_<NAME>, is the test suite's, which autoclobber would drop
        connection.settings_dict["TEST"]["NAME"] = f"{connection.settings_dict['NAME']}_bench_prometheus_{os.getpid()}"
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    prometheus = None
    try:
        end = datetime.now(UTC).replace(microsecond=0)
        started = time.perf_counter()
        build_fleet((args.gpus + 7) // 8)
        Allocation.objects.update(created_at=end - timedelta(hours=max(1.0, hours)))
        queue = Queue.objects.get(name="research")
        print(f"fleet: {Gpu.objects.count()} GPUs on {Gpu.objects.values('node').distinct().count()} nodes, "
              f"{Allocation.objects.filter(released_at__isnull=True).count()} allocated, database "
              f"{connection.vendor}; built in {time.perf_counter() - started:.0f} s")
        if scaled:
            print(f"SCALED DOWN (--history-hours {hours:g}): per-GPU history covers the last {hours:g} h, not "
                  f"{args.days} days, in both stores; queue series cover {args.days} days")

        # 1. The built-in store.
        started = time.perf_counter()
        builtin_hours = args.builtin_history_hours if args.builtin_history_hours is not None else hours
        if builtin_hours < hours:
            print(f"BUILT-IN SCALED DOWN (--builtin-history-hours {builtin_hours:g}): the minute history covers the "
                  f"last {builtin_hours:g} h, Prometheus {hours:g} h", flush=True)
        minutes = int(builtin_hours * 60)
        fill = args.builtin_fill
        if fill == "auto":
            fill = "sql" if connection.vendor == "postgresql" and minutes * args.gpus > 1_000_000 else "scrape"
        if fill == "sql" and connection.vendor != "postgresql":
            raise SystemExit("error: --builtin-fill sql needs PostgreSQL (DATABASE_URL)")
        minute_rows, minute_bytes = (fill_builtin_sql if fill == "sql" else fill_builtin)(end, minutes)
        usage_samples(end, 30)
        how = ("readings_store every minute" if fill == "scrape"
               else "readings_store for the latest minute, INSERT ... SELECT for the rest")
        print(f"built-in: {minute_rows:,} minute rows ({minute_bytes / 1e6:.0f} MB with indexes; {how}) in "
              f"{time.perf_counter() - started:.0f} s", flush=True)

        # 2. Prometheus, backfilled.
        idle_ids = _idle_gpu_ids()
        gpus = [(uuid, node, index, gid in idle_ids)
                for gid, uuid, node, index in Gpu.objects.order_by("node_id", "index").values_list(
                    "id", "uuid", "node__name", "index")]
        held = dict(Allocation.objects.filter(released_at__isnull=True).values_list("gpu__node__flavor_id")
                    .annotate(n=Count("id")))
        queues = [{"team": "research", "queue": "research", "flavor": f.name, "queue_id": str(queue.pk),
                   "flavor_id": str(f.pk), "gpus": str(held.get(f.pk, 0))} for f in GpuFlavor.objects.all()]
        t_end, t_start = int(end.timestamp()), int((end - timedelta(days=args.days)).timestamp())
        t_history = int((end - timedelta(hours=hours)).timestamp())
        expected = (len(gpus) * ((t_end - (t_history - t_history % args.step)) // args.step + 1)
                    + len(queues) * ((t_end - (t_start - t_start % args.step)) // args.step + 1))
        backfill = args.backfill
        if backfill == "auto":
            backfill = "blockwriter" if expected > 20_000_000 and shutil.which("go") else "promtool"
        (work / "tsdb").mkdir()
        started = time.perf_counter()
        if backfill == "blockwriter":
            samples, said = backfill_blockwriter(work, gpus=gpus, queues=queues, start=t_start, end=t_end,
                                                 step=args.step, history_start=t_history)
            print(f"prometheus: {samples:,} samples backfilled with tsdb.BlockWriter (bench/tsdb_backfill: {said}) "
                  f"in {time.perf_counter() - started:.0f} s wall", flush=True)
        else:
            text = work / "backfill.om"
            samples = write_openmetrics(text, gpus=gpus, queues=queues,
                                        start=t_start, end=t_end, step=args.step, history_start=t_history)
            generated = time.perf_counter() - started
            started = time.perf_counter()
            subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
                            str(text), str(work / "tsdb")], check=True, capture_output=True)
            backfilled = time.perf_counter() - started
            size = text.stat().st_size
            text.unlink()
            print(f"prometheus: {samples:,} samples ({size / 1e9:.1f} GB of OpenMetrics) written in {generated:.0f} s, "
                  f"backfilled with promtool in {backfilled:.0f} s", flush=True)
        tsdb_bytes = sum(f.stat().st_size for f in (work / "tsdb").rglob("*") if f.is_file())
        print(f"prometheus: TSDB {tsdb_bytes / 1e6:.0f} MB on disk")
        (work / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
        with socket.socket() as probe:  # a free loopback port
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        started = time.perf_counter()
        prometheus = start_prometheus(work, port)
        print(f"prometheus ready on the backfilled TSDB in {time.perf_counter() - started:.0f} s\n")

        client = Client()
        assert client.login(username="bench-ops", password="bench-ops-pw")
        team_url = f"/scheduling/teams/{queue.team_id}/"
        prom = PrometheusClient(f"http://127.0.0.1:{port}", timeout=60)

        def page(path: str) -> Callable[[], object]:
            def fetch():
                response = client.get(path)
                assert response.status_code == 200, (path, response.status_code)
                assert b"telemetry source unavailable" not in response.content, path
                return response
            return fetch

        def idle_check():
            answer = telemetry.idle_allocated(now=end + timedelta(seconds=1))
            assert answer.available and answer.value, answer.notice or "no idle GPU found"
            return answer

        rows = []
        # The pages at the data's last instant (the processes' clock moved there).
        with time_machine.travel(end + timedelta(seconds=1), tick=True):
            for name, source in (("built-in", telemetry.BUILT_IN), ("Prometheus", PrometheusTelemetry(prom))):
                telemetry.register_telemetry_source(source)
                counted = (lambda: prom.queries) if source is not telemetry.BUILT_IN else (lambda: 0)
                idle = len(idle_check().value)
                for label, fn in (("GET / (overview)", page("/")), (f"GET {team_url} (team page)", page(team_url)),
                                  ("idle-allocated check", idle_check)):
                    rows.append((name, label, *measure(fn, args.repeat, counted)))
                print(f"{name}: {idle} idle allocated GPUs found")
        telemetry.register_telemetry_source(None)
        print(f"\n{'path':11} {'page':34} {'first ms':>10} {'median ms':>10} {'SQL':>5} {'PromQL':>7}")
        for name, label, cold, ms, sql, promql in rows:
            print(f"{name:11} {label:34} {cold:10.1f} {ms:10.1f} {sql:5d} {promql:7d}")

        # 3. Growth per day.
        per_row = minute_bytes / minute_rows
        telemetry.register_telemetry_source(PrometheusTelemetry(prom))
        before = GpuReadingMinute.objects.count()
        readings_store(rows=[ReadingRow(gpu_id=gid, sm_active=0.5) for gid in Gpu.objects.values_list("id", flat=True)],
                       source="dcgm", now=end + timedelta(minutes=2))
        prometheus_rows = GpuReadingMinute.objects.count() - before
        telemetry.register_telemetry_source(None)
        print(f"\ndatabase growth per day (one minute row per GPU; {per_row:.0f} bytes a row with its indexes, "
              f"measured on {connection.vendor}):")
        for fleet in (10_000, 50_000):
            rows_day = fleet * 24 * 60
            print(f"  {fleet:>6} GPUs: built-in {rows_day:>11,} rows {rows_day * per_row / 1e9:6.2f} GB/day;  "
                  f"Prometheus {prometheus_rows * 24 * 60 * fleet // max(1, args.gpus)} rows 0.00 GB/day")
        print(f"  (the Prometheus path stored {prometheus_rows} minute rows for a scrape of all {args.gpus} GPUs)")
        print(f"\nserver time in this process (Django test client, no network to the web server; Prometheus over "
              f"loopback HTTP), wall: the first call, then the median of {args.repeat} calls after it; queries of one "
              f"call. " + ("SCALED DOWN: see above." if scaled else
                           f"Full size: {args.days} days of {args.step} s samples for {len(gpus)} GPUs in Prometheus, "
                           f"{builtin_hours:g} h of minute rows in the built-in store."))
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(timeout=30)
        connection.creation.destroy_test_db(db_name, verbosity=0)
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
