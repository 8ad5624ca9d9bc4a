"""Tunables of a scheduling round."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Tunables of a round."""

    preemption_cooldown_s: float = 3600.0  # a workload preempted this recently is not preempted again
    max_reservations: int = 16  # backfill reservations made per round (Slurm's bf_max_job_test idea)
    reservation_search_limit: int = 256  # running workloads released while searching a start time
    reservation_budget: int = 4000  # placement attempts all reservation searches of a round may make
    quota_eta_budget: int = 10000  # quota checks the ETA replay of quota waits may make in a round
    node_topology_candidates: int = 64  # nodes tried for a topology=node (required) workload
    # Lower priorities leave room on every node for the parts of higher-priority workloads blocked
    # on capacity with no known start (engine.protection); off: they may take any free GPU.
    protect_blocked: bool = False
