"""dcgm-exporter /metrics text -> one GpuReading per GPU or MIG instance.

Public API:
    parse_exposition(text: str | bytes, *, all_metrics=True) -> list[GpuReading]
        Parsed with prometheus_client (never by hand): its parse_labels reads each distinct label
        block once, its text parser reads every line's name, value, family and type (see "the fast
        path" below); in store mode each distinct value text once (see "the lean path"). Raises
        ValueError naming the first line the parser rejects ("DCGM exposition line 7: ...: '<line>'").
        all_metrics=False is the store path's mode: `metrics` keeps only FIELD_METRICS and lines of
        other families are read only as far as needed to know which GPUs reported (so a malformed
        line there is not seen); the readings are otherwise the same.
    parse_exposition_reference(text, *, all_metrics=True)
                        the same readings with every line through prometheus_client as written
                        (~30x slower); the fast path is tested and benchmarked against it
    parse_for_store(text: str | bytes) -> list[StoreReading]
                        parse_exposition(text, all_metrics=False) as StoreReadings (what storing, matching
                        and the fault check read), the same values; a steady scrape of a known shape
                        (see "the lean path") is placed straight into them, no GpuReading built
    StoreReading        named tuple: GpuReading's identity fields up to mig_instance_id, its named
                        fields, pod and namespace
    FIELD_METRICS       the metric families behind GpuReading's named fields
    clear_caches()      forget the label blocks (16,384 at most), value texts (65,536 at most) and
                        exposition shapes (4,096 at most) this process has seen
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
import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from operator import itemgetter
from typing import Any, NamedTuple

import prometheus_client.parser as _prom_parser

from .pci import normalize_pci_bus_id

HEALTH_PASS, HEALTH_WARN, HEALTH_FAIL = 0, 10, 20

# DCGM's blank sentinels (dcgm_structs.h): BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED.
_INT32_BLANK = 0x7FFFFFF0
_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
_FP64_BLANK = 140737488355328.0  # 2**47
_SENTINELS = frozenset({_INT32_BLANK + i for i in range(4)} | {_FP64_BLANK + i for i in range(4)})
_SMALLEST_SENTINEL = min(_SENTINELS)


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
# The named fields in GpuReading's order, after the identity fields (_identity's keys, in order).
_NAMED = [(metric, scale, attr in _INT_FIELDS) for metric, (attr, scale, _how) in _FIELDS.items()]
_KNOWN_COUNTERS_WITH_TOTAL = frozenset({"DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_EXP_CLOCK_EVENTS_TOTAL"})


_HOW = {name: how for name, (_attr, _scale, how) in _FIELDS.items() if how != "last"}
# What the store path reads (all_metrics=False): the named fields' families, nothing else.
FIELD_METRICS = frozenset(_FIELDS)
_AMBIGUOUS_TOTALS = frozenset(name + "_total" for name in FIELD_METRICS)


def _workload(labels: dict[str, str]) -> tuple[str | None, str | None, str | None]:
    return (_label(labels, "namespace"), _label(labels, "pod"), _label(labels, "container"))


@dataclass(slots=True)
class _Builder:
    labels: dict[str, str]
    values: dict[str, float] = field(default_factory=dict)
    workloads: list[tuple[str | None, str | None, str | None]] = field(default_factory=list)
    identity: dict[str, Any] | None = None  # _identity(labels) when already known (a cached block's)

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        self.put(name, value)
        self.see(labels, _workload(labels))

    def put(self, name: str, value: float) -> None:
        how = _HOW.get(name)
        values = self.values
        if how is None or name not in values:
            values[name] = value
        elif how == "sum":
            values[name] += value
        else:
            values[name] = max(values[name], value)

    def see(self, labels: dict[str, str], workload: tuple[str | None, str | None, str | None]) -> None:
        if len(labels) > len(self.labels):
            # Label sets vary inside a family: keep identity labels that only some rows carry.
            self.labels = {**labels, **self.labels}
            self.identity = None
        if any(workload) and workload not in self.workloads:
            self.workloads.append(workload)

    def build(self) -> GpuReading:
        values = self.values
        named = _named([values.get(metric) for metric, _scale, _integral in _NAMED])
        namespace, pod, container = self.workloads[0] if self.workloads else (None, None, None)
        # Positional, in the dataclass's field order (checked below): a third cheaper than by keyword.
        return GpuReading(*(self.identity or _identity(self.labels)).values(), *named, pod, namespace, container,
                          tuple(self.workloads), values)  # the builder is done with `values`


def _named(raw: Sequence[float | None]) -> list[Any]:
    """The named fields (GpuReading's order) from their metrics' values (None: not reported)."""
    named: list[Any] = []
    for (_metric, scale, integral), value in zip(_NAMED, raw, strict=True):
        if value is not None:
            value = value * scale
            value = int(value) if integral else float(value)
        named.append(value)
    if named[0] is None and named[1] is not None:  # no SM activity reported: utilisation stands in
        named[0] = named[1] / 100.0
    return named


def _identity(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "uuid": labels.get("UUID") or None,
        "gpu_index": _int(labels.get("gpu")),
        "hostname": _hostname(labels),
        "mig_profile": labels.get("GPU_I_PROFILE") or None,
        "mig_instance_id": _int(labels.get("GPU_I_ID")),
        "model_name": labels.get("modelName") or None,
        "pci_bus_id": normalize_pci_bus_id(labels.get("pci_bus_id")),
        "driver_version": labels.get("DCGM_FI_DRIVER_VERSION") or None,
    }


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
            # The parser's reason may quote the raw line: keep the message one printable line.
            reason = str(exc)[:120] if str(exc).isprintable() else ascii(str(exc)[:120])[1:-1]
            return ValueError(f"DCGM exposition line {number}: {reason}: {stripped[:200]!r}")
    return ValueError(f"DCGM exposition rejected: {error}")


def parse_exposition(text: str | bytes, *, all_metrics: bool = True) -> list[GpuReading]:
    """One reading per GPU or MIG instance, in order of first appearance.

    all_metrics=False is the store path's mode: `metrics` keeps only FIELD_METRICS, and lines of
    other families are read only as far as needed to know which GPUs reported and with which labels
    (so a malformed line there is not looked at). The readings are otherwise the same."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    keep = None if all_metrics else FIELD_METRICS
    if keep is not None:
        try:
            return _parse_lean(text)
        except (_Fallback, ValueError, IndexError, KeyError, TypeError):
            pass  # the general fast path below decides (and falls back in turn)
    try:
        return _parse_fast(text, keep)
    except (_Fallback, ValueError, IndexError, KeyError, TypeError):
        # The fast path proves its shortcuts line by line and gives up on anything unusual; the
        # reference path then decides, and names the line prometheus_client rejects.
        return _parse_reference(text, keep)


def clear_caches() -> None:
    """Forget the parsed label blocks, value texts and shapes (the bench times a first scrape with this)."""
    _parse_block.cache_clear()
    _HEADS.clear()
    _TEMPLATES.clear()
    _VALUES.young.clear()
    _VALUES.old.clear()


def parse_exposition_reference(text: str | bytes, *, all_metrics: bool = True) -> list[GpuReading]:
    """The same readings, with every line through prometheus_client as written: slow (~16 ms per
    8-GPU payload), kept as the reference the fast path is tested and benchmarked against."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return _parse_reference(text, None if all_metrics else FIELD_METRICS)


def _parse_reference(text: str, keep: frozenset[str] | None) -> list[GpuReading]:
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
                name = _metric_name(family, sample.name)
                if keep is None or name in keep:
                    builder.add(name, sample.labels, value)
                else:
                    builder.see(sample.labels, _workload(sample.labels))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise _locate_error(text, exc) from exc
    return [builder.build() for builder in builders.values()]


# --- the fast path ----------------------------------------------------------------------------------
#
# prometheus_client spends ~90% of its time scanning label blocks character by character, and an
# exporter repeats each GPU's ~250-character block on all ~40 of its lines. So each distinct block is
# parsed once, by prometheus_client's own parse_labels, and prometheus_client then parses every line
# with the block cut out ("NAME{block} rest" -> "NAME rest"): same name, same value and timestamp
# text, same families and types. The cut is only made where it provably changes nothing (legacy
# metric name, no "}" or backslash in the block, quotes balanced, no "{" after it); any other line
# goes through as written. Samples come back in line order, which maps them to their blocks.
#
# With keep (the store path), only the kept families' values are parsed, under one synthetic name
# ("v"), since a kept name is its own metric name whatever the family's type. A line of another
# family matters only the first time its block has a sample that is not a blank sentinel (that is
# when the reference path creates a GPU, merges labels or adds a workload; later samples of the same
# block change nothing), so such lines are parsed only until their block has a value that cannot be
# blank. A sample named <kept name>_total could be renamed by a counter TYPE line: that text goes
# to the reference path.

_LEGACY_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_HELP_NAME = re.compile(r"# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[ \t\n\r\x0b\x0c]|$)")
# A value with at most 9 integer digits is below every sentinel (the smallest is 2147483632) and not NaN.
_SURELY_NOT_BLANK = re.compile(r"[ \t]*[0-9]{1,9}(?:\.[0-9]*)?(?:[ \t]|$)")
_KEPT, _OTHER, _VERBATIM, _AMBIGUOUS = range(4)
_ALIAS = "v"
_UNSEEN = object()


# A label block's labels, GPU key, workload and identity fields (what _parse_block caches).
_Parsed = tuple[dict[str, str], tuple[str, str, str] | None, tuple, dict[str, Any]]


class _Fallback(Exception):
    """The fast path cannot prove it would read this text exactly like the reference path."""


class _Block:
    """One distinct label block within one parse: its labels and what this parse did with it."""

    __slots__ = ("parsed", "labels", "key", "workload", "identity", "builder", "confirmed")

    def __init__(self, parsed: _Parsed) -> None:
        self.parsed = parsed
        self.labels, self.key, self.workload, self.identity = parsed
        self.builder: _Builder | None = None
        self.confirmed = False  # a line with a value that cannot be blank has been queued


def _builder_of(block: _Block, builders: dict[tuple[str, str, str], _Builder]) -> _Builder:
    """The GPU's builder for a block's first sample (created on first sight), remembered on the block."""
    builder = builders.get(block.key)  # type: ignore[arg-type]  (callers skip blocks without a key)
    if builder is None:
        builder = builders[block.key] = _Builder(labels=block.labels, identity=block.identity)  # type: ignore[index]
    builder.see(block.labels, block.workload)
    block.builder = builder
    return builder


@functools.lru_cache(maxsize=16384)
def _parse_block(block: str) -> _Parsed | None:
    """Labels, GPU key, workload and identity fields of a label block; None where cutting the block out of a line
    might change the parse. Cached: a worker sees the same blocks every scrape (about 1.5 KB each;
    the labels dict is shared, and nothing here or in _Builder mutates it)."""
    if "}" in block or "\\" in block or block.count('"') % 2:
        return None
    labels = _prom_parser.parse_labels(block, False)
    if "__name__" in labels:
        return None  # the parser rejects the line ("metric name specified more than once")
    return labels, _gpu_key(labels), _workload(labels), _identity(labels)


def _classify(name: str, keep: frozenset[str] | None) -> int:
    if not _LEGACY_NAME.fullmatch(name):
        return _VERBATIM
    if keep is None or name in keep:
        return _KEPT
    return _AMBIGUOUS if name in _AMBIGUOUS_TOTALS else _OTHER


_CLASSES: dict[frozenset[str] | None, dict[str, int]] = {}  # metric name -> how to read it, per `keep`


def _parse_fast(text: str, keep: frozenset[str] | None) -> list[GpuReading]:
    everything = keep is None
    out: list[str] = [] if everything else [f"# TYPE {_ALIAS} untyped"]
    # Per line given to prometheus_client: (block, metric) for a cut line (metric None: only its
    # labels matter), (None, None) for a line given as written.
    queued: list[tuple[_Block | None, str | None]] = []
    blocks: dict[str, _Block | None] = {}
    classes = _CLASSES.setdefault(keep, {})
    if len(classes) > 4096:  # metric names are few; this only bounds what odd input can add
        classes.clear()
    verbatim = (None, None)
    for line in text.split("\n"):  # the parser splits on "\n" only, and strips each line
        line = line.strip()
        if not line:
            continue
        if line[0] == "#":
            if everything:
                match = _HELP_NAME.match(line)
                out.append("# HELP " + match[1] if match else line)  # HELP text is never read
            continue
        brace = line.find("{")
        if brace < 0:
            if everything:  # no labels, so never a GPU's: only its validity matters
                out.append(line)
                queued.append(verbatim)
            continue
        name = line[:brace]
        kind = classes.get(name)
        if kind is None:
            kind = classes[name] = _classify(name, keep)
        end = line.rfind("}")
        if end > brace and (kind == _KEPT or kind == _OTHER):
            block_text = line[brace + 1:end]
            block = blocks.get(block_text, _UNSEEN)
            if block is _UNSEEN:
                parsed = _parse_block(block_text)
                block = blocks[block_text] = None if parsed is None else _Block(parsed)
            if block is not None:
                if not everything and (block.key is None or (kind == _OTHER and block.confirmed)):
                    continue
                rest = line[end + 1:]
                if "{" not in rest:
                    if not everything and not block.confirmed and _SURELY_NOT_BLANK.match(rest):
                        block.confirmed = True
                    out.append(f"{name if everything else _ALIAS} {rest}")
                    queued.append((block, name if kind == _KEPT else None))
                    continue
        elif kind == _AMBIGUOUS:
            raise _Fallback(name)
        out.append(line)
        queued.append(verbatim)
        if not everything:
            out.append(f"# TYPE {_ALIAS} untyped")  # the line above ended the alias family

    families = list(_prom_parser.text_string_to_metric_families("\n".join(out)))
    if sum(len(family.samples) for family in families) != len(queued):
        raise _Fallback("samples lost")  # e.g. a family named "" that the parser never yields
    builders: dict[tuple[str, str, str], _Builder] = {}
    pending = iter(queued)
    for family in families:
        for sample, (block, metric) in zip(family.samples, pending, strict=False):  # counts checked above
            value = sample.value
            if value >= _INT64_BLANK or value in _SENTINELS or value != value:  # is_blank, inlined
                continue
            if block is None:
                labels = sample.labels
                key = _gpu_key(labels)
                if key is None:
                    continue
                builder = builders.get(key)
                if builder is None:
                    builder = builders[key] = _Builder(labels=labels)
                builder.see(labels, _workload(labels))
                metric = _metric_name(family, sample.name) if everything else sample.name
                if not everything:
                    if metric in _AMBIGUOUS_TOTALS:
                        raise _Fallback(metric)
                    if metric not in keep:
                        continue
            else:
                builder = block.builder
                if builder is None:
                    if block.key is None:
                        continue
                    builder = _builder_of(block, builders)
                if everything:
                    metric = _metric_name(family, sample.name)
                elif metric is None:
                    continue
            if metric in _HOW:
                builder.put(metric, value)
            else:
                builder.values[metric] = value
    return [builder.build() for builder in builders.values()]


# --- the lean path (store mode) ---------------------------------------------------------------------
#
# The store mode reads about 90 of an 8-GPU payload's 430 lines. _parse_fast still copies every line
# it reads into a text for prometheus_client; here a line of another family whose block is already
# confirmed costs one partition, one rfind and two dict look-ups, and values are memoised: each
# distinct value text (what follows the label block: "42", " 0.000000", " 345.123000 1700000000000")
# is parsed once by prometheus_client, as "v{} <text>" in an untyped family (the line with its block
# emptied: its value depends on nothing else), all of a payload's new texts in one call. Exporters
# repeat most value texts (temperatures, utilisation, zero counters, memory of a running job); power
# and profiling ratios are mostly new each scrape.
#
# The next scrape of the same exporter is checked against the last one's shape (_Template) instead of
# being scanned line by line; when each GPU block's first value surely is not blank and no read value
# is blank, the shape's _Plan places the values into fields without builders.
#
# It reads exactly the lines _parse_fast gives prometheus_client in store mode, in the same order, with
# the same blank-sentinel rule; a line _parse_fast would give as written (no legacy name before the
# "{", a block that cannot be cut out, a "{" after the block, an ambiguous "<kept>_total") sends the
# whole text to _parse_fast.

_VALUES_PER_GENERATION = 1 << 15
_HEAD_OTHER, _HEAD_COMMENT, _HEAD_ODD = "", "#", "!"  # kept families map to their own name


class _ValueMemo:
    """Value text -> the value prometheus_client reads from it, in two generations: a text in use
    since the young generation began stays; one unused for two generations (2 x 32,768 texts) is
    forgotten. Bounded like an LRU, with dict-speed hits."""

    __slots__ = ("young", "old")

    def __init__(self) -> None:
        self.young: dict[str, float] = {}
        self.old: dict[str, float] = {}

    def values(self, texts: list[str]) -> list[float]:
        young = self.young
        found: list[Any] = list(map(young.get, texts))
        if None not in found:
            return found
        old = self.old
        new = []
        for text in set(texts).difference(young):  # the few texts not in use lately, by C-speed set work
            value = old.get(text)
            if value is None:
                new.append(text)
            else:
                young[text] = value
        if new:
            young.update(zip(new, _parse_values(new), strict=True))
        found = list(map(young.get, texts))
        if len(young) > _VALUES_PER_GENERATION:
            self.old, self.young = young, {}
        return found


def _parse_values(texts: list[str]) -> list[float]:
    """prometheus_client's values of "v{} <text>" lines (the sample with its label block emptied, which
    the parser reads past at once), all in one call; ValueError as it raises it."""
    lines = "".join(f"{_ALIAS}{{}} {text}\n" for text in texts)
    samples = [sample for family in _prom_parser.text_string_to_metric_families(f"# TYPE {_ALIAS} untyped\n{lines}")
               for sample in family.samples]
    if len(samples) != len(texts) or any(sample.name != _ALIAS for sample in samples):
        raise _Fallback("value texts did not read as one sample each")
    return [sample.value for sample in samples]


_VALUES = _ValueMemo()
_HEADS: dict[str, str] = {}  # what precedes a line's first "{" -> how the lean path reads the line


def _head_kind(head: str) -> str:
    name = head.lstrip()  # the parser strips each line: leading whitespace is not part of the name
    if name.startswith("#"):
        return _HEAD_COMMENT
    if not _LEGACY_NAME.fullmatch(name) or name in _AMBIGUOUS_TOTALS:
        return _HEAD_ODD
    return next((kept for kept in FIELD_METRICS if kept == name), _HEAD_OTHER)


class _LeanBlock(_Block):
    """A block of one lean parse, which also remembers its text and the block that followed it:
    an exporter prints the GPUs in the same order in every family, so after the first family the next
    line's block is nearly always known and is checked in place, without slicing or hashing it."""

    __slots__ = ("text", "next", "seq")

    def __init__(self, text: str, parsed: _Parsed) -> None:
        super().__init__(parsed)
        self.text = text
        self.seq: list[tuple[int, str | None]] = []  # (sample line number, kept metric) per line
        self.next: _LeanBlock = _NO_BLOCK


