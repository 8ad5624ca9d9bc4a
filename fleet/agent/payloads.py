"""Wire schema between fleetdeck-agent and the Fleetdeck server (schema version 1).

Both sides import these dataclasses: the agent builds them, the server's ingestion API validates
incoming JSON with `RegisterPayload.from_dict` / `HeartbeatPayload.from_dict` (ValueError naming the
field) or with its own serializer mirroring the same keys.

Endpoints (JSON bodies, header `Authorization: Bearer <node agent token>`):
    POST REGISTER_PATH  = /api/v1/agent/register/    body RegisterPayload, once at start and after
                                                      the server answers a heartbeat with 409
    POST HEARTBEAT_PATH = /api/v1/agent/heartbeat/   body HeartbeatPayload, every --interval seconds
Server answers: 200/201 with a JSON object on success; 400 {"message", "code", "extra"} for a body
that does not validate; 401/403 for a missing, unknown or foreign token (the token names the node,
and `node` in the body must match it); 409 when a heartbeat arrives for a node that never registered.

RegisterPayload (inventory)
    schema: 1, node: str, hostname: str, agent_version: str, driver_version: str | null, sent_at: RFC 3339
    gpus: [GpuInventory]
        index: int, uuid: "GPU-…", name: "NVIDIA H100 80GB HBM3", memory_mib: int,
        pci_bus_id: "0000:1a:00" (normalised, see health.core.pci), numa_node: int | null,
        mig_enabled: bool, mig_instances: [{"profile": "1g.10gb", "gi_id": 7, "uuid": "MIG-…"}],
        nvlink_peers: ["0000:2a:00", …] (remote PCI ids: GPUs or NVSwitches),
        nvlink_group: int (connected component of the NVLink graph; a GPU without NVLink is alone)
HeartbeatPayload (health)
    schema: 1, node: str, seq: int (increments per heartbeat, restarts at 0 with the agent), sent_at
    gpus: [GpuHealthReport]
        uuid, index, lost: bool (NVML says the GPU is gone: treat as fallen off the bus),
        gpu_util_pct, mem_util_pct, memory_used_mib, temperature_c, power_w: number | null,
        ecc: {volatile_dbe, volatile_sbe, aggregate_dbe, aggregate_sbe: int | null},
        retired_pages: {dbe, sbe: int | null, pending: bool | null},
        row_remap: {correctable, uncorrectable: int | null, pending, failure: bool | null},
        recovery_action: int | null (NVML nvmlDeviceGpuRecoveryAction_t, 0 = none)
    events: [XidEvent] received from NVML since the previous heartbeat
        kind: "xid" | "gpu_lost", xid: int | null, gpu_uuid, pci_bus_id, at: RFC 3339,
        category, action (health.core.xid_catalog values), dedup_key (health.core.policy.make_dedup_key)
    burn_in: BurnInReport, optional (absent on ordinary heartbeats)
        passed: bool, details: str (at most MAX_BURN_IN_DETAILS characters, e.g. the test's output tail)
        The server records it on the node's repair ticket when that ticket is in burn-in, and answers
        "burn_in": {"ticket", "passed"}, or "burn_in": null when there was no such ticket.
Null means "not supported on this GPU/driver", never zero.

Bounds (the server refuses a body outside them with a 400 naming the field): every integer is
0 to 2^63-1 unless INT_BOUNDS says otherwise; GPU UUIDs start "GPU-", MIG UUIDs "MIG-", an
event's gpu_uuid either; an event's kind is one of EVENT_KINDS.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

SCHEMA_VERSION = 1
MAX_BURN_IN_DETAILS = 4000
REGISTER_PATH = "/api/v1/agent/register/"
HEARTBEAT_PATH = "/api/v1/agent/heartbeat/"

T = TypeVar("T")

EVENT_KINDS = ("xid", "gpu_lost")
_BIG = 2**63 - 1  # a BigIntegerField's largest value
# (dataclass, field) -> (least, most). Slots and groups: no node has a thousand GPUs; Xids as
# NVIDIA's catalog (health.core.xid_catalog.MAX_XID); memory up to 16 TiB per GPU.
INT_BOUNDS: dict[tuple[str, str], tuple[int, int]] = {
    ("GpuInventory", "index"): (0, 1023),
    ("GpuInventory", "memory_mib"): (0, 16 * 1024 * 1024),
    ("GpuInventory", "numa_node"): (0, 1023),
    ("GpuInventory", "nvlink_group"): (0, 1023),
    ("MigInstance", "gi_id"): (0, 1023),
    ("GpuHealthReport", "index"): (0, 1023),
    ("GpuHealthReport", "recovery_action"): (0, 255),
    ("XidEvent", "xid"): (1, 65535),
}
# (dataclass, field) -> the prefixes a UUID may have.
UUID_PREFIXES: dict[tuple[str, str], tuple[str, ...]] = {
    ("GpuInventory", "uuid"): ("GPU-",),
    ("GpuHealthReport", "uuid"): ("GPU-",),
    ("MigInstance", "uuid"): ("MIG-",),
    ("XidEvent", "gpu_uuid"): ("GPU-", "MIG-"),
}
MAX_UUID = 64  # Gpu.uuid's column


@dataclass(slots=True)
class MigInstance:
    profile: str
    gi_id: int | None = None
    uuid: str | None = None


@dataclass(slots=True)
class GpuInventory:
    index: int
    uuid: str
    name: str
    memory_mib: int
    pci_bus_id: str | None
    numa_node: int | None = None
    mig_enabled: bool = False
    mig_instances: list[MigInstance] = field(default_factory=list)
    nvlink_peers: list[str] = field(default_factory=list)
    nvlink_group: int = 0


@dataclass(slots=True)
class RegisterPayload:
    node: str
    hostname: str
    agent_version: str
    driver_version: str | None
    sent_at: str
    gpus: list[GpuInventory]
    schema: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> RegisterPayload:
        return _from_dict(cls, data, "")


@dataclass(slots=True)
class EccCounters:
    volatile_dbe: int | None = None
    volatile_sbe: int | None = None
    aggregate_dbe: int | None = None
    aggregate_sbe: int | None = None


@dataclass(slots=True)
class RetiredPages:
    dbe: int | None = None
    sbe: int | None = None
    pending: bool | None = None


@dataclass(slots=True)
class RowRemap:
    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None


@dataclass(slots=True)
class GpuHealthReport:
    uuid: str
    index: int
    lost: bool = False
    gpu_util_pct: float | None = None
    mem_util_pct: float | None = None
    memory_used_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    ecc: EccCounters = field(default_factory=EccCounters)
    retired_pages: RetiredPages = field(default_factory=RetiredPages)
    row_remap: RowRemap = field(default_factory=RowRemap)
    recovery_action: int | None = None


@dataclass(slots=True)
class XidEvent:
    kind: str
    xid: int | None
    gpu_uuid: str | None
    pci_bus_id: str | None
    at: str
    category: str
    action: str
    dedup_key: str


@dataclass(slots=True)
class BurnInReport:
    """The outcome of a burn-in test the agent ran (or was told about) on a node under repair."""

    passed: bool
    details: str = ""

    def __post_init__(self) -> None:
        if len(self.details) > MAX_BURN_IN_DETAILS:
            raise ValueError(f"burn_in.details: longer than {MAX_BURN_IN_DETAILS} characters")


@dataclass(slots=True)
class HeartbeatPayload:
    node: str
    seq: int
    sent_at: str
    gpus: list[GpuHealthReport]
    events: list[XidEvent] = field(default_factory=list)
    burn_in: BurnInReport | None = None
    schema: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.burn_in is None:
            del data["burn_in"]  # ordinary heartbeats keep the wire format they always had
        return data

    @classmethod
    def from_dict(cls, data: Any) -> HeartbeatPayload:
        return _from_dict(cls, data, "")


def _from_dict(cls: type[T], data: Any, path: str) -> T:
    """Strict loader: unknown keys are ignored, missing required keys and wrong types raise ValueError."""
    if not isinstance(data, dict):
        raise ValueError(f"{path or 'body'}: expected an object")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for item in dataclasses.fields(cls):  # type: ignore[arg-type]
        where = f"{path}.{item.name}" if path else item.name
        if item.name not in data:
            required = item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING
            if required:
                raise ValueError(f"{where}: missing")
            continue
        kwargs[item.name] = _checked(cls.__name__, item.name, _coerce(hints[item.name], data[item.name], where), where)
    if "schema" in kwargs and kwargs["schema"] != SCHEMA_VERSION:
        raise ValueError(f"schema: unsupported version {kwargs['schema']!r}, expected {SCHEMA_VERSION}")
    return cls(**kwargs)


def _checked(owner: str, name: str, value: Any, where: str) -> Any:
    """The value within its bounds, or ValueError naming the field and the bound."""
    if isinstance(value, int) and not isinstance(value, bool):
        least, most = INT_BOUNDS.get((owner, name), (0, _BIG))
        if not least <= value <= most:
            raise ValueError(f"{where}: must be from {least} to {most}")
    prefixes = UUID_PREFIXES.get((owner, name))
    if prefixes and value is not None:
        if not value.startswith(prefixes) or len(value) > MAX_UUID:
            raise ValueError(f"{where}: expected a UUID starting {' or '.join(prefixes)} "
                             f"(at most {MAX_UUID} characters)")
    if (owner, name) == ("XidEvent", "kind") and value not in EVENT_KINDS:
        raise ValueError(f"{where}: unknown kind {value!r}; one of {', '.join(EVENT_KINDS)}")
    return value


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        hint = next(option for option in options if option is not type(None))
        origin = typing.get_origin(hint)
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list")
        (inner,) = typing.get_args(hint)
        return [_coerce(inner, item, f"{where}[{i}]") for i, item in enumerate(value)]
    if dataclasses.is_dataclass(hint):
        return _from_dict(hint, value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: expected an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}: expected a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected a string")
        return value
    raise ValueError(f"{where}: unsupported type {hint!r}")
