"""Every write of the scheduling app. Views, API views, tasks and commands call these only.

For other parts:
- workload_stop_gang(*, workload, reason, actor, grace_seconds=0, requeue=True, now=None) -> GangStop
- node_drain(*, node, reason, grace_seconds, actor, now=None) -> DrainOutcome
- workload_heartbeat(*, workload, step, checkpoint_at, actor, now=None)
- placement_round_run(*, actor, now=None, start=False) -> RoundReport
- executor_tick(*, actor=..., now=None) -> TickSummary
Executors register with scheduling.executors.register_executor(kind, cls)."""

from .drain import DrainOutcome, node_drain, workloads_on_node
from .execution import TickSummary, executor_tick, workloads_start
from .rounds import RoundReport, placement_round_run
from .transitions import TransitionConflict, workload_transition
from .workloads import (
    GangStop,
    workload_cancel,
    workload_finish,
    workload_heartbeat,
    workload_mark_running,
    workload_preempt,
    workload_preemption_finish,
    workload_stop_gang,
    workload_submit,
    workloads_submit,
)

__all__ = [
    "DrainOutcome",
    "GangStop",
    "RoundReport",
    "TickSummary",
    "TransitionConflict",
    "executor_tick",
    "node_drain",
    "placement_round_run",
    "workload_cancel",
    "workload_finish",
    "workload_heartbeat",
    "workload_mark_running",
    "workload_preempt",
    "workload_preemption_finish",
    "workload_stop_gang",
    "workload_submit",
    "workloads_submit",
    "workload_transition",
    "workloads_on_node",
    "workloads_start",
]
