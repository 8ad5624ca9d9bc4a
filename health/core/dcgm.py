"""dcgm-exporter /metrics text -> one DcgmSample per GPU or MIG instance.

Public API:
    parse_exposition(text: str | bytes, *, all_metrics=True) -> list[DcgmSample]
        The fast path (below); raises ValueError naming the first line prometheus_client rejects
        ("DCGM exposition line 7: ...: '<line>'"). all_metrics=False is the store path's mode:
        `metrics` keeps only FIELD_METRICS' series and `clock_events` stays empty; lines of other
        families are read only as far as needed to know which GPUs reported, with which labels, and
        which Xids their `xid`-labelled series name (so a malformed line there may not be seen).
    parse_exposition_reference(text, *, all_metrics=True)
                        the same readings with the whole text through prometheus_client's parser as
                        written (~20x slower): the oracle the fast path is tested against
    DcgmSample          dataclass, one per GPU (or per MIG instance), `sample.to_json()`
    FIELD_METRICS       the metric families behind DcgmSample's named fields
    is_blank(value)     True for DCGM's "no data" sentinels (int32 / int64 / fp64 BLANK, NOT_FOUND,
                        NOT_SUPPORTED, NOT_PERMISSIONED) and NaN
    HEALTH_PASS / HEALTH_WARN / HEALTH_FAIL
                        DCGM health result values (0 / 10 / 20) seen in DCGM_EXP_GPU_HEALTH_STATUS

Grouping: samples belong to the GPU named by the `UUID` label, else by `gpu` index plus `Hostname`
(or `hostname`). Rows with `GPU_I_ID` are separate MIG instances (`mig_profile` from GPU_I_PROFILE).
Label sets may vary inside one family (pods come and go); HELP text is ignored. When several pods
share a GPU (MPS, time-slicing) every (namespace, pod, container) lands in `workloads` and the first
fills `pod` / `namespace` / `container`.

Series of one family that differ by a SERIES_LABELS label are kept apart: dcgm-exporter's counting
collectors write one series per `clock_event` (DCGM_EXP_CLOCK_EVENTS_COUNT) and per `xid`
(DCGM_EXP_XID_ERRORS_COUNT and the gauges that name an Xid). `metrics` keys such a series as
`NAME{label="value"}`, `clock_events` holds DCGM_EXP_CLOCK_EVENTS_COUNT per reason, and `xids` the
count of every Xid an `xid`-labelled series reports above zero, so the policy reads it as an Xid of
that GPU (the same catalog as a kernel-log Xid).
"""
from __future__ import annotations

import math
import re
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

CLOCK_EVENTS_METRIC = "DCGM_EXP_CLOCK_EVENTS_COUNT"
# Labels that tell apart series of one family on one GPU (dcgm-exporter's counting collectors).
SERIES_LABELS = ("clock_event", "xid")


def is_blank(value: float) -> bool:
    """DCGM writes sentinels, not gaps, for unsupported fields: 9223372036854775794 is not 9.2e18 C."""
    return value != value or value >= _INT64_BLANK or value in _SENTINELS


@dataclass(slots=True)
class DcgmSample:
    """One GPU's (or MIG instance's) reading from one exposition. Not frozen: a frozen dataclass sets
    each of its 27 fields through object.__setattr__ (3x the cost of a plain one, built per GPU); a
    reading is not changed after the parse builds it."""

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
    xid_count: int | None = None  # DCGM_EXP_XID_ERRORS_COUNT summed over its series
    health_status: int | None = None  # worst DCGM_EXP_GPU_HEALTH_STATUS (0 pass, 10 warn, 20 fail)
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    workloads: tuple[tuple[str | None, str | None, str | None], ...] = ()
    xids: dict[int, int] = field(default_factory=dict)  # Xid code -> largest count its series report
    clock_events: dict[str, float] = field(default_factory=dict)  # clock_event -> DCGM_EXP_CLOCK_EVENTS_COUNT
    metrics: dict[str, float] = field(default_factory=dict)  # series key -> value, blanks left out

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["workloads"] = [
            {"namespace": ns, "pod": pod, "container": container} for ns, pod, container in self.workloads
        ]
        return data


