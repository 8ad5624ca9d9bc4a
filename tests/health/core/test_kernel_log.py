"""Kernel-log parsing against the real lines in ../shared/telemetry/xid and hand-written format variants."""
from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from health.core.kernel_log import (
    KIND_FALLEN_OFF_BUS,
    KIND_GPU_MAPPING,
    KIND_SXID,
    KIND_XID,
    parse_lines,
    parse_text,
    to_json,
)
from health.core.xid_catalog import Action, Category

# Hand-checked against each line of xid_lines.txt.
EXPECTED_PCI = (
    ["0000:cb:00"] * 4 + ["0000:41:00"] * 3 + ["0000:43:00"] + ["0000:01:00"] * 2 + ["0000:08:00"] * 2
    + ["0000:00:08"] + ["0000:07:00"] * 2 + ["0000:01:00"] * 5 + ["0000:02:00", "0000:2b:00", "0000:65:00",
    "0000:10:00", "0000:10:1c"] + ["0000:9b:00"] * 4 + ["0003:00:00"] + ["0000:52:00"] * 3
)
EXPECTED_CATEGORY = {
    13: Category.APPLICATION, 31: Category.APPLICATION, 32: Category.PCIE, 44: Category.DRIVER,
    45: Category.SYMPATHETIC, 48: Category.MEMORY, 62: Category.FIRMWARE, 63: Category.MEMORY, 64: Category.MEMORY,
    74: Category.NVLINK, 79: Category.PCIE, 94: Category.MEMORY, 109: Category.HARDWARE, 119: Category.FIRMWARE,
    120: Category.FIRMWARE, 154: Category.RECOVERY,
}


def expected_xids(xid_dir) -> list[int]:
    """The `Xid` column of the SOURCES.md table: one row per line of xid_lines.txt."""
    rows = re.findall(r"^\| (\d+) \| (\d+) \|", (xid_dir / "SOURCES.md").read_text(), flags=re.M)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1))
    return [int(xid) for _, xid in rows]


def test_every_real_line_yields_its_xid_pci_and_category(xid_dir):
    lines = (xid_dir / "xid_lines.txt").read_text().splitlines()
    xids = expected_xids(xid_dir)
    assert len(lines) == len(xids) == len(EXPECTED_PCI) == 33
    events = parse_lines(lines)
    assert [e.line for e in events] == list(range(1, 34))
    assert [e.kind for e in events] == [KIND_XID] * 33
    assert [e.xid for e in events] == xids
    assert [e.pci_bus_id for e in events] == EXPECTED_PCI
    assert [e.category for e in events] == [EXPECTED_CATEGORY[x] for x in xids]


def test_real_lines_keep_pid_name_host_and_time(xid_dir):
    events = parse_lines((xid_dir / "xid_lines.txt").read_text().splitlines())
    first, ctxsw, syslog, bare = events[0], events[3], events[13], events[15]
    assert (first.pid, first.process_name) == (None, None)  # pid='<unknown>', name=<unknown>
    assert first.at == datetime(2024, 8, 30, 11, 43, 9, tzinfo=UTC)
    assert first.message.startswith("Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0)")
    assert (ctxsw.pid, ctxsw.process_name) == (1797828, "pt_main_thread")
    assert ctxsw.message == "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"
    assert (syslog.host, syslog.timestamp, syslog.uptime_s) == ("worker4", "Dec  2 11:38:47", 219.470994)
    assert syslog.at is None  # syslog has no year unless the caller supplies one
    assert bare.timestamp is None and bare.message.startswith("323f0f30 0000c3d8")
    assert events[16].host is None and events[20].host == "Kyrios"
    assert (events[23].pid, events[23].message) == (0, "GPU has fallen off the bus.")
    assert (events[24].pid, events[24].process_name) == (1896, None)
    assert (events[19].pid, events[19].process_name) == (12542, "VLLM::Worker")
    assert events[28].process_name == "gpud"