_NO_BLOCK = _LeanBlock.__new__(_LeanBlock)
_NO_BLOCK.text = "\n"  # in no line


class _Template:
    """The shape of an exposition the lean scan read without falling back. An exporter prints the same
    lines every scrape with new values, so the next payload of that node is checked against the shape
    in C-speed passes: the value text after each "}" (up to the next "{", "}" or newline) is found, one a
    "}", and the template's text with these value texts in place of its own is the text. Then every
    line is the same line (comments too) with another rest, free of braces and newlines (so the first
    "{" and the block's end are where they were), and the head and block decide everything the scan does
    besides the value texts.
    Only shapes whose every "}" closes a sample line's block and whose value texts hold no "{" are kept."""

    __slots__ = ("size", "parts", "reads", "plan")

    def __init__(self, skeleton: list[str], scan: _Scan) -> None:
        self.size = len(skeleton) - 1  # value texts
        # The text again: its skeleton's pieces, each with the "}" after it, around the value texts.
        self.parts: list[str] = [""] * (2 * len(skeleton) - 1)
        self.parts[0::2] = [piece + "}" for piece in skeleton[:-1]] + skeleton[-1:]
        # Per block with a GPU key, in order of first appearance: all its lines, and its kept ones.
        self.reads = [(block.parsed, block.seq, [entry[0] for entry in block.seq if entry[1] is not None],
                       [entry for entry in block.seq if entry[1] is not None])
                      for block in scan.blocks.values() if block.key is not None]
        self.plan = _Plan.of(self.reads)

    @classmethod
    def of(cls, text: str, scan: _Scan) -> _Template | None:
        """The text's shape, where the cut pieces line up with its lines: one "}" a sample line (its
        block's), and every value text runs to the end of its line (holds no "{")."""
        skeleton = _RESTS.split(text)[0::2]
        if len(skeleton) != scan.samples + 1 or not all(piece[:1] == "\n" for piece in skeleton[1:-1]):
            return None
        if skeleton[-1][:1] not in ("\n", ""):
            return None
        return cls(skeleton, scan)

    def rests(self, text: str) -> list[str] | None:
        """The value text of each sample line, in order; None when the text is not of this shape."""
        rests = _RESTS.findall(text)  # one a "}"
        if len(rests) != self.size:
            return None
        parts = self.parts.copy()
        parts[1::2] = rests
        return rests if "".join(parts) == text else None

    def read(self, rests: list[str]) -> tuple[list[tuple[_Block, str | None]], list[str]]:
        """What the scan would queue for these value texts (of the shape's lines), in line order."""
        queued: list[tuple[int, _Block, str | None, str]] = []
        for parsed, seq, kept_at, kept in self.reads:
            block = _Block(parsed)
            for number, metric in seq:
                rest = rests[number]
                queued.append((number, block, metric, rest))
                if _SURELY_NOT_BLANK.match(rest):
                    block.confirmed = True
                    break
            else:
                continue
            for later, metric in kept[bisect_right(kept_at, number):]:  # confirmed: its kept lines only
                queued.append((later, block, metric, rests[later]))
        queued.sort(key=_first)
        return [(block, metric) for _number, block, metric, _rest in queued], [entry[3] for entry in queued]


