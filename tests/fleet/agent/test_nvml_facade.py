"""The real NvmlFacade over a pynvml-shaped fake: inventory, per-call NOT_SUPPORTED, lost GPUs, Xid events."""
from __future__ import annotations

import pynvml
import pytest

from fleet.agent.nvml import DeviceInfo, NvmlFacade, NvmlNotFound, NvmlUnavailable, nvlink_groups

from .fakes import NVSWITCH_BUSES, FakeGpu, FakeNvml, hgx_h100


def facade_for(gpus: list[FakeGpu]) -> tuple[NvmlFacade, FakeNvml]:
    nvml = FakeNvml(gpus)
    facade = NvmlFacade(nvml)
    facade.init()
    return facade, nvml


def test_inventory_of_an_hgx_h100():
    facade, _ = facade_for(hgx_h100())
    devices = facade.devices()
    assert facade.device_count() == 8 and facade.driver_version() == "565.57.01"
    first = devices[0]
    assert (first.index, first.uuid, first.name, first.memory_mib) == (0, "GPU-h100-0", "NVIDIA H100 80GB HBM3", 81559)
    assert [d.pci_bus_id for d in devices] == [f"0000:{b}:00" for b in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]
    assert [d.numa_node for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert first.nvlink_peers == ("0000:05:00", "0000:06:00", "0000:07:00", "0000:08:00")
    assert not first.mig_enabled and first.mig_instances == ()
    assert set(nvlink_groups(devices).values()) == {0}


def test_mig_instances_are_listed_with_profile_and_gpu_instance_id():
    gpu = FakeGpu(uuid="GPU-m", bus="00000000:1A:00.0", mig=[("1g.10gb", 7, "MIG-7"), ("3g.40gb", 2, "MIG-2")])
    facade, _ = facade_for([gpu])
    (device,) = facade.devices()
    assert device.mig_enabled
    assert device.mig_instances == (("1g.10gb", 7, "MIG-7"), ("3g.40gb", 2, "MIG-2"))


def test_unsupported_queries_are_none_not_errors():
    consumer = FakeGpu(uuid="GPU-c", bus="00000000:01:00.0", name="NVIDIA GeForce RTX 5080", datacenter=False,
                       numa=None)
    facade, _ = facade_for([consumer])
    (device,) = facade.devices()
    assert (device.mig_enabled, device.nvlink_peers) == (False, ())
    health = facade.health(0, device.uuid)
    assert health.ecc.volatile_dbe is None and health.ecc.aggregate_sbe is None
    assert (health.row_remap.pending, health.retired_pages.dbe, health.recovery_action) == (None, None, None)
    assert (health.gpu_util_pct, health.temperature_c, health.power_w) == (87.0, 61.0, 455.5)
    assert facade.wait_xid_events(5) == []  # event registration refused, waiting still works


def test_datacenter_health_counters():
    gpu = FakeGpu(uuid="GPU-d", bus="00000000:52:00.0", remapped=(3, 1, 1, 0), volatile_dbe=2, used_mib=2048)
    facade, _ = facade_for([gpu])
    health = facade.health(0, "GPU-d")
    assert (health.ecc.volatile_dbe, health.ecc.aggregate_dbe, health.ecc.volatile_sbe) == (2, 3, 7)
    assert (health.row_remap.correctable, health.row_remap.uncorrectable) == (3, 1)
    assert (health.row_remap.pending, health.row_remap.failure) == (True, False)
    assert (health.retired_pages.dbe, health.retired_pages.sbe, health.retired_pages.pending) == (2, 0, False)
    assert health.memory_used_mib == 2048.0 and health.recovery_action == 0 and not health.lost


def test_a_gpu_that_fell_off_the_bus_reports_lost():
    gpu = FakeGpu(uuid="GPU-x", bus="00000000:2B:00.0")
    facade, _ = facade_for([gpu])
    gpu.lost = True
    health = facade.health(0, "GPU-x")
    assert health.lost and health.temperature_c is None


def test_xid_events_are_drained_after_the_first_wait():
    gpus = hgx_h100()
    facade, nvml = facade_for(gpus)
    nvml.queued = [(gpus[4], 79), (gpus[4], 154)]
    events = facade.wait_xid_events(15000)
    assert [(e.xid, e.gpu_uuid, e.pci_bus_id) for e in events] == [(79, "GPU-h100-4", "0000:9a:00"),
                                                                    (154, "GPU-h100-4", "0000:9a:00")]
    assert nvml.waits == [15000, 0, 0]
    assert facade.wait_xid_events(10) == []


def test_init_without_the_driver_raises_nvml_not_found(monkeypatch):
    nvml = FakeNvml([])

    def missing() -> None:
        raise pynvml.NVMLError_LibraryNotFound(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(nvml, "nvmlInit", missing)
    with pytest.raises(NvmlNotFound, match=r"^NVML not found: is the NVIDIA driver installed\?$"):
        NvmlFacade(nvml).init()


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (pynvml.NVMLError_DriverNotLoaded(pynvml.NVML_ERROR_DRIVER_NOT_LOADED),
         "NVML not found: is the NVIDIA driver installed?"),
        (pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION), "NVML failed to start: Insufficient Permissions"),
    ],
)
def test_init_failures_are_one_clear_message(monkeypatch, error, message):
    nvml = FakeNvml([])

    def fail() -> None:
        raise error

    monkeypatch.setattr(nvml, "nvmlInit", fail)
    with pytest.raises(NvmlUnavailable) as raised:
        NvmlFacade(nvml).init()
    assert str(raised.value) == message


