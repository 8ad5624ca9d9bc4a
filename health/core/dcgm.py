"""dcgm-exporter /metrics text -> one GpuReading per GPU or MIG instance.

Public API:
    parse_exposition(text: str | bytes) -> list[GpuReading]
        Parsed with prometheus_client's text parser (never by hand). Raises ValueError naming the
        first line the parser rejects ("DCGM exposition line 7: ...: '<line>'").
    GpuReading          frozen dataclass, one per GPU (or per MIG instance), `reading.to_json()`
    is_blank(value)     True for DCGM's "no data" sentinels (int32 / int64 / fp64 BLANK, NOT_FOUND,
                        NOT_SUPPORTED, NOT_PERMISSIONED) and NaN
    HEALTH_PASS / HEALTH_WARN / HEALTH_FAIL
                        DCGM health result values (0 / 10 / 20) seen in DCGM_EXP_GPU_HEALTH_STATUS

Grouping: samples belong to the GPU named by the `UUID` label, else by `gpu` index plus `Hostname`
(or `hostname`). Rows with `GPU_I_ID` are separate MIG instances (`mig_profile` from GPU_I_PROFILE).
Label sets may vary inside one family (pods come and go); HELP text is ignored. When several pods
share a GPU (MPS, time-slicing) every (namespace, pod, container) lands in `workloads` and the first
fills `pod` / `namespace` / `container`. `metrics` keeps every non-blank value by metric name, so the
store can keep fields this dataclass does not name.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import prometheus_client.parser as _prom_parser

from .pci import normalize_pci_bus_id

HEALTH_PASS, HEALTH_WARN, HEALTH_FAIL = 0, 10, 20

# DCGM's blank sentinels (dcgm_structs.h): BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED.
_INT32_BLANK = 0x7FFFFFF0
_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
_FP64_BLANK = 140737488355328.0  # 2**47
_SENTINELS = frozenset({_INT32_BLANK + i for i in range(4)} | {_FP64_BLANK + i for i in range(4)})


def is_blank(value: float) -> bool:
    """DCGM writes sentinels, not gaps, for unsupported fields: 9223372036854775794 is not 9.2e18 C."""
    if isinstance(value, float) and math.isnan(value):
        return True
    return value >= _INT64_BLANK or value in _SENTINELS


@dataclass(frozen=True, slots=True)
class GpuReading:
    uuid: str | None
    gpu_index: int | None
    hostname: str | None
    mig_profile: str | None = None
    mig_instance_id: int | None = None
    model_name: str | None = None
    pci_bus_id: str | None = None
    driver_version: str | None = None
    sm_active: float | None = None  # 0..1
    gpu_util: float | None = None  # percent
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    xid_last: int | None = None  # DCGM_FI_DEV_XID_ERRORS: last Xid seen, 0 = none
    ecc_dbe_volatile: int | None = None
    row_remap_failure: int | None = None
    row_remap_pending: int | None = None
    xid_count: int | None = None  # DCGM_EXP_XID_ERRORS_COUNT summed over its `xid` label
    health_status: int | None = None  # worst DCGM_EXP_GPU_HEALTH_STATUS (0 pass, 10 warn, 20 fail)
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    workloads: tuple[tuple[str | None, str | None, str | None], ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["workloads"] = [
            {"namespace": ns, "pod": pod, "container": container} for ns, pod, container in self.workloads
        ]
        return data


# metric name -> (GpuReading field, scale, how repeated samples combine)
_FIELDS: dict[str, tuple[str, float, str]] = {
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 1.0, "last"),
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util", 1.0, "last"),
    "DCGM_FI_DEV_FB_USED": ("fb_used_mib", 1.0, "last"),
    "DCGM_FI_DEV_FB_FREE": ("fb_free_mib", 1.0, "last"),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0, "last"),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0, "last"),
    "DCGM_FI_DEV_XID_ERRORS": ("xid_last", 1.0, "last"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_dbe_volatile", 1.0, "last"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("row_remap_failure", 1.0, "last"),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("row_remap_pending", 1.0, "last"),
    "DCGM_EXP_XID_ERRORS_COUNT": ("xid_count", 1.0, "sum"),
    "DCGM_EXP_GPU_HEALTH_STATUS": ("health_status", 1.0, "max"),
}
_INT_FIELDS = frozenset(
    {"xid_last", "ecc_dbe_volatile", "row_remap_failure", "row_remap_pending", "xid_count", "health_status"}
)
_KNOWN_COUNTERS_WITH_TOTAL = frozenset({"DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_EXP_CLOCK_EVENTS_TOTAL"})


def _install_label_cache() -> None:
    """Memoise prometheus_client's label parser.

    Profiling shows ~70% of parse time in `parse_labels`, a character-by-character scanner, while an
    exporter repeats each GPU's label block on all ~40 of its metrics. Caching by label text keeps the
    library's own parsing (and its errors) and makes the whole parse about 3x faster. Results are copied
    because the parser mutates the dict (`del labels['__name__']`).
    """
    original = _prom_parser.parse_labels
    if getattr(original, "_fleetdeck_cached", False):
        return
    cached = functools.lru_cache(maxsize=16384)(lambda text, openmetrics: original(text, openmetrics))

    def parse_labels(labels_string: str, openmetrics: bool = False) -> dict[str, str]:
        return dict(cached(labels_string, openmetrics))

    parse_labels._fleetdeck_cached = True  # type: ignore[attr-defined]
    parse_labels.__wrapped__ = original  # type: ignore[attr-defined]  # bench/ingest.py times the uncached path
    _prom_parser.parse_labels = parse_labels


_install_label_cache()


@dataclass(slots=True)
class _Builder:
    labels: dict[str, str]
    values: dict[str, float] = field(default_factory=dict)
    workloads: list[tuple[str | None, str | None, str | None]] = field(default_factory=list)

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        spec = _FIELDS.get(name)
        how = spec[2] if spec else "last"
        if how == "sum" and name in self.values:
            self.values[name] += value
        elif how == "max" and name in self.values:
            self.values[name] = max(self.values[name], value)
        else:
            self.values[name] = value
        if len(labels) > len(self.labels):
            # Label sets vary inside a family: keep identity labels that only some rows carry.
            self.labels = {**labels, **self.labels}
        workload = (_label(labels, "namespace"), _label(labels, "pod"), _label(labels, "container"))
        if any(workload) and workload not in self.workloads:
            self.workloads.append(workload)

    def build(self) -> GpuReading:
        labels = self.labels
        named: dict[str, Any] = {}
        for metric, (attr, scale, _how) in _FIELDS.items():
            if metric in self.values:
                value = self.values[metric] * scale
                named[attr] = int(value) if attr in _INT_FIELDS else float(value)
        if "sm_active" not in named and "gpu_util" in named:
            named["sm_active"] = named["gpu_util"] / 100.0
        first = self.workloads[0] if self.workloads else (None, None, None)
        return GpuReading(
            uuid=labels.get("UUID") or None,
            gpu_index=_int(labels.get("gpu")),
            hostname=_hostname(labels),
            mig_profile=labels.get("GPU_I_PROFILE") or None,
            mig_instance_id=_int(labels.get("GPU_I_ID")),
            model_name=labels.get("modelName") or None,
            pci_bus_id=normalize_pci_bus_id(labels.get("pci_bus_id")),
            driver_version=labels.get("DCGM_FI_DRIVER_VERSION") or None,
            namespace=first[0],
            pod=first[1],
            container=first[2],
            workloads=tuple(self.workloads),
            metrics=dict(self.values),
            **named,
        )


def _label(labels: dict[str, str], name: str) -> str | None:
    # Prometheus renames clashing target labels to exported_*; both mean the workload.
    return labels.get(name) or labels.get("exported_" + name) or None


def _hostname(labels: dict[str, str]) -> str | None:
    return labels.get("Hostname") or labels.get("hostname") or None


def _int(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit():
        return None
    return int(text)


def _gpu_key(labels: dict[str, str]) -> tuple[str, str, str] | None:
    instance = labels.get("GPU_I_ID", "")
    uuid = labels.get("UUID")
    if uuid:
        return ("uuid", uuid, instance)
    index = labels.get("gpu")
    if index is None or index == "":
        return None
    return (_hostname(labels) or "", index, instance)


def _metric_name(family: Any, sample_name: str) -> str:
    # The parser renames counters: "X" gains "_total" on samples and "X_total" loses it on the family.
    if family.type == "counter" and family.name + "_total" in _KNOWN_COUNTERS_WITH_TOTAL:
        return family.name + "_total"
    if family.type == "counter":
        return family.name
    return sample_name


def _locate_error(text: str, error: Exception) -> ValueError:
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            for _family in _prom_parser.text_string_to_metric_families(stripped + "\n"):
                pass
        except Exception as exc:  # any rejection is reported with its line
            return ValueError(f"DCGM exposition line {number}: {exc}: {stripped[:200]!r}")
    return ValueError(f"DCGM exposition rejected: {error}")


def parse_exposition(text: str | bytes) -> list[GpuReading]:
    """One reading per GPU or MIG instance, in order of first appearance."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    builders: dict[tuple[str, str, str], _Builder] = {}
    try:
        for family in _prom_parser.text_string_to_metric_families(text):
            for sample in family.samples:
                value = sample.value
                if is_blank(value):
                    continue
                key = _gpu_key(sample.labels)
                if key is None:
                    continue
                builder = builders.get(key)
                if builder is None:
                    builder = builders[key] = _Builder(labels=sample.labels)
                builder.add(_metric_name(family, sample.name), sample.labels, value)
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise _locate_error(text, exc) from exc
    return [builder.build() for builder in builders.values()]
