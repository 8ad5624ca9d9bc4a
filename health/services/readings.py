"""Storing GPU readings: the latest per GPU (bulk upsert) and a bounded one-minute history.

The hot path of every scrape and heartbeat: one upsert statement for the latest rows, one
insert-or-ignore for the minute rows (the first reading of a minute wins, so a 15 s scrape
writes one history row per minute), no per-GPU queries."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction

from health.models import WHOLE_GPU, GpuReading, GpuReadingMinute

HISTORY_DAYS = 7
_LATEST_FIELDS = [
    "mig_profile", "at", "source", "sm_active", "gpu_util", "fb_used_mib", "fb_free_mib", "temperature_c", "power_w",
    "ecc_dbe_volatile", "row_remap_failure", "row_remap_pending", "xid_last", "health_status", "pod", "namespace",
]


@dataclass(frozen=True, slots=True)
class ReadingRow:
    """One GPU's (or MIG instance's) values, already matched to a GPU row."""

    gpu_id: int
    mig_instance_id: int = WHOLE_GPU
    mig_profile: str = ""
    sm_active: float | None = None
    gpu_util: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    ecc_dbe_volatile: int | None = None
    row_remap_failure: int | None = None
    row_remap_pending: int | None = None
    xid_last: int | None = None
    health_status: int | None = None
    pod: str = ""
    namespace: str = ""


def minute_of(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def readings_store(*, rows: Sequence[ReadingRow], source: str, now: datetime) -> int:
    """Upsert the latest readings and add the minute history; returns the number of rows stored."""
    if not rows:
        return 0
    latest = [
        GpuReading(
            gpu_id=r.gpu_id, mig_instance_id=r.mig_instance_id, mig_profile=r.mig_profile, at=now, source=source,
            sm_active=r.sm_active, gpu_util=r.gpu_util, fb_used_mib=r.fb_used_mib, fb_free_mib=r.fb_free_mib,
            temperature_c=r.temperature_c, power_w=r.power_w, ecc_dbe_volatile=r.ecc_dbe_volatile,
            row_remap_failure=r.row_remap_failure, row_remap_pending=r.row_remap_pending, xid_last=r.xid_last,
            health_status=r.health_status, pod=r.pod[:253], namespace=r.namespace[:253],
        )
        for r in rows
    ]
    minute = minute_of(now)
    history = [
        GpuReadingMinute(gpu_id=r.gpu_id, minute=minute, sm_active=r.sm_active, fb_used_mib=r.fb_used_mib,
                         temperature_c=r.temperature_c, power_w=r.power_w)
        for r in rows
        if r.mig_instance_id == WHOLE_GPU
    ]
    with transaction.atomic():
        GpuReading.objects.bulk_create(
            latest, update_conflicts=True, unique_fields=["gpu", "mig_instance_id"], update_fields=_LATEST_FIELDS
        )
        if history:
            GpuReadingMinute.objects.bulk_create(history, ignore_conflicts=True)
    return len(latest)


def readings_prune(*, now: datetime, keep_days: int = HISTORY_DAYS) -> int:
    """Delete minute history older than `keep_days`; returns the number of rows deleted."""
    deleted, _ = GpuReadingMinute.objects.filter(minute__lt=now - timedelta(days=keep_days)).delete()
    return deleted
