"""/metrics exposes the scheduler's queue, bind-time, decision and round-duration families."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from .conftest import api_for, run_round, submit, training


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