def test_other_nvml_errors_are_not_swallowed(monkeypatch):
    facade, nvml = facade_for([FakeGpu(uuid="GPU-e", bus="00000000:01:00.0")])

    def broken(gpu, sensor):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    monkeypatch.setattr(nvml, "nvmlDeviceGetTemperature", broken)
    with pytest.raises(pynvml.NVMLError):
        facade.temperature_c(0)


def dev(index: int, bus: str, *peers: str) -> DeviceInfo:
    return DeviceInfo(index=index, uuid=f"GPU-{index}", name="g", memory_mib=1, pci_bus_id=bus, nvlink_peers=peers)


def test_nvlink_groups_are_connected_components():
    # Two 4-GPU islands with direct links (as on an A100 PCIe box with bridges), listed out of order.
    island_a = [f"0000:0{i}:00" for i in range(4)]
    island_b = [f"0000:8{i}:00" for i in range(4)]
    devices = [dev(4 + i, bus, *[p for p in island_b if p != bus]) for i, bus in enumerate(island_b)]
    devices += [dev(i, bus, island_a[(i + 1) % 4]) for i, bus in enumerate(island_a)]  # a ring is enough
    groups = nvlink_groups(devices)
    assert [groups[f"GPU-{i}"] for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_gpus_without_nvlink_are_each_their_own_group():
    devices = [dev(i, f"0000:{i + 1:02x}:00") for i in range(4)]
    assert nvlink_groups(devices) == {"GPU-0": 0, "GPU-1": 1, "GPU-2": 2, "GPU-3": 3}


def test_gpus_behind_one_switch_fabric_share_a_group():
    switches = [s.lower()[4:-2] for s in NVSWITCH_BUSES]
    devices = [dev(i, f"0000:{i + 0x10:02x}:00", switches[i % 4]) for i in range(8)]
    devices[7] = dev(7, "0000:17:00", switches[0], switches[3])
    # GPUs 0-6 each reach one switch; GPU 7 bridges switches 0 and 3; 1,2,5,6 stay on switches 1 and 2.
    groups = nvlink_groups(devices)
    assert groups["GPU-0"] == groups["GPU-3"] == groups["GPU-4"] == groups["GPU-7"] == 0
    assert groups["GPU-1"] == groups["GPU-5"] == 1 and groups["GPU-2"] == groups["GPU-6"] == 2
