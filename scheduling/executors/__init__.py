"""Executors by node pool. Another app adds its own with one line:
`register_executor("slurm", SlurmExecutor)` (from its AppConfig.ready())."""

from .base import (
    Executor,
    ExecutorReport,
    ReplicaAssignment,
    StopRequest,
    executor_for_kind,
    register_executor,
    registered_kinds,
)
from .simulated import SimulatedExecutor

register_executor("simulated", SimulatedExecutor)

__all__ = [
    "Executor",
    "ExecutorReport",
    "ReplicaAssignment",
    "SimulatedExecutor",
    "StopRequest",
    "executor_for_kind",
    "register_executor",
    "registered_kinds",
]
