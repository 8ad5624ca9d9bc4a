"""Quota usage arithmetic: nominal, in use, borrowed, lent and pending demand per queue × flavor.

Pure Python over plain values, so the cohort lending rule is testable without a database. The
selectors load the numbers in a fixed number of queries and hand them here."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Key = tuple[int, int]  # (queue_id, flavor_id)


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


def apportion(total: int, weights: Mapping[Key, int]) -> dict[Key, int]:
    """Split `total` in proportion to `weights` (largest remainder), never giving a key more than
    its weight: the lent GPUs of each queue then add up to exactly what the cohort borrowed."""
    capacity = sum(weights.values())
    total = min(total, capacity)
    if total <= 0 or capacity <= 0:
        return {key: 0 for key in weights}
    exact = {key: total * weight / capacity for key, weight in weights.items()}
    shares = {key: int(value) for key, value in exact.items()}
    left = total - sum(shares.values())
    # Ties broken by key so the same inputs always give the same split.
    by_remainder = sorted(weights, key=lambda key: (-(exact[key] - shares[key]), key))
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

    borrowed = GPUs in use beyond nominal. lent = the cohort's borrowed GPUs of that flavor,
    attributed to the queues whose nominal sits idle, in proportion to what each may lend
    (idle nominal, capped by its lending limit)."""
    lines = {(q.queue_id, q.flavor_id): q for q in quotas}
    keys = set(lines) | {k for k, v in in_use.items() if v} | {k for k, v in pending.items() if v}
    for key in keys - set(lines):
        lines[key] = QuotaLine(queue_id=key[0], flavor_id=key[1], cohort_id=cohort_of.get(key[0]), nominal=0)

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
    for group, weights in lendable.items():
        lent.update(apportion(borrowed_in_cohort[group], weights))

    return {
        key: Usage(
            queue_id=line.queue_id,
            flavor_id=line.flavor_id,
            nominal=line.nominal,
            borrowing_limit=line.borrowing_limit,
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


def pod_set_gpus(*, replicas: int, gpus_per_replica: int, milli_gpu: int | None) -> int:
    """Whole GPUs a pod set asks for; a fractional share still needs (part of) a GPU each."""
    if milli_gpu:
        return -(-replicas * milli_gpu // 1000)
    return replicas * gpus_per_replica
