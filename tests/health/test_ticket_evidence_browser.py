"""Ticket evidence wraps inside its card, on the ticket page and on the board, instead of being cut
off (a truncated line on the board, a <pre> running out of its card on the ticket page): the whole
kernel-log line is there to read, and nothing scrolls sideways. Saves
artifacts/ticket-evidence-detail.png and artifacts/ticket-evidence-board.png."""
from __future__ import annotations

import os

import pytest

from fleet.models import Node
from health.services import ticket_open

from .test_loops import OPS

# Playwright's sync API runs an event loop in this thread; the ORM calls made here while it is
# open are plain synchronous reads of the live server's test database.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# A real GSP timeout line (Xid 119) and a second one with a path no space breaks.
EVIDENCE = (
    "May 18 19:02:39 dgx-n5 kernel: NVRM: Xid (PCI:0000:3b:00): 119, pid=48213, name=python3, Timeout after 6s "
    "of waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).\n"
    "May 18 19:02:41 dgx-n5 kernel: /sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/nvidia/gpu/"
    "GPU-5f3c2d1e-8a9b-4c7d-9e0f-1a2b3c4d5e6f/gsp/rpc_history_overflowed_while_waiting"
)


def _overflows(locator) -> bool:
    return locator.evaluate("el => el.scrollWidth > el.clientWidth + 1")


def test_evidence_wraps_on_the_ticket_page_and_the_board(transactional_db, cluster, operator, browser, live_server,
                                                         artifacts_dir):
    from playwright.sync_api import expect

    ticket, _ = ticket_open(node=Node.objects.get(name="n5"), evidence=EVIDENCE, actor=OPS)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", "pw-" + operator.username)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    page.goto(f"{live_server.url}/health/tickets/{ticket.pk}/")
    evidence = page.locator("#ticket-evidence")
    expect(evidence).to_have_text(EVIDENCE)
    card = page.locator("section.card", has=evidence)
    assert not _overflows(evidence) and not _overflows(card)
    box, card_box = evidence.bounding_box(), card.bounding_box()
    assert box["x"] + box["width"] <= card_box["x"] + card_box["width"]  # inside its card
    line_height = evidence.evaluate("el => parseFloat(getComputedStyle(el).lineHeight) || 16")
    assert box["height"] > 3 * line_height  # two log lines, each wrapped at least once
    page.screenshot(path=str(artifacts_dir / "ticket-evidence-detail.png"), full_page=True)

    page.goto(f"{live_server.url}/health/tickets/")
    shown = page.locator(f"#ticket-{ticket.pk} .evidence")
    expect(shown).to_contain_text("Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).")
    expect(shown).to_contain_text("rpc_history_overflowed_while_waiting")
    assert not _overflows(page.locator(f"#ticket-{ticket.pk}"))
    page.screenshot(path=str(artifacts_dir / "ticket-evidence-board.png"), full_page=True)
