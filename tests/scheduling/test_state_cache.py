"""The placement round's state cache (issue 18 §2): after any sequence of changes, made through
the services or behind their back (another process, a bulk update), the cached state a round
schedules on equals a full reload from the database, and the rounds decide the same."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from django.db import IntegrityError, transaction

from core.actors import Actor
from fleet.choices import GpuHealth
from fleet.models import Gpu, GpuFlavor, Node
from fleet.services import gpu_health_set, node_cordon
from scheduling.choices import WorkloadState
from scheduling.engine.snapshot import Capacity
from scheduling.models import Allocation, Cohort, Queue, QueueQuota, StateChange, Team, Workload
from scheduling.services import (
    executor_tick,
    placement_round_run,
    workload_cancel,
    workload_finish,
    workload_submit,
)
from scheduling.services.workloads import (
    Finish,
    workload_heartbeat,
    workload_stop_gang,
    workloads_finish,
)
from scheduling.snapshot import snapshot_load
from scheduling.state_cache import round_state, state_cache, state_cache_clear
from tests.cluster import make_cluster, run_round, training

OPS = Actor.automation("test")


def _capacity(cap: Capacity) -> dict:
    """Everything a round reads from a Capacity, comparable."""
    nodes = [
        (n.name, n.rank, n.schedulable, n.reason, list(n.free), list(n.healthy), n.mig, n.whole, n.cpu, n.mem)
        for n in cap.nodes
    ]
    flavors = {
        name: (fx.node_size, fx.buckets, fx.whole_by_rack, fx.rack_nodes, fx.free_whole, fx.fully_free_nodes,
               fx.shares, fx.mig_gpus, sorted(fx.products), fx.schedulable_nodes, fx.cordoned_nodes)
        for name, fx in cap.flavors.items()
    }
    return {"nodes": nodes, "flavors": flavors}


def _state(snapshot) -> dict:
    return {
        "nodes": sorted((asdict(n) for n in snapshot.nodes), key=lambda n: n["name"]),
        "queues": {name: asdict(q) for name, q in sorted(snapshot.queues.items())},
        "running": sorted((asdict(r) for r in snapshot.running), key=lambda r: r["id"]),
        "pending": [asdict(p) for p in snapshot.pending],
    }


def assert_cache_equals_reload(clock) -> dict:
    """The cached snapshot and capacity against a full load (snapshot_load, a fresh Capacity)."""
    with round_state(now=clock.now) as (cached, _index, capacity):
        assert capacity is not None
        kept = _capacity(capacity)
        last = dict(state_cache().last)
    full, _ = snapshot_load(now=clock.now)
    assert _state(cached) == _state(full)
    assert kept == _capacity(Capacity(full.nodes))
    return last


@pytest.fixture
def fleet(db, team, classes):
    flavor = make_cluster(nodes=6, per_rack=3)
    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=48)
    state_cache_clear()
    yield flavor
    state_cache_clear()


def _submit(name: str, gpus: int, **extra) -> Workload:
    return workload_submit(spec=training(name, gpus, priority="research-batch", **extra), actor=OPS)


def test_after_claims_releases_and_state_moves_the_cache_equals_a_full_reload(fleet, clock):
    assert assert_cache_equals_reload(clock)["kind"] == "reload"  # a process's first round loads

    gangs = [_submit(f"g{i}", gpus) for i, gpus in enumerate((8, 4, 2, 1, 16))]
    run_round(clock)
    assert {w.state for w in Workload.objects.filter(pk__in=[g.pk for g in gangs])} == {WorkloadState.RUNNING}
    delta = assert_cache_equals_reload(clock)
    assert delta["kind"] == "delta" and delta["workloads"] >= len(gangs)

    clock.advance(60)
    workload_finish(workload=gangs[0], succeeded=True, reason="done", actor=OPS, now=clock.now)
    workload_cancel(workload=Workload.objects.get(pk=gangs[2].pk), actor=OPS, now=clock.now)
    assert assert_cache_equals_reload(clock)["kind"] == "delta"

    node = Node.objects.get(name="n6")
    node_cordon(node=node, reason="maintenance", actor=OPS)
    gpu = Gpu.objects.filter(node__name="n5").order_by("index").first()
    gpu_health_set(gpu=gpu, health=GpuHealth.UNHEALTHY, reason="xid 79", actor=OPS)
    assert assert_cache_equals_reload(clock)["kind"] == "delta"

    # Behind the services' back (another process, a bulk fix): the database's journal sees it.
    Gpu.objects.filter(node__name="n4", index__in=[1, 2]).update(health=GpuHealth.UNHEALTHY)
    Node.objects.filter(name="n6").update(cpu_cores=64, memory_mib=512_000)
    assert assert_cache_equals_reload(clock)["kind"] == "delta"

    clock.advance(60)
    later = [_submit(f"h{i}", gpus) for i, gpus in enumerate((8, 8, 2))]
    run_round(clock)
    assert assert_cache_equals_reload(clock)["kind"] == "delta"
    assert Workload.objects.filter(pk__in=[w.pk for w in later], state=WorkloadState.RUNNING).exists()


def test_a_change_to_the_nodes_a_round_just_filled_is_seen_by_the_next_round(fleet, clock):
    # The round applies its own commit to the cache; what another writer does to the same nodes
    # right after (here: a GPU of the node the first gang landed on fails) still reaches the next round.
    assert_cache_equals_reload(clock)
    first = _submit("first", 4)
    run_round(clock)
    held = Allocation.objects.filter(workload=first, released_at__isnull=True)
    node = held.first().node
    assert assert_cache_equals_reload(clock)["kind"] == "delta"

    free = Gpu.objects.filter(node=node).exclude(pk__in=held.values("gpu_id")).order_by("index")
    gpu_health_set(gpu=free.first(), health=GpuHealth.UNHEALTHY, reason="xid 79", actor=OPS)
    assert assert_cache_equals_reload(clock)["kind"] == "delta"
    second = _submit("second", 4)
    run_round(clock)
    assert assert_cache_equals_reload(clock)["kind"] == "delta"
    taken = set(Allocation.objects.filter(workload=second).values_list("gpu_id", flat=True))
    assert len(taken) == 4 and free.first().pk not in taken


# One pod set per workload: (name, replicas, shape); each replica also asks for CPU and memory.
MIXED = (("mig", 2, {"mig_profile": "1g.10gb", "gpus_per_replica": 0}),
         ("shares", 3, {"milli_gpu": 250, "gpus_per_replica": 0}),
         ("whole", 2, {"gpus_per_replica": 2}))


def _mig_and_shared_gpus() -> None:
    """Nodes that report CPU and memory, a MIG GPU on n1 and time-sliced GPUs on n2."""
    Node.objects.update(cpu_cores=64, memory_mib=512_000)
    Gpu.objects.filter(node__name="n1", index=0).update(
        mig_enabled=True, mig_instances=[{"profile": "1g.10gb", "gi_id": i} for i in (1, 2, 3)])
    Gpu.objects.filter(node__name="n2").update(sharing_mode="time_slicing", sharing_replicas=4)


def _submit_shapes(fleet, shapes) -> dict[str, Workload]:
    host = {"cpu_millicores": 4000, "memory_mib": 32_000}
    return {
        name: workload_submit(spec={**training(name, 1, priority="research-batch"), "pod_sets": [
            {"name": name, "replicas": replicas, "flavor": fleet.name, **shape, **host}]}, actor=OPS)
        for name, replicas, shape in shapes
    }


def test_mig_instances_shares_and_host_resources_a_round_takes_match_a_full_reload(fleet, clock):
    # A round applies what it admitted to the cache itself: MIG instances off the free lists,
    # milli shares off a GPU, a pod set's CPU and memory once per replica, as a re-read reads them.
    _mig_and_shared_gpus()
    assert_cache_equals_reload(clock)
    jobs = _submit_shapes(fleet, MIXED)
    run_round(clock)
    assert Workload.objects.filter(pk__in=[j.pk for j in jobs.values()], state=WorkloadState.RUNNING).count() == 3
    assert assert_cache_equals_reload(clock)["kind"] == "delta"


def test_gangs_a_round_starts_in_its_commit_are_in_the_cache_as_a_full_load_finds_them(
    fleet, clock, django_capture_on_commit_callbacks
):
    # The round task's path (start=True): the simulated executor starts the gangs in the commit that
    # admits them (MIG instances, shares, host resources, quota borrowed from the cohort, a requeued
    # gang's checkpoint and preemption times), and the tick's bulk finish ends them. After each, the
    # next round sees what a full load sees.
    cohort = Cohort.objects.create(name="c")
    Queue.objects.filter(name="research-q").update(cohort=cohort)
    QueueQuota.objects.filter(queue__name="research-q").update(nominal=16)
    lender = Queue.objects.create(name="lender-q", team=Team.objects.create(name="lenders"), cohort=cohort)
    QueueQuota.objects.create(queue=lender, flavor=fleet, nominal=32)
    _mig_and_shared_gpus()
    assert_cache_equals_reload(clock)

    again = _submit("again", 8, checkpoint={"enabled": True, "write_seconds": 10})
    placement_round_run(actor=OPS, now=clock.now, start=True)
    clock.advance(120)
    workload_heartbeat(workload=Workload.objects.get(pk=again.pk), step=100, checkpoint_at=clock.now, actor=OPS,
                       now=clock.now)
    with django_capture_on_commit_callbacks(execute=True):  # its release applied as the stop commits
        workload_stop_gang(workload=Workload.objects.get(pk=again.pk), reason="drain", actor=OPS, now=clock.now)
    assert Workload.objects.get(pk=again.pk).state == WorkloadState.REQUEUED
    assert_cache_equals_reload(clock)

    clock.advance(30)
    jobs = _submit_shapes(fleet, MIXED)
    borrower = _submit("borrower", 16)
    placement_round_run(actor=OPS, now=clock.now, start=True)
    started = Workload.objects.filter(pk__in=[again.pk, borrower.pk, *(j.pk for j in jobs.values())],
                                      state=WorkloadState.RUNNING)
    assert started.count() == 5
    assert any(w.borrowed for w in started)  # 24 whole GPUs and more: beyond research-q's nominal 16
    assert assert_cache_equals_reload(clock)["kind"] == "delta"

    # Their end as the executor tick writes it: the cache gives back what it took in, CPU and memory too.
    clock.advance(60)
    with django_capture_on_commit_callbacks(execute=True):
        workloads_finish(finishes=[Finish(workload=w, succeeded=True, reason="done") for w in started
                                   if w.name != "mig"], actor=OPS, now=clock.now)
    assert_cache_equals_reload(clock)


def test_gpus_shares_and_host_resources_jobs_give_back_when_they_end_match_a_full_reload(
    fleet, clock, django_capture_on_commit_callbacks
):
    # The executor tick's finish gives the ended jobs' GPUs, shares, CPU and memory back in the
    # cache itself (PostgreSQL); a MIG instance, whose free list keeps the GPU's configured order,
    # is left to the next sync's re-read. Either way the next round sees what a full load sees.
    from django.db import connection

    _mig_and_shared_gpus()
    jobs = _submit_shapes(fleet, (*MIXED, ("gang", 2, {"gpus_per_replica": 8})))
    run_round(clock)
    assert Workload.objects.filter(state=WorkloadState.RUNNING).count() == 4
    assert_cache_equals_reload(clock)

    clock.advance(60)
    for ended in (["shares", "whole", "gang"], ["mig"]):
        with django_capture_on_commit_callbacks(execute=True):
            workloads_finish(finishes=[Finish(workload=jobs[name], succeeded=True, reason="done") for name in ended],
                             actor=OPS, now=clock.now)
        delta = assert_cache_equals_reload(clock)
        if connection.vendor == "postgresql" and ended != ["mig"]:
            assert delta["nodes"] == 0  # applied by the cache, not re-read: the equality above checks its arithmetic
    assert not Allocation.objects.filter(released_at__isnull=True).exists()


def test_a_round_that_preempts_and_the_victims_stop_match_a_full_reload(
    db, team, classes, cohort, clock, django_capture_on_commit_callbacks
):
    # A round that starts a reclaim while it admits other work, then the executor tick's hard stop
    # of the victim: after each the next round sees what a full load sees, first the victim
    # preempting (a change to its workload row alone, no allocation written beside it), then gone
    # with its GPUs back. On PostgreSQL the cache applies both commits itself (the round's
    # admissions, the stop's releases) rather than re-reading the nodes they touched.
    from django.db import connection

    flavor = make_cluster(nodes=2, per_rack=2)
    product = Team.objects.create(name="product")
    for name, owner in (("research-q", team), ("product-q", product)):
        queue = Queue.objects.create(name=name, team=owner, cohort=cohort)
        QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=8)
    # One node of another flavor, for a queue outside the cohort: work the round admits beside the reclaim.
    other = GpuFlavor.objects.create(name="L40S", product="NVIDIA L40S", memory_mib=46068)
    node = Node.objects.create(name="l1", rack=Node.objects.get(name="n1").rack, flavor=other)
    Gpu.objects.bulk_create(Gpu(uuid=f"GPU-l1-{g}", node=node, index=g, product=other.product, memory_mib=46068)
                            for g in range(8))
    solo = Queue.objects.create(name="solo-q", team=Team.objects.create(name="solo"))
    QueueQuota.objects.create(queue=solo, flavor=other, nominal=8)
    state_cache_clear()
    assert_cache_equals_reload(clock)

    borrower = workload_submit(spec=training("borrower", 16, priority="eval", team="product"), actor=OPS)
    run_round(clock)
    assert Workload.objects.get(pk=borrower.pk).state == WorkloadState.RUNNING

    clock.advance(900)
    lender = _submit("lender", 8)
    solo_job = workload_submit(spec={**training("solo", 8, priority="eval", team="solo"), "pod_sets": [
        {"name": "worker", "replicas": 1, "gpus_per_replica": 8, "flavor": other.name}]}, actor=OPS)
    report = placement_round_run(actor=OPS, now=clock.now)
    assert [wid for wid, _v, _r in report.preempted] == [borrower.pk]
    assert [wid for wid, _n, _p in report.admitted] == [solo_job.pk]
    delta = assert_cache_equals_reload(clock)
    if connection.vendor == "postgresql":
        assert delta["nodes"] == 0  # applied by the cache, not re-read: the equality above checks it

    clock.advance(31)  # past the victim's grace (eval: 30 s): the tick stops it hard
    with django_capture_on_commit_callbacks(execute=True):
        executor_tick(now=clock.now)
    assert Workload.objects.get(pk=borrower.pk).state == WorkloadState.REQUEUED
    delta = assert_cache_equals_reload(clock)
    if connection.vendor == "postgresql":
        assert delta["nodes"] == 0

    run_round(clock)
    assert Workload.objects.get(pk=lender.pk).state == WorkloadState.RUNNING
    assert_cache_equals_reload(clock)


def test_rounds_on_the_cache_decide_as_rounds_on_a_full_load(fleet, clock, settings):
    for i, gpus in enumerate((8, 8, 4, 4, 2, 1, 1, 16, 24)):
        _submit(f"w{i}", gpus)
    first = run_round(clock)
    clock.advance(30)
    workload_finish(workload=Workload.objects.get(name="w0"), succeeded=True, reason="done", actor=OPS, now=clock.now)
    cached = run_round(clock)

    # The same database state scheduled again on a full load decides the same.
    settings.FLEETDECK = {**settings.FLEETDECK, "STATE_CACHE": False}
    with transaction.atomic():
        sid = transaction.savepoint()
        again = run_round(clock)
        transaction.savepoint_rollback(sid)
    assert [a[0] for a in first.admitted]
    assert [(a[0], a[2]) for a in cached.admitted] == [(a[0], a[2]) for a in again.admitted]


def test_a_gap_in_the_journal_reloads(fleet, clock):
    assert_cache_equals_reload(clock)
    _submit("a", 8)
    run_round(clock)
    StateChange.objects.all().delete()  # pruned, truncated or rolled back under this cache
    Node.objects.filter(name="n1").update(cpu_cores=32)
    last = assert_cache_equals_reload(clock)
    assert last["kind"] == "reload" and last["why"].startswith("gap")


def test_a_renamed_rack_reloads(fleet, clock):
    assert_cache_equals_reload(clock)
    Node.objects.get(name="n1").rack.__class__.objects.filter(name="r1").update(name="rack-a")
    last = assert_cache_equals_reload(clock)
    assert last["kind"] == "reload"
    assert {n.rack for n in snapshot_load(now=clock.now)[0].nodes} == {"rack-a", "r2"}


def test_bulk_writes_by_copy_keep_the_audit_rows_and_the_guard_against_double_allocation(fleet, clock, monkeypatch):
    """The many-row path (COPY on PostgreSQL) for every write of a round, however few rows."""
    import core.bulk
    import scheduling.services.bulk

    monkeypatch.setattr(core.bulk, "COPY_FROM_ROWS", 1)
    monkeypatch.setattr(scheduling.services.bulk, "COPY_FROM_ROWS", 1)
    gangs = [_submit(f"c{i}", gpus) for i, gpus in enumerate((8, 4, 2, 1))]
    report = run_round(clock)

    assert sorted(a[0] for a in report.admitted) == sorted(g.pk for g in gangs)
    for gang, gpus in zip(gangs, (8, 4, 2, 1), strict=True):
        gang.refresh_from_db()
        assert gang.state == WorkloadState.RUNNING and gang.allocations.filter(released_at__isnull=True).count() == gpus
        states = list(gang.transitions.order_by("at", "pk").values_list("to_state", flat=True))
        assert states == ["pending", "admitted", "running"]
    held = Allocation.objects.filter(released_at__isnull=True).first()
    with pytest.raises(IntegrityError), transaction.atomic():
        core.bulk.insert_rows(
            model=Allocation,
            fields=["workload_id", "pod_set_id", "replica", "gpu_id", "node_id", "exclusive", "milli", "mig_instance",
                    "created_at"],
            rows=[(gangs[3].pk, held.pod_set_id, 9, held.gpu_id, held.node_id, True, 1000, "", clock.now)],
        )
    assert_cache_equals_reload(clock)


def test_a_renamed_flavor_reaches_the_specs_of_the_waiting_workloads(fleet, clock):
    def flavors_asked() -> set[str]:
        with round_state(now=clock.now) as (cached, _index, _capacity):
            return {ps.flavor for spec in cached.pending for ps in spec.pod_sets}

    _submit("waits", 8)
    assert flavors_asked() == {fleet.name}  # the round after it, on the cache, keeps its spec
    GpuFlavor.objects.filter(pk=fleet.pk).update(name="h100-sxm-renamed")

    assert flavors_asked() == {"h100-sxm-renamed"}
    assert_cache_equals_reload(clock)


def test_a_round_sees_every_queue_with_its_quotas_and_those_without_any(fleet, team, clock):
    spare = Queue.objects.create(name="spare-q", team=team)
    other = GpuFlavor.objects.create(name="l40s", product="NVIDIA L40S", memory_mib=46068)
    QueueQuota.objects.create(queue=spare, flavor=other, nominal=0, borrowing_limit=4)
    Queue.objects.create(name="empty-q", team=team)

    with round_state(now=clock.now) as (cached, _index, _capacity):
        quotas = {name: {f: (q.nominal, q.borrowing_limit) for f, q in queue.quotas.items()}
                  for name, queue in cached.queues.items()}
    assert quotas == {"empty-q": {}, "research-q": {fleet.name: (48, None)}, "spare-q": {"l40s": (0, 4)}}
