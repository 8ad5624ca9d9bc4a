"""Quota requests: file, withdraw, approve, deny, apply, expire; and usage sampling.

Every mutation is one transaction with an audit row; e-mails go out after commit.

Lock order, the same in every service, so concurrent reviews and the beat task cannot deadlock:
the QuotaRequest row, then the GpuFlavor row, then that flavor's QueueQuota rows by pk. The
flavor row is the serialisation point: two approvals for the same flavor run one after the
other, and the second computes the flavor's nominal sum only after the first has committed,
so together they can never oversubscribe the fleet unnoticed."""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.actors import Actor
from core.audit import audit_record
from core.roles import is_operator, may_act_for_team, team_ids
from fleet.models import GpuFlavor
from scheduling import limits
from scheduling.choices import QuotaRequestState
from scheduling.models import Allocation, Queue, QueueQuota, QueueUsageSample, QuotaRequest
from scheduling.usage import projected_nominal_sum

from . import notifications, selectors

S = QuotaRequestState
SAMPLE_EVERY = dt.timedelta(minutes=5)
SAMPLE_RETENTION = dt.timedelta(days=40)


# --- validation shared by the form and the API ---------------------------------------------------


def quota_request_check_may_file(*, user, queue: Queue) -> None:
    if not may_act_for_team(user, queue.team_id):
        raise PermissionDenied("You can only request quota for your own team.")


def quota_request_validate(
    *,
    queue: Queue,
    flavor: GpuFlavor,
    requested_nominal: int | None,
    requested_borrowing_limit: int | None,
    starts_on: dt.date | None,
    ends_on: dt.date | None,
    justification: str,
    today: dt.date,
) -> None:
    """Raise a ValidationError keyed by field with every problem of a new request."""
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    capacity = selectors.flavor_capacity(flavor.pk)
    if requested_nominal is None:
        add("requested_nominal", "Enter the number of GPUs you need.")
    elif requested_nominal < 1:
        add("requested_nominal", "Enter a positive whole number of GPUs.")
    elif requested_nominal > capacity:
        add("requested_nominal", f"The fleet has only {capacity} {flavor.name} GPUs.")
    if requested_borrowing_limit is not None:
        if requested_borrowing_limit < 0:
            add("requested_borrowing_limit", "Enter a whole number of GPUs (0 or more).")
        elif requested_borrowing_limit > capacity:
            add("requested_borrowing_limit", f"The fleet has only {capacity} {flavor.name} GPUs.")
    if starts_on is None:
        add("starts_on", "Enter a start date.")
    elif starts_on < today:
        add("starts_on", "The start date cannot be in the past.")
    if ends_on is not None and starts_on is not None and ends_on <= starts_on:
        add("ends_on", "The end date must be after the start date.")
    if not (justification or "").strip():
        add("justification", "Explain why the team needs this quota.")
    elif len(justification.strip()) > limits.MAX_JUSTIFICATION_LENGTH:
        add("justification", f"At most {limits.MAX_JUSTIFICATION_LENGTH} characters, not {len(justification.strip())}.")

    current = QueueQuota.objects.filter(queue=queue, flavor=flavor).first()
    if (
        current is not None
        and requested_nominal == current.nominal
        and requested_borrowing_limit in (None, current.borrowing_limit)
    ):
        add("requested_nominal", f"{queue.name} already has {current.nominal} {flavor.name} GPUs.")
    open_request = QuotaRequest.objects.filter(team_id=queue.team_id, flavor=flavor, state=S.SUBMITTED).first()
    if open_request is not None:
        conflict = ValidationError(_open_request_message(open_request), code=OPEN_REQUEST)
        errors.setdefault("flavor", []).append(conflict)  # type: ignore[arg-type]  # its code marks a 409
    if errors:
        raise ValidationError(errors)


# The code of "this team already has an open request for the flavor": a conflict with what exists,
# which the API answers with a 409.
OPEN_REQUEST = "open_request"


def _open_request_message(open_request: QuotaRequest) -> str:
    return (
        f"{open_request.team} already has an open request for {open_request.flavor} "
        f"(#{open_request.pk}); withdraw it or wait for its review."
    )


# --- filing and withdrawing ----------------------------------------------------------------------


