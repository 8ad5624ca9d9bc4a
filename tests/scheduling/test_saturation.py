"""The saturation signals (overview and /metrics): pending per class, queue wait by job size,
time to bind counted once per admission (restarts too) down to 10 ms, preemptions per hour,
and the idle GPUs no waiting workload can use."""
from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from core.actors import Actor
from fleet.choices import NodeState
from fleet.models import Gpu, GpuFlavor, Node, Rack
from scheduling.models import Workload
from scheduling.saturation import quantile, saturation, unusable_idle
from scheduling.services import workload_stop_gang
from tests.cluster import api_for, run_round, submit, training


@pytest.mark.parametrize("values, q, expected", [
    ([], 0.95, None),
    ([3.0], 0.5, 3.0),
    ([1, 2, 3, 4], 0.5, 2),
    ([float(i) for i in range(1, 101)], 0.95, 95.0),
    ([0.1] * 19 + [30.0], 0.95, 0.1),  # one slow bind in twenty is above p95
    ([0.1] * 18 + [30.0, 30.0], 0.95, 30.0),
])
def test_quantile_is_nearest_rank(values, q, expected):
    assert quantile(values, q) == expected


@pytest.mark.parametrize("free_by_node, waiting, expected", [
    # (flavor id, GPUs free) per ready node; waiting (flavor id or None for any, GPUs one replica needs)
    ([(1, 4), (1, 8)], [(1, 8)], (12, 4)),  # a 4-free node cannot take an 8-GPU replica
    ([(1, 4), (1, 8)], [(1, 8), (1, 2)], (12, 0)),  # a 2-GPU replica fits there
    ([(1, 4), (2, 4)], [(1, 2)], (8, 4)),  # flavor 2's idle GPUs serve nothing waiting
    ([(1, 4), (2, 4)], [(None, 4)], (8, 0)),  # … unless it accepts any flavor
    ([(1, 4)], [], (4, 0)),  # nothing waits: fragmentation keeps nobody waiting
])
def test_idle_gpus_no_waiting_workload_can_use(free_by_node, waiting, expected):
    assert unusable_idle(free_by_node, waiting) == expected


def families(client) -> dict:
    return {f.name: f for f in text_string_to_metric_families(client.get("/metrics").content.decode())}


def test_every_admission_counts_once_restarts_included_with_buckets_down_to_10_ms(
        research_queue, team_member, client, clock):
    api = api_for(team_member)
    fast = submit(api, **training("fast", 8))
    clock.advance(0.02)
    run_round(clock)  # admitted 20 ms after submission
    submit(api, **training("slow", 16, priority="research-batch"))
    clock.advance(90)
    run_round(clock)
    workload_stop_gang(workload=Workload.objects.get(pk=fast["id"]), reason="node fault", actor=Actor.automation("t"))
    clock.advance(3)
    run_round(clock)  # fast restarts 3 s after its requeue: a second admission, not an overwrite

    bind = families(client)["fleetdeck_time_to_bind_seconds"]
    buckets = {s.labels["le"]: s.value for s in bind.samples if s.name.endswith("_bucket")}
    count = next(s.value for s in bind.samples if s.name.endswith("_count"))
    assert count == 3  # fast, slow, fast again
    assert (buckets["0.01"], buckets["0.025"], buckets["2.5"], buckets["5.0"], buckets["60.0"], buckets["+Inf"]) == (
        0, 1, 1, 2, 2, 3)

    sat = saturation(now=clock.now)
    assert sat.admissions == 3 and sat.time_to_bind_p95_seconds == pytest.approx(90.0, abs=0.01)
    by_size = {row.label: row for row in sat.wait_by_size}
    assert by_size["2–8 GPUs"].admissions == 2 and by_size["2–8 GPUs"].p50_seconds == pytest.approx(0.02, abs=1e-3)
    assert by_size["9–32 GPUs"].admissions == 1 and by_size["9–32 GPUs"].p95_seconds == pytest.approx(90.0, abs=0.01)
    assert by_size["33+ GPUs"].admissions == 0 and by_size["33+ GPUs"].p95_seconds is None


