"""Series of one family that differ only by a label stay apart: dcgm-exporter's counting collectors.

The clock-events collector writes DCGM_EXP_CLOCK_EVENTS_COUNT once per `clock_event` reason and the
Xid collector DCGM_EXP_XID_ERRORS_COUNT once per `xid`, both over a `window_size_in_ms` window; an
`xid`-labelled series is an Xid of its GPU, read through the same catalog as a kernel-log Xid."""
from __future__ import annotations

import pytest

from health.core.dcgm import parse_exposition, parse_exposition_reference
from health.core.policy import SignalKind, signals_from_reading
from health.core.xid_catalog import Action, lookup

GPU = ('gpu="0",UUID="GPU-c0",pci_bus_id="00000000:1A:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
       'Hostname="n1",DCGM_FI_DRIVER_VERSION="565.57.01"')
OTHER = GPU.replace('gpu="0"', 'gpu="1"').replace("GPU-c0", "GPU-c1").replace("1A:00", "2B:00")
WINDOW = 'window_size_in_ms="300000"'
COUNTING = f"""\
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{{{GPU}}} 61
DCGM_FI_DEV_GPU_TEMP{{{OTHER}}} 40
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{{{GPU},err_code="0",err_msg="No Error"}} 0
DCGM_FI_DEV_XID_ERRORS{{{OTHER},err_code="0",err_msg="No Error"}} 0
# HELP DCGM_EXP_CLOCK_EVENTS_COUNT Count of clock events within the user-specified time window.
# TYPE DCGM_EXP_CLOCK_EVENTS_COUNT gauge
DCGM_EXP_CLOCK_EVENTS_COUNT{{{GPU},clock_event="sw_thermal",{WINDOW}}} 3
DCGM_EXP_CLOCK_EVENTS_COUNT{{{GPU},clock_event="sw_power_cap",{WINDOW}}} 7
DCGM_EXP_CLOCK_EVENTS_COUNT{{{GPU},clock_event="hw_slowdown",{WINDOW}}} 1
DCGM_EXP_CLOCK_EVENTS_COUNT{{{OTHER},clock_event="sw_power_cap",{WINDOW}}} 2
# HELP DCGM_EXP_XID_ERRORS_COUNT Count of XID Errors within user-specified time window.
# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge
DCGM_EXP_XID_ERRORS_COUNT{{{GPU},{WINDOW},xid="48"}} 2
DCGM_EXP_XID_ERRORS_COUNT{{{GPU},{WINDOW},xid="94"}} 1
"""


def test_clock_events_are_kept_per_reason():
    gpu, other = parse_exposition(COUNTING)
    assert gpu.clock_events == {"sw_thermal": 3, "sw_power_cap": 7, "hw_slowdown": 1}
    assert other.clock_events == {"sw_power_cap": 2}
    assert gpu.metrics['DCGM_EXP_CLOCK_EVENTS_COUNT{clock_event="sw_thermal"}'] == 3
    assert gpu.metrics['DCGM_EXP_CLOCK_EVENTS_COUNT{clock_event="hw_slowdown"}'] == 1
    assert "DCGM_EXP_CLOCK_EVENTS_COUNT" not in gpu.metrics


@pytest.mark.parametrize("all_metrics", [True, False], ids=["every metric", "store mode"])
def test_an_xid_label_names_an_xid_of_that_gpu(all_metrics):
    gpu, other = parse_exposition(COUNTING, all_metrics=all_metrics)
    assert gpu.xids == {48: 2, 94: 1} and gpu.xid_count == 3 and gpu.xid_last == 0
    assert other.xids == {} and other.xid_count is None


def test_the_counting_collectors_read_as_the_reference_reads_them():
    for all_metrics in (True, False):
        assert parse_exposition(COUNTING, all_metrics=all_metrics) == parse_exposition_reference(
            COUNTING, all_metrics=all_metrics)


def test_an_xid_gauge_outside_the_named_fields_is_read_as_an_xid_in_store_mode_too():
    text = COUNTING + (
        "# HELP DCGM_EXP_XID_ERRORS_TOTAL Xids seen since the exporter started.\n"
        "# TYPE DCGM_EXP_XID_ERRORS_TOTAL counter\n"
        f'DCGM_EXP_XID_ERRORS_TOTAL{{{OTHER},xid="79"}} 1\n'
        f'DCGM_EXP_XID_ERRORS_TOTAL{{{GPU},xid="48"}} 5\n'
        f'DCGM_EXP_XID_ERRORS_TOTAL{{{GPU},xid="13"}} 0\n')  # none within the window: no Xid
    gpu, other = parse_exposition(text, all_metrics=False)
    assert other.xids == {79: 1}
    assert gpu.xids == {48: 5, 94: 1}


def test_an_xid_series_becomes_an_xid_signal_with_the_catalog_action():
    gpu, _other = parse_exposition(COUNTING)
    signals = signals_from_reading(gpu, node="n1")
    assert [(s.kind, s.xid, s.gpu_uuid) for s in signals] == [(SignalKind.XID, 48, "GPU-c0"),
                                                              (SignalKind.XID, 94, "GPU-c0")]
    assert [(s.category, s.action) for s in signals] == [(lookup(48).category, lookup(48).action),
                                                         (lookup(94).category, lookup(94).action)]
    assert lookup(48).action == Action.RESET_GPU


def test_the_signal_of_an_xid_series_does_not_change_with_its_window_count():
    (first, _other) = parse_exposition(COUNTING)
    (later, _other) = parse_exposition(COUNTING.replace(f'{WINDOW},xid="48"}} 2', f'{WINDOW},xid="48"}} 4'))
    assert later.xids[48] == 4
    assert [s.dedup_key for s in signals_from_reading(first, node="n1")] == [
        s.dedup_key for s in signals_from_reading(later, node="n1")]


def test_an_xid_both_fields_report_is_one_signal():
    text = COUNTING.replace(f'{GPU},err_code="0",err_msg="No Error"}} 0',
                            f'{GPU},err_code="48",err_msg="Double Bit ECC Error"}} 48')
    (gpu, _other) = parse_exposition(text)
    assert gpu.xid_last == 48
    assert sorted(s.xid for s in signals_from_reading(gpu, node="n1")) == [48, 94]