def test_real_lines_get_actions_from_their_text(xid_dir):
    events = parse_lines((xid_dir / "xid_lines.txt").read_text().splitlines())
    by_line = {e.line: e for e in events}
    assert by_line[1].action is Action.ANNOTATE_WORKLOAD
    assert by_line[18].recovery_action == "GPU Reset Required" and by_line[18].action is Action.RESET_GPU
    assert by_line[15].action is Action.RESET_GPU  # "Blacklisting failed"
    assert by_line[25].action is Action.MARK_SUSPECT and by_line[32].action is Action.MARK_SUSPECT
    assert by_line[22].action is Action.REBOOT_NODE
    assert by_line[30].action is Action.DRAIN_AND_RESET


def test_near_misses_never_yield_an_xid(xid_dir):
    events = parse_lines((xid_dir / "xid_near_misses.txt").read_text().splitlines())
    assert all(e.xid is None for e in events)
    assert [(e.line, e.kind, e.pci_bus_id) for e in events] == [
        (1, KIND_FALLEN_OFF_BUS, "0000:b3:00"),
        (5, KIND_FALLEN_OFF_BUS, "0000:2b:00"),
        (7, KIND_SXID, "0000:aa:00"),
    ]
    fallen = events[0]
    assert fallen.action is Action.REBOOT_NODE and fallen.uptime_s == 1843.308145
    assert fallen.raw.count("\n") == 2 and "fallen off the bus" in fallen.raw
    sxid = events[2]
    assert sxid.sxid == 24007 and sxid.host == "192.168.11.119" and sxid.category is Category.NVSWITCH
    assert sxid.at == datetime(2026, 4, 22, 21, 25, 20, 466440, tzinfo=UTC)


XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."


@pytest.mark.parametrize(
    ("line", "pci", "xid"),
    [
        (f"[ 1843.308145] {XID79}", "0000:3b:00", 79),
        (f"[Tue May  7 09:01:02 2024] {XID79}", "0000:3b:00", 79),
        (f"May  7 09:01:02 gpu-017 kernel: [ 1843.308145] {XID79}", "0000:3b:00", 79),
        (f"May  7 09:01:02 kernel: {XID79}", "0000:3b:00", 79),
        (f"2024-05-07T09:01:02.123456+02:00 gpu-017 kernel: {XID79}", "0000:3b:00", 79),
        (f"2024-05-07T09:01:02+0000 gpu-017 kernel: {XID79}", "0000:3b:00", 79),
        (f"2024-05-07T09:01:02,123456+00:00 {XID79}", "0000:3b:00", 79),  # dmesg --time-format iso
        ("NVRM: Xid (0000:01:00): 13, 0001 00000000 0000a097 00001b0c 00000000 00000000", "0000:01:00", 13),
        ("NVRM: Xid (01:00): 13, 0001 00000000 0000a097", "0000:01:00", 13),
        ("NVRM: Xid (PCI:0001:C1:00): 74, pid=77, name=nccl, NVLink: fatal error detected on link 3(0x0)",
         "0001:c1:00", 74),
        ("NVRM: Xid (PCI:00000002:1A:00.0): 48, An uncorrectable double bit error", "0002:1a:00", 48),
    ],
)
def test_prefix_and_pci_variants(line, pci, xid):
    (event,) = parse_lines([line])
    assert (event.kind, event.xid, event.pci_bus_id) == (KIND_XID, xid, pci)


