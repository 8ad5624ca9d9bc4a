"""Alertmanager's webhook: an alert is a health signal, decided by the same policy as the kernel log."""
from __future__ import annotations

from core.models import AuditEvent
from fleet.choices import GpuHealth, NodeState
from fleet.models import Gpu, Node
from health.choices import EventSource, TicketState
from health.models import HealthEvent, RepairTicket
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from tests.cluster import nodes_of, run_round

from .conftest import WEBHOOK, WEBHOOK_TOKEN, place_seed_jobs, webhook_body, xid_alert


def _post(client, *alerts):
    return client.post(WEBHOOK, webhook_body(*alerts), format="json")


def test_a_firing_xid_79_alert_cordons_the_node_stops_its_gang_and_opens_a_ticket(
    research_queue, with_pci, team_member, alertmanager_client
):
    train = place_seed_jobs(team_member)

    response = _post(alertmanager_client, xid_alert("n3", 5))

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["events_created"] == 1 and body["ignored"] == []
    assert [a["kind"] for a in body["actions"]] == ["cordon_node", "mark_gpu", "stop_gangs_on_node",
                                                    "open_repair_ticket"]
    n3 = Node.objects.get(name="n3")
    assert n3.state == NodeState.IN_REPAIR and n3.cordoned_by == "automation:health"
    assert "Xid 79" in n3.cordon_reason
    assert Gpu.objects.get(node=n3, index=5).health == GpuHealth.UNHEALTHY
    event = HealthEvent.objects.get()
    assert (event.kind, event.xid, event.source, event.severity, event.action) == (
        "xid", 79, EventSource.ALERTMANAGER, "fatal", "reboot_node")
    assert Workload.objects.get(pk=train["id"]).state == WorkloadState.REQUEUED
    assert RepairTicket.objects.get().state == TicketState.OPEN
    run_round()
    assert nodes_of(train["id"]) == ["n1", "n2", "n4", "n8"]


def test_alertmanager_resending_the_same_alert_acts_once(research_queue, with_pci, alertmanager_client):
    alert = xid_alert("n3", 5)

    first = _post(alertmanager_client, alert).json()
    again = _post(alertmanager_client, alert).json()

    assert first["events_created"] == 1 and len(first["actions"]) == 4
    assert again == {"events_created": 0, "duplicates": 1, "resolved": 0, "actions": [], "ignored": []}
    assert AuditEvent.objects.filter(verb="node.cordon").count() == 1


def test_a_resolved_alert_resolves_the_event_and_never_uncordons(research_queue, with_pci, alertmanager_client):
    _post(alertmanager_client, xid_alert("n3", 5))

    body = _post(alertmanager_client, xid_alert("n3", 5, status="resolved")).json()

    assert body["resolved"] == 1 and body["events_created"] == 0
    assert HealthEvent.objects.get().resolved_at is not None
    assert Node.objects.get(name="n3").state == NodeState.IN_REPAIR
    assert RepairTicket.objects.get().state == TicketState.OPEN


def test_an_alert_for_a_gpu_outside_the_inventory_changes_nothing_and_says_why(cluster, alertmanager_client):
    alert = xid_alert("n3", 5)
    alert["labels"] |= {"UUID": "GPU-not-ours", "Hostname": "elsewhere-17"}
    other = {**xid_alert("n2", 1), "labels": {"alertname": "HighLatency", "severity": "page"}}

    body = _post(alertmanager_client, alert, other).json()

    assert body["events_created"] == 0
    assert body["ignored"] == [
        "FleetdeckGpuXid: no node in the inventory matches its UUID or host labels",
        "HighLatency: no known fleetdeck_signal label (none)",
    ]
    assert not HealthEvent.objects.exists()


def test_legacy_series_without_a_uuid_find_their_node_by_hostname(cluster, alertmanager_client):
    alert = xid_alert("n6", 2, xid=48)
    del alert["labels"]["UUID"]

    body = _post(alertmanager_client, alert).json()

    assert body["events_created"] == 1
    assert Node.objects.get(name="n6").state == NodeState.IN_REPAIR


def test_an_exporter_down_alert_is_a_scrape_condition_until_it_resolves(cluster, alertmanager_client):
    down = {"status": "firing", "fingerprint": "0f3c", "startsAt": "2026-11-02T09:00:00Z",
            "labels": {"alertname": "FleetdeckGpuExporterDown", "fleetdeck_signal": "exporter_down",
                       "instance": "10.0.0.7:9400", "job": "dcgm", "node": "n7"}}

    assert _post(alertmanager_client, down).json()["events_created"] == 1
    event = HealthEvent.objects.get()
    assert (event.kind, event.node.name, event.resolved_at) == ("scrape_failed", "n7", None)
    assert Node.objects.get(name="n7").state == NodeState.READY  # a scrape failing is no hardware fault

    assert _post(alertmanager_client, {**down, "status": "resolved"}).json()["resolved"] == 1


def test_the_webhook_needs_its_own_token(cluster, client, webhook_settings, operator):
    body = webhook_body(xid_alert("n3", 5))
    anonymous = client.post(WEBHOOK, body, content_type="application/json")
    wrong = client.post(WEBHOOK, body, content_type="application/json", HTTP_AUTHORIZATION="Bearer nope")
    client.force_login(operator)
    person = client.post(WEBHOOK, body, content_type="application/json")

    assert (anonymous.status_code, wrong.status_code, person.status_code) == (401, 401, 401)
    assert not HealthEvent.objects.exists()


def test_the_webhook_is_off_without_a_token(cluster, client, settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "ALERTMANAGER_WEBHOOK_TOKEN_SHA256": ""}

    response = client.post(WEBHOOK, webhook_body(xid_alert("n3", 5)), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {WEBHOOK_TOKEN}")

    assert response.status_code == 403
    assert "ALERTMANAGER_WEBHOOK_TOKEN" in response.json()["detail"]


def test_a_post_without_credentials_is_a_401_asking_for_a_bearer_token(cluster, client, webhook_settings):
    settings = webhook_settings
    for digest in (settings.FLEETDECK["ALERTMANAGER_WEBHOOK_TOKEN_SHA256"], ""):  # on, and off
        settings.FLEETDECK = {**settings.FLEETDECK, "ALERTMANAGER_WEBHOOK_TOKEN_SHA256": digest}
        response = client.post(WEBHOOK, webhook_body(xid_alert("n3", 5)), content_type="application/json")
        assert (response.status_code, response["WWW-Authenticate"]) == (401, "Bearer")
    assert not HealthEvent.objects.exists()


def test_a_malformed_post_is_a_400_naming_the_field(cluster, alertmanager_client):
    alert = xid_alert("n3", 5)
    alert["startsAt"] = "yesterday"
    no_alerts = alertmanager_client.post(WEBHOOK, {"version": "4"}, format="json")
    bad_time = _post(alertmanager_client, alert)
    bad_status = _post(alertmanager_client, {**xid_alert("n3", 5), "status": "exploded"})

    assert no_alerts.status_code == 400 and "alerts" in no_alerts.content.decode()
    assert bad_time.status_code == 400 and "startsAt" in bad_time.content.decode()
    assert bad_status.status_code == 400 and "status" in bad_status.content.decode()
    assert not HealthEvent.objects.exists()