_RESTS = re.compile(r"\}([^{}\n]*)")  # a block's "}" and the value text after it


def _first(entry: tuple) -> int:
    return entry[0]


def _getter(positions: Sequence[int]) -> Callable[[Sequence[Any]], tuple]:
    """itemgetter that always returns a tuple (itemgetter of one position returns the item)."""
    if not positions:
        return lambda items: ()
    if len(positions) == 1:
        only = positions[0]
        return lambda items: (items[only],)
    return itemgetter(*positions)


class _Plan:
    """How a shape reads when each GPU block's first line has a value that cannot be blank (every
    steady scrape: the first family is a clock or a count) and no kept value is blank: the scan then
    reads the same lines every time and creates the same GPUs in the same order with the same labels,
    so which value lands in which field is worked out once. `values` of the read texts (one
    prometheus_client value each, through the memo) then only need placing. Built only where each GPU
    has at most one line of each summed or maxed family (those then read like "last")."""

    __slots__ = ("texts", "confirms", "frames", "named", "metrics")

    def __init__(self, numbers: list[int], confirms: list[int], frames: list[tuple[tuple, tuple, tuple]],
                 named: list[list[int]], metrics: list[tuple[list[str], list[int]]]) -> None:
        self.texts = _getter(numbers)  # the value texts to read, from all sample lines' value texts
        self.confirms = _getter(confirms)  # of those, each block's first (it must surely not be blank)
        self.frames = frames  # per GPU: identity fields, (pod, namespace, container), workloads
        self.named = [_getter(positions) for positions in named]  # per GPU: its named metrics' values
        self.metrics = [(names, _getter(positions)) for names, positions in metrics]  # per GPU: `metrics`

    @classmethod
    def of(cls, reads: list[tuple[_Parsed, list, list[int], list]]) -> _Plan | None:
        entries: list[tuple[int, int, str | None]] = []  # (line number, block, kept metric) in line order
        for block_index, (_parsed, seq, kept_at, kept) in enumerate(reads):
            first, metric = seq[0]
            entries.append((first, block_index, metric))
            entries += [(later, block_index, metric) for later, metric in kept[bisect_right(kept_at, first):]]
        if not entries:
            return None
        entries.sort(key=_first)
        # The GPUs as _build creates them: each block's first line is read first and is not blank.
        builders: dict[tuple[str, str, str], _Builder] = {}
        blocks = [_Block(parsed) for parsed, _seq, _kept_at, _kept in reads]
        for _number, block_index, _metric in entries:
            block = blocks[block_index]
            if block.builder is None:
                _builder_of(block, builders)
        gpus = list(builders.values())
        slot = {id(builder): i for i, builder in enumerate(gpus)}
        puts: list[list[tuple[str, int]]] = [[] for _ in gpus]  # per GPU: (metric, position) as put
        for position, (_number, block_index, metric) in enumerate(entries):
            if metric is not None:
                puts[slot[id(blocks[block_index].builder)]].append((metric, position))
        none = len(entries)  # `values` gets a None after the read values: a field no line reported
        named, metrics = [], []
        for gpu_puts in puts:
            last = {metric: position for metric, position in gpu_puts}
            if any(sum(1 for m, _p in gpu_puts if m == metric) > 1 for metric in _HOW):
                return None
            named.append([last.get(metric, none) for metric, _scale, _integral in _NAMED])
            metrics.append(([m for m, _p in gpu_puts], [p for _m, p in gpu_puts]))
        frames = []
        for builder in gpus:
            reading = builder.build()  # the builder has no values yet: identity, workload and workloads
            frames.append((tuple((builder.identity or _identity(builder.labels)).values()),
                           (reading.pod, reading.namespace, reading.container), reading.workloads))
        firsts = {}
        for position, (_number, block_index, _metric) in enumerate(entries):
            firsts.setdefault(block_index, position)
        return cls([entry[0] for entry in entries], list(firsts.values()), frames, named, metrics)

    def values(self, rests: list[str]) -> list[Any] | None:
        """The read values (then a None), or None where this plan does not hold for these value texts."""
        texts = self.texts(rests)
        if not all(map(_SURELY_NOT_BLANK.match, self.confirms(texts))):
            return None
        values: list[Any] = _VALUES.values(list(texts))
        # No blank: none is a sentinel or above (max), none is NaN (a NaN makes the sum NaN).
        total = sum(values)
        if max(values) >= _SMALLEST_SENTINEL or total != total:
            return None
        values.append(None)
        return values

    def readings(self, values: list[Any]) -> list[GpuReading]:
        return [GpuReading(*identity, *_named(named(values)), *workload, workloads,
                           dict(zip(names, get(values), strict=True)))
                for (identity, workload, workloads), named, (names, get)
                in zip(self.frames, self.named, self.metrics, strict=True)]

    def store_readings(self, values: list[Any]) -> list[StoreReading]:
        return [_new(StoreReading, (*identity[:5], *_named(named(values)), workload[0], workload[1]))
                for (identity, workload, _workloads), named in zip(self.frames, self.named, strict=True)]


