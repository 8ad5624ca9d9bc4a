"""Against the real Prometheus and Alertmanager (servers.py): the pages' utilisation is what the
exporters served, the seed's Xid 79 goes exporter → Prometheus → Alertmanager → Fleetdeck → back to
Alertmanager, and a Prometheus that stops mid-test degrades the pages with a notice, then recovers."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from console.selectors import fleet_overview
from fleet.choices import NodeState
from fleet.models import Gpu, Node
from health import telemetry
from health.models import GpuReadingMinute
from health.services import ReadingRow, readings_store
from scheduling.choices import WorkloadState
from scheduling.models import Allocation, Workload, WorkloadTransition
from scheduling.quota_requests.selectors import usage_history_with_utilisation
from scheduling.quota_requests.services import quota_usage_sample
from tests.cluster import nodes_of

from .conftest import place_seed_jobs
from .servers import wait_for

pytestmark = pytest.mark.slow


def _allocated() -> dict[int, tuple[str, int]]:
    rows = Allocation.objects.filter(released_at__isnull=True).values_list("gpu_id", "gpu__node__name", "gpu__index")
    return {gpu_id: (node, index) for gpu_id, node, index in rows}


def _serve(stack, util: dict[tuple[str, int], float]) -> None:
    for (node, index), value in util.items():
        stack.set(node, index, util=value, fb_used=1000 + 10 * index)


def _prometheus_holds(stack, util: dict[tuple[str, int], float]) -> bool:
    held = {(r["metric"]["Hostname"], int(r["metric"]["gpu"])): float(r["value"][1])
            for r in stack.query("fleetdeck:gpu_sm_active:ratio")}
    return all(held.get(key) == pytest.approx(value / 100) for key, value in util.items())


def test_the_overview_shows_the_utilisation_the_exporters_served(prometheus_stack, team_member, operator, client):
    place_seed_jobs(team_member)
    allocated = _allocated()
    for phase in (1, 2):  # the exporters' values change over the test; the page follows
        util = {(node, index): float((phase * 17 + index * 7 + int(node[1:]) * 3) % 100)
                for node, index in Gpu.objects.values_list("node__name", "index")}
        _serve(prometheus_stack, util)
        wait_for(lambda util=util: _prometheus_holds(prometheus_stack, util), what=f"phase {phase} in Prometheus")
        expected = sum(util[allocated[gpu_id]] / 100 for gpu_id in allocated)

        before = prometheus_stack.client.queries
        overview = fleet_overview()

        assert prometheus_stack.client.queries - before == 1
        assert overview.telemetry_source == "Prometheus" and overview.telemetry_notice == ""
        assert overview.total.utilised == pytest.approx(expected)
        client.force_login(operator)
        page = client.get("/").content.decode()
        assert f"<dt>Utilised</dt><dd>{expected:.1f}</dd>" in page and "telemetry source unavailable" not in page
    memory = telemetry.memory_used_by_gpu(now=timezone.now()).value
    gpu = Gpu.objects.get(node__name="n2", index=3)
    assert memory[gpu.pk] == 1030


def test_idle_allocated_gpus_come_from_prometheus(prometheus_stack, team_member, operator, client, settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "IDLE_ALLOCATED_MINUTES": 0.1}  # a 6 s window
    place_seed_jobs(team_member)
    busy = {(n, i): 60.0 for n, i in Gpu.objects.values_list("node__name", "index")}
    busy[("n2", 4)] = 1.0  # train-A's GPU 4 on n2 idles
    _serve(prometheus_stack, busy)
    wait_for(lambda: _prometheus_holds(prometheus_stack, busy), what="the idle GPU in Prometheus")
    time.sleep(7)  # the window must pass with the series in it

    before = prometheus_stack.client.queries
    idle = telemetry.idle_allocated(now=timezone.now())

    assert prometheus_stack.client.queries - before == 2
    assert [(g.node, g.gpu_index, g.workload, g.team) for g in idle.value] == [("n2", 4, "train-A", "research")]
    assert idle.value[0].sm_active == pytest.approx(0.01)
    client.force_login(operator)
    page = client.get("/health/idle-gpus/").content.decode()
    assert ">n2</a></td><td>4</td>" in page


def test_the_team_charts_take_their_utilised_line_from_prometheus(prometheus_stack, team_member, research_queue):
    place_seed_jobs(team_member)
    _serve(prometheus_stack, {(n, i): 50.0 for n, i in Gpu.objects.values_list("node__name", "index")})
    held = sum(milli for milli in Allocation.objects.filter(released_at__isnull=True).values_list("milli", flat=True))
    # What Fleetdeck's allocation shares times the GPUs' activity give, per the recording rule.
    wait_for(lambda: [float(r["value"][1]) for r in prometheus_stack.query(
        f'fleetdeck:queue_flavor_utilised_gpus:sum{{queue_id="{research_queue.pk}"}}')] == [held / 1000 * 0.5],
        what="the research queue's utilised GPUs recorded")
    now = timezone.now()
    quota_usage_sample(now=now)  # one usage sample: the hour the chart shows

    before = prometheus_stack.client.queries
    history, notice = usage_history_with_utilisation(queue_ids=[research_queue.pk], since=now - timedelta(days=30),
                                                     now=now)

    assert prometheus_stack.client.queries - before == 1 and notice == ""
    [points] = history.values()
    hour = now.replace(minute=0, second=0, microsecond=0)
    [point] = [p for p in points if p.at == hour]
    # The hour's mean of the recorded series: every evaluation since the stack started saw the same
    # allocations and the same 50 %, except the first ones, before every exporter was scraped.
    assert 0 < point.utilised <= held / 1000 * 0.5 + 1e-6
    wait_for(lambda: usage_history_with_utilisation(queue_ids=[research_queue.pk], since=now - timedelta(days=1),
                                                    now=timezone.now())[0], what="the chart's history")


def test_the_seed_xid_79_goes_through_prometheus_and_alertmanager_and_back(
    prometheus_stack, with_pci, team_member
):
    train_a = place_seed_jobs(team_member)
    first_placement = list(Allocation.objects.filter(workload_id=train_a["id"]).values_list("pk", flat=True))

    prometheus_stack.set("n3", 5, xid=79)  # the exporter of n3 starts reporting Xid 79 on GPU 5

    wait_for(lambda: Node.objects.get(name="n3").state == NodeState.IN_REPAIR, timeout=45,
             what="the webhook to take n3 out of service")
    n3 = Node.objects.get(name="n3")
    assert n3.cordoned_by == "automation:health" and "Xid 79" in n3.cordon_reason
    assert "FleetdeckGpuXid" in n3.cordon_reason
    # The gang stopped as a whole and went back to its queue, as its timeline says. The stop asks
    # for a round, which (Celery eager here) runs in the webhook's request right after the commit
    # and may already have placed it again: the timeline is what a user sees, not a passing state.
    [requeued] = WorkloadTransition.objects.filter(workload_id=train_a["id"], to_state=WorkloadState.REQUEUED)
    assert (requeued.from_state, requeued.actor) == (WorkloadState.RUNNING, "automation:health")
    assert "node n3 failed" in requeued.reason and "Xid 79" in requeued.reason
    released = Allocation.objects.filter(pk__in=first_placement).values_list("released_at", flat=True)
    assert len(first_placement) == 32 and len(set(released)) == 1 and None not in released  # all 32 at once
    # Placed again on the healthy nodes by the round the stop asked for.
    wait_for(lambda: Workload.objects.get(pk=train_a["id"]).state == WorkloadState.RUNNING
             and nodes_of(train_a["id"]) == ["n1", "n2", "n4", "n8"], timeout=20, what="train-A re-placed")
    [cordoned] = wait_for(lambda: prometheus_stack.alerts("FleetdeckNodeCordonedByAutomation"), timeout=20,
                          what="Fleetdeck's alert in Alertmanager")
    assert cordoned["labels"] | {"node": "n3", "rack": "r1", "severity": "warning"} == cordoned["labels"]
    assert "Xid 79" in cordoned["annotations"]["description"]
    [stopped] = wait_for(lambda: prometheus_stack.alerts("FleetdeckGangStoppedByFault"), timeout=20,
                         what="the stopped gang's alert")
    assert {k: stopped["labels"][k] for k in ("node", "team", "workload")} == {
        "node": "n3", "team": "research", "workload": "train-A"}
    assert wait_for(lambda: prometheus_stack.alerts("FleetdeckRepairTicketOpened"), timeout=20, what="ticket alert")


def test_a_stopped_prometheus_degrades_the_pages_and_they_recover_by_themselves(
    prometheus_stack, team_member, operator, client, research_queue, settings
):
    settings.FLEETDECK = {**settings.FLEETDECK, "IDLE_ALLOCATED_MINUTES": 0.02}  # the idle check asks too
    place_seed_jobs(team_member)
    _serve(prometheus_stack, {(n, i): 40.0 for n, i in Gpu.objects.values_list("node__name", "index")})
    wait_for(lambda: fleet_overview().total.utilised > 0, what="utilisation from Prometheus")
    client.force_login(operator)

    prometheus_stack.stop_prometheus()
    started = time.monotonic()
    overview = client.get("/")
    idle = client.get("/health/idle-gpus/")
    team = client.get(f"/scheduling/teams/{research_queue.team_id}/")
    node = client.get("/nodes/n1/")
    took = time.monotonic() - started

    assert took < 10  # four pages, none waiting past the 2 s timeout
    for response in (overview, idle, team):
        assert response.status_code == 200
        assert "telemetry source unavailable" in response.content.decode()
    page = overview.content.decode()
    assert "8 nodes · 64 GPUs · 2 racks" in page  # inventory keeps serving
    assert node.status_code == 200 and "train-A" in node.content.decode()  # scheduling keeps serving
    assert Workload.objects.get(name="train-A").state == WorkloadState.RUNNING

    prometheus_stack.start_prometheus()
    wait_for(lambda: "telemetry source unavailable" not in client.get("/").content.decode(), timeout=30,
             what="the overview to recover")
    wait_for(lambda: fleet_overview().total.utilised == pytest.approx(32 * 0.4 + 16 * 0.4 + 8 * 0.4),
             what="the utilisation back")


def test_with_prometheus_as_the_source_fleetdeck_stores_no_minute_history(prometheus_stack):
    gpus = list(Gpu.objects.filter(node__name="n1"))

    readings_store(rows=[ReadingRow(gpu_id=g.pk, sm_active=0.5) for g in gpus], source="dcgm", now=timezone.now())

    assert not GpuReadingMinute.objects.exists()
    assert not telemetry.keeps_minute_history()


def _run_on_kubernetes(workload: Workload, namespace: str = "ml") -> str:
    """What the Kubernetes executor's start records for a gang it runs (its Jobs, namespace/name):
    the seed's nodes run the simulated executor, so the test writes it; returns the Job's name."""
    job = f"fleetdeck-w{workload.pk}-main"
    Workload.objects.filter(pk=workload.pk).update(executor="kubernetes", executor_job_id=f"{namespace}/{job}")
    return job


def test_series_labelled_with_a_kubernetes_pod_count_for_the_pods_workload(
    prometheus_stack, team_member, research_queue, settings
):
    settings.FLEETDECK = {**settings.FLEETDECK, "IDLE_ALLOCATED_MINUTES": 0.1}  # a 6 s window
    place_seed_jobs(team_member)
    train_a, eval_0, eval_1 = (Workload.objects.get(name=name) for name in ("train-A", "eval-0", "eval-1"))
    jobs = {w.name: _run_on_kubernetes(w) for w in (train_a, eval_0, eval_1)}
    util = {(n, i): 60.0 for n, i in Gpu.objects.values_list("node__name", "index")}
    # n2's exporter reports no UUID and its own pod's name as Hostname: only the pod label (train-A's
    # Indexed Job, completion index = the replica on n2) says whose GPUs these are.
    [replica] = set(Allocation.objects.filter(workload=train_a, node__name="n2").values_list("replica", flat=True))
    for index in range(8):
        prometheus_stack.set("n2", index, labels={"UUID": "", "Hostname": "nvidia-dcgm-exporter-8x2kq",
                                                  "namespace": "ml", "container": "main",
                                                  "pod": f"{jobs['train-A']}-{replica}-k4d9s"})
    util[("n2", 4)] = 1.0
    # On n7 the kubelet gave eval-1's pod the GPUs Fleetdeck allocated to eval-0, and the other way round.
    held = {w.name: sorted(Allocation.objects.filter(workload=w).values_list("gpu__index", flat=True))
            for w in (eval_0, eval_1)}
    for name, other in (("eval-0", "eval-1"), ("eval-1", "eval-0")):
        for index in held[name]:
            prometheus_stack.set("n7", index, labels={"namespace": "ml", "pod": f"{jobs[other]}-q2w3e",
                                                      "container": "main"})
    idle_gpu = held["eval-0"][0]
    util[("n7", idle_gpu)] = 1.0
    _serve(prometheus_stack, util)
    wait_for(lambda: sorted(float(r["value"][1]) for r in prometheus_stack.query(
        'fleetdeck:gpu_sm_active:ratio{pod!=""}')) == sorted([0.01] * 2 + [0.6] * 10)
        and len(prometheus_stack.query('fleetdeck:gpu_sm_active:ratio{Hostname="n2"}')) == 0,
        what="the pod-labelled series in Prometheus")
    time.sleep(7)  # the idle window must pass with the series in it

    before = prometheus_stack.client.queries
    idle = telemetry.idle_allocated(now=timezone.now())
    overview = fleet_overview()
    quota_usage_sample(now=timezone.now())

    assert prometheus_stack.client.queries - before == 2 + 1 + 1
    # Named by the pod: train-A's GPU although its series has no UUID, and eval-1 on the GPU
    # Fleetdeck had allocated to eval-0.
    assert [(g.node, g.gpu_index, g.workload, g.team) for g in idle.value] == [
        ("n2", 4, "train-A", "research"), ("n7", idle_gpu, "eval-1", "research")]
    allocated = {(n, i) for n, i in Allocation.objects.filter(released_at__isnull=True)
                 .values_list("gpu__node__name", "gpu__index")}
    expected = sum(util[key] / 100 for key in allocated)
    assert overview.telemetry_notice == "" and overview.total.utilised == pytest.approx(expected)
    [sample] = research_queue.usage_samples.all()
    assert sample.utilised == pytest.approx(expected, abs=1e-3)  # n2's eight GPUs count for research
