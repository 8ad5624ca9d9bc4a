"""Policy decisions, dedup keys, storm collapsing and watchdogs."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from health.core.dcgm import DcgmSample
from health.core.kernel_log import parse_lines
from health.core.policy import (
    AnnotateWorkload,
    CordonNode,
    HealthSignal,
    MarkGpu,
    MarkNodesSuspect,
    OpenRepairTicket,
    PolicyContext,
    Quarantine,
    Requeue,
    SignalKind,
    StopGangsOnNode,
    WorkloadProgress,
    WorkloadRef,
    collapse,
    decide,
    make_dedup_key,
    signal_from_kernel_event,
    signals_from_reading,
    stale_nodes,
    watchdog,
)
from health.core.xid_catalog import Action

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CTX = PolicyContext(now=NOW, workloads=(WorkloadRef("train-a", ("GPU-0", "GPU-1")), WorkloadRef("eval-b", ("GPU-2",))))


def kinds(actions) -> list[str]:
    return [a.kind for a in actions]


def xid(code: int, evidence: str = "", gpu: str | None = "GPU-0") -> HealthSignal:
    return HealthSignal(kind=SignalKind.XID, node="n3", gpu_uuid=gpu, xid=code, evidence=evidence, at=NOW)


REMEDIATION = ["cordon_node", "mark_gpu", "stop_gangs_on_node", "open_repair_ticket"]


@pytest.mark.parametrize(
    ("signal", "want"),
    [
        pytest.param(xid(13), ["annotate_workload"], id="xid 13 is the job's fault: annotate it only"),
        pytest.param(xid(31), ["annotate_workload"], id="xid 31 annotate"),
        pytest.param(xid(43), ["annotate_workload"], id="xid 43 annotate"),
        pytest.param(xid(45), ["annotate_workload"], id="xid 45 never acts on the GPU alone"),
        pytest.param(xid(44), [], id="xid 44 is logged only"),
        pytest.param(xid(79), REMEDIATION, id="xid 79 remediates the node"),
        pytest.param(xid(48), REMEDIATION, id="xid 48 remediates"),
        pytest.param(xid(74), REMEDIATION, id="xid 74 remediates"),
        pytest.param(xid(119), REMEDIATION, id="xid 119 remediates"),
        pytest.param(xid(63, "New row marked for remapping, reset gpu to activate."), ["mark_gpu"],
                     id="xid 63 successful remap marks the GPU suspect"),
        pytest.param(xid(63, "Row remapping failed"), REMEDIATION, id="xid 63 failed remap remediates"),
        pytest.param(xid(154, "changed from 0x0 (None) to 0x2 (Node Reboot Required)"), REMEDIATION,
                     id="xid 154 follows its recovery action"),
        pytest.param(xid(154, "changed from 0x1 (GPU Reset Required) to 0x0 (None)"), [], id="xid 154 back to none"),
        pytest.param(xid(999), ["mark_gpu", "open_repair_ticket"], id="unknown xid alerts"),
        pytest.param(HealthSignal(kind=SignalKind.FALLEN_OFF_BUS, node="n3", pci_bus_id="0000:b3:00"),
                     ["cordon_node", "stop_gangs_on_node", "open_repair_ticket"],
                     id="fallen off the bus without a known GPU still remediates the node"),
        pytest.param(HealthSignal(kind=SignalKind.ECC_DBE, node="n3", gpu_uuid="GPU-1"), REMEDIATION, id="ecc dbe"),
        pytest.param(HealthSignal(kind=SignalKind.ROW_REMAP_FAILURE, node="n3", gpu_uuid="GPU-1"), REMEDIATION,
                     id="row remap failure"),
        pytest.param(HealthSignal(kind=SignalKind.DCGM_HEALTH, node="n3", gpu_uuid="GPU-1"), REMEDIATION,
                     id="dcgm health fail"),
        pytest.param(HealthSignal(kind=SignalKind.DCGM_HEALTH, node="n3", gpu_uuid="GPU-1", severity="warning"),
                     ["mark_gpu"], id="dcgm health warning"),
        pytest.param(HealthSignal(kind=SignalKind.HANG, node="n3", workload_id="train-a"),
                     ["annotate_workload", "requeue"], id="hang"),
        pytest.param(HealthSignal(kind=SignalKind.OOM, node="n3", workload_id="eval-b"), ["annotate_workload"],
                     id="oom is the job's problem"),
        pytest.param(HealthSignal(kind=SignalKind.HEARTBEAT_LOST, node="n3"), ["cordon_node", "mark_nodes_suspect"],
                     id="heartbeat lost cordons but leaves gangs to the watchdog"),
    ],
)
def test_decision_table(signal, want):
    assert kinds(decide(signal, CTX)) == want


def test_remediation_carries_evidence_and_remedy():
    actions = decide(xid(79, "GPU has fallen off the bus."), CTX)
    cordon, mark, stop, ticket = actions
    assert cordon == CordonNode("n3", reason=cordon.reason)
    assert "Xid 79" in cordon.reason and "GPU has fallen off the bus." in cordon.reason
    assert mark == MarkGpu("GPU-0", "unhealthy")
    assert stop == StopGangsOnNode("n3", requeue=True)
    assert isinstance(ticket, OpenRepairTicket) and ticket.remedy == "reboot_node" and ticket.node == "n3"
    assert ticket.to_dict()["kind"] == "open_repair_ticket"


def test_application_faults_annotate_only_the_workloads_on_that_gpu():
    assert decide(xid(13, "Graphics Exception", gpu="GPU-2"), CTX) == [
        AnnotateWorkload("eval-b", "Xid 13 (ROBUST_CHANNEL_GR_EXCEPTION) on n3 GPU GPU-2: Graphics Exception")
    ]
    assert [a.workload_id for a in decide(xid(13, gpu=None), CTX)] == ["train-a", "eval-b"]


def nccl(at: datetime = NOW) -> HealthSignal:
    return HealthSignal(kind=SignalKind.NCCL_TIMEOUT, node="n1", nodes=("n1", "n2"), workload_id="train-a", at=at)


def test_nccl_timeout_requeues_and_suspects_every_node_of_the_job():
    assert decide(nccl(), PolicyContext(now=NOW)) == [
        Requeue("train-a", reason="nccl timeout on n1"), MarkNodesSuspect(("n1", "n2")),
    ]


def test_third_nccl_offence_in_24h_quarantines_only_the_repeat_offender():
    earlier = {"n1": [NOW - timedelta(hours=2), NOW - timedelta(hours=20)], "n2": [NOW - timedelta(hours=25)] * 5}
    actions = decide(nccl(), PolicyContext(now=NOW, nccl_offences=earlier))
    assert actions[-1] == Quarantine("n1", reason="3 NCCL timeouts within 24 h")
    assert kinds(actions) == ["requeue", "mark_nodes_suspect", "quarantine"]


def test_dedup_key_is_stable_and_distinguishes_events():
    a = make_dedup_key(node="n1", gpu_uuid="GPU-0", kind="xid", xid=79, at=NOW)
    assert a == make_dedup_key(node="n1", gpu_uuid="GPU-0", kind="xid", xid=79, at=NOW)
    assert len(a) == 64
    assert a != make_dedup_key(node="n1", gpu_uuid="GPU-0", kind="xid", xid=79, at=NOW + timedelta(seconds=1))
    assert a != make_dedup_key(node="n2", gpu_uuid="GPU-0", kind="xid", xid=79, at=NOW)
    raw1 = make_dedup_key(node="n1", gpu_uuid=None, kind="xid", xid=13, raw="[1.0] NVRM: Xid ...")
    assert raw1 == HealthSignal(kind=SignalKind.XID, node="n1", xid=13, raw="[1.0] NVRM: Xid ...").dedup_key
    assert raw1 != make_dedup_key(node="n1", gpu_uuid=None, kind="xid", xid=13, raw="[2.0] NVRM: Xid ...")


def test_a_storm_of_500_identical_lines_is_one_event_with_count_500():
    line = "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM"
    events = parse_lines([line] * 500)
    signals = [signal_from_kernel_event(e, node="n7", gpu_uuid="GPU-0") for e in events]
    assert len({s.dedup_key for s in signals}) == 1
    (storm,) = collapse(signals)
    assert storm.count == 500 and storm.xid == 13 and storm.gpu_uuid == "GPU-0"
    assert "(x500)" in decide(storm, CTX)[0].text


def test_collapse_splits_on_the_window_and_on_the_gpu():
    def sig(gpu: str, seconds: int) -> HealthSignal:
        return HealthSignal(kind=SignalKind.XID, node="n", gpu_uuid=gpu, xid=31, at=NOW + timedelta(seconds=seconds))

    out = collapse([sig("a", 0), sig("a", 30), sig("b", 31), sig("a", 60), sig("a", 61), sig("a", 90)], window_s=60)
    assert [(s.gpu_uuid, s.count, s.at, s.last_at) for s in out] == [
        ("a", 3, NOW, NOW + timedelta(seconds=60)),
        ("b", 1, NOW + timedelta(seconds=31), None),
        ("a", 2, NOW + timedelta(seconds=61), NOW + timedelta(seconds=90)),
    ]


def test_repeat_counts_from_the_log_add_up():
    events = parse_lines([
        "May  7 09:01:02 h kernel: message repeated 3 times: [ NVRM: Xid (PCI:0000:3b:00): 13, Graphics]",
        "May  7 09:01:02 h kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics",
    ])
    (storm,) = collapse([signal_from_kernel_event(e, node="h") for e in events])
    assert storm.count == 4


def test_gpu_mapping_events_are_not_signals():
    (event,) = parse_lines(["NVRM: GPU at PCI:0000:3b:00: GPU-5c8e2f3a-1111-2222-3333-444455556666"])
    assert signal_from_kernel_event(event, node="n") is None


def test_level_signals_from_a_dcgm_reading_dedupe_across_scrapes():
    reading = DcgmSample(uuid="GPU-9", gpu_index=0, hostname="n9", ecc_dbe_volatile=2, row_remap_failure=1,
                         row_remap_pending=1, health_status=10, xid_last=48)
    first = signals_from_reading(reading, node="n9")
    again = signals_from_reading(reading, node="n9")
    assert [s.kind for s in first] == ["ecc_dbe", "row_remap_failure", "row_remap_pending", "dcgm_health", "xid"]
    assert [s.dedup_key for s in first] == [s.dedup_key for s in again]
    assert first[3].severity == "warning" and first[4].action is Action.RESET_GPU
    assert signals_from_reading(DcgmSample(uuid="GPU-9", gpu_index=0, hostname="n9", xid_last=0), node="n9") == []


def test_watchdog_flags_first_and_requeues_on_a_later_check():
    last = NOW - timedelta(seconds=1000)
    first = watchdog([WorkloadProgress("w", last), WorkloadProgress("ok", NOW - timedelta(seconds=10))], NOW)
    assert (first.flag, first.requeue, first.clear) == (("w",), (), ())
    later = watchdog([WorkloadProgress("w", last, flagged_at=NOW)], NOW + timedelta(seconds=60))
    assert (later.flag, later.requeue) == ((), ("w",))
    progressed = WorkloadProgress("w", NOW + timedelta(seconds=30), flagged_at=NOW)
    recovered = watchdog([progressed], NOW + timedelta(seconds=60))
    assert (recovered.flag, recovered.requeue, recovered.clear) == ((), (), ("w",))
    # Flagged in an earlier stale period, then progressed, then stale again: flag anew, do not requeue.
    again = watchdog([WorkloadProgress("w", NOW, flagged_at=NOW - timedelta(hours=1))], NOW + timedelta(seconds=901))
    assert (again.flag, again.requeue) == (("w",), ())


def test_stale_nodes():
    seen = {"a": NOW - timedelta(seconds=121), "b": NOW - timedelta(seconds=5), "c": None}
    seen["d"] = NOW - timedelta(hours=1)
    assert stale_nodes(seen, NOW) == ["a", "d"]
    assert stale_nodes(seen, NOW, after_s=3600) == ["d"]
