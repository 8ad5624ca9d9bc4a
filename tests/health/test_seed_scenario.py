"""The seed's "When hardware fails" example through the real ingestion path: n3 raises Xid 79."""
from __future__ import annotations

from core.models import AuditEvent
from fleet.choices import GpuHealth, NodeState
from fleet.models import Gpu, Node
from health.choices import TicketState
from health.models import HealthEvent, RepairTicket
from scheduling.choices import WorkloadState
from scheduling.models import Allocation, Workload
from scheduling.services import executor_tick
from tests.cluster import nodes_of, run_round, submit, training

from .conftest import agent_client, xid_line


def _eval(i: int) -> dict:
    return {"name": f"eval-{i}", "team": "research", "priority_class": "eval",
            "pod_sets": [{"name": "main", "replicas": 1, "gpus_per_replica": 2, "flavor": "H100-SXM-80GB"}]}


def _place_the_seed_jobs(team_member, clock):
    client = api_for_member(team_member)
    a = submit(client, **training("train-A", 32, topology={"level": "rack", "mode": "preferred"},
                                  checkpoint={"enabled": True, "write_seconds": 120}, checkpoint_interval_seconds=600))
    b = submit(client, **training("train-B", 16, topology={"level": "rack", "mode": "preferred"}))
    evals = [submit(client, **_eval(i)) for i in range(4)]
    run_round(clock)
    assert nodes_of(a["id"]) == ["n1", "n2", "n3", "n4"]
    assert nodes_of(b["id"]) == ["n5", "n6"]
    return a, b, evals


def api_for_member(user):
    from tests.cluster import api_for

    return api_for(user)