def quota_request_create(
    *,
    actor: Actor,
    queue: Queue,
    flavor: GpuFlavor,
    requested_nominal: int,
    requested_borrowing_limit: int | None = None,
    starts_on: dt.date,
    ends_on: dt.date | None = None,
    justification: str,
    now: dt.datetime | None = None,
) -> QuotaRequest:
    """File a request for the queue's team. The partial unique index on (team, flavor) while
    submitted is the real guard against a double submission; the check in validation only
    gives the common case a friendlier message."""
    now = now or timezone.now()
    quota_request_check_may_file(user=actor.user, queue=queue)
    fields = dict(
        queue=queue,
        flavor=flavor,
        requested_nominal=requested_nominal,
        requested_borrowing_limit=requested_borrowing_limit,
        starts_on=starts_on,
        ends_on=ends_on,
        justification=justification.strip(),
    )
    quota_request_validate(**fields, today=timezone.localdate(now))
    with transaction.atomic():
        try:
            with transaction.atomic():
                quota_request = QuotaRequest.objects.create(team_id=queue.team_id, requested_by=actor.user, **fields)
        except IntegrityError as exc:
            open_request = QuotaRequest.objects.filter(team_id=queue.team_id, flavor=flavor, state=S.SUBMITTED).first()
            if open_request is None:
                raise
            conflict = ValidationError(_open_request_message(open_request), code=OPEN_REQUEST)
            raise ValidationError({"flavor": [conflict]}) from exc
        audit_record(
            actor=actor,
            verb="quota_request.submit",
            target=quota_request,
            reason=quota_request.justification,
            after=_request_dict(quota_request),
        )
        notifications.notify_on_commit(quota_request.pk, old_state="", new_state=S.SUBMITTED)
    return quota_request


def quota_request_withdraw(*, actor: Actor, quota_request: QuotaRequest) -> QuotaRequest:
    """The requester or a member of the team takes back a request that is still open."""
    user = actor.user
    if not (quota_request.requested_by_id == user.pk or quota_request.team_id in team_ids(user)):
        raise PermissionDenied("Only the requester or a member of the team can withdraw this request.")
    with transaction.atomic():
        locked = _lock_request(quota_request.pk)
        _expect_state(locked, S.SUBMITTED, "withdrawn")
        locked.state = S.WITHDRAWN
        locked.save(update_fields=["state"])
        audit_record(actor=actor, verb="quota_request.withdraw", target=locked, before={"state": S.SUBMITTED},
                     after={"state": S.WITHDRAWN})
        notifications.notify_on_commit(locked.pk, old_state=S.SUBMITTED, new_state=S.WITHDRAWN)
    return locked


# --- review --------------------------------------------------------------------------------------


def quota_request_deny(*, actor: Actor, quota_request: QuotaRequest, comment: str,
                       now: dt.datetime | None = None) -> QuotaRequest:
    """An operator turns a request down; the comment tells the team why."""
    _require_operator(actor)
    if not (comment or "").strip():
        raise ValidationError({"comment": ["Say why the request is denied."]})
    now = now or timezone.now()
    with transaction.atomic():
        locked = _lock_request(quota_request.pk)
        _expect_state(locked, S.SUBMITTED, "denied")
        _mark_reviewed(locked, actor=actor, state=S.DENIED, comment=comment.strip(), now=now)
        audit_record(actor=actor, verb="quota_request.deny", target=locked, reason=locked.review_comment,
                     before={"state": S.SUBMITTED}, after={"state": S.DENIED})
        notifications.notify_on_commit(locked.pk, old_state=S.SUBMITTED, new_state=S.DENIED)
    return locked


