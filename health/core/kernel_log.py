"""Kernel-log parser for NVIDIA driver (NVRM) fault events.

Public API:
    parse_lines(lines, *, assume_tz=UTC, year=None) -> list[KernelEvent]
        `lines` is any iterable of str (a file object works). Line numbers are 1-based physical lines.
        `assume_tz` is the zone of wall-clock stamps that carry none (dmesg -T, syslog); `year`
        completes syslog stamps ("Feb 15 17:37:45"), which have no year: without it `at` is None.
    parse_text(text, **kw) -> list[KernelEvent]      same, for one string
    to_json(event) -> dict                            {"line", "kind", "xid", "pci_bus_id", "category",
                                                       "action"} plus the extras listed on KernelEvent
    KernelEvent                                       frozen dataclass, see below
    KIND_XID, KIND_FALLEN_OFF_BUS, KIND_GPU_MAPPING, KIND_SXID

Event kinds:
    "xid"             `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., <message>`, also the older
                      `Xid (0000:01:00):` form, any PCI domain, with dmesg / dmesg -T / syslog / journalctl /
                      RFC 3339 prefixes, JSON envelopes of log shippers (docker, fluent-bit, journald
                      -o json, vector), rsyslog "message repeated N times: [...]" and "last message
                      repeated N times" (counted in `repeat`), and several Xids glued into one line.
    "fallen_off_bus"  the multi-line "The NVIDIA GPU 0000:b3:00.0 / (PCI ID: ...) installed in this system
                      has / fallen off the bus" message, and `NVRM: GPU 0000:2b:00.0: GPU has fallen off the
                      bus.`: fatal, action REBOOT_NODE, xid None.
    "gpu_mapping"     `NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>`: teaches the caller PCI bus -> UUID.
    "sxid"            NVSwitch `nvidia-nvswitchN: SXid (PCI:...): 24007, ...`: `sxid` set, xid None.
Lines such as `_kgspLogXid119: ***`, `_kgspRpcGspEventPmuHalted` or "probe routine failed" are not
events. Only lines containing "NVRM" or "SXid" reach a regular expression, which keeps the parser
well above 100,000 lines/s on noisy logs.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from .pci import normalize_pci_bus_id
from .xid_catalog import Action, Category, action_for, is_recovery_directive, lookup, recovery_action_from_text

KIND_XID = "xid"
KIND_FALLEN_OFF_BUS = "fallen_off_bus"
KIND_GPU_MAPPING = "gpu_mapping"
KIND_SXID = "sxid"


@dataclass(frozen=True, slots=True)
class KernelEvent:
    line: int
    kind: str
    xid: int | None
    pci_bus_id: str | None
    category: Category
    action: Action
    pid: int | None = None
    process_name: str | None = None
    message: str = ""
    raw: str = ""
    timestamp: str | None = None  # the stamp exactly as written in the line
    at: datetime | None = None  # aware datetime when the stamp says enough to build one
    uptime_s: float | None = None  # dmesg seconds since boot
    host: str | None = None
    uuid: str | None = None  # gpu_mapping only
    caused_by_xid: int | None = None
    recovery_action: str | None = None  # Xid 154 target label, e.g. "GPU Reset Required"
    sxid: int | None = None
    repeat: int = 1  # how many times a shipper says the line occurred


_HEX = "[0-9A-Fa-f]"
_FULL_PCI = _HEX + r"{1,8}:" + _HEX + r"{1,2}:" + _HEX + r"{1,2}(?:\.[0-7])?"
_PCI_TEXT = r"(?:PCI:)?(?P<pci>" + _FULL_PCI + "|" + _HEX + "{1,2}:" + _HEX + "{1,2})"
# The lazy body stops at the next "NVRM: Xid (" so a shipper that glued two lines yields two events.
_XID = re.compile(
    r"NVRM:\s*Xid\s*\(" + _PCI_TEXT + r"\)\s*:\s*(?P<xid>\d+)\b\s*,?\s*(?P<rest>.*?)\s*(?=NVRM:\s*Xid\s*\(|$)"
)
_PID = re.compile(r"pid\s*=\s*(?:'(?P<q>[^']*)'|\"(?P<dq>[^\"]*)\"|(?P<bare>[^,\s]*))\s*(?:,\s*|$)")
_NAME = re.compile(r"name\s*=\s*(?:'(?P<q>[^']*)'|\"(?P<dq>[^\"]*)\"|(?P<bare>[^,]*?))\s*(?:,\s*|$)")
_CAUSED_BY = re.compile(r"caused by (?:a )?previous Xid\s*(\d+)", re.IGNORECASE)
_FALLEN_START = re.compile(r"NVRM:\s*The NVIDIA GPU\s+(?P<pci>" + _FULL_PCI + ")")
_FALLEN_ONE_LINE = re.compile(
    r"NVRM:\s*GPU\s+(?P<pci>" + _FULL_PCI + r"):\s*GPU has fallen off the bus"
)
_MAPPING = re.compile(r"NVRM:\s*GPU at " + _PCI_TEXT + r":\s*(?P<uuid>GPU-[0-9A-Fa-f-]+)")
_SXID = re.compile(
    r"(?P<dev>nvidia-nvswitch\d*):\s*SXid\s*\(" + _PCI_TEXT + r"\)\s*:\s*(?P<sxid>\d+)\b\s*,?\s*(?P<rest>.*)"
)
_REPEATED = re.compile(r"message repeated (?P<n>\d+) times:\s*\[\s*")
_LAST_REPEATED = re.compile(r"last message repeated (?P<n>\d+) times?")
_FATAL = re.compile(r"(?<!non)(?<!non-)(?<!non )\bfatal\b", re.IGNORECASE)

_RFC3339 = re.compile(r"(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)")
# Forwarded syslog may keep its priority ("<4>") and, in RFC 5424, its version ("<4>1 ... kernel - - - ").
_PRI = r"(?:<\d{1,3}>(?:1\s+)?)?"
_KERNEL_TAG = r"kernel(?:\[\d+\])?(?::|\s+-\s+-\s+-)"
_RFC_PREFIX = re.compile(r"^\s*" + _PRI + _RFC3339.pattern + r"\s+(?:(?P<host>[^\s\[\]]+)\s+)?" + _KERNEL_TAG)
_SYSLOG_PREFIX = re.compile(
    r"^\s*" + _PRI + r"(?P<ts>[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?)\s+(?:(?P<host>\S+)\s+)?"
    + _KERNEL_TAG
)
_MONOTONIC_PREFIX = re.compile(r"^\s*\[\s*\d+\.\d+\]\s+(?P<host>[^\s\[\]]+)\s+kernel:")  # journalctl -o short-monotonic
_HOST_COLON_PREFIX = re.compile(r"^\s*(?P<host>[^\s:]+(?::\d+)?):\s+kern:")  # Talos-style "10.0.0.1: kern: warning:"
_DMESG_T = re.compile(r"\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]")
_UPTIME = re.compile(r"\[\s*(?P<up>\d+\.\d+)\]")

_JSON_MESSAGE_KEYS = ("MESSAGE", "message", "log", "msg")
_JSON_HOST_KEYS = ("_HOSTNAME", "host", "hostname", "HOSTNAME")
_JSON_TIME_KEYS = ("timestamp", "@timestamp", "time", "date")
_FALLEN_LOOKAHEAD = 4  # the multi-line message spans three lines; allow one stray line between


@dataclass(slots=True)
class _Prefix:
    timestamp: str | None = None
    at: datetime | None = None
    uptime_s: float | None = None
    host: str | None = None


def _iso(ts: str, assume_tz: tzinfo) -> datetime | None:
    text = ts.replace(",", ".").replace(" ", "T", 1)
    head, dot, tail = text.partition(".")
    if dot:
        digits = re.match(r"\d+", tail)
        frac = digits.group(0) if digits else ""
        # fromisoformat takes at most microseconds; shippers write nanoseconds.
        text = f"{head}.{frac[:6]}{tail[len(frac):]}"
    if re.search(r"[+-]\d{4}$", text):
        text = f"{text[:-2]}:{text[-2:]}"
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=assume_tz)


def _parse_prefix(prefix: str, assume_tz: tzinfo, year: int | None) -> _Prefix:
    out = _Prefix()
    if match := _RFC_PREFIX.match(prefix):
        out.timestamp, out.host = match["ts"], match["host"]
        out.at = _iso(match["ts"], assume_tz)
    elif match := _SYSLOG_PREFIX.match(prefix):
        out.timestamp, out.host = match["ts"], match["host"]
        if year is not None:
            try:
                # journalctl -o short-precise adds microseconds; the line itself carries no zone.
                fmt = "%Y %b %d %H:%M:%S.%f" if "." in match["ts"] else "%Y %b %d %H:%M:%S"
                out.at = datetime.strptime(f"{year} {match['ts']}", fmt).replace(tzinfo=assume_tz)
            except ValueError:
                out.at = None
    elif match := _MONOTONIC_PREFIX.match(prefix):
        out.host = match["host"]
    elif match := _HOST_COLON_PREFIX.match(prefix):
        out.host = match["host"]
        if rfc := _RFC3339.search(prefix):
            out.timestamp, out.at = rfc["ts"], _iso(rfc["ts"], assume_tz)
    elif rfc := _RFC3339.match(prefix.strip()):  # dmesg --time-format iso
        out.timestamp, out.at = rfc["ts"], _iso(rfc["ts"], assume_tz)
    if match := _DMESG_T.search(prefix):
        out.timestamp = match["ts"]
        out.at = datetime.strptime(match["ts"], "%a %b %d %H:%M:%S %Y").replace(tzinfo=assume_tz)
    if match := _UPTIME.search(prefix):
        out.uptime_s = float(match["up"])
        out.timestamp = out.timestamp or match["up"]
    return out


def _unwrap_json(line: str, assume_tz: tzinfo) -> tuple[str, _Prefix | None]:
    """Shippers wrap the kernel line in a JSON record; return the inner text and what the record says."""
    stripped = line.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return line, None
    try:
        record = json.loads(stripped)
    except ValueError:
        return line, None
    if not isinstance(record, dict):
        return line, None
    inner = next((record[k] for k in _JSON_MESSAGE_KEYS if isinstance(record.get(k), str)), None)
    if inner is None:
        return line, None
    meta = _Prefix(host=next((record[k] for k in _JSON_HOST_KEYS if isinstance(record.get(k), str)), None))
    realtime = record.get("__REALTIME_TIMESTAMP")
    if isinstance(realtime, str | int) and str(realtime).isdigit():
        meta.at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(realtime))
        meta.timestamp = str(realtime)
    else:
        stamp = next((record[k] for k in _JSON_TIME_KEYS if isinstance(record.get(k), str)), None)
        if stamp and (iso := _RFC3339.search(stamp)):
            meta.timestamp, meta.at = iso["ts"], _iso(iso["ts"], assume_tz)
    return inner, meta


def _merge(prefix: _Prefix, envelope: _Prefix | None) -> _Prefix:
    """The line's own stamp wins; the shipper's record fills what the line lacks."""
    if envelope is None:
        return prefix
    return _Prefix(
        timestamp=prefix.timestamp or envelope.timestamp,
        at=prefix.at or envelope.at,
        uptime_s=prefix.uptime_s,
        host=prefix.host or envelope.host,
    )


def _pid_name(rest: str) -> tuple[int | None, str | None, str]:
    pid: int | None = None
    name: str | None = None
    if rest.startswith("pid") and (match := _PID.match(rest)):
        value = match["q"] if match["q"] is not None else match["dq"] if match["dq"] is not None else match["bare"]
        pid = int(value) if value and value.isdigit() else None
        rest = rest[match.end():]
    if rest.startswith("name") and (match := _NAME.match(rest)):
        value = match["q"] if match["q"] is not None else match["dq"] if match["dq"] is not None else match["bare"]
        name = None if value in ("", "<unknown>") else value
        rest = rest[match.end():]
    return pid, name, rest


def _clean_message(rest: str, repeated: bool) -> str:
    rest = rest.strip()
    if repeated and rest.endswith("]"):
        rest = rest[:-1].rstrip()
    return rest


def _xid_events(number: int, text: str, raw: str, meta_of: Callable[[], _Prefix], repeat: int) -> list[KernelEvent]:
    events = []
    meta: _Prefix | None = None
    for match in _XID.finditer(text):
        meta = meta or meta_of()
        xid = int(match["xid"])
        pid, name, message = _pid_name(match["rest"])
        message = _clean_message(message, repeat > 1)
        caused = _CAUSED_BY.search(message)
        recovery = recovery_action_from_text(message) if is_recovery_directive(xid) else None
        events.append(
            KernelEvent(
                line=number, kind=KIND_XID, xid=xid, pci_bus_id=normalize_pci_bus_id(match["pci"]),
                category=lookup(xid).category, action=action_for(xid, message), pid=pid, process_name=name,
                message=message, raw=raw, timestamp=meta.timestamp, at=meta.at, uptime_s=meta.uptime_s,
                host=meta.host, caused_by_xid=int(caused.group(1)) if caused else None,
                recovery_action=recovery.to_label if recovery else None, repeat=repeat,
            )
        )
    return events


def _other_event(
    number: int, text: str, raw: str, meta_of: Callable[[], _Prefix], repeat: int
) -> KernelEvent | None:
    if "fallen off the bus" not in text and "GPU at" not in text and "SXid" not in text:
        return None
    meta = meta_of()
    common = {"line": number, "raw": raw, "timestamp": meta.timestamp, "at": meta.at, "uptime_s": meta.uptime_s,
              "host": meta.host, "repeat": repeat}
    if match := _FALLEN_ONE_LINE.search(text):
        return KernelEvent(kind=KIND_FALLEN_OFF_BUS, xid=None, pci_bus_id=normalize_pci_bus_id(match["pci"]),
                           category=Category.PCIE, action=Action.REBOOT_NODE,
                           message="GPU has fallen off the bus", **common)
    if match := _MAPPING.search(text):
        return KernelEvent(kind=KIND_GPU_MAPPING, xid=None, pci_bus_id=normalize_pci_bus_id(match["pci"]),
                           category=Category.INFO, action=Action.NONE, uuid=match["uuid"],
                           message=f"GPU at {match['pci']} is {match['uuid']}", **common)
    if match := _SXID.search(text):
        rest = _clean_message(match["rest"], repeat > 1)
        action = Action.DRAIN_AND_RESET if _FATAL.search(rest) else Action.NONE
        return KernelEvent(kind=KIND_SXID, xid=None, pci_bus_id=normalize_pci_bus_id(match["pci"]),
                           category=Category.NVSWITCH, action=action, sxid=int(match["sxid"]),
                           process_name=match["dev"], message=rest, **common)
    return None


@dataclass(slots=True)
class _PendingFallen:
    line: int
    pci: str | None
    raw: list[str]
    meta: _Prefix


class _Parser:
    def __init__(self, assume_tz: tzinfo, year: int | None) -> None:
        self.assume_tz = assume_tz
        self.year = year
        self.events: list[KernelEvent] = []
        self.pending: _PendingFallen | None = None
        self.last_event_line = -1

    def feed(self, number: int, line: str) -> None:
        """One candidate line (it mentions NVRM or SXid); everything else went through `other`."""
        if self.pending is not None and number - self.pending.line >= _FALLEN_LOOKAHEAD:
            self.pending = None
        raw = line.rstrip("\r\n")
        text, envelope = _unwrap_json(raw, self.assume_tz) if "{" in raw else (raw, None)
        if "Xid" not in text and "GPU" not in text and self.pending is None:
            return  # driver chatter such as "NVRM: loading NVIDIA UNIX x86_64 Kernel Module"
        repeat = 1
        if "repeated" in text and (rep := _REPEATED.search(text)):
            repeat = int(rep["n"])
        if self._fallen(number, text, raw, envelope, repeat):
            return
        found = _xid_events(number, text, raw, lambda: self._meta(text, envelope), repeat) if "Xid" in text else []
        if not found and (other := _other_event(number, text, raw, lambda: self._meta(text, envelope), repeat)):
            found = [other]
        if found:
            self.events.extend(found)
            self.last_event_line = number

    def other(self, number: int, line: str) -> None:
        if self.last_event_line == number - 1 and "repeated" in line:
            self._last_message_repeated(number, line)

    def _meta(self, text: str, envelope: _Prefix | None) -> _Prefix:
        # Only lines that turned out to be events pay for prefix parsing.
        nvrm = text.find("NVRM")
        cut = nvrm if nvrm >= 0 else text.find("nvidia-nvswitch")
        return _merge(_parse_prefix(text[: max(cut, 0)], self.assume_tz, self.year), envelope)

    def _fallen(self, number: int, text: str, raw: str, envelope: _Prefix | None, repeat: int) -> bool:
        """Track the three-line "fallen off the bus" message; True when the line belonged to it."""
        if start := _FALLEN_START.search(text):
            meta = _merge(_parse_prefix(text[: start.start()], self.assume_tz, self.year), envelope)
            self.pending = _PendingFallen(number, normalize_pci_bus_id(start["pci"]), [raw], meta)
        elif self.pending is not None and "NVRM" in text and "Xid" not in text:
            self.pending.raw.append(raw)
        else:
            return False
        if "fallen off the bus" in text:
            pending = self.pending
            self.pending = None
            self.events.append(
                KernelEvent(
                    line=pending.line, kind=KIND_FALLEN_OFF_BUS, xid=None, pci_bus_id=pending.pci,
                    category=Category.PCIE, action=Action.REBOOT_NODE, message="GPU has fallen off the bus",
                    raw="\n".join(pending.raw), timestamp=pending.meta.timestamp, at=pending.meta.at,
                    uptime_s=pending.meta.uptime_s, host=pending.meta.host, repeat=repeat,
                )
            )
            self.last_event_line = number
        return True

    def _last_message_repeated(self, number: int, line: str) -> None:
        match = _LAST_REPEATED.search(line)
        if match is None:
            return
        extra = int(match["n"])
        # rsyslog folds the repeats into this line: they belong to every event of the previous line.
        for index in range(len(self.events) - 1, -1, -1):
            event = self.events[index]
            if event.line != self.last_event_line:
                break
            self.events[index] = replace(event, repeat=event.repeat + extra)
        self.last_event_line = number


def parse_lines(lines: Iterable[str], *, assume_tz: tzinfo = UTC, year: int | None = None) -> list[KernelEvent]:
    """All NVRM fault events in `lines`, in order."""
    parser = _Parser(assume_tz, year)
    feed, other = parser.feed, parser.other
    for number, line in enumerate(lines, start=1):
        # The cheap substring test is the whole cost for the vast majority of lines.
        if "NVRM" in line or "SXid" in line:
            feed(number, line)
        else:
            other(number, line)
    return parser.events


def parse_text(text: str, *, assume_tz: tzinfo = UTC, year: int | None = None) -> list[KernelEvent]:
    return parse_lines(text.splitlines(), assume_tz=assume_tz, year=year)


def to_json(event: KernelEvent) -> dict[str, Any]:
    """JSON-ready dict; the first six keys are the stable core the API and the UI rely on."""
    data = asdict(event)
    out: dict[str, Any] = {key: data.pop(key) for key in ("line", "kind", "xid", "pci_bus_id")}
    out["category"] = event.category.value
    out["action"] = event.action.value
    data.pop("category")
    data.pop("action")
    data["at"] = event.at.isoformat() if event.at else None
    out.update(data)
    return out
