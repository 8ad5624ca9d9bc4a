"""A team member hears, by e-mail and webhook, what happens to their team's workloads: started,
preempted (grace and lost GPU-hours), stopped and requeued, failed, waiting too long. Real SMTP
and HTTP receivers on loopback; Celery eager, with its retries and backoff as configured."""
from __future__ import annotations

from datetime import timedelta

import pytest

from core.actors import Actor
from fleet.models import Node
from notifications.choices import Event
from notifications.models import Delivery
from notifications.waits import waits_notify
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from scheduling.services import node_drain, workload_finish, workload_preempt, workload_preemption_finish
from tests.cluster import api_for, run_round, submit, training

from .conftest import subscribe

pytestmark = pytest.mark.django_db
OPS = Actor.automation("test")


@pytest.fixture
def member(team_member):
    team_member.email = "tess@example.com"
    team_member.save()
    return team_member


def _running(client, clock, name="train", gpus=16) -> Workload:
    workload = submit(client, **training(name, gpus))
    run_round(clock)
    return Workload.objects.get(pk=workload["id"])


def test_a_drain_tells_the_team_by_mail_and_webhook(research_queue, member, clock, smtp_server, webhook_receiver,
                                                    django_capture_on_commit_callbacks):
    subscribe(member, Event.WORKLOAD_REQUEUED, email=True, webhook=f"{webhook_receiver.url}/ok")
    workload = _running(api_for(member), clock)
    node = workload.allocations.first().node
    clock.advance(3600)

    with django_capture_on_commit_callbacks(execute=True):
        node_drain(node=node, reason="PSU swap", grace_seconds=0, actor=Actor.automation("ops"), now=clock.now)

    (rcpt, mail), = smtp_server.messages
    assert rcpt == ["tess@example.com"]
    assert mail["Subject"] == "[Fleetdeck] train was stopped and requeued"
    body = mail.get_payload()
    assert f"node {node.name} drained: PSU swap" in body and "lost 16.0 GPU-hours" in body
    (path, hook), = webhook_receiver.received
    assert hook["event"] == "workload.requeued" and hook["data"]["lost_gpu_hours"] == 16.0
    assert hook["url"].endswith(f"/scheduling/workloads/{workload.pk}/")
    assert set(Delivery.objects.values_list("channel", "state")) == {("email", "sent"), ("webhook", "sent")}


def test_a_drain_with_grace_tells_the_team_once_when_the_grace_ends(research_queue, member, clock, webhook_receiver,
                                                                   django_capture_on_commit_callbacks):
    subscribe(member, Event.WORKLOAD_REQUEUED, webhook=f"{webhook_receiver.url}/ok")
    workload = _running(api_for(member), clock, "train", 8)
    node = workload.allocations.first().node
    clock.advance(3600)

    with django_capture_on_commit_callbacks(execute=True):
        node_drain(node=node, reason="PSU swap", grace_seconds=300, actor=OPS, now=clock.now)
    assert Workload.objects.get(pk=workload.pk).state == WorkloadState.PREEMPTING
    assert webhook_receiver.received == []  # still running out its grace: nothing to tell yet

    clock.advance(301)
    with django_capture_on_commit_callbacks(execute=True):
        run_round(clock)
        run_round(clock)  # a second tick changes nothing and tells nothing again

    (_, hook), = webhook_receiver.received
    assert hook["event"] == "workload.requeued" and hook["subject"] == "train was stopped and requeued"
    # 8 GPUs × 65 min since it started, never checkpointed
    assert hook["data"]["grace_seconds"] == 300 and hook["data"]["lost_gpu_hours"] == 8.67
    assert f"node {node.name} drained: PSU swap" in hook["text"] and "300 s of grace" in hook["text"]


def test_a_slack_webhook_gets_slack_text(research_queue, member, clock, webhook_receiver,
                                         django_capture_on_commit_callbacks):
    subscribe(member, Event.WORKLOAD_STARTED, webhook=f"{webhook_receiver.url}/ok", fmt="slack")
    submit(api_for(member), **training("train", 8))

    with django_capture_on_commit_callbacks(execute=True):
        run_round(clock)

    (_, hook), = webhook_receiver.received
    assert set(hook) == {"text"} and hook["text"].startswith("*train started*\nWorkload train of team research")
    assert "|Open in Fleetdeck>" in hook["text"]


