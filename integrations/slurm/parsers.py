"""Parsers for Slurm's command output: pure functions, no Django, no subprocesses.

Written against real output (the samples under shared/telemetry/slurm/ and the local test
cluster, Slurm 22.05) and the later formats: `scontrol show node` in multi-line and `-o` form,
`sinfo --json` in OpenAPI v0.0.38 (22.05: one entry per node, lower-case state plus
`state_flags`) and the v0.0.39+ data_parser form (23.02 and later: a `sinfo` list of
node groups, upper-case state lists, `{"set", "infinite", "number"}` numbers), `sinfo -R`,
plain `sinfo` tables, `scontrol show topology`, `squeue --json` and slurm.conf/gres.conf lines.

The hard parts are the free-text fields. A drain reason may contain `=`, `<`, `>`, `;`, `#`
and spaces, and in `-o` mode other `Key=Value` pairs follow it on the same line, so nothing
here splits on `=` or on whitespace blindly: a field starts only where whitespace is followed
by an identifier and `=`, and a reason ends at its `[user@timestamp]` stamp.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


class SlurmParseError(ValueError):
    """Output that does not have the shape the parser expects."""


# --- host lists ------------------------------------------------------------------------------

_BRACKET = re.compile(r"\[([^\]]*)\]")


def expand_hostlist(text: str) -> list[str]:
    """`n[1-4],gpu0[01-03],x` -> names, in order, duplicates kept out. Zero padding is kept."""
    names: list[str] = []
    for part in _split_top_level(text.strip(), ","):
        part = part.strip()
        if not part:
            continue
        for name in _expand_one(part):
            if name not in names:
                names.append(name)
    return names


def _expand_one(pattern: str) -> list[str]:
    match = _BRACKET.search(pattern)
    if not match:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    out: list[str] = []
    for item in match.group(1).split(","):
        item = item.strip()
        if "-" in item:
            lo, hi = item.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise SlurmParseError(f"bad host range {item!r} in {pattern!r}")
            width = len(lo)
            values = [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
        elif item:
            values = [item]
        else:
            raise SlurmParseError(f"empty host range in {pattern!r}")
        for value in values:
            out.extend(_expand_one(head + value + tail))
    return out


def _split_top_level(text: str, sep: str) -> list[str]:
    """Split on `sep` outside brackets and parentheses: `gpu:a:2(S:0-1),mps:4` or `n[1,3],m`."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth = max(0, depth - 1)
        if char == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


# --- node state ------------------------------------------------------------------------------

BASE_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})

# sinfo's suffix characters, as documented in sinfo(1) "NODE STATE CODES".
_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "!": "POWER_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}

# sinfo short and long names -> (base state, flags).
_SINFO_NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "idle": ("IDLE", ()),
    "mix": ("MIXED", ()),
    "mixed": ("MIXED", ()),
    "alloc": ("ALLOCATED", ()),
    "allocated": ("ALLOCATED", ()),
    "down": ("DOWN", ()),
    "err": ("ERROR", ()),
    "error": ("ERROR", ()),
    "futr": ("FUTURE", ()),
    "future": ("FUTURE", ()),
    "unk": ("UNKNOWN", ()),
    "unknown": ("UNKNOWN", ()),
    "drain": ("IDLE", ("DRAIN",)),
    "drained": ("IDLE", ("DRAIN",)),
    "drng": ("ALLOCATED", ("DRAIN",)),
    "draining": ("ALLOCATED", ("DRAIN",)),
    "fail": ("DOWN", ("FAIL",)),
    "failg": ("ALLOCATED", ("FAIL",)),
    "failing": ("ALLOCATED", ("FAIL",)),
    "comp": ("ALLOCATED", ("COMPLETING",)),
    "completing": ("ALLOCATED", ("COMPLETING",)),
    "maint": ("IDLE", ("MAINTENANCE",)),
    "resv": ("IDLE", ("RESERVED",)),
    "reserved": ("IDLE", ("RESERVED",)),
    "inval": ("IDLE", ("INVALID_REG",)),
    "npc": ("IDLE", ("PERFCTRS",)),
    "plnd": ("IDLE", ("PLANNED",)),
    "planned": ("IDLE", ("PLANNED",)),
    "boot": ("IDLE", ("REBOOT_ISSUED",)),
    "blocked": ("IDLE", ("BLOCKED",)),
    "pow_dn": ("IDLE", ("POWERED_DOWN",)),
    "powered_down": ("IDLE", ("POWERED_DOWN",)),
    "pow_up": ("IDLE", ("POWERING_UP",)),
    "powering_up": ("IDLE", ("POWERING_UP",)),
    "powering_down": ("IDLE", ("POWERING_DOWN",)),
}