def quota_request_approve(
    *,
    actor: Actor,
    quota_request: QuotaRequest,
    comment: str = "",
    override: bool = False,
    now: dt.datetime | None = None,
) -> QuotaRequest:
    """An operator approves. The quota changes in the same transaction when the start date has
    come (the scheduler reads QueueQuota every round, so the next round uses it); otherwise
    `quota_requests_tick` applies it on the start date.

    Refused when the flavor's nominal quotas would add up to more than fleet capacity × the
    oversubscription ratio, unless `override` is set, which is audited."""
    _require_operator(actor)
    now = now or timezone.now()
    today = timezone.localdate(now)
    with transaction.atomic():
        locked = _lock_request(quota_request.pk)
        _expect_state(locked, S.SUBMITTED, "approved")
        if locked.ends_on is not None and locked.ends_on <= today:
            raise ValidationError("The boost's end date has passed; the team should file a new request.",
                                  code="expired")
        check = _lock_flavor_and_check(locked)
        if check.oversubscribed and not override:
            raise ValidationError({"override": [check.message]}, code="oversubscribed")
        _mark_reviewed(locked, actor=actor, state=S.APPROVED, comment=(comment or "").strip(), now=now)
        reason = locked.review_comment
        if check.oversubscribed:
            reason = f"{reason}\nOversubscription override: {check.message}".strip()
        audit_record(
            actor=actor,
            verb="quota_request.approve",
            target=locked,
            reason=reason,
            before={"state": S.SUBMITTED},
            after={"state": S.APPROVED, "override": check.oversubscribed, "flavor_sum_after": check.sum_after,
                   "capacity": check.capacity, "ratio": check.ratio},
        )
        notifications.notify_on_commit(locked.pk, old_state=S.SUBMITTED, new_state=S.APPROVED)
        if locked.starts_on <= today:
            _apply(locked, actor=actor, now=now)
    return locked


@dataclass(frozen=True)
class CapacityCheck:
    sum_after: int
    capacity: int
    ratio: float
    flavor: str

    @property
    def limit(self) -> float:
        return self.capacity * self.ratio

    @property
    def oversubscribed(self) -> bool:
        return self.sum_after > self.limit

    @property
    def message(self) -> str:
        return (
            f"Approving would bring the nominal quotas of {self.flavor} to {self.sum_after} GPUs, beyond the "
            f"fleet's {self.capacity} × {self.ratio:g} = {self.limit:g}. Tick “override” to oversubscribe "
            "deliberately."
        )


def _lock_flavor_and_check(quota_request: QuotaRequest) -> CapacityCheck:
    flavor = GpuFlavor.objects.select_for_update().get(pk=quota_request.flavor_id)
    # Read only after the flavor lock: a concurrent approval has committed by now.
    rows = list(QueueQuota.objects.select_for_update().filter(flavor=flavor).order_by("pk"))
    current = {row.queue_id: row.nominal for row in rows}
    scheduled = selectors.scheduled_changes(flavor.pk, exclude_id=quota_request.pk)
    return CapacityCheck(
        sum_after=projected_nominal_sum(current, scheduled, (quota_request.queue_id, quota_request.requested_nominal)),
        capacity=selectors.flavor_capacity(flavor.pk),
        ratio=selectors.oversubscription_ratio(),
        flavor=flavor.name,
    )


# --- applying and expiring -----------------------------------------------------------------------


def _apply(quota_request: QuotaRequest, *, actor: Actor, now: dt.datetime) -> None:
    """Set the queue's quota to the request, keeping the previous values for a later revert.
    Runs inside the caller's transaction, with the request row locked."""
    GpuFlavor.objects.select_for_update().get(pk=quota_request.flavor_id)
    quota = QueueQuota.objects.select_for_update().filter(queue_id=quota_request.queue_id,
                                                          flavor_id=quota_request.flavor_id).first()
    if quota is None:
        quota = QueueQuota(queue_id=quota_request.queue_id, flavor_id=quota_request.flavor_id, nominal=0)
    before = _quota_dict(quota)
    quota_request.previous_nominal = quota.nominal
    quota_request.previous_borrowing_limit = quota.borrowing_limit
    quota.nominal = quota_request.requested_nominal
    if quota_request.requested_borrowing_limit is not None:
        quota.borrowing_limit = quota_request.requested_borrowing_limit
    _save_quota(quota)
    quota_request.state = S.APPLIED
    quota_request.applied_at = now
    quota_request.save(update_fields=["state", "applied_at", "previous_nominal", "previous_borrowing_limit"])
    audit_record(actor=actor, verb="quota.apply", target=quota, reason=f"Quota request #{quota_request.pk}",
                 before=before, after=_quota_dict(quota))
    audit_record(actor=actor, verb="quota_request.apply", target=quota_request,
                 before={"state": S.APPROVED}, after={"state": S.APPLIED})
    notifications.notify_on_commit(quota_request.pk, old_state=S.APPROVED, new_state=S.APPLIED)