def test_a_preemption_names_the_preemptor_the_grace_and_the_work_lost(research_queue, member, clock,
                                                                     webhook_receiver,
                                                                     django_capture_on_commit_callbacks):
    subscribe(member, Event.WORKLOAD_PREEMPTED, webhook=f"{webhook_receiver.url}/ok")
    victim = _running(api_for(member), clock, "victim", 8)
    urgent = Workload.objects.get(pk=submit(api_for(member), **training("urgent", 8))["id"])
    clock.advance(1800)

    with django_capture_on_commit_callbacks(execute=True):
        workload_preempt(victim=victim, preemptor=urgent, reason="priority", message="urgent needs the GPUs",
                         deadline=clock.now + timedelta(seconds=120), actor=OPS, now=clock.now)
    clock.advance(120)
    with django_capture_on_commit_callbacks(execute=True):
        workload_preemption_finish(workload=victim, actor=OPS, now=clock.now, hard=True)

    (_, hook), = webhook_receiver.received
    assert hook["subject"] == "victim was preempted"
    data = hook["data"]
    # 8 GPUs × 32 min since it started, never checkpointed
    assert (data["grace_seconds"], data["preemptor"], data["lost_gpu_hours"]) == (120, "urgent", 4.27)
    assert "120 s of grace" in hook["text"] and "lost 4.27 GPU-hours" in hook["text"]


def test_a_failure_is_told_once_and_other_teams_hear_nothing(research_queue, member, operator, clock,
                                                            webhook_receiver, django_capture_on_commit_callbacks):
    subscribe(member, Event.WORKLOAD_FAILED, webhook=f"{webhook_receiver.url}/ok")
    subscribe(operator, Event.WORKLOAD_FAILED, webhook=f"{webhook_receiver.url}/ok")  # in no team
    workload = _running(api_for(member), clock, "job", 8)

    with django_capture_on_commit_callbacks(execute=True):
        workload_finish(workload=workload, succeeded=False, reason="exit code 137 (OOM)", actor=OPS, now=clock.now)
        workload_finish(workload=workload, succeeded=False, reason="again", actor=OPS, now=clock.now)

    assert [(h["subject"], h["text"]) for _, h in webhook_receiver.received] == [
        ("job failed", "Workload job of team research failed: exit code 137 (OOM).")]
    assert Delivery.objects.get().user == member


def test_a_long_wait_is_told_once_per_wait(research_queue, member, clock, webhook_receiver):
    subscribe(member, Event.WORKLOAD_WAITING, webhook=f"{webhook_receiver.url}/ok", wait_minutes=30)
    submit(api_for(member), **training("huge", 64))  # no round runs: it waits (128 would never fit: a 400)

    clock.advance(29 * 60)
    assert waits_notify(now=clock.now) == 0
    clock.advance(2 * 60)
    assert waits_notify(now=clock.now) == 1
    clock.advance(60 * 60)
    assert waits_notify(now=clock.now) == 0

    (_, hook), = webhook_receiver.received
    assert hook["subject"] == "huge has waited 31 min" and hook["data"]["waited_minutes"] == 31


def test_a_webhook_answering_500_is_retried_then_logged_as_failed(research_queue, member, clock, webhook_receiver,
                                                                  django_capture_on_commit_callbacks):
    subscribe(member, Event.WORKLOAD_REQUEUED, webhook=f"{webhook_receiver.url}/500")
    workload = _running(api_for(member), clock, "job", 8)

    with django_capture_on_commit_callbacks(execute=True):
        outcome = node_drain(node=workload.allocations.first().node, reason="swap", grace_seconds=0, actor=OPS,
                             now=clock.now)

    assert [s.workload.state for s in outcome.stops] == [WorkloadState.REQUEUED]  # the drain went through
    assert len(webhook_receiver.received) == 5
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_error) == ("failed", 5, "the webhook answered HTTP 500")


def test_a_webhook_that_never_answers_costs_the_drain_nothing(research_queue, member, clock, webhook_receiver,
                                                             django_capture_on_commit_callbacks):
    subscribe(member, Event.WORKLOAD_REQUEUED, webhook=f"{webhook_receiver.url}/slow")
    workload = _running(api_for(member), clock, "job", 8)
    node = workload.allocations.first().node

    with django_capture_on_commit_callbacks(execute=True):
        node_drain(node=node, reason="swap", grace_seconds=0, actor=OPS, now=clock.now)

    assert Node.objects.get(pk=node.pk).state == "cordoned"
    assert Workload.objects.get(pk=workload.pk).state == WorkloadState.REQUEUED
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_error) == ("failed", 5, "no answer within 0.5 s")


def test_the_mail_server_being_down_is_logged_as_the_reason(research_queue, member, clock, settings,
                                                            django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 1  # nothing listens there
    subscribe(member, Event.WORKLOAD_STARTED, email=True)
    submit(api_for(member), **training("train", 8))

    with django_capture_on_commit_callbacks(execute=True):
        run_round(clock)

    delivery = Delivery.objects.get()
    assert delivery.state == "failed" and delivery.attempts == 5 and "mail server" in delivery.last_error
    assert Workload.objects.get().state == WorkloadState.RUNNING
