"""The fleet's policy: teams and their members, cohorts, queues and their quotas per flavor,
priority classes. Operators only; one transaction with its audit row per change. The pages and
the API call these, so both refuse the same things in the same words. Deletes are in
scheduling.services.policy_delete.

Errors are Django ValidationErrors keyed by field (a quota's fields as `quotas[<i>].<field>`);
code "unique" marks a name that is taken (the API's 409), code "over_capacity" a change that
needs `confirm_overcommit` (also a 409: the fleet's state, not the input, is what is wrong). The
confirmation carries the numbers the warning showed and holds only for them: if the capacity
shrank or another change landed in between, the save is refused again with the new numbers.

Lock order, the same as scheduling.quota_requests.services: GpuFlavor rows (by pk), then the
QueueQuota rows, so a quota edit and a quota-request approval of the same flavor serialise and
each sees the other's nominal quotas when it checks capacity."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, models, transaction

from core.actors import Actor
from core.audit import audit_record
from core.roles import is_operator
from fleet.models import GpuFlavor
from scheduling import limits
from scheduling.models import Cohort, PriorityClass, Queue, QueueQuota, Team, TeamMembership

# A cohort's capacity of a flavor: every GPU of the flavor in the fleet, the number quota requests
# are checked against.
from scheduling.quota_requests.selectors import flavor_capacity

UNIQUE = "unique"
OVER_CAPACITY = "over_capacity"


def require_operator(actor: Actor) -> None:
    if actor.user is None or not is_operator(actor.user):
        raise PermissionDenied("Only operators may change the fleet's policy.")


def _fields(obj: models.Model, names: Sequence[str]) -> dict[str, Any]:
    """The audit row's picture of `obj`: foreign keys by name, as people read them."""
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(obj, name)
        out[name] = str(value) if isinstance(value, models.Model) else value
    return out


def _save(obj: models.Model, *, exclude: Sequence[str] = ()) -> None:
    """Validate as the model does (a taken name is code "unique"), then save; a name taken by a
    concurrent writer between the check and the INSERT is the same error, not a 500."""
    obj.full_clean(exclude=list(exclude))
    try:
        with transaction.atomic():
            obj.save()
    except IntegrityError as exc:
        raise ValidationError({"name": [ValidationError("That name is taken.", code=UNIQUE)]}) from exc


def _apply(obj: models.Model, changes: dict[str, Any], allowed: Sequence[str]) -> dict[str, Any]:
    unknown = set(changes) - set(allowed)
    if unknown:
        raise ValidationError({name: ["Not a field that can be changed here."] for name in sorted(unknown)})
    before = _fields(obj, list(changes))
    for name, value in changes.items():
        setattr(obj, name, value)
    return before


def _changed(obj: models.Model, actor: Actor, verb: str, before: dict[str, Any], reason: str = "") -> None:
    after = _fields(obj, list(before))
    if after != before:
        audit_record(actor=actor, verb=verb, target=obj, reason=reason, before=before, after=after)


# --- teams and members ---------------------------------------------------------------------------

TEAM_FIELDS = ("name", "description", "email")


def team_create(*, actor: Actor, name: str, description: str = "", email: str = "") -> Team:
    require_operator(actor)
    team = Team(name=name.strip(), description=description, email=email)
    with transaction.atomic():
        _save(team)
        audit_record(actor=actor, verb="team.create", target=team, after=_fields(team, TEAM_FIELDS))
    return team


def team_update(*, actor: Actor, team: Team, **changes: Any) -> Team:
    require_operator(actor)
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=team.pk)
        before = _apply(team, changes, TEAM_FIELDS)
        _save(team)
        _changed(team, actor, "team.update", before)
    return team


def team_member_add(*, actor: Actor, team: Team, user: AbstractBaseUser) -> TeamMembership:
    """Idempotent: adding a member twice keeps one membership and one audit row."""
    require_operator(actor)
    with transaction.atomic():
        membership, created = TeamMembership.objects.get_or_create(team=team, user=user)
        if created:
            audit_record(actor=actor, verb="team.member_add", target=team, after={"member": user.get_username()})
    return membership


