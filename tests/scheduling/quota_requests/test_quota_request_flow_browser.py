"""A quota request end to end in a real browser: a team member files one (first with a field
error), an operator approves it from the review queue, the team page shows the new quota and
both actions in its history. Saves artifacts/quota-request-*.png."""
from __future__ import annotations

import datetime as dt
import io
import os

import pytest
from django.utils import timezone

from scheduling.models import QueueQuota, QueueUsageSample, QuotaRequest
from tests.browser import log_in

# Playwright's sync API runs an event loop in this thread; the ORM reads made here while it is
# open are plain synchronous reads of the live server's test database.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.slow, pytest.mark.browser]



def test_a_team_member_files_and_an_operator_approves(transactional_db, live_server, browser, artifacts_dir,
                                                      research_queue, other_queue, h100, team_member, operator):
    from playwright.sync_api import expect

    now = timezone.now()
    QueueUsageSample.objects.bulk_create(
        QueueUsageSample(queue=research_queue, flavor=h100, at=now - dt.timedelta(hours=h), nominal=8,
                         in_use=6 + h % 3, utilised=4.0)
        for h in range(48)
    )

    member = log_in(browser, live_server, team_member, width=1400)
    member.goto(f"{live_server.url}/scheduling/quota-requests/new/")
    member.select_option("#id_flavor", label="H100")
    member.fill("#id_requested_nominal", "40")
    member.fill("#id_justification", "The 13B run needs four more H100s.")
    member.click(".qr-form button[type=submit]")
    expect(member.locator("#errors-requested_nominal")).to_contain_text("The fleet has only 16 H100 GPUs.")
    assert not QuotaRequest.objects.exists()
    member.screenshot(path=str(artifacts_dir / "quota-request-form-error.png"), full_page=True)

    member.fill("#id_requested_nominal", "12")
    member.click(".qr-form button[type=submit]")
    expect(member.locator(".page-head .badge")).to_have_text("Submitted")
    qr = QuotaRequest.objects.get()

    ops = log_in(browser, live_server, operator, width=1400)
    ops.goto(f"{live_server.url}/scheduling/quota-requests/")
    card = ops.locator(f"#request-{qr.pk}")
    expect(card.locator(".review-context")).to_contain_text("12 now → 16 if approved, against 16 GPUs")
    ops.screenshot(path=str(artifacts_dir / "quota-request-review-queue.png"), full_page=True)
    card.locator(f"#approve-comment-{qr.pk}").fill("Fits the fleet; go ahead.")
    card.get_by_role("button", name=f"Approve #{qr.pk}").click()
    expect(ops.locator(".messages")).to_contain_text(f"Request #{qr.pk} approved and applied")
    assert QueueQuota.objects.get(queue=research_queue, flavor=h100).nominal == 12

    member.goto(f"{live_server.url}/scheduling/teams/{research_queue.team_id}/")
    expect(member.locator("#usage-table tr[data-flavor='H100'] td.nominal")).to_have_text("12")
    expect(member.locator(f"#usage-7d-{h100.pk} .main-svg").first).to_be_visible()
    history = member.locator(".audit-table")
    expect(history).to_contain_text("quota_request.submit")
    expect(history).to_contain_text("quota_request.approve")
    expect(history).to_contain_text("Fits the fleet; go ahead.")
    expect(history).to_contain_text("quota.apply")
    member.screenshot(path=str(artifacts_dir / "quota-request-team-page.png"), full_page=True)


def test_a_new_user_walks_the_demo_loop(transactional_db, live_server, browser, artifacts_dir):
    """On the demo data: alice sees her pending request, files and withdraws another; ops approves
    hers without an override, is warned about bob's, denies it; alice sees 52 H100s."""
    from django.core.management import call_command
    from playwright.sync_api import expect

    call_command("load_demo", verbosity=0, stdout=io.StringIO())
    mine = QuotaRequest.objects.get(team__name="research", state="submitted")
    bobs = QuotaRequest.objects.get(team__name="inference", state="submitted")
    team_url = f"{live_server.url}/scheduling/teams/{mine.team_id}/"

    alice = log_in(browser, live_server, "alice", "alice-demo", width=1400)
    alice.goto(team_url)
    h100_row = alice.locator(f"#usage-table tr[data-flavor='{mine.flavor.name}'] td.nominal")
    expect(h100_row).to_have_text("48")
    expect(alice.locator(f".request-table tr[data-request='{mine.pk}']")).to_contain_text("Submitted")
    alice.click(".page-head a.button")
    alice.select_option("#id_flavor", label="A100-SXM-80GB")
    alice.fill("#id_requested_nominal", "20")
    alice.fill("#id_justification", "Ablations for the 70B run.")
    alice.click(".qr-form button[type=submit]")
    expect(alice.locator(".review-context .notice")).to_contain_text("only with an override")
    alice.click(".withdraw-form button")
    expect(alice.locator(".page-head .badge")).to_have_text("Withdrawn")

    ops = log_in(browser, live_server, "ops", "ops-demo", width=1400)
    ops.goto(f"{live_server.url}/scheduling/quota-requests/")
    card = ops.locator(f"#request-{mine.pk}")
    expect(card.locator(".review-context")).to_contain_text("60 now → 64 if approved, against 64 GPUs")
    expect(card.locator("input[name=override]")).to_have_count(0)
    expect(ops.locator(f"#request-{bobs.pk} .review-context .notice")).to_contain_text("Approval needs the override")
    ops.screenshot(path=str(artifacts_dir / "quota-request-demo-review-queue.png"), full_page=True)
    card.locator(f"#approve-comment-{mine.pk}").fill("Evaluation's four H100s are yours for the run.")
    card.get_by_role("button", name=f"Approve #{mine.pk}").click()
    expect(ops.locator(".messages")).to_contain_text(f"Request #{mine.pk} approved and applied")
    ops.locator(f"#deny-comment-{bobs.pk}").fill("The A100 pool is full; borrow from the cohort.")
    ops.get_by_role("button", name=f"Deny #{bobs.pk}").click()
    expect(ops.locator(".messages")).to_contain_text(f"Request #{bobs.pk} denied")

    alice.goto(team_url)
    expect(h100_row).to_have_text("52")
    history = alice.locator(".audit-table")
    for verb in ("quota_request.submit", "quota_request.withdraw", "quota_request.approve", "quota.apply"):
        expect(history).to_contain_text(verb)
    alice.screenshot(path=str(artifacts_dir / "quota-request-demo-team-page.png"), full_page=True)