_TEMPLATES: dict[str, _Template] = {}  # the text up to its first "}" -> the shape of that exporter's output
_TEMPLATES_MAX = 4096  # ~12 KB each: a worker's nodes (an 8-GPU payload has ~430 lines)


def _template_values(text: str) -> tuple[_Template | None, list[str] | None, list[Any] | None]:
    """The text's shape (None: not seen), its value texts (None: not of the shape) and the shape's
    plan's values for them (None: the plan does not hold)."""
    first_close = text.find("}")
    template = _TEMPLATES.get(text[:first_close + 1]) if first_close >= 0 else None
    if template is None:
        return None, None, None
    rests = template.rests(text)
    if rests is None or template.plan is None:
        return template, rests, None
    return template, rests, template.plan.values(rests)


def _parse_lean(text: str) -> list[GpuReading]:
    template, rests, values = _template_values(text)
    if values is not None:
        return template.plan.readings(values)  # type: ignore[union-attr]  (values come from the plan)
    if rests is not None:
        return _build(*template.read(rests))  # type: ignore[union-attr]
    lines = text.split("\n")  # the parser splits on "\n" only
    scan = _scan(lines)
    first_close = text.find("}")
    template = _Template.of(text, scan) if first_close >= 0 else None
    if template is not None:
        if len(_TEMPLATES) >= _TEMPLATES_MAX:
            _TEMPLATES.clear()
        _TEMPLATES[text[:first_close + 1]] = template
    return _build(scan.queued, scan.rests)