def team_member_remove(*, actor: Actor, team: Team, user: AbstractBaseUser) -> bool:
    """Whether there was a membership to remove."""
    require_operator(actor)
    with transaction.atomic():
        removed, _ = TeamMembership.objects.filter(team=team, user=user).delete()
        if removed:
            audit_record(actor=actor, verb="team.member_remove", target=team,
                         before={"member": user.get_username()})
    return bool(removed)


# --- cohorts -------------------------------------------------------------------------------------


def cohort_create(*, actor: Actor, name: str) -> Cohort:
    require_operator(actor)
    cohort = Cohort(name=name.strip())
    with transaction.atomic():
        _save(cohort)
        audit_record(actor=actor, verb="cohort.create", target=cohort, after={"name": cohort.name})
    return cohort


def cohort_update(*, actor: Actor, cohort: Cohort, name: str) -> Cohort:
    require_operator(actor)
    with transaction.atomic():
        cohort = Cohort.objects.select_for_update().get(pk=cohort.pk)
        before = _apply(cohort, {"name": name.strip()}, ("name",))
        _save(cohort)
        _changed(cohort, actor, "cohort.update", before)
    return cohort


# --- queues and quotas ---------------------------------------------------------------------------


@dataclass(frozen=True)
class QuotaSpec:
    """One flavor's quota of a queue; None limits mean "no limit" (borrowing) / "all" (lending)."""

    flavor: GpuFlavor
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class CohortExcess:
    """A cohort whose nominal quotas of a flavor would add up to more than the fleet has of it."""

    cohort: str
    flavor: str
    nominal_before: int
    nominal_after: int
    capacity: int

    @property
    def message(self) -> str:
        return (
            f"Cohort {self.cohort}'s nominal quotas of {self.flavor} would add up to {self.nominal_after} GPUs "
            f"(now {self.nominal_before}), above the {self.capacity} {self.flavor} GPUs in the fleet. "
            "Confirm to save it anyway."
        )


class OverCapacity(ValidationError):
    """A change refused until confirmed; `excesses` carries the numbers for the form's warning,
    and the confirmation that saves it anyway (`confirm_overcommit`) must carry the same."""

    def __init__(self, excesses: list[CohortExcess]) -> None:
        self.excesses = excesses
        super().__init__({"confirm_overcommit": [ValidationError(e.message, code=OVER_CAPACITY)
                                                 for e in excesses]})


EXCESS_FIELDS = ("cohort", "flavor", "nominal_before", "nominal_after", "capacity")


def excess_rows(excesses: Sequence[CohortExcess]) -> list[dict[str, Any]]:
    """The warned numbers as the API answers them and a confirmation sends them back."""
    return [{name: getattr(e, name) for name in EXCESS_FIELDS} for e in excesses]


def excesses_from_rows(rows: Sequence[dict[str, Any]]) -> list[CohortExcess]:
    """The inverse of excess_rows; a row that is not one is a ValueError."""
    out = []
    for row in rows:
        if not isinstance(row, dict) or set(row) != set(EXCESS_FIELDS):
            raise ValueError(f"Each confirmed excess has exactly {', '.join(EXCESS_FIELDS)}.")
        if not all(isinstance(row[k], str) for k in EXCESS_FIELDS[:2]) or not all(
                type(row[k]) is int for k in EXCESS_FIELDS[2:]):
            raise ValueError("cohort and flavor are names, the nominal sums and the capacity whole numbers.")
        out.append(CohortExcess(**row))
    return out


def _refuse_unconfirmed(excesses: list[CohortExcess], confirmed: Sequence[CohortExcess]) -> None:
    """Saved past the warning only when the confirmation holds exactly today's numbers."""
    if excesses and sorted(excesses, key=_order) != sorted(confirmed, key=_order):
        raise OverCapacity(excesses)


def _order(e: CohortExcess) -> tuple:
    return tuple(getattr(e, name) for name in EXCESS_FIELDS)


QUEUE_FIELDS = ("name", "team", "cohort")
QUOTA_FIELDS = ("nominal", "borrowing_limit", "lending_limit")


