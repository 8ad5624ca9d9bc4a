"""Quota usage numbers, one definition each: GPUs asked, GPUs held, borrowed and lent.

Pure Python over plain values (no Django), so every rule is testable without a database. The
queues page, the queues API, the team pages, the quota-request form and review context, the
usage samples behind the history charts and the admin, and the round's snapshot all take their
numbers from here (scheduling.selectors.usage_book loads them in a fixed number of queries).

* GPUs asked (`pod_set_gpus`, `spec_gpus`): what a pod set is charged against quota on
  admission, exactly as the engine charges it (engine.placement.Need.quota_gpus): whole GPUs
  per replica × replicas; milli-GPU shares and MIG slices added up over the pod set's replicas
  and rounded up. `pod_sets_gpus` adds them up over a workload's pod sets: the number stored
  as Workload.gpus_asked when its pod sets are written, so the workloads table sorts and
  filters by it in the database.
  `pod_set_asked_label` says the same request in words for the pages ("2 × 1g.10gb MIG",
  "0.5 GPU (shared)", "16 GPUs (2 × 8)"): the number alone reads 1 for a 1g.10gb slice.
* GPUs held (`held_gpus`, `held_by_queue`): a workload's allocated milli on one flavor, rounded
  up to whole GPUs (a half-used GPU is still a GPU nobody else gets exclusively), then summed
  per queue: how the round's snapshot counts a queue's usage and what a preempted workload
  gives back.
* Borrowed: GPUs held beyond the queue's nominal quota of that flavor.
* Lent (`cohort_lent`): Kueue's cohort accounting draws borrowed quota from the cohort's pool
  (each member's idle nominal, capped by its lending limit) without saying whose it was, so
  "lent" is an attribution for people, not a number the scheduler acts on. We attribute the
  cohort's borrowed GPUs of a flavor to its members in proportion to what each could lend,
  by largest remainder, ties to the lower queue id. Unlike charging lenders one by one in name
  order, this does not depend on what queues are called (renaming one never moves the numbers),
  treats every lender in the pool alike, as Kueue's pool does, and still adds up exactly to
  what the cohort borrowed, so an operator can check it with a sum: "beta could lend 6 and
  gamma 3 of the 9 idle GPUs; alpha borrowed 3, so beta lent 2 and gamma 1"."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from .engine.placement import Kind, need_of
from .engine.types import WHOLE, PodSetSpec

Key = tuple[int, int]  # (queue_id, flavor_id)
Q = TypeVar("Q")  # a queue's id or name
F = TypeVar("F")  # a flavor's id or name


@dataclass(frozen=True)
class QuotaLine:
    queue_id: int
    flavor_id: int
    cohort_id: int | None
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class Usage:
    queue_id: int
    flavor_id: int
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None
    in_use: int
    borrowed: int
    lent: int
    pending_demand: int

    @property
    def idle(self) -> int:
        return max(0, self.nominal - self.in_use)

    @property
    def share_of_nominal(self) -> float | None:
        return self.in_use / self.nominal if self.nominal else None


def spec_gpus(spec: PodSetSpec) -> int:
    """GPUs the engine's pod set asks for, as quota counts them on admission."""
    return need_of(spec).quota_gpus


def pod_set_gpus(*, replicas: int, gpus_per_replica: int, milli_gpu: int | None = None, mig_profile: str = "") -> int:
    """GPUs a stored pod set asks for (its columns), as quota counts them on admission."""
    return spec_gpus(PodSetSpec(name="", replicas=replicas, gpus_per_replica=gpus_per_replica, milli=milli_gpu,
                                mig_profile=mig_profile or None))


class StoredPodSet(Protocol):
    """The columns of a pod set that say what it asks for (a PodSet row or a submission's draft)."""

    replicas: int
    gpus_per_replica: int
    milli_gpu: int | None
    mig_profile: str


def pod_sets_gpus(pod_sets: Iterable[StoredPodSet]) -> int:
    """GPUs a workload asks for: its pod sets' `pod_set_gpus` added up."""
    return sum(pod_set_gpus(replicas=ps.replicas, gpus_per_replica=ps.gpus_per_replica, milli_gpu=ps.milli_gpu,
                            mig_profile=ps.mig_profile) for ps in pod_sets)