@dataclass(slots=True)
class _Scan:
    queued: list[tuple[_Block, str | None]]  # (block, kept metric or None) per value to read
    rests: list[str]  # the value text of each
    samples: int  # lines with a label block
    blocks: dict[str, _LeanBlock]  # in order of first appearance


def _scan(lines: list[str]) -> _Scan:
    """Every line in order: what to read, and the shape of the text for _Template."""
    heads = _HEADS
    if len(heads) > 4096:  # heads are a few metric names; this only bounds what odd input can add
        heads.clear()
    blocks: dict[str, _LeanBlock] = {}
    queued: list[tuple[_Block, str | None]] = []  # (block, kept metric or None) per value read
    rests: list[str] = []
    samples = 0
    head_brace, kind, start = "\n", _HEAD_OTHER, 0  # the last sample line's "<head>{", how to read it
    block = _LeanBlock("\n", ({}, None, (), {}))  # the first line's predecessor (links are per parse)
    predicted = _NO_BLOCK
    for line in lines:
        if not line.startswith(head_brace):  # a line of another family (or no sample line)
            head, brace, _tail = line.partition("{")
            if not brace:
                continue  # a comment, a blank line or a sample without labels: never a GPU's
            kind = heads.get(head)
            if kind is None:
                kind = heads[head] = _head_kind(head)
            if kind == _HEAD_COMMENT:
                continue
            if kind == _HEAD_ODD:
                raise _Fallback(head)
            head_brace = head + "{"
            start = len(head_brace)
        end = line.rfind("}")  # the block runs to the last "}", as _parse_fast cuts it
        if end - start == len(predicted.text) and line.startswith(predicted.text, start):
            block.next = block = predicted
        else:
            if end < start:
                raise _Fallback(line)
            block_text = line[start:end]
            found = blocks.get(block_text)
            if found is None:
                parsed = _parse_block(block_text)
                if parsed is None:
                    raise _Fallback(block_text)
                found = blocks[block_text] = _LeanBlock(block_text, parsed)
            block.next = block = found
        predicted = block.next
        samples += 1
        if block.key is None:
            continue
        block.seq.append((samples - 1, kind or None))
        if not kind and block.confirmed:
            continue
        rest = line[end + 1:]
        if "{" in rest:
            raise _Fallback(rest)
        if not block.confirmed and _SURELY_NOT_BLANK.match(rest):
            block.confirmed = True
        queued.append((block, kind or None))
        rests.append(rest)
    return _Scan(queued, rests, samples, blocks)