def _check_quotas(quotas: Sequence[QuotaSpec]) -> None:
    errors: dict[str, list[str]] = {}
    seen: set[int] = set()
    for i, quota in enumerate(quotas):
        where = f"quotas[{i}]"
        if quota.flavor.pk in seen:
            errors.setdefault(f"{where}.flavor", []).append(f"{quota.flavor.name} is listed twice.")
        seen.add(quota.flavor.pk)
        for name in QUOTA_FIELDS:
            value = getattr(quota, name)
            if value is not None and not 0 <= value <= limits.MAX_QUOTA_GPUS:
                errors.setdefault(f"{where}.{name}", []).append(
                    f"Enter a whole number of GPUs from 0 to {limits.MAX_QUOTA_GPUS}.")
        if quota.lending_limit is not None and 0 <= quota.nominal < quota.lending_limit:
            errors.setdefault(f"{where}.lending_limit", []).append(
                f"At most the nominal quota ({quota.nominal}): a queue lends only GPUs it has.")
    if errors:
        raise ValidationError(errors)


def _cohort_nominal(cohort_id: int, flavor_ids: Sequence[int], *, except_queue: int | None) -> dict[int, int]:
    qs = QueueQuota.objects.filter(queue__cohort_id=cohort_id, flavor_id__in=flavor_ids)
    if except_queue is not None:
        qs = qs.exclude(queue_id=except_queue)
    sums: dict[int, int] = defaultdict(int)
    for flavor_id, nominal in qs.values_list("flavor_id", "nominal"):
        sums[flavor_id] += nominal
    return sums


def _excesses(queue: Queue | None, cohort: Cohort | None, quotas: Sequence[QuotaSpec],
              flavors: dict[int, GpuFlavor]) -> list[CohortExcess]:
    """What the change does to the cohort the queue ends up in. Refused only where it raises a
    flavor's sum above capacity: a change that lowers an already excessive sum goes through."""
    if cohort is None:
        return []
    flavor_ids = sorted(flavors)
    others = _cohort_nominal(cohort.pk, flavor_ids, except_queue=queue.pk if queue else None)
    before_own: dict[int, int] = defaultdict(int)
    if queue is not None and queue.cohort_id == cohort.pk:
        for flavor_id, nominal in queue.quotas.filter(flavor_id__in=flavor_ids).values_list("flavor_id", "nominal"):
            before_own[flavor_id] = nominal
    after_own = {q.flavor.pk: q.nominal for q in quotas}
    found = []
    for flavor_id in flavor_ids:
        before = others[flavor_id] + before_own[flavor_id]
        after = others[flavor_id] + after_own.get(flavor_id, 0)
        capacity = flavor_capacity(flavor_id)
        if after > capacity and after > before:
            found.append(CohortExcess(cohort.name, flavors[flavor_id].name, before, after, capacity))
    return found


def _lock_flavors(flavor_ids: set[int]) -> dict[int, GpuFlavor]:
    return {f.pk: f for f in GpuFlavor.objects.select_for_update().filter(pk__in=flavor_ids).order_by("pk")}


def _quota_picture(queue: Queue) -> dict[str, Any]:
    return {
        q.flavor.name: {name: getattr(q, name) for name in QUOTA_FIELDS}
        for q in queue.quotas.select_related("flavor").order_by("flavor__name")
    }


def _write_quotas(queue: Queue, quotas: Sequence[QuotaSpec]) -> None:
    """Make the queue's quotas exactly `quotas`: update in place, create the new, delete the rest."""
    existing = {q.flavor_id: q for q in QueueQuota.objects.select_for_update().filter(queue=queue).order_by("pk")}
    for spec in quotas:
        row = existing.pop(spec.flavor.pk, None) or QueueQuota(queue=queue, flavor=spec.flavor)
        for name in QUOTA_FIELDS:
            setattr(row, name, getattr(spec, name))
        row.save()
    QueueQuota.objects.filter(pk__in=[row.pk for row in existing.values()]).delete()


