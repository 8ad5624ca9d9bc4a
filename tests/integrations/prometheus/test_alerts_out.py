"""Fleetdeck's own alerts to Alertmanager: which events raise one, with which labels, and what a
push does when Alertmanager is down. The push's one outbound call (tasks.alerts_post) is recorded."""
from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from core.actors import Actor
from fleet.models import Node
from fleet.services import node_cordon
from health.services import burn_in_record, ticket_open, ticket_transition
from integrations.prometheus import tasks
from integrations.prometheus.alertmanager import AlertmanagerUnavailable, alerts_post, inference_pending_alerts
from scheduling.models import PriorityClass, Workload
from tests.cluster import api_for, submit

OPS = Actor.automation("test-operator")


@pytest.fixture
def pushed(settings, celery_eager, monkeypatch):
    settings.FLEETDECK = {**settings.FLEETDECK, "ALERTMANAGER_URL": "http://alertmanager.test:9093",
                          "PUBLIC_URL": "https://fleetdeck.test"}
    sent: list[dict] = []
    monkeypatch.setattr(tasks, "alerts_post", lambda alerts: sent.extend(alerts))
    return sent


def test_an_operator_cordon_alerts_nobody_and_automation_s_does(cluster, operator, pushed,
                                                              django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        node_cordon(node=Node.objects.get(name="n1"), reason="fan swap", actor=Actor.for_user(operator))
        node_cordon(node=Node.objects.get(name="n2"), reason="quarantined: 3 NCCL timeouts in 24 h",
                    actor=Actor.automation("health"))

    [alert] = pushed
    assert alert["labels"] == {"alertname": "FleetdeckNodeQuarantined", "severity": "critical",
                               "source": "fleetdeck", "node": "n2", "rack": "r1"}
    assert alert["generatorURL"] == "https://fleetdeck.test/nodes/n2/"
    assert alert["annotations"]["description"] == "quarantined: 3 NCCL timeouts in 24 h"


def test_a_failed_burn_in_alerts_that_the_node_is_back_in_repair(cluster, pushed,
                                                                 django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        ticket, _ = ticket_open(node=Node.objects.get(name="n4"), evidence="Xid 79", actor=OPS)
    for to in ("diagnosing", "repaired", "burn_in"):
        ticket_transition(ticket=ticket, to_state=to, reason=to, actor=OPS)
    with django_capture_on_commit_callbacks(execute=True):
        burn_in_record(ticket=ticket, passed=False, details="dcgmi diag -r 3: memory test failed", actor=OPS)

    assert [a["labels"]["alertname"] for a in pushed] == ["FleetdeckRepairTicketOpened", "FleetdeckBurnInFailed"]
    assert pushed[1]["labels"]["node"] == "n4" and "memory test failed" in pushed[1]["annotations"]["description"]


def test_online_inference_waiting_too_long_is_one_alert_per_workload(research_queue, team_member, settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "INFERENCE_PENDING_ALERT_SECONDS": 60}
    PriorityClass.objects.create(name="inference-online", value=2000, may_preempt=True, preemptible=False)
    spec = {"name": "chat-api", "team": "research", "priority_class": "inference-online",
            "pod_sets": [{"name": "main", "replicas": 1, "gpus_per_replica": 8, "flavor": "H100-SXM-80GB"}]}
    created = submit(api_for(team_member), **spec)
    workload = Workload.objects.get(pk=created["id"])
    now = timezone.now()

    assert inference_pending_alerts(now=now) == []  # not waiting long enough yet
    [alert] = inference_pending_alerts(now=workload.submitted_at + timedelta(minutes=2))
    assert alert["labels"] == {"alertname": "FleetdeckOnlineInferencePending", "severity": "critical",
                               "source": "fleetdeck", "team": "research", "queue": research_queue.name,
                               "workload": "chat-api"}


def test_an_unreachable_alertmanager_is_retried_then_given_up_without_failing_anyone(settings,
                                                                                      monkeypatch):
    settings.FLEETDECK = {**settings.FLEETDECK, "ALERTMANAGER_URL": "http://alertmanager.test:9093"}
    calls = []

    def down(alerts):
        calls.append(alerts)
        raise AlertmanagerUnavailable("connection refused")

    monkeypatch.setattr(tasks, "alerts_post", down)

    # Run in-process, Celery runs each retry at once (no countdown), the last one giving up.
    tasks.alert_push_task.apply(args=[[{"labels": {"alertname": "FleetdeckBurnInFailed"}}]], throw=False)

    assert len(calls) == tasks.MAX_RETRIES + 1


@pytest.mark.parametrize("answer, raised", [
    (httpx.Response(200), None),
    (httpx.Response(503), AlertmanagerUnavailable),
    (httpx.Response(400, text="bad startsAt"), ValueError),
])
def test_alerts_post_tells_a_retryable_failure_from_a_refusal(settings, answer, raised):
    settings.FLEETDECK = {**settings.FLEETDECK, "ALERTMANAGER_URL": "http://alertmanager.test:9093"}
    seen = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return answer

    post = lambda: alerts_post([{"labels": {"alertname": "x"}}], transport=httpx.MockTransport(handle))  # noqa: E731
    if raised is None:
        post()
    else:
        with pytest.raises(raised):
            post()
    assert seen == ["/api/v2/alerts"]