@dataclass(frozen=True, slots=True)
class SlurmNodeState:
    """A node's base state plus its flags, however Slurm spelled them."""

    base: str
    flags: frozenset[str] = frozenset()

    @property
    def drain(self) -> bool:
        """Drained or draining: Slurm places nothing new on the node."""
        return "DRAIN" in self.flags

    @property
    def draining(self) -> bool:
        return self.drain and (self.base in {"ALLOCATED", "MIXED"} or "COMPLETING" in self.flags)

    @property
    def drained(self) -> bool:
        return self.drain and not self.draining

    @property
    def responding(self) -> bool:
        return "NOT_RESPONDING" not in self.flags

    @property
    def down(self) -> bool:
        """Not usable for reasons other than an operator's drain: down, failed or not answering."""
        return self.base in {"DOWN", "ERROR"} or not self.responding or "FAIL" in self.flags

    @property
    def failed(self) -> bool:
        """Slurm has given up on the node: DOWN (after SlurmdTimeout, or set by an admin), ERROR
        or FAIL. A bare NOT_RESPONDING (`idle*`) is not enough: Slurm shows it for a few seconds
        after every RESUME, and for a missed ping before it decides the node is down."""
        return self.base in {"DOWN", "ERROR"} or "FAIL" in self.flags

    @property
    def busy(self) -> bool:
        return self.base in {"ALLOCATED", "MIXED"}

    def __str__(self) -> str:
        return "+".join([self.base, *sorted(self.flags)])


def parse_node_state(text: str) -> SlurmNodeState:
    """`DOWN+DRAIN+NOT_RESPONDING`, `IDLE+DYNAMIC_NORM`, `DOWN*+DRAIN`, `drng@`, `idle~`, `mix`."""
    raw = text.strip()
    if not raw:
        raise SlurmParseError("empty node state")
    explicit: str | None = None  # a base state named as such (IDLE, DOWN, ...)
    implied: str | None = None  # a base implied by a combined name (drng -> ALLOCATED+DRAIN)
    flags: set[str] = set()
    for token in raw.split("+"):
        token, suffix_flags = _strip_suffixes(token)
        flags |= suffix_flags
        upper = token.upper()
        if upper in BASE_STATES:
            explicit = explicit or upper
        elif token.lower() in _SINFO_NAMES:
            sinfo_base, sinfo_flags = _SINFO_NAMES[token.lower()]
            implied = implied or sinfo_base
            flags |= set(sinfo_flags)
        elif upper == "NO_RESPOND":
            flags.add("NOT_RESPONDING")
        elif upper:
            flags.add(upper)
    return SlurmNodeState(base=explicit or implied or "UNKNOWN", flags=frozenset(flags))


def _strip_suffixes(token: str) -> tuple[str, set[str]]:
    flags: set[str] = set()
    while token and token[-1] in _SUFFIX_FLAGS:
        flags.add(_SUFFIX_FLAGS[token[-1]])
        token = token[:-1]
    return token, flags


def state_from_json(state: Any, state_flags: Iterable[str] = ()) -> SlurmNodeState:
    """v0.0.38: `"idle"` + `["DRAIN"]`; v0.0.39+: `["IDLE", "DRAIN"]`."""
    if isinstance(state, str):
        parsed = parse_node_state(state)
        return SlurmNodeState(parsed.base, parsed.flags | {f.upper() for f in state_flags})
    if isinstance(state, list) and state:
        return parse_node_state("+".join(str(s) for s in [*state, *state_flags]))
    raise SlurmParseError(f"node state {state!r} is neither a string nor a list")