# metric name -> (DcgmSample field, integral, how repeated samples of a GPU combine)
_FIELDS: dict[str, tuple[str, bool, str]] = {
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", False, "last"),
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util", False, "last"),
    "DCGM_FI_DEV_FB_USED": ("fb_used_mib", False, "last"),
    "DCGM_FI_DEV_FB_FREE": ("fb_free_mib", False, "last"),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", False, "last"),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", False, "last"),
    "DCGM_FI_DEV_XID_ERRORS": ("xid_last", True, "last"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_dbe_volatile", True, "last"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("row_remap_failure", True, "last"),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("row_remap_pending", True, "last"),
    "DCGM_EXP_XID_ERRORS_COUNT": ("xid_count", True, "sum"),
    "DCGM_EXP_GPU_HEALTH_STATUS": ("health_status", True, "max"),
}
FIELD_METRICS = frozenset(_FIELDS)
# A counter family "X_total" names its samples X: a line named like this may read as a kept family.
_KEPT_OR_TOTAL = FIELD_METRICS | {name + "_total" for name in FIELD_METRICS}

Workload = tuple[str | None, str | None, str | None]


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


class _Block:
    """One distinct label block of a payload, read once: its labels and what they mean."""

    __slots__ = ("labels", "key", "workload", "xid", "series", "plain", "builder")

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.key = _gpu_key(labels)
        self.workload: Workload = (_label(labels, "namespace"), _label(labels, "pod"), _label(labels, "container"))
        self.xid = _int(labels.get("xid"))
        parts = [f'{name}="{labels[name]}"' for name in SERIES_LABELS if name in labels]
        self.series = "{" + ",".join(parts) + "}" if parts else ""
        self.plain = self.xid is None and not parts  # a sample of it only sets its metric (see _parse_fast)
        self.builder: _Builder | None = None  # the GPU's, once a sample of this block was not blank


class _Builder:
    """One GPU's reading while its samples are read."""

    __slots__ = ("labels", "fields", "metrics", "workloads", "xids", "clock_events")

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.fields: dict[str, float] = {}  # named fields' metrics, combined per _FIELDS
        self.metrics: dict[str, float] = {}
        self.workloads: list[Workload] = []
        self.xids: dict[int, int] = {}
        self.clock_events: dict[str, float] = {}

    def see(self, block: _Block) -> None:
        if len(block.labels) > len(self.labels):
            # Label sets vary inside a family: keep identity labels that only some rows carry.
            self.labels = {**block.labels, **self.labels}
        workload = block.workload
        if any(workload) and workload not in self.workloads:
            self.workloads.append(workload)

    def add(self, metric: str, block: _Block, value: float, keep: frozenset[str] | None) -> None:
        """A non-blank sample of this GPU; `keep` (store mode) limits what lands in `metrics`."""
        if block.xid is not None and value > 0 and value != math.inf:
            self.xids[block.xid] = max(self.xids.get(block.xid, 0), int(value))
        if keep is not None and metric not in keep:
            return
        self.metrics[metric + block.series if block.series else metric] = value
        if metric == CLOCK_EVENTS_METRIC and "clock_event" in block.labels:
            self.clock_events[block.labels["clock_event"]] = value
        spec = _FIELDS.get(metric)
        if spec is None:
            return
        fields = self.fields
        if spec[2] == "last" or metric not in fields:
            fields[metric] = value
        elif spec[2] == "sum":
            fields[metric] += value
        else:
            fields[metric] = max(fields[metric], value)

    def build(self) -> DcgmSample:
        labels = self.labels
        namespace, pod, container = self.workloads[0] if self.workloads else (None, None, None)
        sample = DcgmSample(
            uuid=labels.get("UUID") or None, gpu_index=_int(labels.get("gpu")), hostname=_hostname(labels),
            mig_profile=labels.get("GPU_I_PROFILE") or None, mig_instance_id=_int(labels.get("GPU_I_ID")),
            model_name=labels.get("modelName") or None, pci_bus_id=normalize_pci_bus_id(labels.get("pci_bus_id")),
            driver_version=labels.get("DCGM_FI_DRIVER_VERSION") or None, pod=pod, namespace=namespace,
            container=container, workloads=tuple(self.workloads), xids=self.xids, clock_events=self.clock_events,
            metrics=self.metrics,
        )
        for metric, value in self.fields.items():
            attr, integral, _how = _FIELDS[metric]
            if integral:  # an integer counter cannot be infinite: such a value is no reading of it
                setattr(sample, attr, int(value) if math.isfinite(value) else None)
            else:
                setattr(sample, attr, float(value))
        if sample.sm_active is None and sample.gpu_util is not None:  # no SM activity: utilisation stands in
            sample.sm_active = sample.gpu_util / 100.0
        return sample