def test_pending_per_class_stands_out_for_a_class_that_may_preempt(research_queue, team_member, client, clock):
    Node.objects.update(state=NodeState.CORDONED)  # nothing can start
    api = api_for(team_member)
    submit(api, **training("urgent", 8))  # training-prod may preempt
    clock.advance(40)
    submit(api, **training("batch", 8, priority="research-batch"))
    clock.advance(20)
    run_round(clock)

    rows = {row.name: row for row in saturation(now=clock.now).pending}
    assert (rows["training-prod"].pending, rows["training-prod"].oldest_age_seconds) == (1, pytest.approx(60))
    assert rows["training-prod"].stands_out and not rows["research-batch"].stands_out
    assert (rows["eval"].pending, rows["eval"].oldest_age_seconds, rows["eval"].stands_out) == (0, None, False)

    client.force_login(team_member)
    body = client.get("/").content.decode()
    panel = body[body.index('id="saturation"'):]
    assert '<tr class="stands-out"' in panel and "training-prod" in panel
    metric = families(client)["fleetdeck_pending_oldest_age_seconds_by_class"]
    assert {s.labels["priority_class"]: s.value for s in metric.samples} == {
        "training-prod": pytest.approx(60), "research-batch": pytest.approx(20)}
    assert families(client)["fleetdeck_idle_gpus_unusable_by_pending"].samples[0].value == 0  # no ready node


def test_fragmentation_counts_idle_gpus_of_nodes_too_small_for_what_waits(research_queue, team_member, clock):
    api = api_for(team_member)
    submit(api, **training("evals", 4, priority="research-batch"))  # 4 of n1's 8 GPUs
    for i in range(7):
        submit(api, **training(f"train-{i}", 8))
    run_round(clock)
    submit(api, **training("waits-for-a-node", 8))
    run_round(clock)
    sat = saturation(now=clock.now)
    # Seven nodes full, n1 half used: its 4 idle GPUs cannot take an 8-GPU replica.
    assert (sat.idle_gpus, sat.idle_gpus_unusable) == (4, 4)
    submit(api, **training("small", 2, priority="eval"))
    assert saturation(now=clock.now).idle_gpus_unusable == 0


def test_fragmentation_counts_idle_gpus_of_models_no_waiting_workload_accepts(research_queue, team_member, clock):
    api = api_for(team_member)
    b200_flavor = GpuFlavor.objects.create(name="B200-180GB", product="NVIDIA B200", memory_mib=183359)
    b200_node = Node.objects.create(name="b1", rack=Rack.objects.create(name="rb"), flavor=b200_flavor)
    Gpu.objects.create(uuid="GPU-b1-0", node=b200_node, index=0, product=b200_flavor.product, memory_mib=183359)
    b200 = training("b200-only", 1, priority="research-batch")
    b200["pod_sets"][0].update(flavor=None, accepted_products=["NVIDIA B200"])
    submit(api, **b200)
    b200_node.delete()  # the only B200 node leaves after the workload was accepted: it waits for one
    sat = saturation(now=clock.now)
    assert sat.idle_gpus > 0 and sat.idle_gpus_unusable == sat.idle_gpus  # nothing waiting can use an H100
    h100 = training("h100-ok", 1, priority="research-batch")
    h100["pod_sets"][0].update(flavor=None, accepted_products=["NVIDIA H100 80GB HBM3"])
    submit(api, **h100)
    assert saturation(now=clock.now).idle_gpus_unusable == 0


def test_the_api_gives_the_overviews_saturation_numbers(research_queue, team_member, viewer, clock):
    Node.objects.update(state=NodeState.CORDONED)
    submit(api_for(team_member), **training("urgent", 8))
    clock.advance(30)
    response = api_for(viewer).get("/api/v1/saturation/")
    assert response.status_code == 200
    body = response.json()
    assert body == {**body, "window_hours": 24, "admissions": 0, "time_to_bind_p95_seconds": None,
                    "preemptions_per_hour": 0.0, "idle_gpus": 0, "idle_gpus_unusable": 0}
    urgent = next(row for row in body["pending"] if row["name"] == "training-prod")
    assert urgent == {"name": "training-prod", "value": 1000, "pending": 1, "oldest_age_seconds": 30.0,
                      "stands_out": True}
    assert [row["label"] for row in body["wait_by_size"]] == ["≤ 1 GPU", "2–8 GPUs", "9–32 GPUs", "33+ GPUs"]
    assert Client().get("/api/v1/saturation/").status_code in (401, 403)


def test_metrics_give_the_queue_wait_by_size(research_queue, team_member, client, clock):
    submit(api_for(team_member), **training("quick", 8))
    clock.advance(4)
    run_round(clock)
    got = families(client)
    p50 = {s.labels["size"]: s.value for s in got["fleetdeck_queue_wait_p50_seconds"].samples}
    p95 = {s.labels["size"]: s.value for s in got["fleetdeck_queue_wait_p95_seconds"].samples}
    assert p50 == {"2-8": pytest.approx(4.0)} and p95 == p50
