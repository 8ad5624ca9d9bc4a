"""The pure scheduler core: schedule(Snapshot) -> RoundResult. No Django here (ruff TID251)."""
from .checkpoint import checkpoint_interval, job_mtbf, young_interval
from .config import SchedulerConfig
from .round import schedule

__all__ = ["SchedulerConfig", "checkpoint_interval", "job_mtbf", "schedule", "young_interval"]