# --- GRES and TRES ---------------------------------------------------------------------------

_GRES_ENTRY = re.compile(r"^(?P<body>[^()]*)(?:\((?P<detail>.*)\))?$")
_SIZE_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


@dataclass(frozen=True, slots=True)
class GresEntry:
    name: str
    type: str | None
    count: int
    detail: str = ""  # "S:0-1" (sockets), "IDX:0-3" (used indices), share counts...


@dataclass(frozen=True, slots=True)
class GpuGres:
    """The GPUs a GRES string describes. `type` is None for untyped GRES (`gpu:8`)."""

    count: int
    type: str | None
    types: dict[str, int] = field(default_factory=dict)
    indexes: tuple[int, ...] = ()  # used GRES: the device indexes in use (IDX:…)


def parse_gres_entries(text: str | None) -> list[GresEntry]:
    """`gpu:hopper:4(S:0-7),shard:A100:640(S:0-1),gpu:(null):4(IDX:0-3),tmpsize:7T` -> entries."""
    entries: list[GresEntry] = []
    if text is None:
        return entries
    text = text.strip()
    if text in {"", "(null)", "N/A", "none"}:
        return entries
    for part in _split_top_level(text, ","):
        part = part.strip()
        if not part:
            continue
        match = _GRES_ENTRY.match(part.replace("(null)", ""))  # `gpu:(null):4`: untyped
        if not match:
            raise SlurmParseError(f"bad GRES entry {part!r}")
        pieces = match.group("body").split(":")
        name = pieces[0]
        gres_type: str | None = None
        count = 1
        if len(pieces) >= 3:
            gres_type, count = pieces[1], _gres_count(pieces[2], part)
        elif len(pieces) == 2:
            # `gpu:8` (untyped, count) or `gpu:tesla` (typed, count 1).
            if re.fullmatch(r"\d+[KMGTP]?", pieces[1]):
                count = _gres_count(pieces[1], part)
            else:
                gres_type = pieces[1]
        if gres_type in {"(null)", "", None}:
            gres_type = None
        entries.append(GresEntry(name=name, type=gres_type, count=count, detail=match.group("detail") or ""))
    return entries


def _gres_count(raw: str, part: str) -> int:
    match = re.fullmatch(r"(\d+)([KMGTP]?)", raw.strip())
    if not match:
        raise SlurmParseError(f"bad GRES count {raw!r} in {part!r}")
    return int(match.group(1)) * _SIZE_SUFFIX[match.group(2)]


def parse_gpu_gres(text: str | None) -> GpuGres:
    """GPUs in a GRES string. Typed entries win over untyped ones for the same node (Slurm may
    list both for the same devices); shards, MPS and other GRES never count as GPUs."""
    gpus = [e for e in parse_gres_entries(text) if e.name == "gpu"]
    typed = [e for e in gpus if e.type is not None]
    chosen = typed or gpus
    types: dict[str, int] = {}
    for entry in typed:
        types[entry.type] = types.get(entry.type, 0) + entry.count  # type: ignore[index]
    indexes: list[int] = []
    for entry in chosen:
        if entry.detail.startswith("IDX:"):
            indexes.extend(_parse_index_list(entry.detail[4:]))
    main_type = max(types, key=lambda t: types[t]) if types else None
    return GpuGres(count=sum(e.count for e in chosen), type=main_type, types=types, indexes=tuple(indexes))


def _parse_index_list(text: str) -> list[int]:
    if text.strip() in {"", "N/A"}:
        return []
    out: list[int] = []
    for item in text.split(","):
        if "-" in item:
            lo, hi = item.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif item.strip().isdigit():
            out.append(int(item))
    return out


