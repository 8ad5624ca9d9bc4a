"""/metrics exposes the scheduler's queue, bind-time, decision and round-duration families."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.cluster import api_for, run_round, submit, training


def test_metrics_show_pending_by_class_and_queue_time_to_bind_and_round_durations(
    research_queue, team_member, client, clock
):
    api = api_for(team_member)
    submit(api, **training("big", 64))
    clock.advance(30)
    run_round(clock)
    submit(api, **training("waits", 8, priority="eval"))
    clock.advance(90)
    run_round(clock)

    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").content.decode())}

    pending = {
        (s.labels["priority_class"], s.labels["queue"]): s.value
        for s in families["fleetdeck_pending_workloads"].samples
    }
    assert pending == {("eval", "research-q"): 1}
    assert families["fleetdeck_oldest_pending_age_seconds"].samples[0].value == 90
    bind = {
        s.labels.get("le"): s.value
        for s in families["fleetdeck_time_to_bind_seconds"].samples
        if s.name.endswith("_bucket")
    }
    assert (bind["15.0"], bind["60.0"], bind["+Inf"]) == (0, 1, 1)
    rounds = [s for s in families["fleetdeck_placement_round_duration_seconds"].samples if s.name.endswith("_count")]
    assert rounds[0].value == 2
    admissions = {
        s.labels["kind"]: s.value for s in families["fleetdeck_admissions"].samples if s.name.endswith("_total")
    }
    assert admissions == {"fresh": 1}


def test_metrics_count_preemptions_by_reason_and_restarts_apart_from_fresh_admissions(
    db, team, classes, client, clock
):
    from core.actors import Actor
    from scheduling.models import Queue, QueueQuota
    from scheduling.services import workload_cancel, workload_submit
    from tests.cluster import make_cluster

    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=make_cluster(nodes=2, per_rack=2), nominal=64)
    ops = Actor.automation("test")
    workload_submit(spec=training("low", 16, priority="research-batch"), actor=ops)
    run_round(clock)
    clock.advance(700)
    high = workload_submit(spec=training("high", 8, priority="training-prod"), actor=ops)
    run_round(clock)  # preempts low (PRIORITY), grace 60 s
    clock.advance(61)
    run_round(clock)  # past the deadline: low stopped and requeued
    run_round(clock)  # high placed on the GPUs reserved for it
    high.refresh_from_db()
    assert high.state == "running"
    workload_cancel(workload=high, actor=ops)
    clock.advance(1)
    run_round(clock)  # low restarts on both nodes

    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").content.decode())}
    preemptions = {
        s.labels["reason"]: s.value for s in families["fleetdeck_preemptions"].samples if s.name.endswith("_total")
    }
    assert preemptions == {"PRIORITY": 1}
    admissions = {
        s.labels["kind"]: s.value for s in families["fleetdeck_admissions"].samples if s.name.endswith("_total")
    }
    assert admissions == {"fresh": 2, "restart": 1}