def _build(queued: list[tuple[_Block, str | None]], rests: list[str]) -> list[GpuReading]:
    builders: dict[tuple[str, str, str], _Builder] = {}
    for (block, metric), value in zip(queued, _VALUES.values(rests), strict=True):
        if value != value or (value >= _SMALLEST_SENTINEL and (value >= _INT64_BLANK or value in _SENTINELS)):
            continue  # is_blank, inlined: nearly every value is below every sentinel
        builder = block.builder
        if builder is None:
            builder = _builder_of(block, builders)  # only blocks with a key are read here
        if metric is None:
            continue
        if metric in _HOW:
            builder.put(metric, value)
        else:
            builder.values[metric] = value
    return [builder.build() for builder in builders.values()]


# --- store readings -----------------------------------------------------------------------------------


class StoreReading(NamedTuple):
    """What storing a GPU's reading needs (matching, the stored fields, the fault counters): GpuReading's
    fields of those names, without building one."""

    uuid: str | None
    gpu_index: int | None
    hostname: str | None
    mig_profile: str | None
    mig_instance_id: int | None
    sm_active: float | None
    gpu_util: float | None
    fb_used_mib: float | None
    fb_free_mib: float | None
    temperature_c: float | None
    power_w: float | None
    xid_last: int | None
    ecc_dbe_volatile: int | None
    row_remap_failure: int | None
    row_remap_pending: int | None
    xid_count: int | None
    health_status: int | None
    pod: str | None
    namespace: str | None

    @classmethod
    def of(cls, reading: GpuReading) -> StoreReading:
        return cls._make(map(reading.__getattribute__, cls._fields))