def _read(builders: dict[tuple[str, str, str], _Builder], block: _Block, metric: str, value: float,
          keep: frozenset[str] | None) -> None:
    """One sample into its GPU's builder (both paths read every sample through here)."""
    if block.key is None or is_blank(value):
        return
    builder = block.builder
    if builder is None:
        builder = builders.get(block.key)
        if builder is None:
            builder = builders[block.key] = _Builder(block.labels)
        builder.see(block)
        block.builder = builder
    builder.add(metric, block, value, keep)


def parse_exposition(text: str | bytes, *, all_metrics: bool = True) -> list[DcgmSample]:
    """One reading per GPU or MIG instance, in order of first appearance (see the module docstring)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    keep = None if all_metrics else FIELD_METRICS
    try:
        return _parse_fast(text, keep)
    except (_Fallback, ValueError, IndexError, KeyError, TypeError):
        # The fast path takes on only what it reads exactly as prometheus_client does; for anything
        # else (and to name a rejected line) the reference path decides.
        return _parse_reference(text, keep)


def parse_exposition_reference(text: str | bytes, *, all_metrics: bool = True) -> list[DcgmSample]:
    """The same readings, with the whole text through prometheus_client's parser as written."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return _parse_reference(text, None if all_metrics else FIELD_METRICS)


def _parse_reference(text: str, keep: frozenset[str] | None) -> list[DcgmSample]:
    builders: dict[tuple[str, str, str], _Builder] = {}
    try:
        for family in _prom_parser.text_string_to_metric_families(text):
            counter = family.type == "counter"
            for sample in family.samples:
                metric = family.name if counter else sample.name
                _read(builders, _Block(sample.labels), metric, sample.value, keep)
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise _locate_error(text, exc) from exc
    return [builder.build() for builder in builders.values()]


def _locate_error(text: str, error: Exception) -> ValueError:
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            for _family in _prom_parser.text_string_to_metric_families(stripped + "\n"):
                pass
        except Exception as exc:  # noqa: BLE001  any rejection is reported with its line
            # The parser's reason may quote the raw line: keep the message one printable line.
            reason = str(exc)[:120] if str(exc).isprintable() else ascii(str(exc)[:120])[1:-1]
            return ValueError(f"DCGM exposition line {number}: {reason}: {stripped[:200]!r}")
    return ValueError(f"DCGM exposition rejected: {error}")


# --- the fast path ----------------------------------------------------------------------------------
#
# prometheus_client spends most of its time scanning label blocks character by character, and an
# exporter repeats each GPU's ~250-character block on all ~40 of its lines. The fast path walks the
# lines as the parser does (the same family state: which family a sample belongs to, its type), cuts
# each sample line at its braces (or, where that could differ, with one regex that accepts only what
# the parser reads the same way), and reads each distinct label block of the payload once: by
# splitting when it is written as exporters write it, else with prometheus_client's parse_labels.
# Anything the cuts or the comment rules do not accept goes to the parser line by line
# (_parse_sample) or, for comments and types it does not take on, to the reference path.
#
# In store mode (keep), a line of another family changes nothing once its block has a GPU (its labels
# and workload are already merged) unless it names an Xid, so it is skipped on sight.

_LEGACY_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# NAME{labels}rest: the block up to the first "}" outside quotes, escapes only inside quotes.
_SAMPLE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^"{}\\]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^"{}\\]*)*)\}(.*)')
_TYPES = frozenset({"counter", "gauge", "untyped"})  # a family of another type goes to the reference
# "# HELP name ..." / "# TYPE name type" split as the parser splits comments (its whitespace, no quotes).
_HELP_TYPE = re.compile(r"#[ \t\r\x0b\x0c]+(HELP|TYPE)[ \t\r\x0b\x0c]+([a-zA-Z_:][a-zA-Z0-9_:]*)"
                        r"(?:[ \t\r\x0b\x0c]+(.*))?", re.S)


class _Fallback(Exception):
    """The fast path does not take on this text; the reference path reads it."""


def _value(rest: str) -> float:
    """prometheus_client's value of the text after a label block (_parse_value_and_timestamp)."""
    token = rest.lstrip()
    if " " in token or "\t" in token:  # a timestamp (or garbage): the parser's own rules
        return _prom_parser._parse_value_and_timestamp(rest)[0]
    if "_" in token:
        raise ValueError(token)
    if "." in token:  # int() refuses it anyway: exporters print most gauges "%f"
        return float(token)
    try:
        return int(token)
    except ValueError:
        return float(token)


