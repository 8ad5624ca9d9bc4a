"""E-mail about quota request state changes, to the team and to operators.

Sent only after the transaction that changed the state commits: a rolled-back approval must
never have told anyone it happened."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.urls import reverse

from core.roles import OPERATORS_GROUP
from scheduling.choices import QuotaRequestState
from scheduling.models import QuotaRequest, TeamMembership

logger = logging.getLogger(__name__)
_suppressed: ContextVar[bool] = ContextVar("quota_request_mail_suppressed", default=False)


@contextmanager
def suppressed() -> Iterator[None]:
    """No e-mail for transitions made inside: for history written after the fact (the demo's
    past requests), which nobody needs telling about today."""
    token = _suppressed.set(True)
    try:
        yield
    finally:
        _suppressed.reset(token)


def notify_on_commit(quota_request_id: int, *, old_state: str, new_state: str) -> None:
    if _suppressed.get():
        return
    transaction.on_commit(lambda: quota_request_notify(quota_request_id, old_state=old_state, new_state=new_state))


def page_url(quota_request_id: int) -> str:
    path = reverse("scheduling:quota-request-detail", kwargs={"request_id": quota_request_id})
    return settings.FLEETDECK.get("PUBLIC_URL", "").rstrip("/") + path


def team_recipients(team_id: int, team_email: str) -> list[str]:
    if team_email:
        return [team_email]
    emails = TeamMembership.objects.filter(team_id=team_id).exclude(user__email="")
    return sorted(set(emails.values_list("user__email", flat=True)))


def operator_recipients() -> list[str]:
    users = get_user_model().objects.filter(groups__name=OPERATORS_GROUP, is_active=True).exclude(email="")
    return sorted(set(users.values_list("email", flat=True)))


def quota_request_notify(quota_request_id: int, *, old_state: str, new_state: str) -> int:
    """Send the team and the operators one message each; returns the number sent. A mail server
    failure is logged, not raised: the state change has already committed."""
    qr = QuotaRequest.objects.select_related("team", "queue", "flavor", "requested_by", "reviewed_by").get(
        pk=quota_request_id
    )
    # Name the transition being announced, not the row's state now: an approval that applies at
    # once sends "approved" and then "applied", both read after the same commit.
    new_label = QuotaRequestState(new_state).label.lower()
    subject = f"[Fleetdeck] Quota request #{qr.pk} for {qr.team.name}: {new_label}"
    body = _body(qr, old_state=old_state, new_label=new_label)
    messages = [
        EmailMessage(subject=subject, body=body, to=recipients)
        for recipients in (team_recipients(qr.team_id, qr.team.email), operator_recipients())
        if recipients
    ]
    if not messages:
        return 0
    try:
        return get_connection().send_messages(messages) or 0
    except OSError:
        logger.exception("could not e-mail about quota request %s", qr.pk)
        return 0


def _body(qr: QuotaRequest, *, old_state: str, new_label: str) -> str:
    window = f"from {qr.starts_on}" + (f" until {qr.ends_on} (temporary boost)" if qr.ends_on else " (permanent)")
    lines = [
        f"Quota request #{qr.pk} of team {qr.team.name} is now {new_label}"
        + (f" (was {old_state})." if old_state else "."),
        "",
        f"Queue: {qr.queue.name}",
        f"Flavor: {qr.flavor.name}",
        f"Requested nominal: {qr.requested_nominal} GPUs",
    ]
    if qr.requested_borrowing_limit is not None:
        lines.append(f"Requested borrowing limit: {qr.requested_borrowing_limit} GPUs")
    lines += [f"Window: {window}", f"Requested by: {qr.requested_by or '—'}", "", "Justification:", qr.justification]
    if qr.reviewed_by_id:
        lines += ["", f"Reviewed by {qr.reviewed_by}: {qr.review_comment or '(no comment)'}"]
    if qr.previous_nominal is not None:
        lines += ["", f"Nominal before the change: {qr.previous_nominal} GPUs"]
    lines += ["", page_url(qr.pk)]
    return "\n".join(lines)