def parse_tres(text: str | None) -> dict[str, str]:
    """`cpu=96,mem=499800M,gres/gpu=4,gres/gpu:hopper=4` -> {key: value}."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if "=" in item:
            key, value = item.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def tres_gpus(tres: dict[str, str]) -> int:
    """GPUs in a TRES map: `gres/gpu` is the total; typed keys repeat it, so only fall back on
    them when the total is missing."""
    if "gres/gpu" in tres:
        return int(tres["gres/gpu"])
    return sum(int(v) for k, v in tres.items() if k.startswith("gres/gpu:"))


# --- reasons ---------------------------------------------------------------------------------

# A field starts where whitespace (or the line start) is followed by `Identifier=`.
_FIELD_START = re.compile(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_]*)=")
_STAMP = r"\[(?P<user>[^\s@\[\]]+)@(?P<at>[^\]]+)\]"
# Fields scontrol prints after Reason= on the same `-o` line (22.05 through 25.x).
_AFTER_REASON = ("Comment", "Extra", "InstanceId", "InstanceType", "ResumeAfterTime", "Topology")


@dataclass(frozen=True, slots=True)
class Reason:
    text: str
    user: str | None = None
    at: str | None = None  # Slurm's own timestamp string; see parse_slurm_time


def parse_reason_value(value: str) -> Reason:
    """`gets too hot [mw445520@2024-12-03T17:06:40]` -> Reason; a reason without a stamp
    (`gres/gpu count reported lower than configured (0 < 8)`) keeps user and time empty."""
    value = value.strip()
    match = re.search(r"\s*" + _STAMP + r"$", value)
    if match:
        return Reason(text=value[: match.start()].rstrip(), user=match.group("user"), at=match.group("at"))
    return Reason(text=value)


def _split_reason(line: str, *, one_line: bool) -> tuple[str, Reason | None]:
    """Cut `Reason=…` out of a line; returns the rest of the line and the reason."""
    start = _FIELD_START.search(line)
    while start and start.group(1) != "Reason":
        start = _FIELD_START.search(line, start.end())
    if not start:
        return line, None
    value_from = start.end()
    if not one_line:
        return line[: start.start()], parse_reason_value(line[value_from:])
    # -o: the reason ends at its [user@time] stamp when a field or the line end follows it...
    stamped = re.compile(r".*?\s" + _STAMP + r"(?=\s+[A-Za-z][A-Za-z0-9_]*=|\s*$)")
    match = stamped.match(line, value_from)
    if match:
        end = match.end()
    else:
        # ...otherwise at the next field Slurm is known to print after it.
        after = re.compile(r"\s(?:" + "|".join(_AFTER_REASON) + r")=")
        nxt = after.search(line, value_from)
        end = nxt.start() if nxt else len(line)
    return line[: start.start()] + line[end:], parse_reason_value(line[value_from:end])


def parse_fields(line: str) -> dict[str, str]:
    """`Key=Value Key2=Value with spaces` -> dict. Values run to the next field start, so
    `OS=Linux 5.15 #174-Ubuntu SMP …` and `BootTime=2026-01-14 13:48:23.UTC` stay whole and
    `CfgTRES=cpu=96,mem=…` keeps its inner `=`."""
    out: dict[str, str] = {}
    starts = list(_FIELD_START.finditer(line))
    for i, match in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(line)
        out[match.group(1)] = line[match.end() : end].strip()
    return out


# --- scontrol show node ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One node as Slurm reports it, whichever command it came from."""

    name: str
    state: SlurmNodeState
    gpus: GpuGres
    gpus_used: int = 0
    reason: Reason | None = None
    partitions: tuple[str, ...] = ()
    address: str = ""
    hostname: str = ""
    cpus: int = 0
    real_memory_mib: int = 0
    comment: str = ""
    fields: dict[str, str] = field(default_factory=dict)


def parse_scontrol_show_node(text: str) -> list[SlurmNode]:
    """`scontrol show node` (multi-line blocks) or `scontrol -o show node` (one line each)."""
    nodes: list[SlurmNode] = []
    for block in _node_blocks(text):
        one_line = len(block) == 1
        fields: dict[str, str] = {}
        reason: Reason | None = None
        for line in block:
            rest, found = _split_reason(line, one_line=one_line)
            reason = found or reason
            fields.update(parse_fields(rest))
        nodes.append(_node_from_fields(fields, reason))
    return nodes


def _node_blocks(text: str) -> Iterator[list[str]]:
    block: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("NodeName="):
            if block:
                yield block
            block = [line]
        elif block and line.strip():
            block.append(line)
    if block:
        yield block


