"""Reading and validating a fleet description file (YAML or JSON).

`validate_fleet` is pure: it never touches the database, so it can check a whole file and
report every problem at once, each with the path of the offending value
(`nodes[3].gpus: expected 8 entries, got 7`). `fleet.services.fleet_import` applies a file only
after it has come back clean.

Format:
    spines: [{name}]
    racks:  [{name, spine?}]
    nodes:  [{name, rack, hostname?, pool?, executor?, cpu_cores?, memory_mib?, labels?,
              nvlink_domain?, exporter_url?, gpu_count?,
              gpus: [{uuid, index, pci_bus_id?, product, memory_mib, nvlink_group?, numa_node?,
                      sharing_mode?, sharing_replicas?, mig_enabled?,
                      mig_instances?: [{profile, gi_id, uuid?}]}]}]
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .choices import ExecutorKind, SharingMode
from .flavors import derive_flavor

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
GPU_UUID_RE = re.compile(r"^GPU-[0-9A-Za-z-]+$")
MIG_UUID_RE = re.compile(r"^MIG-[0-9A-Za-z/-]+$")
PCI_BUS_ID_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
MIG_PROFILE_RE = re.compile(r"^[1-7]g\.\d+gb(\+[a-z]+)?$")
URL_RE = re.compile(r"^https?://[^\s/:]+(:\d+)?(/\S*)?$")

TOP_KEYS = {"spines", "racks", "nodes"}
SPINE_KEYS = {"name"}
RACK_KEYS = {"name", "spine"}
NODE_KEYS = {
    "name", "rack", "hostname", "pool", "executor", "cpu_cores", "memory_mib", "labels",
    "nvlink_domain", "exporter_url", "gpu_count", "gpus",
}
GPU_KEYS = {
    "uuid", "index", "pci_bus_id", "product", "memory_mib", "nvlink_group", "numa_node",
    "sharing_mode", "sharing_replicas", "mig_enabled", "mig_instances",
}
MIG_KEYS = {"profile", "gi_id", "uuid"}
MAX_GPUS_PER_NODE = 64
# A file with thousands of bad nodes would otherwise print one line per problem without end;
# the first ones say what is wrong, the count says how much.
MAX_ERRORS = 50
MORE_PREFIX = "… and "


class FleetFileError(ValueError):
    """The file could not be read or parsed at all (before any validation)."""


@dataclass(frozen=True)
class SpineSpec:
    name: str


@dataclass(frozen=True)
class RackSpec:
    name: str
    spine: str | None


@dataclass(frozen=True)
class GpuSpec:
    uuid: str
    index: int
    pci_bus_id: str
    product: str
    memory_mib: int
    nvlink_group: int
    numa_node: int
    sharing_mode: str
    sharing_replicas: int
    mig_enabled: bool
    mig_instances: tuple[dict[str, Any], ...]

    def fields(self) -> dict[str, Any]:
        """The Gpu model's field values this spec sets (the node is set by the caller)."""
        return {
            "index": self.index,
            "pci_bus_id": self.pci_bus_id,
            "product": self.product,
            "memory_mib": self.memory_mib,
            "nvlink_group": self.nvlink_group,
            "numa_node": self.numa_node,
            "sharing_mode": self.sharing_mode,
            "sharing_replicas": self.sharing_replicas,
            "mig_enabled": self.mig_enabled,
            "mig_instances": [dict(m) for m in self.mig_instances],
        }


@dataclass(frozen=True)
class NodeSpec:
    name: str
    rack: str
    hostname: str
    pool: str
    executor: str
    cpu_cores: int
    memory_mib: int
    labels: dict[str, str]
    nvlink_domain: str
    exporter_url: str
    flavor: str | None
    gpus: tuple[GpuSpec, ...]

    def fields(self) -> dict[str, Any]:
        """The Node model's plain field values this spec sets (rack and flavor are resolved later)."""
        return {
            "hostname": self.hostname,
            "pool": self.pool,
            "executor": self.executor,
            "cpu_cores": self.cpu_cores,
            "memory_mib": self.memory_mib,
            "labels": dict(self.labels),
            "nvlink_domain": self.nvlink_domain,
            "exporter_url": self.exporter_url,
        }