def test_an_xid_79_line_from_n3_cordons_it_restarts_train_a_elsewhere_and_opens_a_ticket(
    research_queue, with_pci, team_member, clock
):
    a, b, evals = _place_the_seed_jobs(team_member, clock)
    clock.advance(1500)
    executor_tick(now=clock.now)
    line = xid_line("n3", 5)

    response = agent_client("n3").post("/api/v1/telemetry/kernel-log/", {"node": "n3", "lines": [line]},
                                       format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["events_created"] == 1
    assert [a_["kind"] for a_ in body["actions"]] == ["cordon_node", "mark_gpu", "stop_gangs_on_node",
                                                      "open_repair_ticket"]
    n3 = Node.objects.get(name="n3")
    assert n3.state == NodeState.IN_REPAIR
    assert "Xid 79" in n3.cordon_reason and "0000:6a:00" in n3.cordon_reason
    assert n3.cordoned_by == "automation:health"
    gpu = Gpu.objects.get(node=n3, index=5)
    assert gpu.health == GpuHealth.UNHEALTHY
    event = HealthEvent.objects.get()
    assert (event.kind, event.xid, event.gpu_id, event.pci_bus_id, event.severity) == (
        "xid", 79, gpu.pk, "0000:6a:00", "fatal")
    assert event.action == "reboot_node"

    train_a = Workload.objects.get(pk=a["id"])
    assert train_a.state == WorkloadState.REQUEUED
    assert not Allocation.objects.filter(workload=train_a, released_at__isnull=True).exists()  # every replica
    assert train_a.lost_gpu_seconds == 32 * 300
    stop = next(x for x in body["actions"] if x["kind"] == "stop_gangs_on_node")
    assert stop["stopped"] == [{"workload": train_a.pk, "name": "train-A", "lost_gpu_seconds": 9600.0}]
    ticket = RepairTicket.objects.get()
    assert ticket.node == n3 and ticket.state == TicketState.OPEN and "Xid 79" in ticket.evidence
    assert list(ticket.events.all()) == [event]
    # Cordon first, then the rest: the audit trail keeps the order.
    verbs = list(AuditEvent.objects.order_by("pk").values_list("verb", flat=True))
    tail = verbs[verbs.index("node.cordon"):]
    assert tail.index("node.cordon") < tail.index("gpu.health") < tail.index("workload.stop_gang") < tail.index(
        "ticket.open") < tail.index("node.in_repair")

    run_round(clock)

    assert nodes_of(a["id"]) == ["n1", "n2", "n4", "n8"]
    assert Workload.objects.get(pk=a["id"]).state == WorkloadState.RUNNING
    assert nodes_of(b["id"]) == ["n5", "n6"]
    for e in evals:
        assert nodes_of(e["id"]) == ["n7"]


def test_the_same_line_twice_acts_once(research_queue, with_pci, team_member, clock):
    _place_the_seed_jobs(team_member, clock)
    client = agent_client("n3")
    body = {"node": "n3", "lines": [xid_line("n3", 2)]}

    first = client.post("/api/v1/telemetry/kernel-log/", body, format="json").json()
    second = client.post("/api/v1/telemetry/kernel-log/", body, format="json").json()

    assert first["events_created"] == 1 and len(first["actions"]) == 4
    assert second["events_created"] == 0 and second["duplicates"] == 1 and second["actions"] == []
    assert HealthEvent.objects.get().count == 1
    assert RepairTicket.objects.count() == 1
    assert AuditEvent.objects.filter(verb="node.cordon").count() == 1


def test_a_storm_of_500_identical_lines_is_one_event_with_count_500_and_one_action(
    research_queue, with_pci, team_member, clock
):
    _place_the_seed_jobs(team_member, clock)
    line = "[ 1234.5] NVRM: Xid (PCI:0000:3a:00): 48, pid=1, name=python, An uncorrectable double bit error"

    body = agent_client("n5").post("/api/v1/telemetry/kernel-log/", {"node": "n5", "lines": [line] * 500},
                                   format="json").json()

    assert body["events_created"] == 1
    event = HealthEvent.objects.get()
    assert event.count == 500 and event.xid == 48
    assert [a["kind"] for a in event.actions_taken].count("cordon_node") == 1
    assert AuditEvent.objects.filter(verb="node.cordon").count() == 1
    assert Workload.objects.get(name="train-B").state == WorkloadState.REQUEUED

    # More of the same storm a few seconds later only grows the counter.
    clock.advance(10)
    more = agent_client("n5").post("/api/v1/telemetry/kernel-log/",
                                   {"node": "n5", "lines": [line.replace("1234.5", "1240.1")] * 20},
                                   format="json").json()
    assert more["events_created"] == 0 and more["events_repeated"] == 1
    event.refresh_from_db()
    assert event.count == 520
    assert RepairTicket.objects.count() == 1


def test_an_application_xid_annotates_the_workload_and_cordons_nothing(research_queue, with_pci, team_member, clock):
    a, _, _ = _place_the_seed_jobs(team_member, clock)
    line = "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:2a:00): 13, pid='<unknown>', name=<unknown>, Graphics SM"

    body = agent_client("n2").post("/api/v1/telemetry/kernel-log/", {"node": "n2", "lines": [line]},
                                   format="json").json()

    event = HealthEvent.objects.get()
    assert event.workload_id == a["id"] and event.category == "application"
    assert [x["kind"] for x in body["actions"]] == ["annotate_workload"]
    assert Node.objects.get(name="n2").state == NodeState.READY
    assert Workload.objects.get(pk=a["id"]).state == WorkloadState.RUNNING
    assert AuditEvent.objects.filter(verb="workload.health_note", target_id=str(a["id"])).exists()


def test_an_undated_line_is_one_event_until_the_node_has_been_repaired(cluster, with_pci, clock):
    """`dmesg -t` / `journalctl -o cat` lines carry no date: a replay is the same event, but the same
    fault after a repair and a passed burn-in is a new one and takes the node out again."""
    from core.actors import Actor
    from health.services import burn_in_record, ticket_transition

    ops = Actor.automation("test-operator")
    line = "NVRM: Xid (PCI:0000:3a:00): 79, pid=0, GPU has fallen off the bus."
    client = agent_client("n4")
    post = {"node": "n4", "lines": [line]}
    assert client.post("/api/v1/telemetry/kernel-log/", post, format="json").json()["events_created"] == 1
    assert client.post("/api/v1/telemetry/kernel-log/", post, format="json").json()["duplicates"] == 1
    ticket = RepairTicket.objects.get(node__name="n4")
    for to in ("diagnosing", "repaired", "burn_in"):
        ticket_transition(ticket=ticket, to_state=to, reason=to, actor=ops)
    burn_in_record(ticket=ticket, passed=True, details="reseated, dcgmi diag -r 3 passed", actor=ops)
    assert Node.objects.get(name="n4").state == NodeState.READY
    clock.advance(3 * 3600)

    again = client.post("/api/v1/telemetry/kernel-log/", post, format="json").json()
    assert again["events_created"] == 1 and again["duplicates"] == 0
    assert Node.objects.get(name="n4").state == NodeState.IN_REPAIR
    assert RepairTicket.objects.filter(node__name="n4").count() == 2
    assert client.post("/api/v1/telemetry/kernel-log/", post, format="json").json()["duplicates"] == 1