def _node_from_fields(fields: dict[str, str], reason: Reason | None) -> SlurmNode:
    name = fields.get("NodeName", "")
    if not name:
        raise SlurmParseError("node record without NodeName")
    if "State" not in fields:
        raise SlurmParseError(f"node {name}: no State= field")
    gpus = parse_gpu_gres(fields.get("Gres"))
    if gpus.count == 0:
        # No Gres= line (some sites only configure TRES); the configured TRES still counts GPUs.
        tres_count = tres_gpus(parse_tres(fields.get("CfgTRES")))
        gpus = GpuGres(count=tres_count, type=None) if tres_count else gpus
    used = tres_gpus(parse_tres(fields.get("AllocTRES")))
    if "GresUsed" in fields:
        used = parse_gpu_gres(fields["GresUsed"]).count
    partitions = tuple(p.strip() for p in fields.get("Partitions", "").split(",") if p.strip())
    return SlurmNode(
        name=name,
        state=parse_node_state(fields["State"]),
        gpus=gpus,
        gpus_used=used,
        reason=reason if reason and reason.text else None,
        partitions=partitions,
        address=fields.get("NodeAddr", ""),
        hostname=fields.get("NodeHostName", ""),
        cpus=_int(fields.get("CPUTot")),
        real_memory_mib=_int(fields.get("RealMemory")),
        comment=_none_if_null(fields.get("Comment", "")),
        fields=fields,
    )


def _int(value: Any) -> int:
    value = _json_number(value)
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return 0


def _none_if_null(value: str) -> str:
    return "" if value in {"(null)", "N/A"} else value


# --- sinfo --json ----------------------------------------------------------------------------


def _json_number(value: Any) -> Any:
    """v0.0.39+ wraps numbers as {"set": bool, "infinite": bool, "number": n}."""
    if isinstance(value, dict) and "number" in value:
        return value["number"] if value.get("set", True) and not value.get("infinite") else None
    return value