def queue_create(*, actor: Actor, name: str, team: Team, cohort: Cohort | None = None,
                 quotas: Sequence[QuotaSpec] = (), confirm_overcommit: Sequence[CohortExcess] = (),
                 **extra: Any) -> Queue:
    """`extra`: the queue's other policy fields (e.g. its reclaim policy), as the model has them;
    `confirm_overcommit`: the excesses a warning showed, to save it anyway."""
    require_operator(actor)
    _check_quotas(quotas)
    queue = Queue(name=name.strip(), team=team, cohort=cohort)
    _apply(queue, extra, queue_extra_fields())
    with transaction.atomic():
        flavors = _lock_flavors({q.flavor.pk for q in quotas})
        excesses = _excesses(None, cohort, quotas, flavors)
        _refuse_unconfirmed(excesses, confirm_overcommit)
        _save(queue)
        _write_quotas(queue, quotas)
        after = _fields(queue, QUEUE_FIELDS + tuple(extra)) | {"quotas": _quota_picture(queue)}
        audit_record(actor=actor, verb="queue.create", target=queue, reason=_confirmed(excesses), after=after)
    return queue


def queue_update(*, actor: Actor, queue: Queue, quotas: Sequence[QuotaSpec] | None = None,
                 confirm_overcommit: Sequence[CohortExcess] = (), **changes: Any) -> Queue:
    """Change the queue's fields in `changes`; `quotas`, when given, replace all its quotas."""
    require_operator(actor)
    if quotas is not None:
        _check_quotas(quotas)
    with transaction.atomic():
        current = list(QueueQuota.objects.filter(queue=queue).select_related("flavor"))
        wanted = quotas if quotas is not None else [
            QuotaSpec(q.flavor, q.nominal, q.borrowing_limit, q.lending_limit) for q in current
        ]
        flavors = _lock_flavors({q.flavor.pk for q in wanted} | {q.flavor_id for q in current})
        queue = Queue.objects.select_for_update(of=("self",)).select_related("team", "cohort").get(pk=queue.pk)
        quotas_before = _quota_picture(queue)
        before = _apply(queue, changes, QUEUE_FIELDS + queue_extra_fields())
        excesses = _excesses(Queue.objects.get(pk=queue.pk), queue.cohort, wanted, flavors)
        _refuse_unconfirmed(excesses, confirm_overcommit)
        _save(queue)
        if quotas is not None:
            _write_quotas(queue, quotas)
        before["quotas"] = quotas_before
        after = _fields(queue, [k for k in before if k != "quotas"]) | {"quotas": _quota_picture(queue)}
        if after != before:
            audit_record(actor=actor, verb="queue.update", target=queue, reason=_confirmed(excesses),
                         before=before, after=after)
    return queue


def _confirmed(excesses: list[CohortExcess]) -> str:
    return " ".join(f"Confirmed: {e.message}" for e in excesses)


# The queue's cohort policy besides name, team and cohort.
QUEUE_EXTRA_FIELDS = ("reclaim_within_cohort", "borrow_non_preemptible")


def queue_extra_fields() -> tuple[str, ...]:
    return QUEUE_EXTRA_FIELDS


# --- priority classes ----------------------------------------------------------------------------

PRIORITY_CLASS_FIELDS = (
    "name", "value", "preemptible", "may_preempt", "hard_preemption", "grace_seconds", "min_runtime_seconds",
    "cooldown_seconds", "description",
)


def priority_class_fields() -> tuple[str, ...]:
    return PRIORITY_CLASS_FIELDS


def priority_class_create(*, actor: Actor, name: str, value: int, **fields: Any) -> PriorityClass:
    require_operator(actor)
    priority_class = PriorityClass(name=name.strip(), value=value)
    _apply(priority_class, fields, priority_class_fields())
    with transaction.atomic():
        _save(priority_class)
        audit_record(actor=actor, verb="priorityclass.create", target=priority_class,
                     after=_fields(priority_class, priority_class_fields()))
    return priority_class


def priority_class_update(*, actor: Actor, priority_class: PriorityClass, **changes: Any) -> PriorityClass:
    require_operator(actor)
    with transaction.atomic():
        priority_class = PriorityClass.objects.select_for_update().get(pk=priority_class.pk)
        before = _apply(priority_class, changes, priority_class_fields())
        _save(priority_class)
        _changed(priority_class, actor, "priorityclass.update", before)
    return priority_class
