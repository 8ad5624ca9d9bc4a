"""The fleet pages: overview numbers, node page, roles, and the operator's cordon flow."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console import charts
from console.selectors import fleet_overview
from core.models import AuditEvent
from fleet.choices import GpuHealth, NodeState
from fleet.models import Gpu, GpuFlavor, Node, Rack, Spine
from scheduling.models import Allocation, PodSet, PriorityClass, Queue, QueueUsageSample, Team, Workload

pytestmark = pytest.mark.django_db


# --- builders --------------------------------------------------------------------------------


def add_nodes(flavor: GpuFlavor, rack: Rack, names: list[str], *, gpus: int = 4, state=NodeState.READY) -> list[Node]:
    """Bulk-create nodes with `gpus` healthy GPUs each; returns the saved nodes."""
    Node.objects.bulk_create(Node(name=n, rack=rack, flavor=flavor, state=state) for n in names)
    nodes = list(Node.objects.filter(name__in=names))
    Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-{node.name}-{i}", product=flavor.product, memory_mib=flavor.memory_mib,
            pci_bus_id=f"0000:{i + 0x18:02x}:00.0")
        for node in nodes
        for i in range(gpus)
    )
    return nodes


def make_workload(name: str = "train-llm") -> Workload:
    team, _ = Team.objects.get_or_create(name="vision")
    queue, _ = Queue.objects.get_or_create(name="vision-q", team=team)
    prio, _ = PriorityClass.objects.get_or_create(name="normal", defaults={"value": 100})
    workload = Workload.objects.create(name=name, team=team, queue=queue, priority_class=prio, state="running")
    PodSet.objects.create(workload=workload, name="main", replicas=1, gpus_per_replica=8)
    return workload


def allocate(workload: Workload, gpus, *, exclusive: bool = True, milli: int = 1000, released: bool = False) -> None:
    pod_set = workload.pod_sets.get()
    Allocation.objects.bulk_create(
        Allocation(workload=workload, pod_set=pod_set, replica=0, gpu=gpu, exclusive=exclusive, milli=milli,
                   released_at=timezone.now() if released else None)
        for gpu in gpus
    )


def gpus_of(node_name: str, *indexes: int) -> list[Gpu]:
    return list(Gpu.objects.filter(node__name=node_name, index__in=indexes))


@pytest.fixture
def fleet():
    """H100: h1 half used, h2 fully free, h3 one unhealthy GPU, h4 cordoned with one GPU in use.
    A100: a1 fully allocated, one GPU shared by two workloads."""
    spine = Spine.objects.create(name="spine-1")
    r1 = Rack.objects.create(name="r1", spine=spine)
    r2 = Rack.objects.create(name="r2", spine=spine)
    h100 = GpuFlavor.objects.create(name="H100", product="NVIDIA H100 80GB HBM3", memory_mib=81559)
    a100 = GpuFlavor.objects.create(name="A100", product="NVIDIA A100-SXM4-80GB", memory_mib=81920)
    add_nodes(h100, r1, ["h1", "h2", "h3", "h4"])
    add_nodes(a100, r2, ["a1"], gpus=2)
    Gpu.objects.filter(node__name="h3", index=1).update(health=GpuHealth.UNHEALTHY)
    Node.objects.filter(name="h4").update(
        state=NodeState.CORDONED, cordon_reason="XID 79 on GPU 2", cordoned_by="olga", cordoned_at=timezone.now()
    )
    big = make_workload("train-llm")
    allocate(big, gpus_of("h1", 0, 1) + gpus_of("h4", 0) + gpus_of("a1", 0))
    allocate(big, gpus_of("h2", 0, 1), released=True)  # finished earlier: h2 stays fully free
    small = make_workload("notebook")
    allocate(small, gpus_of("a1", 1), exclusive=False, milli=500)
    allocate(make_workload("notebook-2"), gpus_of("a1", 1), exclusive=False, milli=500)
    return big


def login(client: Client, user) -> Client:
    client.force_login(user)
    return client


# --- the selector ----------------------------------------------------------------------------


def test_overview_counts_capacity_and_fragmentation_per_flavor(fleet):
    data = fleet_overview()
    by_flavor = {c.flavor: c for c in data.flavors}
    h100, a100 = by_flavor["H100"], by_flavor["A100"]

    assert (h100.nodes, h100.gpus) == (4, 16)
    assert h100.allocatable == 11  # h1 4 + h2 4 + h3 3 healthy; h4 is cordoned
    assert h100.allocated == 3  # h1 ×2 and h4 ×1; the released allocation on h2 no longer counts
    assert h100.free == 9
    assert h100.unhealthy == 1
    assert h100.fully_free_nodes == 1  # h2 only: h3 has an unhealthy GPU, h1 runs something
    assert h100.free_on_fully_free_nodes == 4
    # h1's 2 idle GPUs and h3's 3 healthy ones (its unhealthy GPU keeps whole-node jobs off it):
    # every free GPU is in one column or the other.
    assert h100.idle_on_partial_nodes == 5
    assert h100.free_on_fully_free_nodes + h100.idle_on_partial_nodes == h100.free
    assert h100.idle_on_unschedulable_nodes == 3
    assert h100.utilised == 0.0

    assert (a100.allocatable, a100.allocated, a100.free, a100.fully_free_nodes) == (2, 2, 0, 0)
    assert data.total.allocated == 5 and data.total.allocatable == 13


def test_overview_builds_the_rack_grid_and_cordoned_list(fleet):
    data = fleet_overview()
    assert [r.name for r in data.racks] == ["r1", "r2"]
    boxes = {n.name: n for r in data.racks for n in r.nodes}
    assert [g.status for g in boxes["h1"].gpus] == ["allocated", "allocated", "idle", "idle"]
    assert [g.status for g in boxes["h3"].gpus] == ["idle", "unhealthy", "idle", "idle"]
    assert boxes["h4"].state_label == "Cordoned" and boxes["h4"].color == "#ef6c00"
    assert [(c.name, c.reason, c.by) for c in data.cordoned] == [("h4", "XID 79 on GPU 2", "olga")]


def test_overview_sorts_nodes_the_way_people_number_them(db):
    rack = Rack.objects.create(name="r1")
    flavor = GpuFlavor.objects.create(name="L40S", product="NVIDIA L40S", memory_mib=46068)
    add_nodes(flavor, rack, ["n10", "n2", "n1"], gpus=1)
    assert [n.name for n in fleet_overview().racks[0].nodes] == ["n1", "n2", "n10"]


def grow_fleet(flavor: GpuFlavor, first: int, count: int) -> None:
    """Add `count` nodes of 8 GPUs (every tenth cordoned), three GPUs of each allocated."""
    racks = Rack.objects.bulk_create(Rack(name=f"r{first}-{i}") for i in range(max(1, count // 8)))
    Node.objects.bulk_create(
        Node(name=f"n{i}", rack=racks[i % len(racks)], flavor=flavor,
             state=NodeState.CORDONED if i % 10 == 9 else NodeState.READY, cordon_reason="maintenance")
        for i in range(first, first + count)
    )
    node_ids = Node.objects.filter(gpus__isnull=True).values_list("id", flat=True)
    Gpu.objects.bulk_create(
        Gpu(node_id=nid, index=i, uuid=f"GPU-{nid}-{i}", product=flavor.product, memory_mib=flavor.memory_mib)
        for nid in node_ids
        for i in range(8)
    )
    workload = Workload.objects.first() or make_workload()
    allocate(workload, Gpu.objects.filter(index__lt=3, allocations__isnull=True))


def pinned_week(queue: Queue, flavor: GpuFlavor, *, nominal: int, in_use: int) -> None:
    """A week of 5-minute usage samples at `in_use` of `nominal` for the queue and flavor."""
    now = timezone.now().replace(second=0, microsecond=0)
    QueueUsageSample.objects.bulk_create(
        QueueUsageSample(queue=queue, flavor=flavor, at=now - timedelta(minutes=5 * i), nominal=nominal,
                         in_use=in_use, utilised=in_use * 0.9)
        for i in range(1, 7 * 24 * 12)
    )


def count_overview_queries(client: Client) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as selector_queries:
        fleet_overview()
    with CaptureQueriesContext(connection) as page_queries:
        assert client.get("/").status_code == 200
    return len(selector_queries), len(page_queries)


def test_overview_takes_the_same_queries_at_10_and_1000_nodes(operator, client):
    flavor = GpuFlavor.objects.create(name="H100", product="NVIDIA H100", memory_mib=81559)
    login(client, operator)
    grow_fleet(flavor, 0, 10)
    pinned_week(Queue.objects.get(), flavor, nominal=8, in_use=8)
    small = count_overview_queries(client)
    grow_fleet(flavor, 10, 990)
    for i in range(20):  # more teams with sizing signals cost no more queries either
        team = Team.objects.create(name=f"team-{i}")
        pinned_week(Queue.objects.create(name=f"q-{i}", team=team), flavor, nominal=8, in_use=i % 2 * 8)
    data = fleet_overview()
    assert (data.total.nodes, data.total.gpus, data.total.allocated) == (1000, 8000, 3000)
    assert data.total.idle_on_unschedulable_nodes == 100 * 5
    large = count_overview_queries(client)
    assert small == large, "the overview's query count grows with the fleet or with the signals"
    # Five reads for the selector (the fifth: utilisation from health's latest readings); the page
    # adds the session, user and role look-ups, the idle-GPU list, three for the sizing signals and
    # seven for the saturation signals (pending per class: 2, admissions: 3, preemptions, idle GPUs: 2).
    assert large[0] == 5 and large[1] <= 19


# --- pages and roles -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/nodes/h1/"])
def test_pages_redirect_anonymous_visitors_to_the_login(fleet, client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_anonymous_cordon_post_changes_nothing(fleet, client):
    response = client.post("/nodes/h1/cordon/", {"reason": "x", "confirm": "yes"})
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert Node.objects.get(name="h1").state == NodeState.READY


def test_overview_page_shows_cards_chart_grid_and_cordoned_nodes(fleet, viewer, client):
    body = login(client, viewer).get("/").content.decode()
    assert 'id="capacity-chart"' in body
    assert '<script src="/static/vendor/plotly-basic.min.js">' in body
    assert "cdn" not in body.lower() and "fonts.googleapis" not in body
    assert "Fully free nodes" in body and "Idle GPUs on partly used or degraded nodes" in body
    assert 'href="/nodes/h1/"' in body and 'href="/nodes/a1/"' in body
    # One cell per GPU, plus one in the legend.
    assert body.count('<i class="g allocated">') == 5 + 1
    assert body.count('<i class="g unhealthy">') == 1 + 1
    assert "XID 79 on GPU 2" in body


def test_operators_see_the_sizing_signals_on_the_overview_and_viewers_do_not(fleet, operator, viewer, client):
    h100 = GpuFlavor.objects.get(name="H100")
    pinned_week(Queue.objects.get(name="vision-q"), h100, nominal=4, in_use=4)
    idle_team = Team.objects.create(name="speech")
    pinned_week(Queue.objects.create(name="speech-q", team=idle_team), h100, nominal=8, in_use=0)

    response = login(client, operator).get("/")

    assert [(s.team.name, s.kind) for s in response.context["sizing_signals"]] == [
        ("vision", "pinned"), ("speech", "over-provisioned")]
    body = response.content.decode()
    panel = body[body.index('id="sizing-signals"'):]
    assert "vision</a> · vision-q · H100" in panel and "pinned — consider resizing" in panel
    assert "speech</a> · speech-q · H100" in panel and "over-provisioned" in panel

    client.logout()
    response = login(client, viewer).get("/")
    assert response.context["sizing_signals"] is None and 'id="sizing-signals"' not in response.content.decode()


def test_the_overview_says_so_when_no_queue_needs_resizing(fleet, operator, client):
    body = login(client, operator).get("/").content.decode()
    assert 'id="sizing-signals"' in body and "No team is pinned at its quota or far below it." in body


def test_plotly_js_is_served_from_our_static_url(client, viewer):
    response = login(client, viewer).get("/static/vendor/plotly-basic.min.js")
    assert response.status_code == 200
    assert b"plotly" in b"".join(response.streaming_content)[:2000].lower()


def test_node_page_shows_gpus_workloads_and_history(fleet, viewer, client):
    AuditEvent.objects.create(actor="olga", verb="node.cordon", target_type="fleet.node",
                              target_id=str(Node.objects.get(name="h1").pk), target_repr="h1", reason="fan swap")
    body = login(client, viewer).get("/nodes/h1/").content.decode()
    assert "GPU-h1-0" in body and "0000:18:00.0" in body and "NVIDIA H100 80GB HBM3" in body
    assert f'href="/scheduling/workloads/{fleet.pk}/"' in body
    assert "fan swap" in body and "node.cordon" in body


def test_unknown_node_is_404(fleet, viewer, client):
    assert login(client, viewer).get("/nodes/nope/").status_code == 404


@pytest.mark.parametrize("persona", ["viewer", "team_member"])
def test_viewers_and_team_members_see_no_buttons_and_may_not_post(fleet, client, persona, request):
    login(client, request.getfixturevalue(persona))
    body = client.get("/nodes/h1/").content.decode()
    assert "cordon-form" not in body and "/nodes/h1/cordon/" not in body
    response = client.post("/nodes/h1/cordon/", {"reason": "mine now", "confirm": "yes"})
    assert response.status_code == 403
    assert Node.objects.get(name="h1").state == NodeState.READY
    assert client.post("/nodes/h4/uncordon/", {"reason": "x", "confirm": "yes"}).status_code == 403


def test_operator_sees_cordon_on_ready_and_uncordon_on_cordoned_nodes(fleet, operator, client):
    login(client, operator)
    ready = client.get("/nodes/h1/").content.decode()
    assert 'action="/nodes/h1/cordon/"' in ready and "/uncordon/" not in ready
    cordoned = client.get("/nodes/h4/").content.decode()
    assert 'action="/nodes/h4/uncordon/"' in cordoned and 'action="/nodes/h4/cordon/"' not in cordoned


def test_cordon_without_a_reason_shows_the_error_next_to_the_field(fleet, operator, client):
    response = login(client, operator).post("/nodes/h1/cordon/", {"reason": "   "})
    assert response.status_code == 400
    body = response.content.decode()
    assert re.search(r'id="cordon-reason-errors"><li>Give a reason: it is recorded in the audit log.</li>', body)
    assert Node.objects.get(name="h1").state == NodeState.READY


def test_first_post_asks_for_confirmation_and_changes_nothing(fleet, operator, client):
    response = login(client, operator).post("/nodes/h1/cordon/", {"reason": "PSU swap"})
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="confirm-reason">PSU swap</blockquote>' in body
    assert '<input type="hidden" name="confirm" value="yes">' in body
    assert '<input type="hidden" name="reason" value="PSU swap">' in body
    assert Node.objects.get(name="h1").state == NodeState.READY
    assert not AuditEvent.objects.filter(verb="node.cordon").exists()


def test_operator_cordons_and_uncordons_through_the_confirmation(fleet, operator, client):
    login(client, operator)
    response = client.post("/nodes/h1/cordon/", {"reason": "PSU swap", "confirm": "yes"})
    assert response.status_code == 302 and response["Location"] == "/nodes/h1/"
    node = Node.objects.get(name="h1")
    assert (node.state, node.cordon_reason) == (NodeState.CORDONED, "PSU swap")
    event = AuditEvent.objects.for_target(node).get(verb="node.cordon")
    assert (event.reason, event.actor) == ("PSU swap", "olga")
    page = client.get("/nodes/h1/").content.decode()
    assert "Cordoned" in page and "PSU swap" in page and 'action="/nodes/h1/uncordon/"' in page
    assert "h1" in client.get("/").content.decode().split('id="cordoned"')[1]

    response = client.post("/nodes/h1/uncordon/", {"reason": "PSU replaced", "confirm": "yes"})
    assert response.status_code == 302
    assert Node.objects.get(name="h1").state == NodeState.READY
    assert AuditEvent.objects.for_target(node).filter(verb="node.uncordon", reason="PSU replaced").exists()


def test_cordon_url_refuses_get(fleet, operator, client):
    assert login(client, operator).get("/nodes/h1/cordon/").status_code == 405


def test_cordon_form_enforces_csrf(fleet, operator):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post("/nodes/h1/cordon/", {"reason": "no token", "confirm": "yes"}).status_code == 403
    assert Node.objects.get(name="h1").state == NodeState.READY

    page = client.get("/nodes/h1/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = client.post("/nodes/h1/cordon/", {"reason": "with token", "csrfmiddlewaretoken": token})
    assert response.status_code == 200 and "confirm-reason" in response.content.decode()


def test_login_page_is_styled_and_logs_in(fleet, operator, client):
    body = client.get("/login/").content.decode()
    assert 'class="card login"' in body and 'autocomplete="current-password"' in body
    response = client.post("/login/", {"username": "olga", "password": "wrong"})
    assert "Please enter a correct username and password" in response.content.decode()
    response = client.post("/login/", {"username": "olga", "password": "pw-olga"})
    assert response.status_code == 302 and response["Location"] == "/"


# --- charts ----------------------------------------------------------------------------------


def test_capacity_figure_groups_allocatable_allocated_and_utilised(fleet):
    fig = charts.capacity_figure(fleet_overview().flavors)
    assert fig.layout.barmode == "group"
    assert [t.name for t in fig.data] == ["Allocatable", "Allocated", "Utilised"]
    assert list(fig.data[0].x) == ["A100", "H100"]
    assert [list(t.y) for t in fig.data] == [[2, 11], [2, 3], [0.0, 0.0]]
    div = charts.figure_div(fig, "capacity-chart")
    assert 'id="capacity-chart"' in div and "<script src" not in div


def test_a_node_in_repair_offers_no_action_and_a_forced_post_shows_the_services_refusal(fleet, operator, client):
    Node.objects.filter(name="h3").update(state=NodeState.IN_REPAIR, cordon_reason="RMA for GPU 1")
    login(client, operator)
    page = client.get("/nodes/h3/").content.decode()
    assert "/nodes/h3/uncordon/" not in page and "health workflow returns it to service" in page
    response = client.post("/nodes/h3/uncordon/", {"reason": "looks fine", "confirm": "yes"})
    assert response.status_code == 400
    assert "only the health workflow" in response.content.decode()
    assert Node.objects.get(name="h3").state == NodeState.IN_REPAIR


def test_rack_grid_escapes_names_and_links_each_node(db):
    rack = Rack.objects.create(name="r<1>")
    flavor = GpuFlavor.objects.create(name="L40S", product="NVIDIA L40S", memory_mib=46068)
    add_nodes(flavor, rack, ['gpu"1<script>'], gpus=2)
    html = charts.rack_grid_html(fleet_overview().racks)
    assert "<script>" not in html and "r&lt;1&gt;" in html
    assert 'href="/nodes/gpu%221%3Cscript%3E/"' in html
    assert html.count('<i class="g idle"></i>') == 2


def test_a_slurm_node_page_shows_the_slurm_side(fleet, viewer, client):
    Node.objects.filter(name="h1").update(
        executor="slurm", labels={"slurm.state": "DRAIN", "slurm.reason": "fleetdeck: PSU swap", "slurm.applied": True}
    )
    body = login(client, viewer).get("/nodes/h1/").content.decode()
    assert 'id="slurm-status"' in body and "DRAIN" in body and "fleetdeck: PSU swap" in body
    assert 'id="slurm-status"' not in client.get("/nodes/h2/").content.decode()


def test_utilised_sums_the_fresh_sm_activity_of_allocated_gpus(fleet):
    from health.models import GpuReading

    now = timezone.now()
    GpuReading.objects.bulk_create([
        GpuReading(gpu=gpus_of("h1", 0)[0], at=now, sm_active=0.9),
        GpuReading(gpu=gpus_of("h1", 1)[0], at=now, sm_active=0.6),
        GpuReading(gpu=gpus_of("h2", 0)[0], at=now, sm_active=0.7),  # idle GPU: its activity is not ours to count
    ])
    by_flavor = {c.flavor: c for c in fleet_overview().flavors}
    assert by_flavor["H100"].utilised == pytest.approx(1.5)
    assert by_flavor["A100"].utilised == 0.0
