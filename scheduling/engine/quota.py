"""Quota with Kueue ClusterQueue semantics: nominal quota per flavor, borrowing from the cohort.

A request fits a queue's flavor when usage + request <= nominal, or when the excess can be
borrowed: the queue's total borrowing stays within its borrowing_limit and the cohort still
has lendable quota, i.e. the other queues' idle nominal (each capped by its lending_limit)
minus what the cohort's queues already borrow."""
from __future__ import annotations

from dataclasses import dataclass, field

from .types import PendingReason, QueueView, Quota


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    ok: bool
    borrowed: dict[str, int] = field(default_factory=dict)  # flavor -> GPUs beyond nominal after admission
    reason: PendingReason | None = None
    message: str = ""


class QuotaBook:
    """Usage per queue and flavor, updated as a round admits (or a simulation releases)."""

    def __init__(self, queues: dict[str, QueueView]) -> None:
        self.queues = queues
        self.usage: dict[str, dict[str, int]] = {name: dict(q.usage) for name, q in queues.items()}
        self.cohorts: dict[str, list[str]] = {}
        for name in sorted(queues):
            cohort = queues[name].cohort
            if cohort:
                self.cohorts.setdefault(cohort, []).append(name)
        # Per (cohort, flavor): the sum over its queues of lendable - borrowed, kept current by
        # add(), so cohort_room is O(1) instead of a walk over the cohort for every check.
        self._pool: dict[tuple[str, str], int] = {}
        self.version = 0  # bumped by every add(): equal versions mean equal usage

    def _pool_of(self, cohort: str, flavor: str) -> int:
        key = (cohort, flavor)
        if key not in self._pool:
            self._pool[key] = sum(self._net(q, flavor) for q in self.cohorts.get(cohort, ()))
        return self._pool[key]

    def _net(self, queue: str, flavor: str) -> int:
        return self.lendable(queue, flavor) - self.borrowed(queue, flavor)

    def quota(self, queue: str, flavor: str) -> Quota | None:
        q = self.queues.get(queue)
        return None if q is None else q.quotas.get(flavor)

    def used(self, queue: str, flavor: str) -> int:
        return self.usage.get(queue, {}).get(flavor, 0)

    def add(self, queue: str, request: dict[str, int], sign: int = 1) -> None:
        self.version += 1
        use = self.usage.setdefault(queue, {})
        q = self.queues.get(queue)
        cohort = q.cohort if q is not None else None
        for flavor, gpus in request.items():
            key = (cohort, flavor)
            tracked = cohort is not None and key in self._pool
            if tracked:
                self._pool[key] -= self._net(queue, flavor)
            use[flavor] = use.get(flavor, 0) + sign * gpus
            if tracked:
                self._pool[key] += self._net(queue, flavor)

    def share(self, queue: str) -> float:
        """Dominant share: the largest usage/nominal over the queue's flavors."""
        q = self.queues.get(queue)
        if q is None:
            return 0.0
        best = 0.0
        for flavor, used in self.usage.get(queue, {}).items():
            quota = q.quotas.get(flavor)
            nominal = quota.nominal if quota else 0
            if used > 0:
                best = max(best, used / nominal if nominal else float(used))
        return best

    def within_nominal(self, queue: str, request: dict[str, int]) -> bool:
        for flavor, gpus in request.items():
            quota = self.quota(queue, flavor)
            if quota is None or self.used(queue, flavor) + gpus > quota.nominal:
                return False
        return True

    def borrowed(self, queue: str, flavor: str) -> int:
        quota = self.quota(queue, flavor)
        nominal = quota.nominal if quota else 0
        return max(0, self.used(queue, flavor) - nominal)

    def lendable(self, queue: str, flavor: str) -> int:
        quota = self.quota(queue, flavor)
        if quota is None:
            return 0
        idle = max(0, quota.nominal - self.used(queue, flavor))
        return idle if quota.lending_limit is None else min(quota.lending_limit, idle)

    def cohort_room(self, queue: str, flavor: str) -> int:
        """What the other queues of the cohort can still lend to `queue` for `flavor`.

        The others' lendable quota, minus what they already borrow (that comes out of the same
        pool); the asking queue's own current borrowing is counted by the caller."""
        cohort = self.queues[queue].cohort
        if not cohort:
            return 0
        return self._pool_of(cohort, flavor) - self._net(queue, flavor)

    def check(self, queue: str, request: dict[str, int], *, preemptible: bool = True) -> QuotaVerdict:
        """Does the request fit the queue's quota, borrowing from the cohort if needed?

        Work that is not `preemptible` borrows only where the queue allows it (borrowed GPUs
        are lent on the promise that the lender can take them back)."""
        q = self.queues.get(queue)
        if q is None:
            return QuotaVerdict(False, reason=PendingReason.QUOTA_EXCEEDED, message=f"queue {queue} does not exist")
        borrowed: dict[str, int] = {}
        for flavor in sorted(request):
            gpus = request[flavor]
            quota = q.quotas.get(flavor)
            if quota is None:
                return QuotaVerdict(False, reason=PendingReason.QUOTA_EXCEEDED,
                                    message=f"queue {queue} has no quota for flavor {flavor}")
            used = self.used(queue, flavor)
            excess = used + gpus - quota.nominal
            if excess <= 0:
                continue
            head = (f"needs {gpus} {flavor} GPUs; queue {queue} uses {used} of nominal {quota.nominal}, "
                    f"so it must borrow {excess}")
            if not q.cohort:
                return QuotaVerdict(False, reason=PendingReason.QUOTA_EXCEEDED, message=f"{head} but is in no cohort")
            if not preemptible and not q.borrow_non_preemptible:
                return QuotaVerdict(False, reason=PendingReason.BORROWING_LIMIT,
                                    message=f"{head}, and its priority class is not preemptible: queue {queue} lets "
                                            "only preemptible work borrow (the lender could never reclaim it)")
            if quota.borrowing_limit is not None and excess > quota.borrowing_limit:
                return QuotaVerdict(False, reason=PendingReason.BORROWING_LIMIT,
                                    message=f"{head} beyond its borrowing limit {quota.borrowing_limit}")
            room = self.cohort_room(queue, flavor)
            if excess > room:
                return QuotaVerdict(False, reason=PendingReason.QUOTA_EXCEEDED,
                                    message=f"{head}; cohort {q.cohort} can lend only {max(0, room)}")
            borrowed[flavor] = excess
        return QuotaVerdict(True, borrowed=borrowed)