_new = tuple.__new__  # a named tuple from an iterable without _make's length check (the plan's are exact)


def parse_for_store(text: str | bytes) -> list[StoreReading]:
    """parse_exposition(text, all_metrics=False) as StoreReadings: the same GPUs in the same order with
    the same values. A steady scrape of a known shape builds them straight from the read values."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        template, rests, values = _template_values(text)
        if values is not None:
            return template.plan.store_readings(values)  # type: ignore[union-attr]  (values come from the plan)
        if rests is not None:  # the shape, read as _parse_lean reads it (without cutting the text again)
            return [StoreReading.of(reading) for reading in _build(*template.read(rests))]  # type: ignore[union-attr]
    except (_Fallback, ValueError, IndexError, KeyError, TypeError):
        pass  # parse_exposition decides (and names a refused line as it does)
    return [StoreReading.of(reading) for reading in parse_exposition(text, all_metrics=False)]


_POSITIONAL = [*_identity({}), *(attr for attr, _scale, _how in _FIELDS.values()), "pod", "namespace", "container",
               "workloads", "metrics"]
if _POSITIONAL != [f.name for f in fields(GpuReading)]:  # GpuReading.build passes its fields by position
    raise RuntimeError(f"GpuReading's fields are not in the order build() passes them: {_POSITIONAL}")
if list(StoreReading._fields) != [*_POSITIONAL[:5], *(attr for attr, _scale, _how in _FIELDS.values()), "pod",
                                  "namespace"]:  # the plan builds store readings by position
    raise RuntimeError("StoreReading's fields are not GpuReading's identity, named fields, pod and namespace")
