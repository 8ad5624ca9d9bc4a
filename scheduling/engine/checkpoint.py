"""Young's approximation of the optimal checkpoint interval."""
from __future__ import annotations

import math


def job_mtbf(mtbf_per_gpu_s: float, gpus: int) -> float:
    """A synchronous job fails when any of its GPUs does, so its MTBF shrinks with its size."""
    if mtbf_per_gpu_s <= 0 or gpus < 1:
        raise ValueError("mtbf_per_gpu_s must be > 0 and gpus >= 1")
    return mtbf_per_gpu_s / gpus


def young_interval(write_s: float, job_mtbf_s: float) -> float:
    """sqrt(2 * C * MTBF_job) seconds, C being the time to write one checkpoint.

    The seed's example: C = 2 min and a job MTBF of 10 h give sqrt(2 * 120 * 36000) s ≈ 49 min."""
    if write_s < 0 or job_mtbf_s <= 0:
        raise ValueError("write_s must be >= 0 and job_mtbf_s > 0")
    return math.sqrt(2.0 * write_s * job_mtbf_s)


def checkpoint_interval(write_s: float, mtbf_per_gpu_s: float, gpus: int) -> float:
    """Young's interval for a job of `gpus` GPUs, each failing every `mtbf_per_gpu_s` on average."""
    return young_interval(write_s, job_mtbf(mtbf_per_gpu_s, gpus))
