"""A small facade over NVML (pynvml from nvidia-ml-py), the only place the agent touches the driver.

Public API:
    NVML_NOT_FOUND_MESSAGE  the one line printed when the driver library is missing
    NvmlUnavailable         raised by NvmlFacade.init() when NVML cannot start ("NVML failed to start: ...")
    NvmlNotFound            its subclass for a missing library or driver (NVMLError_LibraryNotFound,
                            NVMLError_DriverNotLoaded): NVML_NOT_FOUND_MESSAGE
    DeviceInfo              frozen dataclass: index, uuid, name, memory_mib, pci_bus_id, mig_enabled,
                            mig_instances [(profile, gi_id, uuid)], numa_node, nvlink_peers [pci ids]
    NvmlEvent               frozen dataclass: xid, gpu_uuid, pci_bus_id, at (aware datetime)
    NvmlFacade              init/shutdown, driver_version, device_count, devices, ecc_counters, retired_pages,
                            row_remapping, utilization, temperature_c, power_w, memory_used_mib,
                            recovery_action, health(index) -> payloads.GpuHealthReport, wait_xid_events(timeout_ms)
    nvlink_groups(devices) -> dict[uuid, group]
                            connected components of the NVLink graph (NVSwitches count as nodes, so GPUs
                            behind one switch fabric share a group); numbered from 0 by lowest GPU index

Every per-device query that the GPU or driver does not support returns None instead of raising, so one
old driver or consumer board never stops a heartbeat. Tests use a fake with the same methods.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from health.core.pci import normalize_pci_bus_id

from .payloads import EccCounters, GpuHealthReport, RetiredPages, RowRemap

NVML_NOT_FOUND_MESSAGE = "NVML not found: is the NVIDIA driver installed?"


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine; the message is the one line the agent prints."""


class NvmlNotFound(NvmlUnavailable):
    def __init__(self) -> None:
        super().__init__(NVML_NOT_FOUND_MESSAGE)


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    index: int
    uuid: str
    name: str
    memory_mib: int
    pci_bus_id: str | None
    mig_enabled: bool = False
    mig_instances: tuple[tuple[str, int | None, str | None], ...] = ()
    numa_node: int | None = None
    nvlink_peers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NvmlEvent:
    xid: int | None
    gpu_uuid: str | None
    pci_bus_id: str | None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


