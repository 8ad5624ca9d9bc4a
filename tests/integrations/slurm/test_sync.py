"""The inventory sync against Slurm output fed by a fake client: no cluster needed."""
from __future__ import annotations

import pytest

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import Gpu, GpuFlavor, Node, Rack
from fleet.services import node_cordon
from health.models import HealthEvent
from integrations.slurm import parsers
from integrations.slurm.sync import SYNC_ACTOR, slurm_inventory_sync
from scheduling.choices import WorkloadState
from scheduling.models import Allocation, PodSet, PriorityClass, Queue, Team, Workload

pytestmark = pytest.mark.django_db
OPERATOR = Actor(label="olga")

TOPOLOGY = """SwitchName=leaf-a Level=0 LinkSpeed=1 Nodes=g[1-2]
SwitchName=leaf-b Level=0 LinkSpeed=1 Nodes=g3
SwitchName=core Level=1 LinkSpeed=1 Nodes=g[1-3] Switches=leaf-a,leaf-b
"""


class FakeCli:
    def __init__(self, states: dict[str, str], gres: str = "gpu:nvidia_h100_80gb_hbm3:8(S:0-1)") -> None:
        self.states = states
        self.gres = gres
        self.reasons: dict[str, str] = {}

    def nodes(self) -> list[parsers.SlurmNode]:
        lines = []
        for name, state in self.states.items():
            line = f"NodeName={name} CPUTot=64 RealMemory=512000 Gres={self.gres} NodeAddr=10.0.0.{name[1:]}"
            line += f" State={state}"
            if name in self.reasons:
                line += f" Reason={self.reasons[name]} [alice@2026-11-29T10:00:00]"
            lines.append(line)
        return parsers.parse_scontrol_show_node("\n".join(lines))

    def topology(self) -> parsers.SlurmTopology:
        return parsers.parse_topology(TOPOLOGY)

    def cluster_name(self) -> str:
        return "lab"


def sync(cli):
    return slurm_inventory_sync(actor=SYNC_ACTOR, cli=cli)


@pytest.fixture
def cli():
    return FakeCli({"g1": "IDLE", "g2": "MIXED", "g3": "IDLE"})


def test_it_builds_racks_spine_nodes_and_gpus_from_slurm(cli):
    result = sync(cli)

    assert sorted(result.created) == ["g1", "g2", "g3"]
    assert dict(Rack.objects.values_list("name", "spine__name")) == {"leaf-a": "core", "leaf-b": "core"}
    g1 = Node.objects.get(name="g1")
    assert (g1.rack.name, g1.flavor.name, g1.hostname, g1.cpu_cores) == ("leaf-a", "H100-SXM-80GB", "10.0.0.1", 64)
    assert list(g1.gpus.values_list("uuid", flat=True)) == [f"SLURM-lab-g1-{i}" for i in range(8)]
    assert g1.labels["slurm.cluster"] == "lab" and g1.labels["slurm.state"] == "IDLE"
    assert sync(cli).summary() == "no changes"


def test_untyped_gres_gets_the_configured_default_flavor(settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "SLURM_DEFAULT_FLAVOR": "A100-SXM-80GB"}
    sync(FakeCli({"g1": "IDLE"}, gres="gpu:4"))
    node = Node.objects.get(name="g1")
    assert node.flavor.name == "A100-SXM-80GB" and node.gpus.count() == 4


def test_a_gres_type_naming_only_a_model_gets_that_models_flavor_never_the_default():
    sync(FakeCli({"g1": "IDLE"}, gres="gpu:a100:8(S:0-1)"))
    g1 = Node.objects.get(name="g1")
    assert g1.flavor is None and g1.gpus.count() == 8 and g1.labels["slurm.gpu_type"] == "a100"

    GpuFlavor.objects.create(name="A100-SXM-80GB", product="NVIDIA A100-SXM4-80GB", memory_mib=81920)
    sync(FakeCli({"g1": "IDLE"}, gres="gpu:a100:8(S:0-1)"))
    assert Node.objects.get(name="g1").flavor.name == "A100-SXM-80GB"


def test_fewer_gpus_in_slurm_removes_the_extra_gpu_rows(cli):
    sync(cli)
    cli.gres = "gpu:nvidia_h100_80gb_hbm3:6"
    sync(cli)
    assert Gpu.objects.filter(node__name="g1").count() == 6
    assert AuditEvent.objects.filter(verb="node.gpus_sync").exists()


def test_a_node_drained_by_someone_else_is_cordoned_with_their_reason_and_returned_on_resume(cli):
    sync(cli)
    cli.states["g2"] = "MIXED+DRAIN"
    cli.reasons["g2"] = "GPU 3 Xid 48; DBE <see #12>"

    assert sync(cli).cordoned == ["g2"]
    g2 = Node.objects.get(name="g2")
    assert (g2.state, g2.cordon_reason, g2.cordoned_by) == ("cordoned", "GPU 3 Xid 48; DBE <see #12>", "slurm")
    assert g2.labels["slurm.reason_user"] == "alice"
    assert sync(cli).cordoned == []  # once

    cli.states["g2"] = "MIXED"
    del cli.reasons["g2"]
    assert sync(cli).uncordoned == ["g2"]
    assert Node.objects.get(name="g2").state == "ready"