def _revert(quota_request: QuotaRequest, *, actor: Actor, now: dt.datetime) -> None:
    """End a temporary boost. When nobody touched the quota since, the previous values come
    back exactly; when it was changed meanwhile, only the boost's increment is taken off, so a
    later permanent change is not undone."""
    GpuFlavor.objects.select_for_update().get(pk=quota_request.flavor_id)
    quota = QueueQuota.objects.select_for_update().get(queue_id=quota_request.queue_id,
                                                       flavor_id=quota_request.flavor_id)
    before = _quota_dict(quota)
    previous = quota_request.previous_nominal or 0
    if quota.nominal == quota_request.requested_nominal:
        quota.nominal = previous
        note = "previous values restored"
    else:
        quota.nominal = max(0, quota.nominal - (quota_request.requested_nominal - previous))
        note = "quota changed since the boost; its increment taken off"
    if quota_request.requested_borrowing_limit is not None and quota.borrowing_limit == (
        quota_request.requested_borrowing_limit
    ):
        quota.borrowing_limit = quota_request.previous_borrowing_limit
    _save_quota(quota)
    quota_request.state = S.EXPIRED
    quota_request.expired_at = now
    quota_request.save(update_fields=["state", "expired_at"])
    reason = f"Temporary boost of quota request #{quota_request.pk} ended on {quota_request.ends_on}: {note}"
    audit_record(actor=actor, verb="quota.revert", target=quota, reason=reason, before=before,
                 after=_quota_dict(quota))
    audit_record(actor=actor, verb="quota_request.expire", target=quota_request, reason=reason,
                 before={"state": S.APPLIED}, after={"state": S.EXPIRED})
    notifications.notify_on_commit(quota_request.pk, old_state=S.APPLIED, new_state=S.EXPIRED)


def _save_quota(quota: QueueQuota) -> None:
    # The table's check constraint keeps lending_limit ≤ nominal.
    if quota.lending_limit is not None and quota.lending_limit > quota.nominal:
        quota.lending_limit = quota.nominal
    quota.full_clean()
    quota.save()


@dataclass(frozen=True)
class TickResult:
    applied: list[int]
    expired: list[int]


def quota_requests_tick(*, now: dt.datetime | None = None) -> TickResult:
    """Apply approved requests whose start date has come; end temporary boosts whose end date
    has come. Each request in its own transaction, re-checked under its row lock, so a task that
    runs twice (Celery is at-least-once) or overlaps itself changes nothing twice."""
    now = now or timezone.now()
    today = timezone.localdate(now)
    actor = Actor.automation("quota-requests")
    applied, expired = [], []
    due = QuotaRequest.objects.filter(state=S.APPROVED, starts_on__lte=today).order_by("starts_on", "pk")
    for pk in due.values_list("pk", flat=True):
        with transaction.atomic():
            locked = _lock_request(pk)
            if locked.state != S.APPROVED:
                continue
            if locked.ends_on is not None and locked.ends_on <= today:
                _expire_unapplied(locked, actor=actor, now=now)
                expired.append(pk)
                continue
            _apply(locked, actor=actor, now=now)
            applied.append(pk)
    ending = QuotaRequest.objects.filter(state=S.APPLIED, ends_on__lte=today).order_by("ends_on", "pk")
    for pk in ending.values_list("pk", flat=True):
        with transaction.atomic():
            locked = _lock_request(pk)
            if locked.state != S.APPLIED:
                continue
            _revert(locked, actor=actor, now=now)
            expired.append(pk)
    return TickResult(applied=applied, expired=expired)


def _expire_unapplied(quota_request: QuotaRequest, *, actor: Actor, now: dt.datetime) -> None:
    """A boost approved for a window that passed before it could be applied never takes effect."""
    quota_request.state = S.EXPIRED
    quota_request.expired_at = now
    quota_request.save(update_fields=["state", "expired_at"])
    audit_record(actor=actor, verb="quota_request.expire", target=quota_request,
                 reason="The boost's window passed before it was applied; the quota was not changed.",
                 before={"state": S.APPROVED}, after={"state": S.EXPIRED})
    notifications.notify_on_commit(quota_request.pk, old_state=S.APPROVED, new_state=S.EXPIRED)


# --- usage sampling ------------------------------------------------------------------------------