def nvlink_groups(devices: list[DeviceInfo]) -> dict[str, int]:
    """Union-find over GPUs and the PCI ids their NVLinks reach."""
    parent: dict[str, str] = {}

    def find(item: str) -> str:
        parent.setdefault(item, item)
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    def union(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    def node_of(device: DeviceInfo) -> str:
        return device.pci_bus_id or device.uuid

    for device in devices:
        find(node_of(device))
        for peer in device.nvlink_peers:
            union(node_of(device), peer)
    numbers: dict[str, int] = {}
    groups: dict[str, int] = {}
    for device in sorted(devices, key=lambda d: d.index):
        root = find(node_of(device))
        groups[device.uuid] = numbers.setdefault(root, len(numbers))
    return groups


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlFacade:
    """Real NVML through pynvml. `nvml` can be any module with pynvml's names (tests pass a fake)."""

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml as nvml
        self._nvml = nvml
        self._handles: list[Any] = []
        self._event_set: Any = None
        self._optional_errors = {
            getattr(nvml, name)
            for name in (
                "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NO_PERMISSION",
                "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_FOUND",
            )
            if hasattr(nvml, name)
        }

    # --- lifecycle ---------------------------------------------------------------------------------

    def init(self) -> None:
        # The library without its kernel module is the same situation for the operator: no driver.
        missing = tuple(getattr(self._nvml, name) for name in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
                        if hasattr(self._nvml, name))
        try:
            self._nvml.nvmlInit()
        except missing as exc:
            raise NvmlNotFound() from exc
        except self._nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML failed to start: {exc}") from exc
        self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self._nvml.nvmlDeviceGetCount())]

    def shutdown(self) -> None:
        if self._event_set is not None:
            self._optional(self._nvml.nvmlEventSetFree, self._event_set)
            self._event_set = None
        self._nvml.nvmlShutdown()

    def _optional(self, fn: Any, *args: Any) -> Any:
        """Call NVML; None when this GPU or driver does not support the query."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) in self._optional_errors:
                return None
            raise

    def _call(self, name: str, *args: Any) -> Any:
        fn = getattr(self._nvml, name, None)
        return None if fn is None else self._optional(fn, *args)

    # --- inventory ---------------------------------------------------------------------------------

    def driver_version(self) -> str | None:
        version = self._call("nvmlSystemGetDriverVersion")
        return None if version is None else _text(version)

    def device_count(self) -> int:
        return len(self._handles)

    def devices(self) -> list[DeviceInfo]:
        return [self._device(index, handle) for index, handle in enumerate(self._handles)]

    def _device(self, index: int, handle: Any) -> DeviceInfo:
        memory = self._call("nvmlDeviceGetMemoryInfo", handle)
        pci = self._call("nvmlDeviceGetPciInfo", handle)
        bus_id = normalize_pci_bus_id(_text(pci.busId)) if pci is not None else None
        mig_mode = self._call("nvmlDeviceGetMigMode", handle)
        mig_enabled = bool(mig_mode and mig_mode[0] == getattr(self._nvml, "NVML_DEVICE_MIG_ENABLE", 1))
        return DeviceInfo(
            index=index,
            uuid=_text(self._nvml.nvmlDeviceGetUUID(handle)),
            name=_text(self._nvml.nvmlDeviceGetName(handle)),
            memory_mib=int(memory.total // (1024 * 1024)) if memory is not None else 0,
            pci_bus_id=bus_id,
            mig_enabled=mig_enabled,
            mig_instances=self._mig_instances(handle) if mig_enabled else (),
            numa_node=self._numa_node(handle, pci),
            nvlink_peers=self._nvlink_peers(handle),
        )

    def _mig_instances(self, handle: Any) -> tuple[tuple[str, int | None, str | None], ...]:
        out = []
        for slot in range(self._call("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            try:
                mig = self._nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except self._nvml.NVMLError:
                continue  # empty slot
            name = _text(self._call("nvmlDeviceGetName", mig) or "")
            # MIG device names end in the profile: "NVIDIA H100 80GB HBM3 MIG 1g.10gb".
            profile = name.rsplit("MIG ", 1)[-1] if "MIG " in name else name
            uuid = self._call("nvmlDeviceGetUUID", mig)
            out.append((profile, self._call("nvmlDeviceGetGpuInstanceId", mig), _text(uuid) if uuid else None))
        return tuple(out)

    def _numa_node(self, handle: Any, pci: Any) -> int | None:
        node = self._call("nvmlDeviceGetNumaNodeId", handle)
        if node is not None and node >= 0:
            return int(node)
        if pci is None:
            return None
        # Older drivers lack the call; sysfs knows, with -1 for single-socket machines.
        path = Path("/sys/bus/pci/devices") / _text(pci.busId).lower()[-12:] / "numa_node"
        try:
            value = int(path.read_text().strip())
        except (OSError, ValueError):
            return None
        return value if value >= 0 else None

    def _nvlink_peers(self, handle: Any) -> tuple[str, ...]:
        peers: set[str] = set()
        enabled = getattr(self._nvml, "NVML_FEATURE_ENABLED", 1)
        for link in range(getattr(self._nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            state = self._call("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                break  # past the last link, or no NVLink at all
            if state != enabled:
                continue
            remote = self._call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            if remote is not None and (bus := normalize_pci_bus_id(_text(remote.busId))):
                peers.add(bus)
        return tuple(sorted(peers))

    # --- health ------------------------------------------------------------------------------------

    def ecc_counters(self, index: int) -> EccCounters:
        h, n = self._handles[index], self._nvml
        unc, cor = n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_MEMORY_ERROR_TYPE_CORRECTED
        vol, agg = n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC
        get = "nvmlDeviceGetTotalEccErrors"
        return EccCounters(
            volatile_dbe=self._call(get, h, unc, vol), volatile_sbe=self._call(get, h, cor, vol),
            aggregate_dbe=self._call(get, h, unc, agg), aggregate_sbe=self._call(get, h, cor, agg),
        )

    def retired_pages(self, index: int) -> RetiredPages:
        h, n = self._handles[index], self._nvml
        dbe = self._call("nvmlDeviceGetRetiredPages", h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        sbe = self._call("nvmlDeviceGetRetiredPages", h, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        pending = self._call("nvmlDeviceGetRetiredPagesPendingStatus", h)
        return RetiredPages(
            dbe=None if dbe is None else len(dbe), sbe=None if sbe is None else len(sbe),
            pending=None if pending is None else bool(pending),
        )

    def row_remapping(self, index: int) -> RowRemap:
        rows = self._call("nvmlDeviceGetRemappedRows", self._handles[index])
        if rows is None:
            return RowRemap()
        correctable, uncorrectable, pending, failure = rows
        return RowRemap(int(correctable), int(uncorrectable), bool(pending), bool(failure))

    def utilization(self, index: int) -> tuple[float | None, float | None]:
        rates = self._call("nvmlDeviceGetUtilizationRates", self._handles[index])
        return (None, None) if rates is None else (float(rates.gpu), float(rates.memory))

    def temperature_c(self, index: int) -> float | None:
        value = self._call("nvmlDeviceGetTemperature", self._handles[index], self._nvml.NVML_TEMPERATURE_GPU)
        return None if value is None else float(value)

    def power_w(self, index: int) -> float | None:
        milliwatts = self._call("nvmlDeviceGetPowerUsage", self._handles[index])
        return None if milliwatts is None else milliwatts / 1000.0

    def memory_used_mib(self, index: int) -> float | None:
        memory = self._call("nvmlDeviceGetMemoryInfo", self._handles[index])
        return None if memory is None else memory.used / (1024 * 1024)

    def recovery_action(self, index: int) -> int | None:
        field_id = getattr(self._nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        if field_id is None:
            return None
        values = self._call("nvmlDeviceGetFieldValues", self._handles[index], [field_id])
        if not values or values[0].nvmlReturn != getattr(self._nvml, "NVML_SUCCESS", 0):
            return None
        return int(values[0].value.uiVal)

    def health(self, index: int, uuid: str) -> GpuHealthReport:
        """All health readings of one GPU; `lost=True` when NVML reports the GPU gone from the bus."""
        try:
            gpu_util, mem_util = self.utilization(index)
            return GpuHealthReport(
                uuid=uuid, index=index, gpu_util_pct=gpu_util, mem_util_pct=mem_util,
                memory_used_mib=self.memory_used_mib(index), temperature_c=self.temperature_c(index),
                power_w=self.power_w(index), ecc=self.ecc_counters(index), retired_pages=self.retired_pages(index),
                row_remap=self.row_remapping(index), recovery_action=self.recovery_action(index),
            )
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(self._nvml, "NVML_ERROR_GPU_IS_LOST", object()):
                return GpuHealthReport(uuid=uuid, index=index, lost=True)
            raise

    # --- events ------------------------------------------------------------------------------------

    def _ensure_event_set(self) -> Any:
        if self._event_set is None:
            self._event_set = self._nvml.nvmlEventSetCreate()
            for handle in self._handles:
                # Consumer boards refuse some event types; the others still report.
                self._optional(
                    self._nvml.nvmlDeviceRegisterEvents, handle, self._nvml.nvmlEventTypeXidCriticalError,
                    self._event_set,
                )
        return self._event_set

    def wait_xid_events(self, timeout_ms: int) -> list[NvmlEvent]:
        """Block up to `timeout_ms` for the first Xid, then drain whatever else is queued."""
        event_set = self._ensure_event_set()
        events: list[NvmlEvent] = []
        wait = timeout_ms
        while True:
            try:
                data = self._nvml.nvmlEventSetWait_v2(event_set, wait)
            except self._nvml.NVMLError as exc:
                if getattr(exc, "value", None) == getattr(self._nvml, "NVML_ERROR_TIMEOUT", object()):
                    return events
                raise
            events.append(self._event(data))
            wait = 0

    def _event(self, data: Any) -> NvmlEvent:
        uuid = self._optional(self._nvml.nvmlDeviceGetUUID, data.device)
        pci = self._optional(self._nvml.nvmlDeviceGetPciInfo, data.device)
        return NvmlEvent(
            xid=int(data.eventData), gpu_uuid=_text(uuid) if uuid else None,
            pci_bus_id=normalize_pci_bus_id(_text(pci.busId)) if pci is not None else None,
        )


def default_hostname() -> str:
    return os.uname().nodename
