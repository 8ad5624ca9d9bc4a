"""Property tests: any text into the kernel-log and DCGM parsers gives events or readings, or (DCGM)
a ValueError naming the rejected line; no other exception ever escapes (issue 14 §4)."""
from __future__ import annotations

import json
from datetime import UTC

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from health.core import kernel_log
from health.core.dcgm import DcgmSample, parse_exposition, parse_exposition_reference

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces of real lines, so that generated text reaches the parsers' deep branches and not only
# their "no NVRM here" fast exit.
KERNEL_PIECES = [
    "NVRM: Xid (PCI:0000:3b:00): ", "NVRM: Xid (0000:01:00): ", "79", "48", "-1", "4294967296", "79.5",
    ", pid=1234, name=python, ", "GPU has fallen off the bus.", "NVRM: GPU 0000:2b:00.0: ",
    "The NVIDIA GPU 0000:b3:00.0\n", "(PCI ID: 10de:2330)\n", "installed in this system has\n",
    "fallen off the bus and is not responding to commands.\n", "NVRM: GPU at PCI:0000:3b:00: GPU-",
    "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 24007, ", "message repeated 3 times: [ ",
    "last message repeated 99999999999999999999 times", "]", "[  123.456789] ", "[Tue Dec  1 20:20:41 2099] ",
    "Feb 15 17:37:45 n1 kernel: ", "2099-12-01T20:20:41.123456+00:00 n1 kernel: ", '{"log": "',
    '", "time": "9999-12-31T23:59:59Z"}', '{"MESSAGE": "', '"}', "\x00", "\ud800", "\n", " ", "é",
]
kernel_text = st.one_of(
    st.text(max_size=400),
    st.lists(st.one_of(st.sampled_from(KERNEL_PIECES), st.text(max_size=8)), max_size=40).map("".join),
)


@PROPERTY
@given(kernel_text, st.one_of(st.none(), st.integers(min_value=1, max_value=9999)))
def test_any_text_into_the_kernel_log_parser_gives_events(text, year):
    events = kernel_log.parse_text(text, assume_tz=UTC, year=year)
    for event in events:
        assert isinstance(event, kernel_log.KernelEvent)
        assert event.kind in {kernel_log.KIND_XID, kernel_log.KIND_FALLEN_OFF_BUS, kernel_log.KIND_GPU_MAPPING,
                              kernel_log.KIND_SXID}
        json.dumps(kernel_log.to_json(event), default=str)


GPU = '{gpu="0",UUID="GPU-8d3c1b9e-1111-2222-3333-444455556666",Hostname="n1",modelName="NVIDIA H100"}'
DCGM_PIECES = [
    "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n",
    "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n", "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n", "# TYPE x counter\n",
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "_total", GPU,
    '{gpu="1",UUID="MIG-1",GPU_I_ID="3",GPU_I_PROFILE="1g.10gb"}', '{gpu="x"}', "{", "}", '"', "=", ",",
    " 79", " -5", " 79.5", " 2147483648", " NaN", " +Inf", " 1e400", " 0x10", " 1 1700000000000", "\n",
    "\x00", "\ud800", " ", "#", "# EOF\n",
]
dcgm_text = st.one_of(
    st.text(max_size=400),
    st.lists(st.one_of(st.sampled_from(DCGM_PIECES), st.text(max_size=6)), max_size=40).map("".join),
)


def _readings_or_clear_error(parse, text):
    try:
        readings = parse(text)
    except ValueError as exc:
        assert str(exc)  # names what was rejected
        return None
    for reading in readings:
        assert isinstance(reading, DcgmSample)
        json.dumps(reading.to_json())
    return readings


@PROPERTY
@given(dcgm_text)
def test_any_text_into_the_dcgm_parser_gives_readings_or_a_value_error(text):
    fast = _readings_or_clear_error(parse_exposition, text)
    reference = _readings_or_clear_error(parse_exposition_reference, text)
    # The fast path is an optimisation: it never reads what the reference refuses, or differently.
    assert (fast is None) == (reference is None)
    if fast is not None:
        assert [r.to_json() for r in fast] == [r.to_json() for r in reference]


@PROPERTY
@given(st.binary(max_size=300))
def test_any_bytes_into_the_dcgm_parser_gives_readings_or_a_value_error(data):
    _readings_or_clear_error(parse_exposition, data)
