"""DCGM exposition parsing: every real dump in ../shared/telemetry/dcgm plus hand-written edge cases."""
from __future__ import annotations

import json

import pytest

from health.core.dcgm import HEALTH_FAIL, DcgmSample, is_blank, parse_exposition


def read(dcgm_dir, name: str) -> str:
    return (dcgm_dir / name).read_text()


def test_every_real_dump_parses(dcgm_dir):
    dumps = sorted(dcgm_dir.glob("*.prom"))
    assert len(dumps) == 5
    for path in dumps:
        readings = parse_exposition(path.read_text())
        assert readings, path.name
        for reading in readings:
            assert reading.uuid and reading.uuid.startswith("GPU-")
            json.dumps(reading.to_json())


def test_t4_values_match_the_text(dcgm_dir):
    (t4,) = parse_exposition(read(dcgm_dir, "t4_driver460_datadog-integrations-core.prom"))
    assert t4.uuid == "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
    assert (t4.gpu_index, t4.hostname, t4.model_name) == (0, "424773df46e0", "Tesla T4")
    assert (t4.temperature_c, t4.power_w, t4.fb_free_mib, t4.fb_used_mib) == (25.0, 8.969, 15109.0, 0.0)
    assert (t4.gpu_util, t4.sm_active, t4.xid_last) == (0.0, 0.0, 0)
    assert t4.driver_version == "460.106.00"
    # Counters keep their exposition name although the parser renames counter samples.
    assert t4.metrics["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 128996013
    assert t4.metrics["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == 0


def test_blank_sentinel_is_no_data(dcgm_dir):
    (gpu,) = parse_exposition(read(dcgm_dir, "readme_k8s_example_blank_sentinel_dcgm-exporter-README.prom"))
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in gpu.metrics
    assert gpu.metrics == {"DCGM_FI_DEV_SM_CLOCK": 139, "DCGM_FI_DEV_MEM_CLOCK": 405}
    assert (gpu.pod, gpu.namespace, gpu.container, gpu.workloads) == (None, None, None, ())


def test_mig_instances_are_separate_readings(dcgm_dir):
    readings = parse_exposition(read(dcgm_dir, "h100_mig_1g10gb_pods_dcgm-exporter-512.prom"))
    assert [(r.mig_profile, r.mig_instance_id) for r in readings] == [("1g.10gb", 7), ("1g.10gb", 8), ("1g.10gb", 9)]
    assert {r.uuid for r in readings} == {"GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77"}
    assert [r.pod for r in readings] == [
        "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl",
        None,
        "tts-predictor-00011-deployment-5554f75554-8j8pl",
    ]
    assert readings[0].pci_bus_id == "0000:1a:00" and readings[1].hostname == "gsrh100-074"


def test_shared_gpu_lists_every_pod(dcgm_dir):
    (gpu,) = parse_exposition(read(dcgm_dir, "a100_sxm4_mps_shared_vgpu_label_dcgm-exporter-pr432.prom"))
    assert gpu.fb_used_mib == 15866.0 and gpu.pci_bus_id == "0000:00:05"
    assert gpu.workloads == (
        ("default", "gpu-burn-deployment-1-85dc8ff699-clvh5", "gpu-burn-container-1"),
        ("vllm-inference", "vllm-medgemma-4b-it-d599b4c99-f95nk", "vllm"),
    )
    assert gpu.pod == "gpu-burn-deployment-1-85dc8ff699-clvh5"


def test_custom_help_and_gpus_without_pods(dcgm_dir):
    readings = parse_exposition(read(dcgm_dir, "l40s_pods_custom_help_DCGM-226.prom"))
    assert [(r.gpu_index, r.pci_bus_id, r.pod) for r in readings] == [
        (0, "0000:4e:00", "tensorflow-0"), (1, "0000:62:00", "tensorflow-0"), (2, "0000:c9:00", None),
    ]
    assert readings[2].metrics == {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.0}


LABELS = 'gpu="{i}",UUID="GPU-{i}",pci_bus_id="00000000:{bus}:00.0",device="nvidia{i}",Hostname="n1"'
SYNTHETIC = """\
# HELP DCGM_FI_PROF_SM_ACTIVE
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{L0} 0.75
DCGM_FI_PROF_SM_ACTIVE{L1} 0.25
# HELP DCGM_FI_DEV_GPU_UTIL this help belongs to another family
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_UTIL{L0} 90
DCGM_FI_DEV_GPU_TEMP{L0} 61
DCGM_FI_DEV_GPU_TEMP{L1} 2147483634
DCGM_FI_DEV_POWER_USAGE{L0} 140737488355328
DCGM_FI_DEV_POWER_USAGE{L1} 455.5
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{L1} 2
DCGM_FI_DEV_ROW_REMAP_FAILURE{L1} 1
DCGM_FI_DEV_ROW_REMAP_PENDING{L1} 0
DCGM_FI_DEV_XID_ERRORS{L1,err_code="79",err_msg="GPU has fallen off the bus"} 79
# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge
DCGM_EXP_XID_ERRORS_COUNT{L1,xid="79"} 2
DCGM_EXP_XID_ERRORS_COUNT{L1,xid="48"} 1
# TYPE DCGM_EXP_GPU_HEALTH_STATUS gauge
DCGM_EXP_GPU_HEALTH_STATUS{L1,health_system="memory"} 20
DCGM_EXP_GPU_HEALTH_STATUS{L1,health_system="pcie"} 0
# TYPE DCGM_EXP_XID_ERRORS_TOTAL counter
DCGM_EXP_XID_ERRORS_TOTAL{L1,xid="79"} 3
""".replace("{L0}", "{" + LABELS.format(i=0, bus="1A") + "}").replace(
    "{L1,", "{" + LABELS.format(i=1, bus="2B") + ","
).replace("{L1}", "{" + LABELS.format(i=1, bus="2B") + "}")


def test_synthetic_dump_fills_every_named_field():
    gpu0, gpu1 = parse_exposition(SYNTHETIC)
    assert (gpu0.uuid, gpu0.sm_active, gpu0.gpu_util, gpu0.temperature_c) == ("GPU-0", 0.75, 90.0, 61.0)
    assert gpu0.power_w is None  # fp64 blank sentinel
    assert gpu1.temperature_c is None  # int32 NOT_SUPPORTED sentinel
    assert (gpu1.power_w, gpu1.ecc_dbe_volatile, gpu1.row_remap_failure, gpu1.row_remap_pending) == (455.5, 2, 1, 0)
    assert (gpu1.xid_last, gpu1.xid_count, gpu1.health_status) == (79, 3, HEALTH_FAIL)
    # Each Xid's series stays apart; an Xid's count is the largest any of its series reports.
    assert gpu1.metrics['DCGM_EXP_XID_ERRORS_TOTAL{xid="79"}'] == 3
    counts = gpu1.metrics['DCGM_EXP_XID_ERRORS_COUNT{xid="79"}'], gpu1.metrics['DCGM_EXP_XID_ERRORS_COUNT{xid="48"}']
    assert counts == (2, 1)
    assert gpu1.xids == {79: 3, 48: 1} and gpu0.xids == {}
    assert gpu1.pci_bus_id == "0000:2b:00"


def test_without_uuid_gpus_are_keyed_by_index_and_host():
    text = """\
DCGM_FI_DEV_GPU_UTIL{gpu="0",hostname="a"} 50
DCGM_FI_DEV_GPU_UTIL{gpu="0",hostname="b"} 10
DCGM_FI_DEV_GPU_TEMP{gpu="0",hostname="a"} 40
DCGM_FI_DEV_COUNT 2
"""
    a, b = parse_exposition(text)
    assert (a.uuid, a.gpu_index, a.hostname, a.sm_active, a.temperature_c) == (None, 0, "a", 0.5, 40.0)
    assert (b.hostname, b.gpu_util) == ("b", 10.0)


def test_labels_that_only_some_rows_carry_are_kept():
    text = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x"} 5\nDCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-x",Hostname="h"} 30\n'
    (gpu,) = parse_exposition(text)
    assert gpu.hostname == "h" and gpu.temperature_c == 30.0


def test_bytes_and_empty_input():
    assert parse_exposition(b"") == []
    (gpu,) = parse_exposition(b'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-b"} 33\n')
    assert isinstance(gpu, DcgmSample) and gpu.temperature_c == 33.0


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 30\nDCGM_FI_DEV_GPU_UTIL{gpu="0" 2\n', 2, "GPU_UTIL"),
        ('# HELP x y\nDCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} hot\n', 2, "hot"),
        ('DCGM_FI_DEV_GPU_TEMP{gpu=0} 1\n', 1, "gpu=0"),
    ],
)
def test_rejected_lines_are_named(text, line, fragment):
    with pytest.raises(ValueError, match=rf"line {line}: .*{fragment}"):
        parse_exposition(text)


def test_is_blank_knows_every_sentinel():
    for value in (2147483632, 2147483633, 2147483634, 2147483635, 9223372036854775792, 9223372036854775794,
                  140737488355328.0, 140737488355331.0, float("nan")):
        assert is_blank(value), value
    for value in (0, 25, 2147483631, 128996013, 140737488355327.0):
        assert not is_blank(value), value
