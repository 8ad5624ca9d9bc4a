"""One replay: pods arrive one at a time, a policy places each or it fails; nothing departs.

The metric follows the FGD artifact's analysis: after every arrival record the arrived GPU
request and the allocated GPU milli as % of fleet GPU capacity; the allocation "at k %" is
the mean over arrivals whose arrived % rounds to k (falling back to k±1 when none does).
"""
from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from scheduling.engine.fragmentation import TypicalMix
from scheduling.replay.cluster import Cluster
from scheduling.replay.policies import POLICIES
from scheduling.replay.trace import Arrival, NodeSpec, PodSpec

ARRIVAL_POINTS = range(0, 131)


class UnknownPolicy(ValueError):
    pass


@dataclass(slots=True)
class RunResult:
    policy: str
    seed: int
    total_gpu_milli: int
    records: list[dict[str, object]] = field(default_factory=list)
    arrived_pct: list[float] = field(default_factory=list)  # after each arrival
    alloc_pct: list[float] = field(default_factory=list)
    failed: int = 0
    elapsed_s: float = 0.0

    def curve(self) -> dict[int, float]:
        """Allocation % at each whole arrival % (0–130), as the artifact discretises it."""
        buckets: dict[int, list[float]] = {}
        for arrived, alloc in zip(self.arrived_pct, self.alloc_pct, strict=True):
            buckets.setdefault(round(arrived), []).append(round(alloc, 2))
        out: dict[int, float] = {}
        for k in ARRIVAL_POINTS:
            values = buckets.get(k)
            if not values:
                values = [v for j in (k - 1, k, k + 1) for v in buckets.get(j, ())]
            if values:
                out[k] = round(statistics.fmean(values), 2)
        return out

    def unallocated_at(self, arrived: int = 100) -> float | None:
        """100 - allocated GPU % when `arrived` % of fleet capacity has arrived."""
        value = self.curve().get(arrived)
        return None if value is None else round(100.0 - value, 2)


def typical_mix(pods: Sequence[PodSpec]) -> TypicalMix:
    """The trace's own pod distribution, as FGD learns it (95 % of pods, CPU-only included)."""
    return TypicalMix.from_history(p.demand() for p in pods)


class Progress:
    """A plain carriage-return counter on stderr, redrawn at most every 0.2 s."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label, self.total, self.stream = label, total, stream or sys.stderr
        self.last = 0.0

    def update(self, done: int, failed: int, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < 0.2:
            return
        self.last = now
        width = 30
        filled = width * done // max(self.total, 1)
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(f"\r{self.label:<24} [{bar}] {done}/{self.total} failed {failed}")
        if final:
            self.stream.write("\n")
        self.stream.flush()


def run(
    nodes: Sequence[NodeSpec],
    arrivals: Sequence[Arrival],
    *,
    policy: str,
    seed: int,
    mix: TypicalMix,
    progress: bool = False,
    keep_records: bool = True,
    on_place: Callable[[Cluster, Arrival, dict[str, object]], None] | None = None,
    pods: Sequence[PodSpec] | None = None,
) -> RunResult:
    """Replay `arrivals` on a fresh fleet built from `nodes` with one policy. `pods` is the
    trace the mix was learned from (default: the arrivals' pods); fleetdeck reads its memory."""
    factory = POLICIES.get(policy)
    if factory is None:
        raise UnknownPolicy(f"unknown policy {policy!r} (choose from {', '.join(POLICIES)})")
    cluster = Cluster(list(nodes), seed=seed)
    placer = factory(cluster, seed=seed, mix=mix, pods=[a.pod for a in arrivals] if pods is None else pods)
    result = RunResult(policy, seed, cluster.total_gpu_milli)
    total = cluster.total_gpu_milli
    bar = Progress(f"{policy} seed {seed}", len(arrivals)) if progress else None
    arrived = 0
    started = time.perf_counter()
    for i, arrival in enumerate(arrivals, start=1):
        pod = arrival.pod
        arrived += pod.total_gpu_milli
        choice = placer.choose(pod)
        if choice is None:
            result.failed += 1
            record: dict[str, object] = {"pod": arrival.label, "failed": cluster.unfit_reason(pod)}
        else:
            node, gpus = choice
            cluster.assign(node, pod, gpus)
            record = {"pod": arrival.label, "node": node.name,
                      "gpus": [{"index": g, "milli": pod.gpu_milli} for g in gpus]}
        if on_place is not None:
            on_place(cluster, arrival, record)
        if keep_records:
            result.records.append(record)
        result.arrived_pct.append(arrived * 100 / total)
        result.alloc_pct.append(cluster.used_gpu_milli * 100 / total)
        if bar is not None:
            bar.update(i, result.failed)
    result.elapsed_s = time.perf_counter() - started
    if bar is not None:
        bar.update(len(arrivals), result.failed, final=True)
    return result