UtilisationSource = Callable[[dict[tuple[int, int], list[tuple[int, int]]], dt.datetime], dict[tuple[int, int], float]]
_utilisation_source: UtilisationSource | None = None


def register_utilisation_source(fn: UtilisationSource | None) -> None:
    """Let the health app supply SM activity: fn({(queue_id, flavor_id): [(gpu_id, milli), …]}, now)
    returns utilised GPUs' worth per (queue_id, flavor_id). Without one, samples record 0.0."""
    global _utilisation_source
    _utilisation_source = fn


def quota_usage_sample(*, now: dt.datetime | None = None) -> int:
    """Write one QueueUsageSample per queue × flavor for the current 5-minute slot; a second run
    in the same slot writes nothing. Old samples are pruned on the way. Returns rows written."""
    now = now or timezone.now()
    slot = now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0)
    if QueueUsageSample.objects.filter(at=slot).exists():
        return 0
    snapshot = selectors.usage_now()
    utilised = _utilised(snapshot, now)
    rows = [
        QueueUsageSample(
            queue_id=u.queue_id,
            flavor_id=u.flavor_id,
            at=slot,
            nominal=u.nominal,
            in_use=u.in_use,
            borrowed=u.borrowed,
            lent=u.lent,
            pending_demand=u.pending_demand,
            utilised=utilised.get((u.queue_id, u.flavor_id), 0.0),
        )
        for u in snapshot.lines.values()
    ]
    with transaction.atomic():
        QueueUsageSample.objects.bulk_create(rows)
        QueueUsageSample.objects.filter(at__lt=now - SAMPLE_RETENTION).delete()
    return len(rows)


def _utilised(snapshot: selectors.UsageSnapshot, now: dt.datetime) -> dict[tuple[int, int], float]:
    if _utilisation_source is None or not snapshot.lines:
        return {}

    gpus: dict[tuple[int, int], list[tuple[int, int]]] = {}
    active = Allocation.objects.filter(released_at__isnull=True, gpu__node__flavor__isnull=False).values_list(
        "workload__queue_id", "gpu__node__flavor_id", "gpu_id", "milli"
    )
    for queue_id, flavor_id, gpu_id, milli in active:
        gpus.setdefault((queue_id, flavor_id), []).append((gpu_id, milli))
    return _utilisation_source(gpus, now)


# --- helpers -------------------------------------------------------------------------------------


def _lock_request(pk: int) -> QuotaRequest:
    # of=("self",): without it PostgreSQL would also lock the joined team, queue and flavor rows,
    # hiding the real lock order behind a join.
    return QuotaRequest.objects.select_for_update(of=("self",)).select_related("team", "queue", "flavor").get(pk=pk)


def _expect_state(quota_request: QuotaRequest, state: str, wanted: str) -> None:
    if quota_request.state != state:
        raise ValidationError(
            f"Request #{quota_request.pk} is {quota_request.get_state_display().lower()}; "
            f"only a {S(state).label.lower()} request can be {wanted}.",
            code="invalid_transition",
        )


def _require_operator(actor: Actor) -> None:
    if actor.user is None or not is_operator(actor.user):
        raise PermissionDenied("Only operators may review quota requests.")


def _mark_reviewed(quota_request: QuotaRequest, *, actor: Actor, state: str, comment: str,
                   now: dt.datetime) -> None:
    quota_request.state = state
    quota_request.reviewed_by = actor.user
    quota_request.reviewed_at = now
    quota_request.review_comment = comment
    quota_request.save(update_fields=["state", "reviewed_by", "reviewed_at", "review_comment"])


def _request_dict(quota_request: QuotaRequest) -> dict:
    return {
        "team": quota_request.team.name,
        "queue": quota_request.queue.name,
        "flavor": quota_request.flavor.name,
        "requested_nominal": quota_request.requested_nominal,
        "requested_borrowing_limit": quota_request.requested_borrowing_limit,
        "starts_on": quota_request.starts_on.isoformat(),
        "ends_on": quota_request.ends_on.isoformat() if quota_request.ends_on else None,
        "state": quota_request.state,
    }


def _quota_dict(quota: QueueQuota) -> dict:
    return {"nominal": quota.nominal, "borrowing_limit": quota.borrowing_limit, "lending_limit": quota.lending_limit}