def parse_sinfo_json(text: str) -> list[SlurmNode]:
    """`sinfo --json` (or `scontrol show node --json`/slurmrestd `nodes`) -> one entry per node.

    A node listed in several partitions (v0.0.39+ groups by partition) is returned once, with
    all its partitions."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmParseError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SlurmParseError("sinfo JSON is not an object")
    errors = [e for e in data.get("errors") or [] if e]
    if errors and not (data.get("nodes") or data.get("sinfo")):
        raise SlurmParseError(f"Slurm reported errors: {errors}")
    if isinstance(data.get("nodes"), list):
        found = [_node_from_json(n) for n in data["nodes"]]
    elif isinstance(data.get("sinfo"), list):
        found = [node for group in data["sinfo"] for node in _nodes_from_sinfo_group(group)]
    else:
        raise SlurmParseError("sinfo JSON has neither 'nodes' nor 'sinfo'")
    merged: dict[str, SlurmNode] = {}
    for node in found:
        if node.name in merged:
            old = merged[node.name]
            parts = old.partitions + tuple(p for p in node.partitions if p not in old.partitions)
            merged[node.name] = _replace(old, partitions=parts)
        else:
            merged[node.name] = node
    return list(merged.values())


def _replace(node: SlurmNode, **changes: Any) -> SlurmNode:
    values = {name: getattr(node, name) for name in SlurmNode.__slots__}  # type: ignore[attr-defined]
    values.update(changes)
    return SlurmNode(**values)


def _json_reason(entry: dict[str, Any]) -> Reason | None:
    raw = entry.get("reason")
    if isinstance(raw, dict):  # v0.0.40+: {"description", "time", "user"}
        text = str(raw.get("description") or "")
        user = raw.get("user") or None
        at = _json_number(raw.get("time"))
    else:
        text = str(raw or "")
        user = entry.get("reason_set_by_user") or None
        at = _json_number(entry.get("reason_changed_at"))
    if not text:
        return None
    return Reason(text=text, user=user, at=str(at) if at not in (None, 0, "") else None)


def _node_from_json(entry: dict[str, Any]) -> SlurmNode:
    name = entry.get("name") or entry.get("hostname")
    if not name:
        raise SlurmParseError("JSON node without a name")
    state = state_from_json(entry.get("state"), entry.get("state_flags") or ())
    gres = entry.get("gres")
    used = entry.get("gres_used")
    partitions = entry.get("partitions") or []
    return SlurmNode(
        name=str(name),
        state=state,
        gpus=parse_gpu_gres(gres if isinstance(gres, str) else None),
        gpus_used=parse_gpu_gres(used if isinstance(used, str) else None).count,
        reason=_json_reason(entry),
        partitions=tuple(str(p) for p in partitions),
        address=str(entry.get("address") or ""),
        hostname=str(entry.get("hostname") or ""),
        cpus=_int(entry.get("cpus")),
        real_memory_mib=_int(entry.get("real_memory")),
        comment=str(entry.get("comment") or ""),
    )


def _nodes_from_sinfo_group(group: dict[str, Any]) -> list[SlurmNode]:
    node_info = group.get("node") or {}
    state = state_from_json(node_info.get("state") or ["UNKNOWN"])
    names_info = group.get("nodes") or {}
    names: list[str] = []
    for item in names_info.get("nodes") or []:
        names.extend(expand_hostlist(str(item)))
    gres = group.get("gres") or {}
    partition = (group.get("partition") or {}).get("name")
    cpus = group.get("cpus") or {}
    memory = group.get("memory") or {}
    return [
        SlurmNode(
            name=name,
            state=state,
            gpus=parse_gpu_gres(gres.get("total")),
            gpus_used=parse_gpu_gres(gres.get("used")).count,
            reason=_json_reason(group),
            partitions=(partition,) if partition else (),
            cpus=_int(cpus.get("maximum") or cpus.get("total")),
            real_memory_mib=_int(memory.get("maximum")),
            comment=str(group.get("comment") or ""),
        )
        for name in names
    ]


# --- sinfo tables and sinfo -R ---------------------------------------------------------------


# sinfo(1) `-o` field specifiers -> the header sinfo prints for them.
SINFO_FIELDS = {
    "a": "AVAIL", "A": "NODES(A/I)", "c": "CPUS", "C": "CPUS(A/I/O/T)", "d": "TMP_DISK", "D": "NODES",
    "e": "FREE_MEM", "E": "REASON", "f": "AVAIL_FEATURES", "F": "NODES(A/I/O/T)", "g": "GROUPS",
    "G": "GRES", "h": "OVERSUBSCRIBE", "H": "TIMESTAMP", "l": "TIMELIMIT", "L": "DEFAULTTIME",
    "m": "MEMORY", "M": "PREEMPT_MODE", "n": "HOSTNAMES", "N": "NODELIST", "o": "NODE_ADDR",
    "O": "CPU_LOAD", "p": "PRIO_TIER", "P": "PARTITION", "r": "ROOT", "R": "PARTITION", "s": "JOB_SIZE",
    "S": "ALLOCNODES", "t": "STATE", "T": "STATE", "u": "USER", "U": "USER", "v": "VERSION",
    "w": "WEIGHT", "X": "SOCKETS", "Y": "CORES", "Z": "THREADS", "z": "S:C:T",
}
# The formats sinfo uses without -o (sinfo(1) "-o" defaults).
SINFO_DEFAULT_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"
SINFO_NODE_LONG_FORMAT = "%#N %.6D %#P %.11T %.4c %.8z %.6m %.8d %.6w %.8f %20E"
_FORMAT_FIELD = re.compile(r"%[.#]?\d*([A-Za-z])")
# A header cell: upper case, `_`, and sinfo's `(A/I/O/T)` or `S:C:T` forms; data rows always
# hold a lower-case state or a number, so a header is told from a row without a format.
_HEADER_CELL = re.compile(r"^(?:[A-Z][A-Z_]*(?:\([A-Z/]+\))?|S:C:T)$")
# `sinfo --long` prints the time first: "Tue Dec  1 20:20:41 2026".
_TIME_LINE = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4}$")
# Columns of free text (spaces inside); only ever read as the last column.
_FREE_TEXT = frozenset({"REASON"})


def sinfo_columns(fmt: str) -> list[str]:
    """The headers an `sinfo -o FORMAT` prints, in order ("%P %.5a %N" -> PARTITION AVAIL NODELIST)."""
    specs = _FORMAT_FIELD.findall(fmt)
    unknown = [s for s in specs if s not in SINFO_FIELDS]
    if not specs or unknown:
        raise SlurmParseError(f"unsupported sinfo format {fmt!r}" + (f" (field %{unknown[0]})" if unknown else ""))
    return [SINFO_FIELDS[s] for s in specs]


def parse_sinfo_table(text: str, *, fmt: str | None = None) -> list[dict[str, str]]:
    """Plain `sinfo` output (default, `--long`, `--Node --long` or `-o` formats whose values hold
    no spaces, except a REASON last) -> one dict per row keyed by the header names.

    Output without a header (`sinfo -h`, `--noheader`, a pasted fragment) is read with the
    columns of `fmt`, the format it was asked with; without one it is refused, because taking
    the first row for a header loses that row and misreads the rest."""
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and _TIME_LINE.match(lines[0].strip()):
        lines = lines[1:]
    if not lines:
        return []
    first = lines[0].split()
    if all(_HEADER_CELL.match(cell) for cell in first):
        # sinfo cuts headers to the column width (AVAIL_FE), so only their number is compared.
        header, body = first, lines[1:]
        if fmt is not None and len(header) != len(sinfo_columns(fmt)):
            raise SlurmParseError(f"sinfo header {' '.join(header)!r} does not have the columns of {fmt!r}")
    elif fmt is not None:
        header, body = sinfo_columns(fmt), lines
    else:
        raise SlurmParseError(
            f"sinfo output has no header row (sinfo -h?); give the format it was run with: {lines[0]!r}"
        )
    rest = len(header) - 1 if header[-1] in _FREE_TEXT else -1
    rows: list[dict[str, str]] = []
    for number, line in enumerate(body, start=1):
        values = line.split(None, rest) if rest >= 0 else line.split()
        if len(values) != len(header):
            raise SlurmParseError(f"sinfo row {number} has {len(values)} columns, header {len(header)}: {line!r}")
        rows.append(dict(zip(header, (v.strip() for v in values), strict=True)))
    return rows


@dataclass(frozen=True, slots=True)
class SinfoReason:
    nodes: tuple[str, ...]
    text: str
    user: str
    at: str
    truncated: bool  # sinfo cut the text at its column width; compare with reason_matches()
    extra: dict[str, str] = field(default_factory=dict)


def parse_sinfo_reasons(text: str) -> list[SinfoReason]:
    """`sinfo -R` (and `sinfo -R -l`): REASON is free text padded to a fixed width (20 by
    default), the other columns hold no spaces, so the row is split from the right."""
    lines = [line.rstrip("\n") for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header_line = lines[0]
    if not header_line.lstrip().startswith("REASON"):
        raise SlurmParseError(f"not sinfo -R output: {header_line!r}")
    header = header_line.split()
    width = len(header_line) - len(header_line[len("REASON") :].lstrip()) - 1
    out: list[SinfoReason] = []
    for line in lines[1:]:
        parts = line.rsplit(None, len(header) - 1)
        if len(parts) != len(header):
            raise SlurmParseError(f"sinfo -R row does not match its header: {line!r}")
        row = dict(zip(header, parts, strict=True))
        reason_cell = line[:width] if len(line) > width else line
        reason = row.pop("REASON").strip()
        nodes = tuple(expand_hostlist(row.pop("NODELIST")))
        out.append(
            SinfoReason(
                nodes=nodes,
                text=reason,
                user=row.pop("USER", ""),
                at=row.pop("TIMESTAMP", ""),
                truncated=len(reason_cell.rstrip()) >= width,
                extra=row,
            )
        )
    return out


def reason_matches(full: str, shown: str, *, width: int = 20) -> bool:
    """Does `sinfo -R`'s (possibly truncated) text show this reason?"""
    return full.strip() == shown.strip() or full[:width].rstrip() == shown.strip()