def test_a_fleetdeck_cordon_is_never_undone_and_a_lost_drain_is_flagged(cli):
    sync(cli)
    g1 = node_cordon(node=Node.objects.get(name="g1"), reason="burn-in failed", actor=OPERATOR)
    Node.objects.filter(pk=g1.pk).update(labels={**g1.labels, "slurm.op": "drain", "slurm.applied": True})

    assert sync(cli).uncordoned == []
    g1.refresh_from_db()
    assert g1.state == "cordoned" and g1.cordoned_by == "olga"
    assert g1.labels["slurm.applied"] is False and "not drained" in g1.labels["slurm.error"]
    assert AuditEvent.objects.filter(verb="slurm.drain_lost").count() == 1


def _running_on(node: Node) -> Workload:
    team = Team.objects.create(name="t")
    queue = Queue.objects.create(name="q", team=team)
    prio = PriorityClass.objects.create(name="p", value=1)
    workload = Workload.objects.create(name="job", team=team, queue=queue, priority_class=prio,
                                       state=WorkloadState.RUNNING, executor="slurm")
    pod_set = PodSet.objects.create(workload=workload, name="w", replicas=1, gpus_per_replica=2)
    for gpu in node.gpus.all()[:2]:
        Allocation.objects.create(workload=workload, pod_set=pod_set, replica=0, gpu=gpu, node=node)
    return workload


def test_a_down_node_becomes_unknown_once_and_its_gangs_are_requeued(cli):
    sync(cli)
    workload = _running_on(Node.objects.get(name="g3"))
    cli.states["g3"] = "IDLE*"  # a missed ping: Slurm has not given up yet
    assert sync(cli).not_responding == []

    cli.states["g3"] = "DOWN+NOT_RESPONDING"
    cli.reasons["g3"] = "Not responding"
    result = sync(cli)

    assert result.not_responding == ["g3"] and result.requeued == ["job"]
    assert Node.objects.get(name="g3").state == "unknown"
    workload.refresh_from_db()
    assert workload.state == WorkloadState.REQUEUED
    event = AuditEvent.objects.get(verb="node.not_responding")
    assert "Not responding" in event.reason
    (lost,) = HealthEvent.objects.all()
    assert (lost.kind, lost.source, lost.severity, lost.node.name) == ("heartbeat_lost", "slurm", "warning", "g3")
    assert "DOWN" in lost.evidence and "Not responding" in lost.evidence and lost.resolved_at is None
    assert sync(cli).not_responding == []
    assert HealthEvent.objects.get().count == 1  # a later sync of the same outage adds nothing

    cli.states["g3"] = "IDLE"
    del cli.reasons["g3"]
    assert sync(cli).recovered == ["g3"]
    assert Node.objects.get(name="g3").state == "ready"
    assert HealthEvent.objects.get().resolved_at is not None

    # A second outage is a second event.
    cli.states["g3"] = "DOWN"
    sync(cli)
    assert HealthEvent.objects.filter(node__name="g3", resolved_at__isnull=True).count() == 1
    assert HealthEvent.objects.count() == 2


def test_a_node_gone_from_slurm_is_marked_unknown_once(cli):
    sync(cli)
    del cli.states["g3"]
    assert sync(cli).missing == ["g3"]
    assert sync(cli).missing == []
    assert Node.objects.get(name="g3").state == "unknown"


def test_a_node_of_another_executor_with_the_same_name_is_left_alone(cli):
    rack = Rack.objects.create(name="sim")
    Node.objects.create(name="g1", rack=rack)
    result = sync(cli)
    assert result.conflicts == ["g1"]
    assert Node.objects.get(name="g1").executor == "simulated" and Node.objects.get(name="g1").rack == rack


def test_the_agent_identifies_slurms_unidentified_gpus_in_place_and_the_sync_keeps_them(cli):
    from fleet.agent.payloads import RegisterPayload
    from health.services import agent_register

    sync(cli)
    g1 = Node.objects.get(name="g1")
    workload = _running_on(g1)
    held = sorted(Allocation.objects.filter(workload=workload).values_list("gpu_id", flat=True))
    payload = RegisterPayload.from_dict({
        "node": "g1", "hostname": "", "agent_version": "0.1.0", "driver_version": None, "sent_at": "",
        "gpus": [{"index": i, "uuid": f"GPU-real-{i}", "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559,
                  "pci_bus_id": f"0000:{0x1a + i * 16:02x}:00"} for i in range(7)],  # one GPU missing
    })

    counts = agent_register(node=g1, payload=payload)

    assert (counts["identified"], counts["created"], counts["missing"]) == (7, 0, 1)
    gpus = {g.index: g for g in g1.gpus.all()}
    assert [gpus[i].uuid for i in range(7)] == [f"GPU-real-{i}" for i in range(7)]
    assert gpus[2].pci_bus_id == "0000:3a:00"
    assert gpus[7].uuid == "SLURM-lab-g1-7" and gpus[7].health == "unhealthy"
    # The running gang still holds the same GPU rows, now under their real names.
    assert sorted(Allocation.objects.filter(workload=workload).values_list("gpu_id", flat=True)) == held
    assert AuditEvent.objects.filter(verb="gpu.identify").count() == 7
    assert sync(cli).summary() == "no changes"
    assert Gpu.objects.filter(node=g1).count() == 8