@dataclass(frozen=True)
class FleetSpec:
    spines: tuple[SpineSpec, ...]
    racks: tuple[RackSpec, ...]
    nodes: tuple[NodeSpec, ...]
    # name → (product, memory_mib) of the first GPU seen with that flavor.
    flavors: dict[str, tuple[str, int]] = field(default_factory=dict)


# --- reading ----------------------------------------------------------------------------------


class _NoAliasLoader(yaml.SafeLoader):
    """The safe loader, refusing anchors and aliases: an inventory never needs them, and a
    few hundred bytes of nested aliases ("billion laughs") expand to millions of values."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"YAML aliases (*{event.anchor}) are not allowed in a fleet file", event.start_mark
            )
        event = self.peek_event()
        if getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, f"YAML anchors (&{event.anchor}) are not allowed in a fleet file", event.start_mark
            )
        return super().compose_node(parent, index)


def parse_fleet_text(text: str, *, name: str = "<input>") -> Any:
    """YAML or JSON, chosen by the file name's extension, else by the content."""
    suffix = Path(name).suffix.lower()
    as_json = suffix == ".json" or (suffix not in {".yaml", ".yml"} and text.lstrip().startswith(("{", "[")))
    try:
        if as_json:
            return json.loads(text)
        return yaml.load(text, Loader=_NoAliasLoader)
    except RecursionError as exc:
        raise FleetFileError(f"{name}: nested too deeply") from exc
    except json.JSONDecodeError as exc:
        raise FleetFileError(f"{name}: invalid JSON: {exc}") from exc
    except yaml.YAMLError as exc:
        raise FleetFileError(f"{name}: invalid YAML: {' '.join(str(exc).split())}") from exc