def _labels(block: str) -> dict[str, str]:
    """prometheus_client's parse_labels(block): its character-by-character scan is most of the
    parser's time, so the exporters' own spelling is read by splitting (_plain_labels)."""
    labels = _plain_labels(block)
    # Spaces, escapes, a trailing comma, reserved or repeated names: the parser decides.
    return _prom_parser.parse_labels(block, False) if labels is None else labels


def _plain_labels(block: str) -> dict[str, str] | None:
    """The labels of a block written `name="value",name="value"` (no spaces, no backslash, names
    [a-zA-Z_][a-zA-Z0-9_]* not starting "__", each once), as parse_labels reads it; None otherwise.
    Without a backslash every quote is a delimiter, so the block splits exactly at '",'."""
    if "\\" in block or not block.endswith('"'):
        return None
    labels = {}
    for pair in block[:-1].split('",'):
        name, sep, value = pair.partition('="')
        if not sep or '"' in value or not (name.isidentifier() and name.isascii()) or name.startswith("__"):
            return None
        labels[name] = value
    return labels if block.count('"') == 2 * len(labels) else None  # a stray quote, or a name twice


def _comment(line: str, family: str, counter: bool) -> tuple[str, bool]:
    """The family state after a comment line, as prometheus_client's text parser keeps it."""
    match = _HELP_TYPE.fullmatch(line)
    if match is None:
        if "HELP" in line or "TYPE" in line:
            raise _Fallback(line)  # maybe one the parser reads as HELP or TYPE: it decides
        return family, counter  # a plain comment
    kind, name, rest = match.groups()
    if kind == "HELP":
        return (family, counter) if name == family else (name, False)
    if rest not in _TYPES:
        raise _Fallback(line)
    return name, rest == "counter"


def _parse_fast(text: str, keep: frozenset[str] | None) -> list[DcgmSample]:
    builders: dict[tuple[str, str, str], _Builder] = {}
    blocks: dict[str, _Block] = {}  # this payload's label blocks by their text
    names: set[str] = set()  # the legacy metric names seen (the parser reads them as they are)
    family, counter = "", False  # the parser's current family ("": none) and whether it is a counter
    # Store mode: the texts of the blocks whose lines of an unread family change nothing (their GPU has
    # them, they name no Xid). A line "FAMILY{block}rest" of the current family then costs one test.
    skippable: set[str] = set()
    state = _family("", False, keep)
    prefix, cut, metric, unread, kept, how = state[:6]
    for line in text.split("\n"):  # the parser splits on "\n" only, and strips each line
        if prefix and line.startswith(prefix):
            # A sample of the current family (nearly every line). What the general path below does with it,
            # without stripping (whitespace around the line is outside "FAMILY{...}"), finding the name or
            # checking it (the family's name is a legacy one), or changing family.
            end = line.rfind("}")
            if end >= cut:
                block_text = line[cut:end]
                if unread and block_text in skippable:
                    continue
                block = blocks.get(block_text)
                if block is not None:
                    if unread and (block.key is None or (block.builder is not None and block.xid is None)):
                        continue  # changes nothing (see below)
                    token = line[end + 1:].strip()  # _value's cases, the common ones inline
                    if " " in token or "\t" in token or "_" in token:
                        value = _value(line[end + 1:].rstrip())
                    elif "." in token:
                        value = float(token)
                    else:
                        try:
                            value = int(token)
                        except ValueError:
                            value = float(token)
                    builder = block.builder
                    if builder is None or not block.plain or not (
                            value == value and value < _INT64_BLANK and value not in _SENTINELS):
                        _read(builders, block, metric, value, keep)
                    elif kept:
                        # What _read and _Builder.add do with a non-blank sample of a GPU seen already
                        # from a block that names no Xid and no series label: set the metric and its field.
                        builder.metrics[metric] = value
                        if how is not None:
                            fields = builder.fields
                            if how == "last" or metric not in fields:
                                fields[metric] = value
                            elif how == "sum":
                                fields[metric] += value
                            else:
                                fields[metric] = max(fields[metric], value)
                    if keep is not None and (block.key is None or (block.builder is not None and block.xid is None)):
                        skippable.add(block_text)
                    continue
        if line.startswith(("# HELP ", "# TYPE ")):
            # The exporters' own spelling, read without _comment's regex: "# HELP NAME text" and
            # "# TYPE NAME type" with single spaces, a name _HELP_TYPE would take whole, a type the fast
            # path takes on. (The HELP text is ignored, so whitespace around the line changes nothing.)
            space = line.find(" ", 7)
            name = line[7:space]
            if space > 7 and (name in names or _legacy(name, names)):
                if line[2] == "H":
                    known = True
                    if name != family:
                        family, counter = name, False
                else:
                    kind = line[space + 1:]
                    known = kind in _TYPES
                    if known:
                        family, counter = name, kind == "counter"
                if known:
                    if state[6] != family or state[7] != counter:
                        state = _family(family, counter, keep)
                        prefix, cut, metric, unread, kept, how = state[:6]
                    continue
        line = line.strip()
        if not line:
            continue
        if line[0] == "#":
            family, counter = _comment(line, family, counter)
            if state[6] != family or state[7] != counter:
                state = _family(family, counter, keep)
                prefix, cut, metric, unread, kept, how = state[:6]
            continue
        brace, end = line.find("{"), line.rfind("}")
        # A known name before a known block, then no "}": the regex below would cut it the same way.
        block_text = line[brace + 1:end] if 0 < brace < end else None
        block = blocks.get(block_text) if block_text is not None else None
        if block is None and block_text is not None:
            # A new block in the exporters' spelling: _plain_labels accepts only a block with no brace
            # outside its quotes, so it is the one the regex below would cut.
            labels = _plain_labels(block_text)
            if labels is not None:
                block = blocks[block_text] = _Block(labels)
        name = line[:brace]
        if block is not None and (name in names or _legacy(name, names)):
            if name != family:  # a sample of no current family: an untyped family of its own
                family, counter = "", False
                state = _family(family, counter, keep)
                prefix, cut, metric, unread, kept, how = state[:6]
            if keep is not None and name not in _KEPT_OR_TOTAL and (
                    block.key is None or (block.builder is not None and block.xid is None)):
                continue  # changes nothing: the GPU has this block's labels already and it names no Xid
            value = _value(line[end + 1:])
        else:
            name, block, value, block_text = _sample(line, blocks)
            names.add(name)
            if name != family:
                family, counter = "", False
                state = _family(family, counter, keep)
                prefix, cut, metric, unread, kept, how = state[:6]
        # prometheus_client names a counter family "X_total" X (and its samples X_total): read them as X.
        _read(builders, block, name[:-6] if counter and name.endswith("_total") else name, value, keep)
        if keep is not None and block_text is not None and (
                block.key is None or (block.builder is not None and block.xid is None)):
            skippable.add(block_text)
    return [builder.build() for builder in builders.values()]