def test_prefix_details_are_extracted():
    iso, plus0000, dmesg_t = parse_lines([
        f"2024-05-07T09:01:02.123456789+02:00 gpu-017 kernel: {XID79}",
        f"2024-05-07T09:01:02+0000 gpu-018 kernel: {XID79}",
        f"[Tue May  7 09:01:02 2024] {XID79}",
    ])
    assert iso.host == "gpu-017"
    assert iso.at == datetime(2024, 5, 7, 9, 1, 2, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert plus0000.host == "gpu-018" and plus0000.at == datetime(2024, 5, 7, 9, 1, 2, tzinfo=UTC)
    assert dmesg_t.at == datetime(2024, 5, 7, 9, 1, 2, tzinfo=UTC)
    (syslog,) = parse_lines([f"May  7 09:01:02 gpu-017 kernel: {XID79}"], year=2024)
    assert syslog.at == datetime(2024, 5, 7, 9, 1, 2, tzinfo=UTC)


def test_quoted_and_unquoted_pid_and_name():
    quoted, bare, unknown, double = parse_lines([
        "NVRM: Xid (PCI:0000:3b:00): 13, pid='4242', name='python3', Graphics Exception: ESR 0x1",
        "NVRM: Xid (PCI:0000:3b:00): 13, pid=4243, name=pt_main_thread, Graphics Exception: ESR 0x2",
        "NVRM: Xid (PCI:0000:3b:00): 31, pid='<unknown>', name=<unknown>, Ch 00000010, intr 0",
        'NVRM: Xid (PCI:0000:3b:00): 31, pid="99", name="my app", MMU Fault',
    ])
    assert (quoted.pid, quoted.process_name, quoted.message) == (4242, "python3", "Graphics Exception: ESR 0x1")
    assert (bare.pid, bare.process_name) == (4243, "pt_main_thread")
    assert (unknown.pid, unknown.process_name, unknown.message) == (None, None, "Ch 00000010, intr 0")
    assert (double.pid, double.process_name, double.message) == (99, "my app", "MMU Fault")


def test_caused_by_previous_xid_is_kept():
    (event,) = parse_lines([
        "NVRM: Xid (PCI:0000:3b:00): 45, pid=1234, name=python, Ch 00000010, caused by previous Xid 79"
    ])
    assert event.caused_by_xid == 79 and event.action is Action.ANNOTATE_WORKLOAD


def test_log_shipper_json_envelopes_are_unwrapped():
    docker = json.dumps({"log": f"[  100.5] {XID79}\n", "stream": "stderr", "time": "2024-05-07T09:01:02.5Z"})
    journald = json.dumps({
        "MESSAGE": "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s",
        "_HOSTNAME": "gpu-9", "__REALTIME_TIMESTAMP": "1714557600000000",
    })
    vector = json.dumps({"message": f"May  7 09:01:02 gpu-3 kernel: {XID79}", "host": "collector"})
    a, b, c = parse_lines([docker, journald, vector])
    assert (a.xid, a.pci_bus_id, a.uptime_s, a.message) == (79, "0000:3b:00", 100.5, "GPU has fallen off the bus.")
    assert a.at == datetime(2024, 5, 7, 9, 1, 2, 500000, tzinfo=UTC)
    assert (b.xid, b.host, b.process_name) == (119, "gpu-9", "nvidia-smi")
    assert b.at == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    assert (c.xid, c.host) == (79, "gpu-3")  # the line's own host name beats the shipper's


def test_repeated_and_glued_lines():
    events = parse_lines([
        "May  7 09:01:02 gpu-1 kernel: message repeated 3 times: [ NVRM: Xid (PCI:0000:3b:00): 13, "
        "pid=1, name=a, Graphics Exception: ESR 0x1]",
        "May  7 09:01:03 gpu-1 kernel: NVRM: Xid (PCI:0000:3b:00): 31, pid=2, name=b, MMU Fault",
        "May  7 09:01:33 gpu-1 rsyslogd: last message repeated 4 times",
        f"[ 5.1] {XID79} [ 5.2] NVRM: Xid (PCI:0000:3c:00): 79, pid=0, GPU has fallen off the bus.",
    ])
    assert [(e.line, e.xid, e.repeat) for e in events] == [(1, 13, 3), (2, 31, 5), (4, 79, 1), (4, 79, 1)]
    assert events[0].message == "Graphics Exception: ESR 0x1"
    assert [e.pci_bus_id for e in events[2:]] == ["0000:3b:00", "0000:3c:00"]
    assert events[2].message == "GPU has fallen off the bus. [ 5.2]"


def test_gpu_mapping_lines_teach_pci_to_uuid():
    (event,) = parse_lines(["[    5.123] NVRM: GPU at PCI:0000:3b:00: GPU-5c8e2f3a-1111-2222-3333-444455556666"])
    assert (event.kind, event.xid, event.pci_bus_id) == (KIND_GPU_MAPPING, None, "0000:3b:00")
    assert event.uuid == "GPU-5c8e2f3a-1111-2222-3333-444455556666" and event.action is Action.NONE


def test_fallen_off_bus_is_found_across_lines_and_on_one_line():
    text = "\n".join([
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
        "               NVRM: fallen off the bus and is not responding to commands.",
        "[ 1843.5] NVRM: The NVIDIA GPU 0000:c1:00.0 (PCI ID: 10de:2330) installed in this system has fallen off"
        " the bus and is not responding to commands.",
        "[ 1844.0] NVRM: The NVIDIA GPU 0000:d1:00.0 (PCI ID: 10de:1e04)",
        "[ 1844.0] NVRM: installed in this system is not supported by the NVIDIA 535.129.03 driver release.",
    ])
    events = parse_text(text)
    assert [(e.line, e.kind, e.pci_bus_id) for e in events] == [
        (1, KIND_FALLEN_OFF_BUS, "0000:b3:00"), (4, KIND_FALLEN_OFF_BUS, "0000:c1:00"),
    ]


def test_noise_is_not_reported():
    lines = [
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023",
        "python[123]: starting Xid watcher",
        "NVRM: GPU0 _kgspRpcGspEventPmuHalted: Received signal from GSP that PMU has halted.",
        "NVRM: _kgspLogXid119: ********************************* GSP Timeout **********************************",
        "kernel: usb 1-1: new high-speed USB device number 2 using xhci_hcd",
    ]
    assert parse_lines(lines) == []


def test_xid_154_recovery_action_variants():
    events = parse_lines([
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
    ])
    assert [(e.recovery_action, e.action) for e in events] == [
        ("Node Reboot Required", Action.REBOOT_NODE), ("Drain and Reset", Action.DRAIN_AND_RESET),
    ]


def test_to_json_has_the_stable_core_first(xid_dir):
    (event,) = parse_lines((xid_dir / "xid_lines.txt").read_text().splitlines()[3:4])
    data = to_json(event)
    assert list(data)[:6] == ["line", "kind", "xid", "pci_bus_id", "category", "action"]
    assert data["line"] == 1 and data["category"] == "hardware" and data["action"] == "reset_gpu"
    assert data["pid"] == 1797828 and data["at"] == "2024-08-30T11:43:14+00:00"
    json.dumps(data)


@pytest.mark.parametrize(
    ("line", "host", "at", "uptime"),
    [
        # journalctl -k (short): the host name after the stamp
        (f"May 07 09:01:02 gpu-017 kernel: {XID79}", "gpu-017", datetime(2024, 5, 7, 9, 1, 2, tzinfo=UTC), None),
        # journalctl -o short-precise
        (f"May 07 09:01:02.123456 gpu-017 kernel: {XID79}", "gpu-017",
         datetime(2024, 5, 7, 9, 1, 2, 123456, tzinfo=UTC), None),
        # journalctl -o short-monotonic
        (f"[ 1843.308145] gpu-017 kernel: {XID79}", "gpu-017", None, 1843.308145),
        # journalctl -o short-iso
        (f"2024-05-07T09:01:02+0200 gpu-017 kernel: {XID79}", "gpu-017",
         datetime(2024, 5, 7, 9, 1, 2, tzinfo=timezone(timedelta(hours=2))), None),
        # rsyslog forwarding with the priority kept (RFC 3164), and RFC 5424 with its version and dashes
        (f"<4>May  7 09:01:02 gpu-017 kernel: {XID79}", "gpu-017", datetime(2024, 5, 7, 9, 1, 2, tzinfo=UTC), None),
        (f"<4>1 2024-05-07T09:01:02.5Z gpu-017 kernel - - - {XID79}", "gpu-017",
         datetime(2024, 5, 7, 9, 1, 2, 500000, tzinfo=UTC), None),
        # syslog without a host name, with the kernel's own uptime stamp
        (f"May  7 09:01:02 kernel: [ 1843.308145] {XID79}", None, datetime(2024, 5, 7, 9, 1, 2, tzinfo=UTC),
         1843.308145),
        # dmesg -x (facility and level), dmesg -r (raw priority)
        (f"kern  :warn  : [Tue May  7 09:01:02 2024] {XID79}", None, datetime(2024, 5, 7, 9, 1, 2, tzinfo=UTC), None),
        (f"<4>[ 1843.308145] {XID79}", None, None, 1843.308145),
    ],
)
def test_journal_and_syslog_variants_keep_host_and_time(line, host, at, uptime):
    (event,) = parse_lines([line], year=2024)
    assert (event.kind, event.xid, event.pci_bus_id, event.category) == (KIND_XID, 79, "0000:3b:00", Category.PCIE)
    assert (event.host, event.at, event.uptime_s) == (host, at, uptime)