def pod_set_asked_label(*, replicas: int, gpus_per_replica: int, milli_gpu: int | None = None,
                        mig_profile: str = "") -> str:
    """What a stored pod set asks for, in words, read the way the engine reads it (need_of):
    a MIG slice or a share of one GPU is named as such, never as a GPU count."""
    need = need_of(PodSetSpec(name="", replicas=replicas, gpus_per_replica=gpus_per_replica, milli=milli_gpu,
                              mig_profile=mig_profile or None))
    if need.kind == Kind.MIG:
        return f"{replicas} × {need.profile} MIG"
    if need.kind == Kind.SHARE:
        share = f"{need.milli / WHOLE:g} GPU (shared)"
        return share if replicas == 1 else f"{replicas} × {share}"
    total = replicas * need.gpus
    gpus = f"{total} GPU{'' if total == 1 else 's'}"
    return gpus if replicas == 1 else f"{gpus} ({replicas} × {need.gpus})"


def held_gpus(milli: int) -> int:
    """Whole GPUs one workload holds on a flavor, from the milli-GPUs allocated to it there."""
    return -(-milli // WHOLE)


def held_by_queue(held: Iterable[tuple[Q, F, int]]) -> dict[tuple[Q, F], int]:
    """GPUs held per queue × flavor, from (queue, flavor, milli) of each workload on each flavor:
    every workload's milli rounded up on its own (held_gpus), then added up per queue."""
    usage: dict[tuple[Q, F], int] = defaultdict(int)
    for queue, flavor, milli in held:
        usage[(queue, flavor)] += held_gpus(milli)
    return dict(usage)


def cohort_lent(borrowed: int, lendable: Mapping[Key, int]) -> dict[Key, int]:
    """The GPUs each member of one cohort × flavor lent: the cohort's `borrowed` GPUs split in
    proportion to what each member could lend (`lendable`), by largest remainder with ties to the
    lower key, never more than a member could lend. The shares add up to `borrowed` (or to all
    that was lendable, if the cohort somehow borrowed more)."""
    capacity = sum(lendable.values())
    total = min(borrowed, capacity)
    if total <= 0:
        return dict.fromkeys(lendable, 0)
    exact = {key: total * weight / capacity for key, weight in lendable.items()}
    shares = {key: int(value) for key, value in exact.items()}
    left = total - sum(shares.values())
    by_remainder = sorted(lendable, key=lambda key: (-(exact[key] - shares[key]), key))
    for key in by_remainder[:left]:
        shares[key] += 1
    return shares


def compute_usage(
    quotas: Iterable[QuotaLine],
    in_use: Mapping[Key, int],
    pending: Mapping[Key, int],
    cohort_of: Mapping[int, int | None],
) -> dict[Key, Usage]:
    """Usage of every queue × flavor that has a quota, holds GPUs or waits for them.

    A queue × flavor without a quota line has nominal 0 and may neither borrow nor lend (the
    engine admits nothing there); GPUs it still holds count as borrowed from its cohort."""
    lines = {(q.queue_id, q.flavor_id): q for q in quotas}
    keys = set(lines) | {k for k, v in in_use.items() if v} | {k for k, v in pending.items() if v}
    for key in keys - set(lines):
        lines[key] = QuotaLine(queue_id=key[0], flavor_id=key[1], cohort_id=cohort_of.get(key[0]), nominal=0,
                               borrowing_limit=0, lending_limit=0)

    borrowed = {key: max(0, in_use.get(key, 0) - line.nominal) for key, line in lines.items()}
    lendable: dict[tuple[int, int], dict[Key, int]] = defaultdict(dict)
    borrowed_in_cohort: dict[tuple[int, int], int] = defaultdict(int)
    for key, line in lines.items():
        if line.cohort_id is None:
            continue
        group = (line.cohort_id, line.flavor_id)
        idle = max(0, line.nominal - in_use.get(key, 0))
        lendable[group][key] = idle if line.lending_limit is None else min(idle, line.lending_limit)
        borrowed_in_cohort[group] += borrowed[key]

    lent: dict[Key, int] = {}
    for group, members in lendable.items():
        lent.update(cohort_lent(borrowed_in_cohort[group], members))

    return {
        key: Usage(
            queue_id=line.queue_id,
            flavor_id=line.flavor_id,
            nominal=line.nominal,
            borrowing_limit=line.borrowing_limit,
            lending_limit=line.lending_limit,
            in_use=in_use.get(key, 0),
            borrowed=borrowed[key],
            lent=lent.get(key, 0),
            pending_demand=pending.get(key, 0),
        )
        for key, line in lines.items()
    }


def projected_nominal_sum(
    current: Mapping[int, int],
    scheduled: Iterable[tuple[int, int]],
    change: tuple[int, int],
) -> int:
    """The flavor's sum of nominal quotas once approved-but-not-yet-applied changes (`scheduled`,
    in start order) and then `change` take effect; each change sets one queue's nominal."""
    nominal = dict(current)
    for queue_id, value in [*scheduled, change]:
        nominal[queue_id] = value
    return sum(nominal.values())
