"""The repair-ticket board: operator actions on each card (each with a reason), a constant number
of queries, and the events page's filters surviving pagination."""
from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.models import AuditEvent
from fleet.models import Node
from health.models import HealthEvent, RepairTicket
from health.services import ticket_open, ticket_transition

from .conftest import agent_client, xid_line
from .test_loops import OPS
from .test_pages_and_readings import login


def _tickets(names):
    for name in names:
        agent_client(name).post("/api/v1/telemetry/kernel-log/", {"node": name, "lines": [xid_line(name, 1)]},
                                format="json")
    return {t.node.name: t for t in RepairTicket.objects.select_related("node")}


def test_operators_move_tickets_from_the_board_with_a_reason(cluster, with_pci, operator, client):
    tickets = _tickets(["n3"])
    ticket = tickets["n3"]
    login(client, operator)
    board = client.get("/health/tickets/").content.decode()
    card = board[board.index(f'id="ticket-{ticket.pk}"'):]
    assert 'name="reason" required' in card and '<option value="diagnosing">Diagnosing</option>' in card
    assert '<option value="returned">' not in board  # only a passed burn-in returns a node

    refused = client.post(f"/health/tickets/{ticket.pk}/transition/", {"to": "diagnosing", "reason": " ",
                                                                        "next": "board"})
    assert refused.status_code == 400 and "Give a reason" in refused.content.decode()
    assert RepairTicket.objects.get(pk=ticket.pk).state == "open"

    moved = client.post(f"/health/tickets/{ticket.pk}/transition/",
                        {"to": "diagnosing", "reason": "dmesg shows the bus error", "next": "board"})
    assert moved.status_code == 302 and moved["Location"] == f"/health/tickets/#ticket-{ticket.pk}"
    after = client.get(moved["Location"]).content.decode()
    assert f"Ticket #{ticket.pk} (n3) moved to diagnosing." in after
    audit = AuditEvent.objects.get(verb="ticket.transition")
    assert audit.reason == "dmesg shows the bus error" and audit.actor == operator.username


def test_burn_in_is_recorded_from_the_board_and_returns_the_node(cluster, operator, client):
    ticket, _ = ticket_open(node=Node.objects.get(name="n4"), evidence="fan", actor=OPS, out_of_service=True)
    for to in ("diagnosing", "repaired", "burn_in"):
        ticket_transition(ticket=ticket, to_state=to, reason=to, actor=OPS)
    login(client, operator)
    board = client.get("/health/tickets/").content.decode()
    assert f'action="/health/tickets/{ticket.pk}/burn-in/"' in board
    done = client.post(f"/health/tickets/{ticket.pk}/burn-in/",
                       {"passed": "yes", "details": "dcgmi diag -r 3 passed", "next": "board"})
    assert done.status_code == 302 and done["Location"].startswith("/health/tickets/")
    assert RepairTicket.objects.get(pk=ticket.pk).state == "returned"
    assert Node.objects.get(name="n4").state == "ready"


def test_viewers_see_the_board_without_actions(cluster, with_pci, viewer, client):
    ticket = _tickets(["n2"])["n2"]
    login(client, viewer)
    board = client.get("/health/tickets/").content.decode()
    assert f'id="ticket-{ticket.pk}"' in board and "/transition/" not in board and "/burn-in/" not in board
    assert client.post(f"/health/tickets/{ticket.pk}/transition/",
                       {"to": "diagnosing", "reason": "x", "next": "board"}).status_code == 403


def test_the_board_costs_the_same_queries_for_one_ticket_or_many(cluster, with_pci, operator, client):
    login(client, operator)
    _tickets(["n1"])
    with CaptureQueriesContext(connection) as one:
        assert client.get("/health/tickets/").status_code == 200
    _tickets(["n2", "n3", "n5", "n6"])
    ticket_transition(ticket=RepairTicket.objects.get(node__name="n2"), to_state="diagnosing", reason="x", actor=OPS)
    with CaptureQueriesContext(connection) as five:
        assert client.get("/health/tickets/").status_code == 200
    assert len(five.captured_queries) == len(one.captured_queries)


def test_event_pages_keep_every_filter(cluster, viewer, client):
    n1 = Node.objects.get(name="n1")
    for i in range(105):
        HealthEvent.objects.create(kind="oom", source="app", severity="warning", node=n1, dedup_key=f"k{i}",
                                   first_seen="2026-01-01T00:00:00Z", last_seen="2026-01-01T00:00:00Z")
    login(client, viewer)
    page = client.get("/health/events/?node=n1&kind=oom&severity=warning").content.decode()
    assert 'href="?node=n1&amp;kind=oom&amp;severity=warning&amp;page=2">older</a>' in page
    second = client.get("/health/events/?node=n1&kind=oom&severity=warning&page=2").content.decode()
    assert "page 2 of 2" in second and 'href="?node=n1&amp;kind=oom&amp;severity=warning&amp;page=1">newer' in second
