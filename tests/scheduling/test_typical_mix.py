"""The typical mix: learned from recent submissions in one query, carried in the round's snapshot."""

from __future__ import annotations

from fleet.choices import SharingMode
from fleet.models import Gpu
from scheduling.choices import WorkloadState
from scheduling.engine.types import PodSetShape
from scheduling.models import PodSet, Workload
from scheduling.snapshot import snapshot_load, typical_mix_load
from tests.cluster import FLAVOR, api_for, nodes_of, run_round, submit


def job(name: str, *, gpus: int = 1, replicas: int = 1, milli: int | None = None, products: list[str] | None = None,
        cpu: int = 0, mem: int = 0) -> dict:
    pod_set: dict = {"name": "main", "replicas": replicas, "gpus_per_replica": 0 if milli else gpus, "flavor": FLAVOR}
    if milli:
        pod_set["milli_gpu"] = milli
    if products:
        pod_set["accepted_products"] = products
    if cpu:
        pod_set["cpu_millicores"] = cpu
    if mem:
        pod_set["memory_mib"] = mem
    return {"name": name, "team": "research", "priority_class": "eval", "pod_sets": [pod_set]}


def test_the_mix_counts_replicas_per_shape_submitted_in_the_window_in_one_query(
    research_queue, team_member, clock, django_assert_num_queries
):
    client = api_for(team_member)
    submit(client, **job("too-old", gpus=4, replicas=2))
    clock.advance(8 * 86400)
    submit(client, **job("a", gpus=2, replicas=3))
    submit(client, **job("b", gpus=2))
    submit(client, **job("share", milli=500, cpu=2000, mem=4096))
    submit(client, **job("typed-1", products=["NVIDIA H100 80GB HBM3", "H100-PCIe"]))
    submit(client, **job("typed-2", products=["H100-PCIe", "NVIDIA H100 80GB HBM3"]))
    mig = submit(client, **job("mig", gpus=7))
    PodSet.objects.filter(workload_id=mig["id"]).update(gpus_per_replica=0, sharing="mig", mig_profile="1g.10gb")

    with django_assert_num_queries(1):
        mix = typical_mix_load(now=clock.now)

    assert dict(mix) == {
        PodSetShape(gpus=2, flavor=FLAVOR): 4,
        PodSetShape(gpus=1, flavor=FLAVOR, accepted_products=("H100-PCIe", "NVIDIA H100 80GB HBM3")): 2,
        PodSetShape(gpus=0, milli=500, flavor=FLAVOR, cpu_millicores=2000, memory_mib=4096): 1,
    }
    assert mix[0] == (PodSetShape(gpus=2, flavor=FLAVOR), 4)  # most frequent first


def test_the_window_and_the_shape_cap_come_from_settings(research_queue, team_member, clock, settings):
    client = api_for(team_member)
    submit(client, **job("four", gpus=4, replicas=2))
    clock.advance(2 * 86400)
    submit(client, **job("one", gpus=1))
    settings.FLEETDECK = {**settings.FLEETDECK, "FRAGMENTATION_HISTORY_DAYS": 1}
    assert typical_mix_load(now=clock.now) == ((PodSetShape(gpus=1, flavor=FLAVOR), 1),)
    settings.FLEETDECK = {**settings.FLEETDECK, "FRAGMENTATION_HISTORY_DAYS": 7, "FRAGMENTATION_MIX_SHAPES": 1}
    assert typical_mix_load(now=clock.now) == ((PodSetShape(gpus=4, flavor=FLAVOR), 2),)
    settings.FLEETDECK = {**settings.FLEETDECK, "FRAGMENTATION_HISTORY_DAYS": 0}
    assert typical_mix_load(now=clock.now) == ()


def test_no_history_gives_an_empty_mix_and_the_snapshot_carries_it(research_queue, team_member, clock):
    snapshot, _ = snapshot_load(now=clock.now)
    assert snapshot.typical_mix == ()
    submit(api_for(team_member), **job("a", gpus=2))
    snapshot, _ = snapshot_load(now=clock.now)
    assert snapshot.typical_mix == ((PodSetShape(gpus=2, flavor=FLAVOR), 1),)


def test_with_a_history_of_shares_the_round_keeps_shareable_gpus_for_them(
    research_queue, team_member, clock, settings
):
    Gpu.objects.filter(node__name="n1").update(sharing_mode=SharingMode.TIME_SLICING, sharing_replicas=4)
    client = api_for(team_member)
    shares = [submit(client, **job(f"share-{i}", milli=250))["id"] for i in range(6)]
    Workload.objects.filter(pk__in=shares).update(state=WorkloadState.CANCELLED)  # history only
    clock.advance(3600)

    settings.FLEETDECK = {**settings.FLEETDECK, "FRAGMENTATION_HISTORY_DAYS": 0}
    first = submit(client, **job("first", gpus=1))
    run_round(clock)
    assert nodes_of(first["id"]) == ["n1"]  # no mix: best fit, the first of the free nodes

    settings.FLEETDECK = {**settings.FLEETDECK, "FRAGMENTATION_HISTORY_DAYS": 7}
    second = submit(client, **job("second", gpus=1))
    run_round(clock)
    # Best fit would add it to n1 (7 free, the tightest); the mix of shares keeps n1's
    # shareable GPUs for them and opens a plain node instead.
    assert nodes_of(second["id"]) == ["n2"]


def test_only_the_latest_submissions_of_the_window_are_read(research_queue, team_member, clock, monkeypatch):
    client = api_for(team_member)
    submit(client, **job("oldest", gpus=8))
    for i in range(2):
        clock.advance(60)
        submit(client, **job(f"new-{i}", gpus=1))
    monkeypatch.setattr("scheduling.snapshot.MIX_SAMPLE_WORKLOADS", 2)
    assert typical_mix_load(now=clock.now) == ((PodSetShape(gpus=1, flavor=FLAVOR), 2),)

