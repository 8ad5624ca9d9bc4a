"""Two fakes: `FakeNvml`, a pynvml-shaped module for exercising the real NvmlFacade, and `FakeFacade`,
a stand-in for the facade itself for the agent loop and CLI."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pynvml

from fleet.agent.nvml import DeviceInfo, NvmlEvent
from fleet.agent.payloads import EccCounters, GpuHealthReport, RowRemap


@dataclass
class FakeGpu:
    uuid: str
    bus: str  # NVML style "00000000:1A:00.0"
    name: str = "NVIDIA H100 80GB HBM3"
    total_mib: int = 81559
    used_mib: int = 1024
    numa: int | None = 0
    links: list[str] = field(default_factory=list)  # remote bus ids, NVML style
    mig: list[tuple[str, int, str]] = field(default_factory=list)  # (profile, gi_id, uuid)
    datacenter: bool = True  # consumer boards report NOT_SUPPORTED for ECC, remapping, retired pages
    lost: bool = False
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    volatile_dbe: int = 0


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """Only the pynvml names NvmlFacade uses; constants and error classes are pynvml's own."""

    def __init__(self, gpus: list[FakeGpu], *, driver: str = "565.57.01") -> None:
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError", "nvmlEventType")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.driver = driver
        self.queued: list[tuple[FakeGpu, int]] = []
        self.waits: list[int] = []
        self.shut_down = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def _alive(self, gpu: Any) -> Any:
        if getattr(gpu, "lost", False):
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlDeviceGetUUID(self, gpu: Any) -> str:
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu: Any) -> bytes:
        return gpu.name.encode()  # older bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        self._alive(gpu)
        return SimpleNamespace(total=gpu.total_mib * 1024 * 1024, used=gpu.used_mib * 1024 * 1024)

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(busId=gpu.bus.encode())

    def nvmlDeviceGetNumaNodeId(self, gpu: FakeGpu) -> int:
        if gpu.numa is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.numa

    def nvmlDeviceGetMigMode(self, gpu: FakeGpu) -> tuple[int, int]:
        if not gpu.datacenter:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig else pynvml.NVML_DEVICE_MIG_DISABLE
        return (mode, mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, gpu: FakeGpu) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu: FakeGpu, slot: int) -> SimpleNamespace:
        if slot >= len(gpu.mig):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        profile, gi_id, uuid = gpu.mig[slot]
        return SimpleNamespace(uuid=uuid, name=f"{gpu.name} MIG {profile}", gi_id=gi_id)

    def nvmlDeviceGetGpuInstanceId(self, mig: SimpleNamespace) -> int:
        return mig.gi_id

    def nvmlDeviceGetNvLinkState(self, gpu: FakeGpu, link: int) -> int:
        if link >= len(gpu.links):
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED if not gpu.links else pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, gpu: FakeGpu, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=gpu.links[link])

    def _datacenter(self, gpu: FakeGpu) -> None:
        self._alive(gpu)
        if not gpu.datacenter:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetTotalEccErrors(self, gpu: FakeGpu, error_type: int, counter_type: int) -> int:
        self._datacenter(gpu)
        dbe = error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        volatile = counter_type == pynvml.NVML_VOLATILE_ECC
        return (gpu.volatile_dbe if volatile else gpu.volatile_dbe + 1) if dbe else 7

    def nvmlDeviceGetRetiredPages(self, gpu: FakeGpu, cause: int) -> list[int]:
        self._datacenter(gpu)
        return [0x1000, 0x2000] if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR else []

    def nvmlDeviceGetRetiredPagesPendingStatus(self, gpu: FakeGpu) -> int:
        self._datacenter(gpu)
        return 0

    def nvmlDeviceGetRemappedRows(self, gpu: FakeGpu) -> tuple[int, int, int, int]:
        self._datacenter(gpu)
        return gpu.remapped

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        self._alive(gpu)
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        return 61

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        return 455_500

    def nvmlDeviceGetFieldValues(self, gpu: FakeGpu, field_ids: list[int]) -> list[SimpleNamespace]:
        if not gpu.datacenter:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [SimpleNamespace(nvmlReturn=pynvml.NVML_SUCCESS, value=SimpleNamespace(uiVal=0))]

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, gpu: FakeGpu, types: int, event_set: str) -> None:
        if not gpu.datacenter:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        self.waits.append(timeout_ms)
        if not self.queued:
            raise _err(pynvml.NVML_ERROR_TIMEOUT)
        gpu, xid = self.queued.pop(0)
        return SimpleNamespace(device=gpu, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid)

    def nvmlEventSetFree(self, event_set: str) -> None:
        pass


H100_BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]  # from the real 8x H100 nvidia-smi table
NVSWITCH_BUSES = [f"00000000:{bus}:00.0" for bus in ("05", "06", "07", "08")]


def hgx_h100() -> list[FakeGpu]:
    """8 GPUs, every one linked to the same 4 NVSwitches (18 links spread over them)."""
    return [
        FakeGpu(uuid=f"GPU-h100-{i}", bus=f"00000000:{bus}:00.0", numa=0 if i < 4 else 1,
                links=[NVSWITCH_BUSES[link % 4] for link in range(18)])
        for i, bus in enumerate(H100_BUSES)
    ]


@dataclass
class FakeFacade:
    """The facade's surface with canned answers; `events` is what the next waits return, in order."""

    devices_: list[DeviceInfo]
    driver: str | None = "565.57.01"
    events: list[list[NvmlEvent]] = field(default_factory=list)
    lost: set[str] = field(default_factory=set)
    initialised: bool = False
    shut_down: bool = False
    waits: list[int] = field(default_factory=list)

    def init(self) -> None:
        self.initialised = True

    def shutdown(self) -> None:
        self.shut_down = True

    def driver_version(self) -> str | None:
        return self.driver

    def devices(self) -> list[DeviceInfo]:
        return list(self.devices_)

    def health(self, index: int, uuid: str) -> GpuHealthReport:
        if uuid in self.lost:
            return GpuHealthReport(uuid=uuid, index=index, lost=True)
        return GpuHealthReport(
            uuid=uuid, index=index, gpu_util_pct=87.0, mem_util_pct=40.0, memory_used_mib=1024.0,
            temperature_c=61.0, power_w=455.5, ecc=EccCounters(0, 3, 0, 9),
            row_remap=RowRemap(0, 0, False, False), recovery_action=0,
        )

    def wait_xid_events(self, timeout_ms: int) -> list[NvmlEvent]:
        self.waits.append(timeout_ms)
        return self.events.pop(0) if self.events else []


def two_gpu_devices() -> list[DeviceInfo]:
    return [
        DeviceInfo(index=0, uuid="GPU-a", name="NVIDIA H200", memory_mib=143771, pci_bus_id="0000:18:00",
                   numa_node=0, nvlink_peers=("0000:2a:00",)),
        DeviceInfo(index=1, uuid="GPU-b", name="NVIDIA H200", memory_mib=143771, pci_bus_id="0000:2a:00",
                   numa_node=1, nvlink_peers=("0000:18:00",), mig_enabled=True,
                   mig_instances=(("1g.18gb", 9, "MIG-b9"),)),
    ]


AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