# --- topology --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Switch:
    name: str
    level: int
    nodes: tuple[str, ...]
    switches: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SlurmTopology:
    switches: dict[str, Switch]

    def leaf_of(self, node: str) -> Switch | None:
        """The lowest-level switch that lists the node (its rack's leaf switch)."""
        holders = [s for s in self.switches.values() if node in s.nodes]
        return min(holders, key=lambda s: (s.level, s.name)) if holders else None

    def parent_of(self, switch: str) -> Switch | None:
        parents = [s for s in self.switches.values() if switch in s.switches]
        return min(parents, key=lambda s: (s.level, s.name)) if parents else None


def parse_topology(text: str) -> SlurmTopology:
    """`scontrol show topology` (topology/tree) -> switches with their nodes and children."""
    switches: dict[str, Switch] = {}
    for line in text.splitlines():
        if not line.strip().startswith("SwitchName="):
            continue
        fields = parse_fields(line.strip())
        name = fields["SwitchName"]
        level = fields.get("Level", "0")
        switches[name] = Switch(
            name=name,
            level=int(level) if level.isdigit() else 0,
            nodes=tuple(expand_hostlist(fields.get("Nodes", ""))),
            switches=tuple(expand_hostlist(fields.get("Switches", ""))),
        )
    return SlurmTopology(switches=switches)