def load_fleet_file(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FleetFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise FleetFileError(f"{path}: not UTF-8 text") from exc
    return parse_fleet_text(text, name=str(path))


# --- validation -------------------------------------------------------------------------------


class _Checker:
    """Walks the document once, collecting errors and building the spec as it goes."""

    def __init__(self, known_spines: Iterable[str], known_racks: Iterable[str]) -> None:
        self.errors: list[str] = []
        # Every problem is counted; only the first MAX_ERRORS are kept as messages.
        self.count = 0
        self.known_spines = set(known_spines)
        self.known_racks = set(known_racks)
        self.flavors: dict[str, tuple[str, int]] = {}
        self.gpu_uuids: dict[str, str] = {}
        self.mig_uuids: dict[str, str] = {}

    def error(self, path: str, message: str) -> None:
        self.count += 1
        if self.count <= MAX_ERRORS:
            self.errors.append(f"{path}: {message}")

    def messages(self) -> list[str]:
        extra = self.count - len(self.errors)
        return self.errors + ([f"{MORE_PREFIX}{extra} more error(s)"] if extra else [])

    # Scalar helpers return None after recording an error, so callers can keep going.

    def keys(self, path: str, obj: Mapping, allowed: set[str]) -> None:
        for key in obj:
            if key not in allowed:
                self.error(f"{path}.{key}", f"unknown key (allowed: {', '.join(sorted(allowed))})")

    def string(
        self, path: str, obj: Mapping, key: str, *, required: bool = False, default: str = "", max_length: int = 255,
        pattern: re.Pattern | None = None, what: str = "",
    ) -> str | None:
        if key not in obj or obj[key] is None:
            if required:
                self.error(f"{path}.{key}", "required")
                return None
            return default
        value = obj[key]
        if not isinstance(value, str):
            self.error(f"{path}.{key}", f"expected a string, got {type(value).__name__}")
            return None
        if required and not value.strip():
            self.error(f"{path}.{key}", "must not be empty")
            return None
        if len(value) > max_length:
            self.error(f"{path}.{key}", f"longer than {max_length} characters")
            return None
        if "\x00" in value:
            self.error(f"{path}.{key}", "contains a NUL character")
            return None
        if pattern is not None and value and not pattern.match(value):
            self.error(f"{path}.{key}", f"{value!r} is not a valid {what or key}")
            return None
        return value

    def integer(
        self, path: str, obj: Mapping, key: str, *, required: bool = False, default: int = 0, minimum: int = 0,
        maximum: int | None = None,
    ) -> int | None:
        if key not in obj or obj[key] is None:
            if required:
                self.error(f"{path}.{key}", "required")
                return None
            return default
        value = obj[key]
        # bool is an int in Python; `true` for a core count is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(f"{path}.{key}", f"expected an integer, got {type(value).__name__}")
            return None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
            self.error(f"{path}.{key}", f"{value} is out of range (must be {bound})")
            return None
        return value

    def boolean(self, path: str, obj: Mapping, key: str, *, default: bool = False) -> bool | None:
        if key not in obj or obj[key] is None:
            return default
        if not isinstance(obj[key], bool):
            self.error(f"{path}.{key}", f"expected true or false, got {type(obj[key]).__name__}")
            return None
        return obj[key]

    def choice(self, path: str, obj: Mapping, key: str, choices: list[str], *, default: str) -> str | None:
        if key not in obj or obj[key] is None:
            return default
        if obj[key] not in choices:
            self.error(f"{path}.{key}", f"{obj[key]!r} is not one of {', '.join(choices)}")
            return None
        return obj[key]

    def items(self, path: str, value: Any, what: str) -> list[tuple[str, Mapping]]:
        """The mappings of a list, with their paths; non-mappings are reported."""
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(path, f"expected a list of {what}, got {type(value).__name__}")
            return []
        out = []
        for i, item in enumerate(value):
            if isinstance(item, Mapping):
                out.append((f"{path}[{i}]", item))
            else:
                self.error(f"{path}[{i}]", f"expected a mapping, got {type(item).__name__}")
        return out

    def unique(self, seen: dict[Any, str], value: Any, path: str, what: str) -> None:
        if value is None:
            return
        if value in seen:
            self.error(path, f"duplicate {what} {value!r} (also {seen[value]})")
        else:
            seen[value] = path

    # --- the document ---

    def document(self, data: Any) -> FleetSpec | None:
        if not isinstance(data, Mapping):
            self.error("$", f"expected a mapping with spines, racks and nodes, got {type(data).__name__}")
            return None
        for key in data:
            if key not in TOP_KEYS:
                self.error(str(key), "unknown top-level key (allowed: nodes, racks, spines)")
        spines = self.spines(data.get("spines"))
        racks = self.racks(data.get("racks"), {s.name for s in spines} | self.known_spines)
        nodes = self.nodes(data.get("nodes"), {r.name for r in racks} | self.known_racks)
        if self.count:
            return None
        return FleetSpec(spines=tuple(spines), racks=tuple(racks), nodes=tuple(nodes), flavors=dict(self.flavors))

    def spines(self, value: Any) -> list[SpineSpec]:
        names: dict[str, str] = {}
        out = []
        for path, obj in self.items("spines", value, "spines"):
            self.keys(path, obj, SPINE_KEYS)
            name = self.string(path, obj, "name", required=True, max_length=64, pattern=NAME_RE, what="name")
            self.unique(names, name, f"{path}.name", "spine name")
            if name is not None:
                out.append(SpineSpec(name=name))
        return out

    def racks(self, value: Any, spines: set[str]) -> list[RackSpec]:
        names: dict[str, str] = {}
        out = []
        for path, obj in self.items("racks", value, "racks"):
            self.keys(path, obj, RACK_KEYS)
            name = self.string(path, obj, "name", required=True, max_length=64, pattern=NAME_RE, what="name")
            self.unique(names, name, f"{path}.name", "rack name")
            spine = self.string(path, obj, "spine", max_length=64) or None
            if spine is not None and spine not in spines:
                self.error(f"{path}.spine", f"unknown spine {spine!r}")
            if name is not None:
                out.append(RackSpec(name=name, spine=spine))
        return out

    def nodes(self, value: Any, racks: set[str]) -> list[NodeSpec]:
        names: dict[str, str] = {}
        out = []
        for path, obj in self.items("nodes", value, "nodes"):
            node = self.node(path, obj, racks)
            raw_name = obj.get("name")
            self.unique(names, raw_name if isinstance(raw_name, str) else None, f"{path}.name", "node name")
            if node is not None:
                out.append(node)
        return out

    def node(self, path: str, obj: Mapping, racks: set[str]) -> NodeSpec | None:
        before = self.count
        self.keys(path, obj, NODE_KEYS)
        name = self.string(path, obj, "name", required=True, max_length=64, pattern=NAME_RE, what="name")
        rack = self.string(path, obj, "rack", required=True, max_length=64)
        if rack is not None and rack not in racks:
            self.error(f"{path}.rack", f"unknown rack {rack!r}")
        hostname = self.string(path, obj, "hostname", max_length=255)
        pool = self.string(path, obj, "pool", default="default", max_length=64, pattern=NAME_RE, what="pool name")
        executor = self.choice(path, obj, "executor", ExecutorKind.values, default=ExecutorKind.SIMULATED)
        cpu_cores = self.integer(path, obj, "cpu_cores")
        memory_mib = self.integer(path, obj, "memory_mib")
        labels = self.labels(path, obj.get("labels"))
        nvlink_domain = self.string(path, obj, "nvlink_domain", max_length=128)
        exporter_url = self.string(path, obj, "exporter_url", max_length=200, pattern=URL_RE, what="http(s) URL")
        gpu_count = self.integer(path, obj, "gpu_count", default=-1, maximum=MAX_GPUS_PER_NODE)
        # Required, even if empty (`gpus: []`): a file cut off after a node's name or after
        # `gpus:` would otherwise import that node with no GPUs.
        if obj.get("gpus") is None:
            self.error(f"{path}.gpus", "required (a list; `gpus: []` for a node without GPUs)")
        gpus = self.gpus(f"{path}.gpus", obj.get("gpus"))
        if gpu_count is not None and gpu_count >= 0 and gpu_count != gpus.count:
            self.error(f"{path}.gpus", f"expected {gpu_count} entries, got {gpus.count}")
        flavor = self.node_flavor(f"{path}.gpus", gpus.specs)
        if self.count > before:
            return None
        return NodeSpec(
            name=name, rack=rack, hostname=hostname, pool=pool, executor=executor, cpu_cores=cpu_cores,
            memory_mib=memory_mib, labels=labels, nvlink_domain=nvlink_domain, exporter_url=exporter_url,
            flavor=flavor, gpus=tuple(gpus.specs),
        )

    def labels(self, path: str, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.error(f"{path}.labels", f"expected a mapping of strings, got {type(value).__name__}")
            return {}
        for key, val in value.items():
            if not isinstance(key, str) or not isinstance(val, str):
                self.error(f"{path}.labels.{key}", "label keys and values must be strings")
            elif "\x00" in key or "\x00" in val:
                self.error(f"{path}.labels.{key!r}", "contains a NUL character")
        return dict(value)

    @dataclass
    class _Gpus:
        specs: list[GpuSpec]
        count: int

    def gpus(self, path: str, value: Any) -> _Gpus:
        indices: dict[int, str] = {}
        bus_ids: dict[str, str] = {}
        items = self.items(path, value, "GPUs")
        specs = []
        for gpath, obj in items:
            gpu = self.gpu(gpath, obj)
            self.unique(indices, obj.get("index") if isinstance(obj.get("index"), int) else None,
                        f"{gpath}.index", "GPU index")
            bus = obj.get("pci_bus_id")
            self.unique(bus_ids, bus.lower() if isinstance(bus, str) and bus else None, f"{gpath}.pci_bus_id",
                        "PCI bus id")
            if gpu is not None:
                specs.append(gpu)
        return self._Gpus(specs=specs, count=len(value) if isinstance(value, list) else 0)

    def gpu(self, path: str, obj: Mapping) -> GpuSpec | None:
        before = self.count
        self.keys(path, obj, GPU_KEYS)
        uuid = self.string(path, obj, "uuid", required=True, max_length=64, pattern=GPU_UUID_RE,
                           what="GPU UUID (GPU-…)")
        self.unique(self.gpu_uuids, uuid, f"{path}.uuid", "GPU uuid")
        index = self.integer(path, obj, "index", required=True, maximum=MAX_GPUS_PER_NODE - 1)
        pci_bus_id = self.string(path, obj, "pci_bus_id", max_length=32, pattern=PCI_BUS_ID_RE,
                                 what="PCI bus id (0000:18:00.0)")
        product = self.string(path, obj, "product", required=True, max_length=128)
        memory_mib = self.integer(path, obj, "memory_mib", required=True, minimum=1)
        nvlink_group = self.integer(path, obj, "nvlink_group", maximum=32767)
        numa_node = self.integer(path, obj, "numa_node", maximum=32767)
        sharing_mode = self.choice(path, obj, "sharing_mode", SharingMode.values, default=SharingMode.EXCLUSIVE)
        replicas = self.integer(path, obj, "sharing_replicas", default=1, minimum=1, maximum=1024)
        if sharing_mode == SharingMode.EXCLUSIVE and replicas not in (None, 1):
            self.error(f"{path}.sharing_replicas", "an exclusive GPU has exactly one replica")
        mig_enabled = self.boolean(path, obj, "mig_enabled")
        mig_instances = self.mig_instances(f"{path}.mig_instances", obj.get("mig_instances"))
        if mig_instances and mig_enabled is False:
            self.error(f"{path}.mig_instances", "MIG instances need mig_enabled: true")
        if mig_enabled and product and memory_mib and not derive_flavor(product, memory_mib).mig_capable:
            self.error(f"{path}.mig_enabled", f"{product} does not support MIG")
        if self.count > before:
            return None
        return GpuSpec(
            uuid=uuid, index=index, pci_bus_id=pci_bus_id.lower(), product=product, memory_mib=memory_mib,
            nvlink_group=nvlink_group, numa_node=numa_node, sharing_mode=sharing_mode, sharing_replicas=replicas,
            mig_enabled=mig_enabled, mig_instances=tuple(mig_instances),
        )

    def mig_instances(self, path: str, value: Any) -> list[dict[str, Any]]:
        gi_ids: dict[int, str] = {}
        out = []
        for mpath, obj in self.items(path, value, "MIG instances"):
            self.keys(mpath, obj, MIG_KEYS)
            profile = self.string(mpath, obj, "profile", required=True, max_length=32, pattern=MIG_PROFILE_RE,
                                  what="MIG profile (e.g. 1g.10gb)")
            gi_id = self.integer(mpath, obj, "gi_id", required=True, maximum=255)
            self.unique(gi_ids, gi_id, f"{mpath}.gi_id", "GPU instance id")
            uuid = self.string(mpath, obj, "uuid", max_length=64, pattern=MIG_UUID_RE, what="MIG UUID (MIG-…)")
            self.unique(self.mig_uuids, uuid or None, f"{mpath}.uuid", "MIG uuid")
            if profile is not None and gi_id is not None and uuid is not None:
                instance: dict[str, Any] = {"profile": profile, "gi_id": gi_id}
                if uuid:
                    instance["uuid"] = uuid
                out.append(instance)
        return out

    def node_flavor(self, path: str, gpus: list[GpuSpec]) -> str | None:
        by_flavor: dict[str, list[int]] = {}
        for gpu in gpus:
            name = derive_flavor(gpu.product, gpu.memory_mib).name
            by_flavor.setdefault(name, []).append(gpu.index)
            self.flavors.setdefault(name, (gpu.product, gpu.memory_mib))
        if len(by_flavor) > 1:
            detail = "; ".join(f"{name} (index {', '.join(map(str, idx))})" for name, idx in sorted(by_flavor.items()))
            self.error(path, f"mixed flavors in one node: {detail}")
            return None
        return next(iter(by_flavor), None)


def check_fleet(
    data: Any, *, known_spines: Iterable[str] = (), known_racks: Iterable[str] = ()
) -> tuple[FleetSpec | None, list[str]]:
    """Validates a parsed fleet document; returns (spec, []) or (None, errors).

    `known_spines`/`known_racks` are names that already exist elsewhere (the database), so a
    file may add nodes to racks it does not list."""
    checker = _Checker(known_spines, known_racks)
    spec = checker.document(data)
    return spec, checker.messages()


def validate_fleet(data: Any, *, known_spines: Iterable[str] = (), known_racks: Iterable[str] = ()) -> list[str]:
    """Every problem of a fleet document, each as 'path: message'; empty when it is valid."""
    return check_fleet(data, known_spines=known_spines, known_racks=known_racks)[1]


def error_count(messages: list[str]) -> int:
    """How many problems a (capped) list of validation messages stands for."""
    if messages and messages[-1].startswith(MORE_PREFIX):
        return len(messages) - 1 + int(messages[-1][len(MORE_PREFIX):].split()[0])
    return len(messages)
