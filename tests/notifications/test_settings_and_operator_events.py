"""Operators follow nodes and tickets; everyone configures their channels on one page that also
logs what was sent and why not; an event or a task seen twice still sends once."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import Node
from fleet.services import node_cordon
from health.services.tickets import ticket_open
from notifications.choices import Event
from notifications.models import Delivery, NotificationSettings
from notifications.services import Message, deliveries_requeue_stale, notify
from notifications.tasks import notification_deliver_task

from .conftest import subscribe

pytestmark = pytest.mark.django_db


def test_operators_hear_of_cordons_and_tickets_and_team_members_do_not(operator, team_member, cluster,
                                                                       webhook_receiver,
                                                                       django_capture_on_commit_callbacks):
    subscribe(operator, Event.NODE_CORDONED, Event.TICKET_CHANGED, webhook=f"{webhook_receiver.url}/ok")
    subscribe(team_member, Event.NODE_CORDONED, webhook=f"{webhook_receiver.url}/ok")
    node = Node.objects.get(name="n3")

    with django_capture_on_commit_callbacks(execute=True):
        node_cordon(node=node, reason="fan noise", actor=Actor.for_user(operator))
    with django_capture_on_commit_callbacks(execute=True):
        ticket, _ = ticket_open(node=node, evidence="XID 79 on gpu2", actor=Actor.automation("health"))

    assert [h["subject"] for _, h in webhook_receiver.received] == [
        "Node n3 cordoned", f"Repair ticket #{ticket.pk} for n3: opened"]
    assert webhook_receiver.received[0][1]["text"] == "olga cordoned node n3: fan noise"
    assert set(Delivery.objects.values_list("user__username", flat=True)) == {"olga"}


def test_an_event_seen_twice_and_a_task_run_twice_send_once(operator, smtp_server):
    operator.email = "olga@example.com"
    operator.save()
    subs = [subscribe(operator, Event.NODE_CORDONED, email=True)]
    message = Message(subject="Node n1 cordoned", text="olga cordoned node n1: x")

    assert notify(event=Event.NODE_CORDONED, event_key="node.cordoned:1:7", recipients=subs, message=message) == 1
    assert notify(event=Event.NODE_CORDONED, event_key="node.cordoned:1:7", recipients=subs, message=message) == 0
    notification_deliver_task.delay(Delivery.objects.get().pk)

    assert len(smtp_server.messages) == 1 and Delivery.objects.get().state == "sent"


def test_the_sweep_sends_what_the_broker_lost(operator, webhook_receiver, time_machine):
    subs = [subscribe(operator, Event.NODE_CORDONED, webhook=f"{webhook_receiver.url}/ok")]
    Delivery.objects.create(event_key="node.cordoned:1:8", event=Event.NODE_CORDONED, user=operator,
                            channel="webhook", subject="lost", text="never queued")
    assert subs and deliveries_requeue_stale() == 0  # too young: may still be in the broker

    time_machine.move_to(timezone.now() + timedelta(minutes=16), tick=False)
    assert deliveries_requeue_stale() == 1
    assert Delivery.objects.get().state == "sent" and webhook_receiver.received[0][1]["subject"] == "lost"


def test_the_settings_page_saves_audits_and_shows_the_delivery_log(team_member, operator, webhook_receiver):
    page = Client()
    page.force_login(team_member)
    form = page.get("/account/notifications/").content.decode()
    assert "workload.requeued" in form and "node.cordoned" not in form  # operators' events hidden

    saved = page.post("/account/notifications/", {
        "webhook_url": f"{webhook_receiver.url}/500", "webhook_format": "slack", "wait_threshold_minutes": 45,
        "events": ["workload.requeued", "workload.failed"]})
    assert saved.status_code == 302
    audit = AuditEvent.objects.get(verb="notifications.settings")
    assert audit.actor == "tess" and audit.after["webhook_format"] == "slack"

    Delivery.objects.create(event_key="k", event=Event.WORKLOAD_FAILED, user=team_member, channel="webhook",
                            subject="job failed", text="t", state="failed", attempts=5,
                            last_error="the webhook answered HTTP 500")
    log = page.get("/account/notifications/").content.decode()
    assert "job failed" in log and "the webhook answered HTTP 500" in log and "Failed" in log


@pytest.mark.parametrize(("field", "value", "words"), [
    ("webhook_url", "ftp://example.com/hook", "http"),
    ("wait_threshold_minutes", "0", "greater than or equal to 1"),
    ("events", "node.cordoned", "not one of the available choices"),
], ids=["not http", "zero threshold", "operator event for a member"])
def test_bad_settings_are_a_400_naming_the_field(team_member, field, value, words):
    page = Client()
    page.force_login(team_member)
    body = {"webhook_format": "generic", "wait_threshold_minutes": 60, field: value}
    response = page.post("/account/notifications/", body)
    assert response.status_code == 400 and words in " ".join(response.context["form"].errors[field])


@pytest.fixture
def webhook_hosts(settings):
    allowed = ["hooks.example.com", "*.corp.example"]
    settings.NOTIFICATIONS = {**settings.NOTIFICATIONS, "WEBHOOK_ALLOWED_HOSTS": allowed}


@pytest.mark.parametrize(("url", "status"), [
    ("https://hooks.example.com/T0/B1", 302),
    ("https://chat.corp.example/hook", 302),
    ("http://169.254.169.254/latest/meta-data/", 400),  # the cloud metadata service
    ("http://127.0.0.1:6379/", 400),
    ("https://evilcorp.example/hook", 400),  # "*.corp.example" is subdomains, not a suffix
], ids=["listed host", "listed domain", "metadata address", "loopback", "lookalike domain"])
def test_a_webhook_may_only_point_at_the_allowed_hosts(team_member, webhook_hosts, url, status):
    page = Client()
    page.force_login(team_member)
    response = page.post("/account/notifications/", {"webhook_url": url, "webhook_format": "generic",
                                                     "wait_threshold_minutes": 60})
    assert response.status_code == status
    saved = NotificationSettings.objects.filter(user=team_member).values_list("webhook_url", flat=True).first()
    if status == 400:
        error = " ".join(response.context["form"].errors["webhook_url"])
        assert "hooks.example.com, *.corp.example" in error and saved is None
    else:
        assert saved == url


def test_a_saved_webhook_outside_a_narrowed_list_is_not_posted_to(operator, webhook_receiver, webhook_hosts):
    subscribe(operator, Event.NODE_CORDONED, webhook=f"{webhook_receiver.url}/ok")  # saved before the list
    notify(event=Event.NODE_CORDONED, event_key="node.cordoned:1:9", recipients=[operator.notification_settings],
           message=Message(subject="Node n1 cordoned", text="x"))

    delivery = Delivery.objects.get()
    assert webhook_receiver.received == []
    assert delivery.state == "failed" and "not 127.0.0.1" in delivery.last_error