# --- configuration lines ---------------------------------------------------------------------


def parse_conf_lines(text: str, key: str) -> list[dict[str, str]]:
    """slurm.conf/gres.conf lines whose first field is `key` (e.g. NodeName), comments skipped."""
    out: list[dict[str, str]] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith(key + "="):
            out.append(parse_fields(line))
    return out


# --- squeue --json ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlurmJob:
    job_id: str
    name: str
    state: str  # PENDING, RUNNING, COMPLETING, COMPLETED, CANCELLED, FAILED, ...
    nodes: tuple[str, ...]
    reason: str = ""
    comment: str = ""
    het_job_id: str = ""
    exit_code: int | None = None


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """`squeue --json` in v0.0.38 (strings and plain numbers) or v0.0.39+ (lists, wrapped numbers)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmParseError(f"not JSON: {exc}") from exc
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list):
        raise SlurmParseError("squeue JSON has no 'jobs' list")
    out: list[SlurmJob] = []
    for job in jobs:
        state = job.get("job_state")
        if isinstance(state, list):
            state = state[0] if state else "UNKNOWN"
        nodes = job.get("nodes") or ""
        het = _json_number(job.get("het_job_id"))
        exit_code = _json_number(job.get("exit_code"))
        if isinstance(exit_code, dict):  # v0.0.40: {"status": [...], "return_code": {...}}
            exit_code = _json_number(exit_code.get("return_code"))
        out.append(
            SlurmJob(
                job_id=str(_json_number(job.get("job_id"))),
                name=str(job.get("name") or ""),
                state=str(state or "UNKNOWN").upper(),
                nodes=tuple(expand_hostlist(nodes)) if nodes else (),
                reason=str(job.get("state_reason") or ""),
                comment=str(job.get("comment") or ""),
                het_job_id=str(het) if het not in (None, 0, "") else "",
                exit_code=exit_code if isinstance(exit_code, int) else None,
            )
        )
    return out


# --- times -----------------------------------------------------------------------------------


def parse_slurm_time(value: str | int | None) -> datetime | None:
    """`2024-12-19T11:41:49` (controller local time, returned naive), `2026-01-14 13:48:23.UTC`
    (aware), epoch seconds from JSON (aware), `None`/`Unknown`/`N/A` -> None."""
    if value is None:
        return None
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        number = int(value)
        return datetime.fromtimestamp(number, tz=UTC) if number > 0 else None
    text = value.strip()
    if text in {"", "None", "Unknown", "N/A", "n/a"}:
        return None
    if text.endswith(".UTC") or text.endswith(" UTC"):
        return datetime.fromisoformat(text[:-4].strip().replace(" ", "T")).replace(tzinfo=UTC)
    try:
        return datetime.fromisoformat(text.replace(" ", "T"))
    except ValueError as exc:
        raise SlurmParseError(f"unrecognised Slurm time {value!r}") from exc