def _family(family: str, counter: bool, keep: frozenset[str] | None) -> tuple:
    """What the fast path reads the current family's samples with: "FAMILY{" (their start; "" for no
    family) and its length, the name they are read as, whether store mode reads them only for the GPUs
    and Xids they name, whether `metrics` keeps them, how their named field combines (_FIELDS; None:
    no field); then the family's name and whether it is a counter (to know when it changes)."""
    if not family:
        return "", 0, "", False, False, None, "", False
    metric = family[:-6] if counter and family.endswith("_total") else family
    spec = _FIELDS.get(metric)
    return (family + "{", len(family) + 1, metric, keep is not None and family not in _KEPT_OR_TOTAL,
            keep is None or metric in keep, spec[2] if spec else None, family, counter)


def _legacy(name: str, names: set[str]) -> bool:
    """Whether `name` is a legacy metric name (remembered in `names`)."""
    if _LEGACY_NAME.fullmatch(name) is None:
        return False
    names.add(name)
    return True


def _sample(line: str, blocks: dict[str, _Block]) -> tuple[str, _Block, float, str | None]:
    """A sample line's metric name, label block (remembered in `blocks`), value and the block's text
    (None where the parser read the line)."""
    match = _SAMPLE.match(line)
    if match is None:  # no labels, spaces around them, a quoted name, ...: the parser's own reading
        sample = _prom_parser._parse_sample(line)
        if not _LEGACY_NAME.fullmatch(sample.name):
            raise _Fallback(line)
        return sample.name, _Block(sample.labels), sample.value, None
    name, block_text, rest = match.groups()
    block = blocks.get(block_text)
    if block is None:
        labels = _labels(block_text)
        if "__name__" in labels:
            raise _Fallback(line)  # the parser refuses a second name
        block = blocks[block_text] = _Block(labels)
    return name, block, _value(rest), block_text
