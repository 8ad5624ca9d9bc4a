"""Benchmark: Kueue's scheduler-performance "baseline" fixture, run through Fleetdeck's real path.

Kueue's fixture (kubernetes-sigs/kueue, test/performance/scheduler/configs/baseline/generator.yaml):
5 cohorts x 6 queues, each with a nominal quota of 20 and a borrowing limit of 100; every queue
gets 350 small (1 unit, runs 200 ms, priority 50, one every 100 ms), 100 medium (5 units,
500 ms, priority 100, one every 500 ms) and 50 large (20 units, 1 s, priority 200, one every
1,200 ms) workloads: 15,000 in all. Queues preempt lower priorities in themselves and reclaim
their nominal quota from the cohort. Fleetdeck always reclaims nominal quota from borrowers in
the cohort; its priority preemption (PriorityClass.may_preempt) reaches the whole fleet rather
than one queue, so it is off unless --priority-preemption is given.

Here the fleet holds exactly the nominal quotas (30 x 20 = 600 GPUs: 75 nodes x 8, one flavor),
and every workload goes through PostgreSQL and the services the product runs:
`workload_submit` (or a bulk insert writing the same rows), `executor_tick` with the simulated
executor, and `placement_round_run`; `django.utils.timezone.now` is the benchmark's clock, so
auto timestamps agree with it.

The simulated executor counts whole seconds (Workload.run_seconds), so the clock is dilated:
one simulated second stands for `unit_ms` (100) milliseconds of Kueue's fixture; every duration
(arrival intervals, run times, the tick) is scaled by the same factor, and the times reported
are converted back to the fixture's scale.

Modes (--mode):
- production (default; the headline at the default --speedup 1, the fixture's real time): the
  product as deployed (simulate_production). API worker processes (--api-workers, 4) submit each
  workload with workload_submit at its arrival time; this process is the Celery worker
  (--worker-processes, 1: more are forked as a prefork pool's, taking tasks off the same queue;
  each task through Celery's tracer with the hooks a worker runs around it, the
  Django fixup's and config.celery's, so the database connection is handled as in production;
  each submission between Django's request signals, likewise): the services' own round_request
  (its debounce, its mark in Redis) queues the
  round task (an executor tick, a round, then the admitted gangs started), of which only the
  hand-off to the broker is replaced (CeleryStandIn, which also takes the executor tick's
  wake-ups at a simulated job's end, an eta on Django's clock), and the beat's round task and
  executor tick run every PLACEMENT_ROUND_SECONDS of wall time.
The modes below are extra, labelled rows. Their rounds run when a service asks for one (the
services' round_request replaced by the loop's trigger, without the debounce) or when
PLACEMENT_ROUND_SECONDS of the product's dilated clock have passed, each followed by an executor
tick, and an executor tick runs every iteration: they run the worker more often than production.
- concurrent: real time S x faster than the fixture (--speedup). Submissions come
  from a process of their own at their arrival times (the web API; Kueue's generator); executor
  ticks and rounds run back to back in this one (the Celery worker). A slow round leaves
  finished GPUs idle and arrivals waiting, so the usage measures speed too; S > 1 is a
  different fixture (its work arrives S x faster), not a faster scheduler.
- realtime: the same clock, everything in one process (arrivals submitted late keep their
  arrival time).
- stepped: one iteration per tick (100 ms of fixture time), the clock waiting for it: waits
  measure decisions, not latency, and the wall time measures speed.
Usage is reported twice: GPUs held by allocations (Kueue's quota usage, which the goal is stated
in) and GPUs running the fixture's work (its GPU-seconds over capacity x span, which a late
executor tick cannot inflate). `--speedup 4,5,6` runs each speed-up on a fresh database, one
after another, and prints them side by side: a faster clock admits more per wall second and
leaves more of the quota idle while a round runs.

It never touches the database in DATABASE_URL: it creates (and afterwards drops) a scratch
database `<name>_admission_bench` on the same server. Run it through `bench/admission.py`."""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing
import os
import pstats
import queue as queue_mod
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from bench.benchdb import django_setup, drop_database, host_reference, scratch_database

# Django and the apps are imported inside the functions below: the benchmark picks its database (a
# scratch one) at run time, and Django reads DATABASE_URL once, at django.setup().

EPOCH = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
SCRATCH_SUFFIX = "_admission_bench"
DEFAULT_SPEEDUP = 1.0  # the fixture's real time (Kueue's); faster clocks are extra rows, a different fixture
DEFAULT_API_WORKERS = 4
DEFAULT_WORKER_PROCESSES = 1


@dataclass(frozen=True)
class WorkloadClass:
    """One `workloadsSets` entry of Kueue's generator config (counts are per queue)."""

    name: str
    gpus: int
    runtime_ms: int
    priority: int
    interval_ms: int
    count: int


# configs/baseline/generator.yaml
BASELINE_CLASSES = (
    WorkloadClass("small", gpus=1, runtime_ms=200, priority=50, interval_ms=100, count=350),
    WorkloadClass("medium", gpus=5, runtime_ms=500, priority=100, interval_ms=500, count=100),
    WorkloadClass("large", gpus=20, runtime_ms=1000, priority=200, interval_ms=1200, count=50),
)

# configs/baseline/rangespec.yaml: the averages of Kueue's five reference runs (minimalkueue
# in envtest), written in the comments next to the thresholds.
KUEUE_BASELINE = {
    "wall_s": 351.1164,
    "usage_pct": 58.7,
    "time_to_admission_s": {"small": 215.468, "medium": 76.768, "large": 6.666},
    "workloads": 15000,
}


def class_of(name: str) -> str:
    """The workload class of a fixture workload's name (Fixture.arrivals names them class-queue-...)."""
    return name.split("-", 1)[0]


@dataclass(frozen=True)
class Fixture:
    classes: tuple[WorkloadClass, ...] = BASELINE_CLASSES
    cohorts: int = 5
    queues_per_cohort: int = 6
    nominal: int = 20
    borrowing_limit: int = 100
    node_gpus: int = 8
    unit_ms: int = 100  # fixture milliseconds per simulated second
    tick_ms: int = 100  # fixture milliseconds between ticks
    # Kueue's queues preempt lower priorities *within the queue* (withinClusterQueue:
    # LowerPriority); Fleetdeck's may_preempt reaches lower priorities anywhere in the fleet, a
    # broader rule, so it is off by default. Reclaiming nominal quota from borrowers in the
    # cohort (Kueue's reclaimWithinCohort) is always on in Fleetdeck.
    preemption: bool = False

    @property
    def queues(self) -> list[tuple[str, str]]:
        """(queue, cohort) names, like Kueue's `cq-<set>-<i>-cohort-<c>`."""
        return [(f"cq-{c}-{q}", f"cohort-{c}") for c in range(self.cohorts) for q in range(self.queues_per_cohort)]

    @property
    def capacity(self) -> int:
        return self.cohorts * self.queues_per_cohort * self.nominal

    @property
    def total(self) -> int:
        return len(self.queues) * sum(c.count for c in self.classes)

    @property
    def work_gpu_seconds(self) -> float:
        """The fixture's work in fixture GPU-seconds (what every workload runs once)."""
        return len(self.queues) * sum(c.count * c.gpus * c.runtime_ms / 1000 for c in self.classes)

    def lower_bound_s(self) -> float:
        """No scheduler finishes sooner, in the fixture's real time: each workload's GPU-seconds
        arrive at its arrival time and the capacity works them off at most `capacity` GPUs at
        once, never before they arrive (packing ignored; 66.8 s at full size)."""
        jobs = sorted(
            ((k + 1) * c.interval_ms / 1000, c.gpus * c.runtime_ms / 1000, c.runtime_ms / 1000)
            for _queue in self.queues for c in self.classes for k in range(c.count)
        )
        at = backlog = last_end = 0.0
        for arrival, work, runtime in jobs:
            backlog = max(0.0, backlog - (arrival - at) * self.capacity) + work
            at, last_end = arrival, max(last_end, arrival + runtime)
        return max(at + backlog / self.capacity, last_end)

    def packing_bound_s(self) -> float:
        """No schedule on these nodes finishes sooner: on a node of N GPUs at most one part of more
        than N/2 runs at a time, and none of exactly N/2 beside it, while two of exactly N/2 may
        share it; so each such part holds a whole node (exactly N/2: half a node) for its runtime,
        whatever runs beside it, and the nodes give at most their count of node-seconds per second
        (70.0 s at full size: the 8-GPU parts, the 5-GPU jobs and half of each 4-GPU part need
        5,250 node-seconds of 75 nodes; packing and arrivals aside, which only add)."""
        half = self.node_gpus / 2

        def node_share(gpus: int) -> float:  # a dual-feasible weight: a node's parts never sum above 1
            return 1.0 if gpus > half else 0.5 if gpus == half else 0.0

        node_seconds = len(self.queues) * sum(
            c.count * c.runtime_ms / 1000 * sum(node_share(ps["gpus_per_replica"]) for ps in self.pod_sets(c, ""))
            for c in self.classes)
        return node_seconds / (self.capacity // self.node_gpus)

    def check(self) -> None:
        if self.capacity % self.node_gpus:
            raise ValueError(f"{self.capacity} GPUs of quota do not make whole {self.node_gpus}-GPU nodes")
        for c in self.classes:
            for label, ms in (("runtime", c.runtime_ms), ("interval", c.interval_ms)):
                if ms % self.tick_ms or ms % self.unit_ms:
                    raise ValueError(f"{c.name} {label} {ms} ms is not a multiple of the tick and unit")
        if self.tick_ms % self.unit_ms:
            raise ValueError("the tick must be a whole number of simulated seconds")

    def pod_sets(self, cls: WorkloadClass, flavor: str) -> list[dict]:
        """A request larger than a node becomes a gang of node-sized pod sets plus the rest
        (20 GPUs on 8-GPU nodes: 8 + 8 + 4), the shapes a submitted spec may take."""
        sets, left = [], cls.gpus
        while left:
            take = min(left, self.node_gpus)
            sets.append({"name": f"ps{len(sets)}", "replicas": 1, "gpus_per_replica": take, "flavor": flavor})
            left -= take
        return sets

    def at(self, fixture_ms: int) -> datetime:
        return EPOCH + timedelta(seconds=fixture_ms / self.unit_ms)

    def arrivals(self, flavor: str) -> dict[int, list[dict]]:
        """Specs by tick: Kueue's generator waits one interval before each creation."""
        out: dict[int, list[dict]] = defaultdict(list)
        for qi, (queue, _cohort) in enumerate(self.queues):
            for ci, cls in enumerate(self.classes):
                pod_sets = self.pod_sets(cls, flavor)
                for k in range(cls.count):
                    out[(k + 1) * cls.interval_ms // self.tick_ms].append(
                        {
                            "name": f"{cls.name}-{qi}-{ci}-{k}",
                            "team": queue,
                            "queue": queue,
                            "priority_class": cls.name,
                            "pod_sets": pod_sets,
                            "run_seconds": cls.runtime_ms // self.unit_ms,
                        }
                    )
        return out


def scaled(fixture: Fixture, factor: float) -> Fixture:
    """The same mix with `factor` x the workloads per queue (arrivals end proportionally sooner)."""
    classes = tuple(replace(c, count=max(1, round(c.count * factor))) for c in fixture.classes)
    return replace(fixture, classes=classes)


# --- database -------------------------------------------------------------------------------


FLAVOR = "bench-h100"


def fixture_load(fx: Fixture) -> None:
    """Fleet, cohorts, queues with quotas, and one priority class per workload class."""
    from fleet.models import Gpu, GpuFlavor, Node, Rack
    from scheduling.models import Cohort, PriorityClass, Queue, QueueQuota, Team

    flavor = GpuFlavor.objects.create(name=FLAVOR, product="NVIDIA H100 80GB HBM3", memory_mib=81559)
    per_rack = 16
    nodes = []
    for i in range(fx.capacity // fx.node_gpus):
        rack, _ = Rack.objects.get_or_create(name=f"rack-{i // per_rack}")
        nodes.append(Node(name=f"node-{i:03d}", rack=rack, flavor=flavor))
    Node.objects.bulk_create(nodes)
    Gpu.objects.bulk_create(
        Gpu(uuid=f"GPU-{n.name}-{g}", node=n, index=g, product=flavor.product, memory_mib=81559, nvlink_group=g // 4)
        for n in nodes
        for g in range(fx.node_gpus)
    )
    cohorts = {}
    for queue, cohort in fx.queues:
        if cohort not in cohorts:
            cohorts[cohort] = Cohort.objects.create(name=cohort)
        q = Queue.objects.create(name=queue, team=Team.objects.create(name=queue), cohort=cohorts[cohort])
        QueueQuota.objects.create(queue=q, flavor=flavor, nominal=fx.nominal, borrowing_limit=fx.borrowing_limit)
    for cls in fx.classes:
        # Kueue's pods leave at once when evicted: no grace, no minimum runtime.
        PriorityClass.objects.create(
            name=cls.name,
            value=cls.priority,
            preemptible=True,
            may_preempt=fx.preemption,
            grace_seconds=0,
            min_runtime_seconds=0,
        )


# --- submission -----------------------------------------------------------------------------


def submit_service(specs: list[dict], actor, now: datetime, *, as_requests: bool = False) -> None:
    """The API's path: one workload_submit (its own transaction) per workload; `as_requests`, each
    between Django's request_started and request_finished, as the web serves it (what they do to
    the database connection, DB_CONN_MAX_AGE, is timed too)."""
    from django.core.signals import request_finished, request_started

    from scheduling.services import workload_submit

    for spec in specs:
        if as_requests:
            request_started.send(sender=None)
        try:
            workload_submit(spec=spec, actor=actor, now=now)
        finally:
            if as_requests:
                request_finished.send(sender=None)


class BulkSubmitter:
    """A bulk path writing exactly the rows workload_submit writes (workload, pod sets, the
    'submitted' transition, the audit event), in one transaction per tick. Each distinct spec
    shape (everything but the name) is validated once by the same parser the service uses."""

    def __init__(self) -> None:
        self.drafts: dict[tuple, object] = {}

    def _draft(self, spec: dict):
        from scheduling.services.specs import parse_spec

        key = tuple(sorted((k, repr(v)) for k, v in spec.items() if k != "name"))
        if key not in self.drafts:
            self.drafts[key] = parse_spec(spec)
        return replace(self.drafts[key], name=spec["name"])

    def __call__(self, specs: list[dict], actor, now: datetime) -> None:
        from django.db import transaction

        from core.audit import audit_record_many
        from core.bulk import insert_rows
        from scheduling.choices import WorkloadState
        from scheduling.models import PodSet, Workload
        from scheduling.services.round_requests import round_request_on_commit
        from scheduling.services.transitions import transitions_record_bulk

        drafts = [self._draft(spec) for spec in specs]
        with transaction.atomic():
            user = actor.user if actor.user is not None and actor.user.pk else None
            workloads = Workload.objects.bulk_create(d.workload_row(submitted_by=user, now=now) for d in drafts)
            # Rows without ids to return go in as plain rows, one INSERT each.
            fields = [f.attname for f in PodSet._meta.concrete_fields if not f.primary_key]
            insert_rows(
                model=PodSet,
                fields=fields,
                rows=[
                    tuple(getattr(row, name) for name in fields)
                    for w, d in zip(workloads, drafts, strict=True)
                    for row in d.pod_set_rows(w)
                ],
            )
            transitions_record_bulk(
                changes=[(w.pk, "") for w in workloads], to_state=WorkloadState.PENDING, reason="submitted",
                actor=actor,
            )
            audit_record_many(
                actor=actor,
                verb="workload.submit",
                entries=[(w, None, {"spec": spec}) for w, spec in zip(workloads, specs, strict=True)],
            )
            round_request_on_commit()


# --- the loop -------------------------------------------------------------------------------


class SimClock:
    """Stands in for django.utils.timezone.now while the benchmark runs (like the tests' Clock).

    Stepped: `now` is set by the loop. Real time (speedup S): fixture time runs S x faster than
    the wall clock since `started` (time.time(), the same in every process), so what a service
    stamps is when it happened; `pin` holds it still while a late arrival is submitted."""

    def __init__(self, now: datetime, *, fx: Fixture | None = None, speedup: float | None = None,
                 started: float | None = None) -> None:
        self.now, self.fx, self.speedup = now, fx, speedup
        self.started = time.time() if started is None else started
        self.pin: datetime | None = None

    def fixture_ms(self) -> float:
        return (time.time() - self.started) * 1000 * self.speedup

    def sleep_until(self, fixture_ms: float) -> None:
        ahead = (fixture_ms - self.fixture_ms()) / 1000 / self.speedup
        if ahead > 0:
            time.sleep(ahead)

    def __call__(self) -> datetime:
        if self.pin is not None or self.speedup is None:
            return self.pin or self.now
        return self.fx.at(self.fixture_ms())


@dataclass
class Outcome:
    workloads: int
    admitted: int
    succeeded: int
    ticks: int
    rounds: int
    wall_s: float
    submit_s: float
    tick_s: float
    round_s: float
    slow_ticks: int  # ticks whose real time exceeded the fixture time they stand for
    max_tick_ms: float
    sim_end_s: float  # fixture seconds from the start to the last workload's end
    usage_pct: float  # GPUs held (allocations), like Kueue's quota usage
    work_pct: float  # GPUs doing the fixture's work: its GPU-seconds over capacity x span
    time_to_admission_s: dict[str, float]
    preemptions: int
    requeues: int
    phases_ms: dict[str, float]
    # Per window of fixture time (its start, s): % of the GPUs held by each class in it.
    held_by_window: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    window_s: float = 10.0
    # Per class, mean fixture ms each GPU of a succeeded job was held without running it: from its
    # claim (the admission) to the job's start, and from the run's end to its release (the last run).
    held_idle_ms: dict[str, tuple[float, float]] = field(default_factory=dict)
    # Per class of the job admitted, median fixture ms a GPU stood free before it: from the latest release
    # of its previous holders to this admission (the turn-around's middle leg; held_idle_ms the other two).
    free_before_ms: dict[str, float] = field(default_factory=dict)
    skipped_rounds: int = 0  # rounds that found another committing and wrote nothing
    # Production path: per window, % of its wall time the Celery worker spent running tasks.
    worker_busy_by_window: list[float] = field(default_factory=list)
    cpu_s: float = 0.0  # the benchmark's process(es) only (PostgreSQL's own work is not in it)
    notes: list[str] = field(default_factory=list)


class RoundTrigger:
    """Stands in for scheduling.services.round_requests.round_request: the services ask for a round
    (a submission, a finished job, a round that left a queue's head unseen) and the loop running
    the rounds takes the request. A multiprocessing Event, so the submitting process can ask too;
    a request made after a round's snapshot was read is taken by the next iteration."""

    def __init__(self, ctx=None) -> None:
        self.event = (ctx or multiprocessing.get_context("fork")).Event()

    def __call__(self) -> None:
        self.event.set()

    def take(self) -> bool:
        asked = self.event.is_set()
        if asked:
            self.event.clear()
        return asked


class _Run:
    """What a run's loops share: the fixture, the clock patched into Django, the counters."""

    def __init__(self, fx: Fixture, submit: str, clock: SimClock, trigger: RoundTrigger | None = None) -> None:
        from django.conf import settings

        from core.actors import Actor

        fx.check()
        self.fx, self.clock = fx, clock
        self.trigger = trigger or RoundTrigger()
        # The beat's periodic round, on the product's clock: it catches what no service asks for.
        self.period = timedelta(seconds=settings.FLEETDECK["PLACEMENT_ROUND_SECONDS"])
        self.last_round: datetime | None = None
        self.arrivals = fx.arrivals(FLAVOR)
        self.due = sorted(self.arrivals)
        self.total = sum(len(v) for v in self.arrivals.values())
        self.client = Actor.automation("bench-client")
        self.scheduler = Actor.automation("scheduler")
        self.submitter = submit_service if submit == "service" else BulkSubmitter()
        self.submitted = self.finished = self.admitted = self.ticks = self.slow = 0
        self.submit_s = self.tick_s = self.round_s = self.max_tick = 0.0

    def submit_due(self, tick: int, next_due: int) -> int:
        """Submit every arrival up to `tick` from due[next_due:], each stamped with its arrival time."""
        while next_due < len(self.due) and self.due[next_due] <= tick:
            arrival = self.due[next_due]
            t0 = time.perf_counter()
            self.clock.pin = self.fx.at(arrival * self.fx.tick_ms)  # when the generator created them
            try:
                self.submitter(self.arrivals[arrival], self.client, self.clock.pin)
            finally:
                self.clock.pin = None
            self.submit_s += time.perf_counter() - t0
            self.submitted += len(self.arrivals[arrival])
            next_due += 1
        return next_due

    def schedule(self) -> None:
        """One executor tick (the beat's), then, if one was asked for or the periodic one is due,
        the round task as the Celery worker runs it: a placement round and an executor tick that
        starts what it admitted; each at the clock's time when it starts."""
        from scheduling.services import executor_tick, placement_round_run

        t1 = time.perf_counter()
        self.finished += executor_tick(now=self.clock()).finished
        t2 = time.perf_counter()
        now = self.clock()
        t3 = t2
        if self.trigger.take() or self.last_round is None or now - self.last_round >= self.period:
            self.last_round = now
            self.admitted += len(placement_round_run(actor=self.scheduler, now=now).admitted)
            t3 = time.perf_counter()
            self.finished += executor_tick(now=self.clock()).finished
        t4 = time.perf_counter()
        self.tick_s, self.round_s = self.tick_s + (t2 - t1) + (t4 - t3), self.round_s + t3 - t2
        self.ticks += 1


def simulate(
    fx: Fixture, *, submit: str = "bulk", speedup: float | None = None, max_ticks: int | None = None
) -> Outcome:
    """Drive the whole fixture through the services on the current database (already loaded
    with fixture_load) and measure it, in one process.

    speedup None: the stepped clock, one iteration per tick, the clock waiting for the scheduler.
    speedup S: a real-time clock running S x faster than Kueue's fixture; each iteration submits
    what has arrived by now (stamped with its arrival time), then one executor tick and, when
    asked for or due, a round, so a slow round leaves finished GPUs idle and arrivals waiting, as
    it would in production."""
    clock = SimClock(fx.at(0), fx=fx, speedup=speedup)
    run = _Run(fx, submit, clock)
    max_ticks = max_ticks or run.due[-1] * 50 + 1000
    started, cpu_started = time.perf_counter(), time.process_time()
    with _patched(clock, run.trigger):
        tick = next_due = 0
        while True:
            t0 = time.perf_counter()
            if speedup is None:
                clock.now = fx.at(tick * fx.tick_ms)
            else:
                tick = int(clock.fixture_ms() // fx.tick_ms)
            next_due = run.submit_due(tick, next_due)
            run.schedule()
            run.max_tick = max(run.max_tick, time.perf_counter() - t0)
            run.slow += (time.perf_counter() - t0) * 1000 > fx.tick_ms
            if run.submitted == run.total and run.finished >= run.total:
                break
            if speedup is None:
                tick += 1
            if tick > max_ticks or run.ticks > max_ticks:
                raise RuntimeError(f"gave up after {tick} ticks: {run.finished} of {run.total} workloads finished")
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    out = _measure(fx, run.total, run.ticks, wall, run.submit_s, run.tick_s, run.round_s, run.slow,
                   run.max_tick, run.admitted)
    out.cpu_s = cpu
    return out


def _submit_process(
    fx: Fixture, submit: str, started: float, speedup: float, trigger: RoundTrigger, results
) -> None:
    """The API's side of a concurrent run: each tick's arrivals submitted when they arrive."""
    from django.db import connections

    clock = SimClock(fx.at(0), fx=fx, speedup=speedup, started=started)
    cpu = time.process_time()
    try:
        with _patched(clock, trigger):
            run = _Run(fx, submit, clock, trigger)
            for i, tick in enumerate(run.due):
                clock.sleep_until(tick * fx.tick_ms)
                run.submit_due(tick, i)
        results.put({"submit_s": run.submit_s, "submitted": run.submitted, "cpu_s": time.process_time() - cpu})
    finally:
        connections.close_all()


def simulate_concurrent(fx: Fixture, *, speedup: float, submit: str = "bulk") -> Outcome:
    """Real time, with submissions in a process of their own (the web API in production, the
    generator in Kueue's benchmark) and executor ticks + rounds back to back in this one (the
    Celery worker)."""
    from django.db import connections

    connections.close_all()  # the forked process opens its own connection
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    started = time.time()
    clock = SimClock(fx.at(0), fx=fx, speedup=speedup, started=started)
    run = _Run(fx, submit, clock, RoundTrigger(ctx))
    proc = ctx.Process(
        target=_submit_process, args=(fx, submit, started, speedup, run.trigger, results), name="submit"
    )
    proc.start()
    cpu_started = time.process_time()
    try:
        with _patched(clock, run.trigger):
            while run.finished < run.total:
                begun = clock.fixture_ms()
                run.schedule()
                clock.sleep_until(begun + fx.tick_ms)  # at most one iteration per tick when idle
                if not proc.is_alive() and proc.exitcode:
                    raise RuntimeError(f"the submitting process failed (exit {proc.exitcode})")
        submitted = results.get(timeout=60)
        proc.join()
    finally:
        if proc.is_alive():
            proc.kill()
    wall = time.time() - started
    out = _measure(fx, run.total, run.ticks, wall, submitted["submit_s"], run.tick_s, run.round_s, 0, 0.0,
                   run.admitted)
    out.cpu_s = time.process_time() - cpu_started + submitted["cpu_s"]
    return out


# --- the production path --------------------------------------------------------------------


class CeleryStandIn:
    """The broker between the product's round requests and the benchmark's one worker.

    The services' round_request runs unchanged (its mark in Redis, its DEBOUNCE_SECONDS
    countdown, one queued round at a time); only `placement_round_task.apply_async`, the hand-off
    to Celery, puts the task's due time (wall clock) on a queue the worker loop reads."""

    def __init__(self, ctx, clock: SimClock | None = None) -> None:
        self.queue = ctx.Queue()
        self.clock = clock

    def apply_async(self, kwargs: dict | None = None, countdown: float = 0.0, expires: float | None = None,
                    eta: datetime | None = None, **_options) -> None:
        """`countdown` and `expires` in wall seconds; `eta` on Django's clock (the benchmark's: a
        wake-up at a simulated job's end), turned into the wall time the clock reaches it; the
        task's `kwargs` go with it (as sorted items: queue entries compare)."""
        now = time.time()
        due = now + (countdown or 0.0)
        if eta is not None and self.clock is not None:
            ahead_ms = (eta - self.clock()).total_seconds() * self.clock.fx.unit_ms
            due = now + max(0.0, ahead_ms / 1000 / self.clock.speedup)
        self.queue.put((due, now + expires if expires else float("inf"), tuple(sorted((kwargs or {}).items()))))


class _WorkerProcess:
    """Runs a task as a Celery worker's pool process does: through Celery's tracer (not eagerly),
    with the task_prerun / task_postrun hooks a worker connects (the Django fixup's, as
    DjangoWorkerFixup.install connects them, and the app's own in config.celery). What those do to
    the database connection between tasks (CELERY_DB_REUSE_MAX, DB_CONN_MAX_AGE) is timed too."""

    def __init__(self, app) -> None:
        from celery import signals
        from celery.fixups.django import DjangoWorkerFixup

        fixup = DjangoWorkerFixup(app)  # the hooks a worker process connects as it starts
        signals.task_prerun.connect(fixup.on_task_prerun, weak=False)
        signals.task_postrun.connect(fixup.on_task_postrun, weak=False)
        self.app, self.tracers = app, {}

    def __call__(self, task, kwargs: dict | None = None):
        from celery.app.trace import build_tracer

        if task.name not in self.tracers:
            self.tracers[task.name] = build_tracer(task.name, task, app=self.app, eager=False)
        retval, info, *_ = self.tracers[task.name](uuid.uuid4().hex, (), kwargs or {}, {})
        if info is not None and info.state != "SUCCESS":
            raise RuntimeError(f"{task.name} failed: {info.retval!r}")
        return retval


class _production_patched:
    """Django's clock is `clock` and placement_round_task's hand-off goes to `broker`."""

    def __init__(self, clock: SimClock, broker: CeleryStandIn) -> None:
        self.clock, self.broker = clock, broker

    def __enter__(self) -> None:
        import django.utils.timezone as dj_timezone

        from scheduling.tasks import placement_round_task

        self.saved = dj_timezone.now, placement_round_task.apply_async
        dj_timezone.now = self.clock
        placement_round_task.apply_async = self.broker.apply_async

    def __exit__(self, *exc) -> None:
        import django.utils.timezone as dj_timezone

        from scheduling.tasks import placement_round_task

        dj_timezone.now, placement_round_task.apply_async = self.saved


def _api_process(fx: Fixture, share: int, shares: int, started: float, speedup: float, broker: CeleryStandIn,
                 results) -> None:
    """One API worker: the arrivals of every `shares`-th queue, each a workload_submit of its own at
    its arrival time (stamped with it, also when this worker is late)."""
    from django.db import connections

    from core.actors import Actor

    clock = SimClock(fx.at(0), fx=fx, speedup=speedup, started=started)
    mine = {queue for queue, _cohort in fx.queues[share::shares]}
    arrivals = {tick: [s for s in specs if s["queue"] in mine] for tick, specs in fx.arrivals(FLAVOR).items()}
    client = Actor.automation("bench-client")
    busy = submitted = 0
    late = late_max = 0.0  # how long after its arrival each workload's request went out
    late_by_class: dict[str, float] = defaultdict(float)
    cpu = time.process_time()
    try:
        with _production_patched(clock, broker):
            for tick in sorted(arrivals):
                clock.sleep_until(tick * fx.tick_ms)
                t0 = time.perf_counter()
                behind = max(0.0, (clock.fixture_ms() - tick * fx.tick_ms) / 1000)
                late, late_max = late + behind * len(arrivals[tick]), max(late_max, behind)
                for spec in arrivals[tick]:
                    late_by_class[class_of(spec["name"])] += behind
                clock.pin = fx.at(tick * fx.tick_ms)
                try:
                    submit_service(arrivals[tick], client, clock.pin, as_requests=True)
                finally:
                    clock.pin = None
                busy += time.perf_counter() - t0
                submitted += len(arrivals[tick])
        results.put({"submit_s": busy, "submitted": submitted, "cpu_s": time.process_time() - cpu,
                     "late_s": late, "late_max_s": late_max, "late_by_class": dict(late_by_class)})
    finally:
        connections.close_all()


class _WorkerLoop:
    """One Celery worker process of the production path: runs the tasks the product queues when they
    are due (the broker hands out whichever came due first), and with `beat` the beat's two entries,
    the round task and executor_tick_task, every PLACEMENT_ROUND_SECONDS of wall time. Each process
    takes tasks off the shared queue as it is free, holding those not due yet (a Celery worker
    prefetches tasks with an eta the same way)."""

    def __init__(self, clock: SimClock, broker: CeleryStandIn, *, beat: bool) -> None:
        from django.conf import settings

        self.clock, self.broker = clock, broker
        self.period = float(settings.FLEETDECK["PLACEMENT_ROUND_SECONDS"])
        # Celery beat runs each entry at start, then every period.
        self.beat = {"round": clock.started, "tick": clock.started} if beat else {}
        self.queued: list[tuple[float, float, tuple]] = []
        self.admitted = self.tasks = self.requested = 0
        self.tick_s = self.round_s = 0.0
        self.spans: list[tuple[float, float]] = []  # each task's (start, end), wall seconds from the start
        self.cpu_started = time.process_time()

    def stats(self) -> dict:
        return {"admitted": self.admitted, "tasks": self.tasks, "requested": self.requested, "tick_s": self.tick_s,
                "round_s": self.round_s, "spans": self.spans, "cpu_s": time.process_time() - self.cpu_started}

    def run(self, stop: Callable[[], bool]) -> None:
        import heapq

        from scheduling.tasks import executor_tick_task, placement_round_task

        run_task = _WorkerProcess(placement_round_task.app)
        queued, beat = self.queued, self.beat
        while not stop():
            while True:
                try:
                    heapq.heappush(queued, self.broker.queue.get_nowait())
                except queue_mod.Empty:
                    break
            now = time.time()
            next_beat = min(beat.values(), default=float("inf"))
            due = min(queued[0][0] if queued else float("inf"), next_beat)
            if due > now:
                try:  # wakes at least every 0.05 s to look at `stop`
                    heapq.heappush(queued, self.broker.queue.get(timeout=min(due - now, 0.05)))
                except queue_mod.Empty:
                    pass
                continue
            t0, began = time.perf_counter(), time.time()
            if queued and queued[0][0] <= next_beat:
                _due, expires, kwargs = heapq.heappop(queued)
                if now > expires:
                    continue  # Celery drops an expired task unrun
                self.requested += 1
                self.admitted += run_task(placement_round_task, dict(kwargs))["admitted"]
                self.round_s += time.perf_counter() - t0
            elif beat["round"] <= beat["tick"]:
                # A beat task expires after one period (the schedule's options): a late worker
                # runs the newest one only.
                while beat["round"] <= now:
                    beat["round"] += self.period
                self.admitted += run_task(placement_round_task)["admitted"]
                self.round_s += time.perf_counter() - t0
            else:
                while beat["tick"] <= now:
                    beat["tick"] += self.period
                run_task(executor_tick_task)
                self.tick_s += time.perf_counter() - t0
            self.tasks += 1
            self.spans.append((began - self.clock.started, time.time() - self.clock.started))


def _worker_process(clock: SimClock, broker: CeleryStandIn, done, results) -> None:
    """A further worker process (the prefork pool's): runs tasks until `done`."""
    from django.db import connections

    loop = _WorkerLoop(clock, broker, beat=False)
    try:
        with _production_patched(clock, broker):
            loop.run(done.is_set)
    finally:
        results.put(loop.stats())
        connections.close_all()


def simulate_production(fx: Fixture, *, speedup: float = 1.0, api_workers: int = 4,
                        worker_processes: int = 1) -> Outcome:
    """The fixture through the product as it is deployed: `api_workers` processes submit each
    workload with workload_submit at its arrival time (the web API's workers, one request per
    workload, as Kueue's generator creates one object each); `worker_processes` Celery worker
    processes (this one, and more forked as a prefork pool's) run the tasks the product queues,
    when they are due (_WorkerLoop): the round task (an executor tick, a round, the admitted gangs
    started) that round_request queues with its production debounce or round_request_at for the
    moment a running job ends, and the beat's two entries. Needs REDIS_URL (round_request's mark
    is shared by the processes there, as in production)."""
    from django.conf import settings
    from django.db import connections

    from scheduling.choices import ACTIVE_STATES, WAITING_STATES
    from scheduling.models import Workload

    if not settings.REDIS_URL:
        raise SystemExit("error: the production path needs REDIS_URL (round requests are shared through Redis)")
    fx.check()
    connections.close_all()  # each forked process opens its own connection
    ctx = multiprocessing.get_context("fork")
    started = time.time()
    clock = SimClock(fx.at(0), fx=fx, speedup=speedup, started=started)
    broker, results, worker_results, done = CeleryStandIn(ctx, clock), ctx.Queue(), ctx.Queue(), ctx.Event()
    total = len(fx.queues) * sum(c.count for c in fx.classes)
    procs = [ctx.Process(target=_api_process, args=(fx, i, api_workers, started, speedup, broker, results),
                         name=f"api-{i}") for i in range(api_workers)]
    workers = [ctx.Process(target=_worker_process, args=(clock, broker, done, worker_results), name=f"worker-{i}")
               for i in range(1, worker_processes)]
    for proc in procs + workers:
        proc.start()
    loop = _WorkerLoop(clock, broker, beat=True)
    checked = [0.0]

    def all_finished() -> bool:
        if any(p.exitcode for p in procs + workers if not p.is_alive()):
            raise RuntimeError("an API or worker process failed")
        if time.time() - checked[0] < 0.05 or any(p.is_alive() for p in procs):
            return False
        checked[0] = time.time()
        # Every workload submitted (the API processes are done) and none left waiting or running: one
        # index probe. Counting the finished ones cost this loop, the worker's, ~2.5 ms each time.
        return not Workload.objects.filter(state__in=WAITING_STATES + ACTIVE_STATES).exists()

    try:
        with _production_patched(clock, broker):
            loop.run(all_finished)
        wall = time.time() - started
        done.set()
        stats = [loop.stats()] + [worker_results.get(timeout=60) for _ in workers]
        submitted = [results.get(timeout=60) for _ in procs]
        for proc in procs + workers:
            proc.join()
    finally:
        done.set()
        for proc in procs + workers:
            if proc.is_alive():
                proc.kill()
    tasks, requested = sum(st["tasks"] for st in stats), sum(st["requested"] for st in stats)
    out = _measure(fx, total, tasks, wall, sum(s["submit_s"] for s in submitted), sum(st["tick_s"] for st in stats),
                   sum(st["round_s"] for st in stats), 0, 0.0, sum(st["admitted"] for st in stats))
    out.cpu_s = sum(st["cpu_s"] for st in stats) + sum(s["cpu_s"] for s in submitted)
    # Per window, the worker processes' busy time over the window's: up to 100 % per process.
    spans = [span for st in stats for span in st["spans"]]
    out.worker_busy_by_window = _busy_by_window(spans, out.window_s / speedup, len(out.held_by_window))
    out.notes.append(
        f"worker: {requested} round tasks queued by round_request, {tasks - requested} beat tasks (round or "
        f"executor tick); API: each request went out on average {sum(s['late_s'] for s in submitted) / total:.2f} s "
        f"after its workload's arrival (at most {max(s['late_max_s'] for s in submitted):.2f} s; the times to "
        "admission count from the arrival, so they include it)"
    )
    lag = {c.name: sum(s["late_by_class"].get(c.name, 0.0) for s in submitted) / (len(fx.queues) * c.count)
           for c in fx.classes}
    out.notes.append(
        "time to admission per class, " + " / ".join(c.name for c in fx.classes) + ": the API's lag "
        + " / ".join(f"{lag[c.name]:.1f}" for c in fx.classes) + " s, then from the request to the admission "
        + " / ".join(f"{out.time_to_admission_s[c.name] - lag[c.name]:.1f}" for c in fx.classes) + " s"
    )
    return out


class _patched:
    """Django's clock is `clock` and the services' round trigger is `trigger` (the loop takes
    its requests instead of Celery) for the duration of the block."""

    def __init__(self, clock: SimClock, trigger: RoundTrigger) -> None:
        self.clock, self.trigger = clock, trigger

    def __enter__(self) -> None:
        import django.utils.timezone as dj_timezone

        self.saved = dj_timezone.now, _round_trigger()
        dj_timezone.now = self.clock
        _set_round_trigger(self.trigger)

    def __exit__(self, *exc) -> None:
        import django.utils.timezone as dj_timezone

        dj_timezone.now, trigger = self.saved
        _set_round_trigger(trigger)


def _round_trigger():
    import scheduling.services.round_requests

    return scheduling.services.round_requests.round_request


def _set_round_trigger(fn) -> None:
    import scheduling.services.round_requests

    scheduling.services.round_requests.round_request = fn


def _measure(fx, total, ticks, wall, submit_s, tick_s, round_s, slow, max_tick, admitted) -> Outcome:
    from django.db.models import Sum

    from scheduling.models import Allocation, PlacementRound, Preemption, Workload

    scale = fx.unit_ms / 1000  # simulated seconds -> fixture seconds
    waits: dict[str, list[float]] = defaultdict(list)
    succeeded = 0
    for name, state, submitted, admitted_at in Workload.objects.values_list(
        "name", "state", "submitted_at", "admitted_at"
    ):
        succeeded += state == "succeeded"
        if admitted_at is not None:
            # Like Kueue's recorder: from creation to the (last) admission.
            waits[class_of(name)].append((admitted_at - submitted).total_seconds() * scale)
    start = fx.at(0)
    gpu_seconds, end = 0.0, start
    held = []  # (class, from, to) in fixture seconds
    # Per GPU of a succeeded job's last run (the rows its finish released), fixture ms from the
    # claim to the run's start and from the run's end to the release.
    idle: dict[str, list[tuple[float, float]]] = defaultdict(list)
    by_gpu: dict[int, list[tuple]] = defaultdict(list)  # (created, released, class) per GPU
    for created, released, name, state, started, finished, run, resumed, gpu in Allocation.objects.values_list(
        "created_at", "released_at", "workload__name", "workload__state", "workload__started_at",
        "workload__finished_at", "workload__run_seconds", "workload__resume_step", "gpu_id",
    ):
        released = released or created
        by_gpu[gpu].append((created, released, class_of(name)))
        gpu_seconds += (released - created).total_seconds()
        end = max(end, released)
        held.append((class_of(name), (created - start).total_seconds() * scale,
                     (released - start).total_seconds() * scale))
        if state == "succeeded" and released == finished and started is not None and run is not None:
            ran_until = started + timedelta(seconds=run - resumed)
            idle[class_of(name)].append(((started - created).total_seconds() * scale * 1000,
                                         (released - ran_until).total_seconds() * scale * 1000))
    span = (end - start).total_seconds()
    window = 10.0 if span * scale > 30 else 1.0
    phases = PlacementRound.objects.aggregate(
        load=Sum("load_ms"), compute=Sum("compute_ms"), commit=Sum("commit_ms"), followup=Sum("followup_ms")
    )
    return Outcome(
        workloads=total,
        admitted=admitted,
        succeeded=succeeded,
        ticks=ticks,
        rounds=PlacementRound.objects.count(),
        skipped_rounds=PlacementRound.objects.filter(skipped=True).count(),
        wall_s=wall,
        submit_s=submit_s,
        tick_s=tick_s,
        round_s=round_s,
        slow_ticks=slow,
        max_tick_ms=max_tick * 1000,
        sim_end_s=span * scale,
        usage_pct=100 * gpu_seconds / (fx.capacity * span) if span else 0.0,
        work_pct=100 * fx.work_gpu_seconds / fx.unit_ms * 1000 / (fx.capacity * span) if span else 0.0,
        time_to_admission_s={c.name: _mean(waits.get(c.name, [])) for c in fx.classes},
        preemptions=Preemption.objects.count(),
        requeues=Workload.objects.aggregate(n=Sum("requeue_count"))["n"] or 0,
        phases_ms={k: v or 0.0 for k, v in phases.items()},
        held_by_window=_held_by_window(fx, held, span * scale, window),
        window_s=window,
        held_idle_ms={cls: (_mean([a for a, _ in pairs]), _mean([e for _, e in pairs])) for cls, pairs in idle.items()},
        free_before_ms={cls: statistics.median(gaps) * scale * 1000
                        for cls, gaps in free_before_admission(by_gpu).items()},
    )


def free_before_admission(by_gpu: dict[int, list[tuple]]) -> dict[str, list[float]]:
    """Per class of the job admitted, the seconds each GPU stood free before that admission: from the
    latest release of the GPU's previous holders (`by_gpu`: per GPU, (created, released, class) rows).
    A GPU's first admission has no previous holder; a share admitted beside a holder (time-slicing)
    waited for no release: neither counts."""
    gaps: dict[str, list[float]] = defaultdict(list)
    for rows in by_gpu.values():
        last = None  # the latest release so far
        for created, released, cls in sorted(rows, key=lambda r: r[0]):
            if last is not None and created >= last:
                gaps[cls].append((created - last).total_seconds())
            last = released if last is None else max(last, released)
    return dict(gaps)


def _held_by_window(fx: Fixture, held: list[tuple[str, float, float]], span: float, window: float
                    ) -> list[tuple[float, dict[str, float]]]:
    """Per `window` seconds of fixture time up to `span`: % of the GPUs each class held, from the
    allocations' (class, from, to) in fixture seconds."""
    by_window: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for cls, start, stop in held:
        w = int(start // window)
        while w * window < stop:
            by_window[w][cls] += min(stop, (w + 1) * window) - max(start, w * window)
            w += 1
    return [(w * window, {c.name: 100 * by_window[w][c.name] / (fx.capacity * window) for c in fx.classes})
            for w in range(int(span // window) + 1)]


def _busy_by_window(spans: list[tuple[float, float]], window: float, windows: int) -> list[float]:
    """% of each `window` wall seconds covered by the (start, end) spans."""
    busy = [0.0] * windows
    for start, stop in spans:
        w = int(start // window)
        while w < windows and w * window < stop:
            busy[w] += min(stop, (w + 1) * window) - max(start, w * window)
            w += 1
    return [100 * b / window for b in busy]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


# --- report ---------------------------------------------------------------------------------


MODES = {
    "production": "the product as deployed: {api_workers} API worker processes, each workload one workload_submit "
    "(a request: Django's request signals around it) at its arrival time; {workers} ("
    "each task through Celery's tracer and the hooks a worker runs around it) running the round task "
    "(executor tick, round, start) "
    "when round_request's production debounce queues it ({debounce:g} s, one queued at a time, through Redis) "
    "or the executor tick's wake-up comes at a running job's end, "
    "and the beat's round task and executor tick every {period:g} s of wall time; the clock running {speedup:g}x "
    "the fixture's real time",
    "stepped": "one process, one iteration per {tick} ms of fixture time, the clock waiting for it",
    "realtime": "one process, iterations back to back, the clock running {speedup:g}x the fixture's real time",
    "concurrent": "submissions in a process of their own (the web API's part), executor ticks and rounds back "
    "to back in another (the Celery worker's), the clock running {speedup:g}x the fixture's real time",
}


# Issue 6's goal: ten times Kueue's admission rate at Kueue's quota usage (55.9 % in the issue).
GOAL_RATE = 430
GOAL_USAGE_PCT = 55.9


def goal_met(out: Outcome, *, strict: bool = False) -> bool:
    """Kueue's usage is quota held by admitted workloads, the `usage_pct` here; `strict` asks the
    same of the GPUs running the fixture's work, which a late executor tick cannot inflate."""
    usage = min(out.usage_pct, out.work_pct) if strict else out.usage_pct
    return out.admitted / out.wall_s >= GOAL_RATE and usage >= GOAL_USAGE_PCT


# Issue 18's goal, on the production path in real time: wall time and each class's wait.
GOAL_WALL_S = 80.0


def production_goal_met(out: Outcome) -> bool:
    waits = KUEUE_BASELINE["time_to_admission_s"]
    return out.wall_s <= GOAL_WALL_S and all(out.time_to_admission_s[c] < w for c, w in waits.items())


def _workers_text(processes: int) -> str:
    if processes == 1:
        return "one Celery worker process"
    return f"a Celery worker of {processes} processes (its prefork pool; `celery worker` starts one per CPU)"


def report(fx: Fixture, out: Outcome, submit: str, setup_s: float, mode: str, speedup: float | None = None,
           api_workers: int = 0, worker_processes: int = DEFAULT_WORKER_PROCESSES, host: str = "") -> str:
    from django.conf import settings

    from scheduling.services.round_requests import DEBOUNCE_SECONDS

    k = KUEUE_BASELINE
    kueue_rate = k["workloads"] / k["wall_s"]
    rate = out.admitted / out.wall_s
    bound = fx.lower_bound_s()
    bound_use = 100 * fx.work_gpu_seconds / (fx.capacity * bound)
    described = MODES[mode].format(tick=fx.tick_ms, speedup=speedup or 0, api_workers=api_workers,
                                   workers=_workers_text(worker_processes), debounce=DEBOUNCE_SECONDS,
                                   period=settings.FLEETDECK["PLACEMENT_ROUND_SECONDS"])
    lines = [
        f"fixture: {len(fx.queues)} queues in {fx.cohorts} cohorts (nominal {fx.nominal}, borrowing limit "
        f"{fx.borrowing_limit}), {fx.capacity} GPUs = {fx.capacity // fx.node_gpus} nodes x {fx.node_gpus}; "
        f"{out.workloads:,} workloads (" + ", ".join(f"{c.count} {c.name}" for c in fx.classes) + " per queue)",
        f"path: PostgreSQL, {submit} submission, workload_submit / executor_tick / placement_round_run; "
        + described
        + f" (1 simulated s = {fx.unit_ms} ms); preemption: "
        f"{'priority (fleet-wide) + cohort reclaim' if fx.preemption else 'cohort reclaim only'}; "
        f"ROUND_QUEUE_DEPTH {settings.FLEETDECK.get('ROUND_QUEUE_DEPTH', 0)} (waiting workloads a round considers "
        "per queue); "
        f"PROTECT_BLOCKED_GANGS {'on' if settings.FLEETDECK.get('PROTECT_BLOCKED_GANGS') else 'off'} (lower "
        "priorities leave room for blocked gangs); "
        f"set-up (scratch DB, migrate, fleet) {setup_s:.1f} s, not counted",
        *([host] if host else []),
        "",
        f"    {'':34} {'Fleetdeck':>12} {'lower bound':>12} {'Kueue baseline':>15}",
        f"    {'wall time (s)':34} {out.wall_s:>12.1f} {bound:>12.1f} {k['wall_s']:>15.1f}",
        f"    {'admissions / wall second':34} {rate:>12.0f} {out.workloads / bound:>12.0f} {kueue_rate:>15.1f}",
        f"    {'mean quota usage (%)':34} {out.usage_pct:>12.1f} {bound_use:>12.1f} {k['usage_pct']:>15.1f}",
        f"    {'  of which running work (%)':34} {out.work_pct:>12.1f} {bound_use:>12.1f} {'-':>15}",
    ]
    for c in fx.classes:
        kv = k["time_to_admission_s"].get(c.name)
        kueue = f"{kv:>15.1f}" if kv is not None else f"{'-':>15}"
        label = f"time to admission, {c.name} (s)"
        lines.append(f"    {label:34} {out.time_to_admission_s[c.name]:>12.1f} {'-':>12} {kueue}")
    lines += [
        "",
        f"    lower bound: the fixture's {fx.work_gpu_seconds:,.0f} GPU-seconds on {fx.capacity} GPUs, none before "
        "it arrives (no scheduler finishes sooner in real time); on these nodes no schedule ends before "
        f"{fx.packing_bound_s():.1f} s (node-packing bound: on {fx.node_gpus}-GPU nodes a part of more than half a "
        "node holds it whole, one of exactly half holds half of it, whatever runs beside). Goal (issue 18, "
        "production path, 1x): wall "
        f"<= {GOAL_WALL_S:.0f} s and every class's time to admission below Kueue's: "
        + (f"{'met' if production_goal_met(out) else 'NOT met'}" if out.workloads == k["workloads"] else
           f"not judged (a fixture scaled to {out.workloads:,} of its {k['workloads']:,} workloads)")
        + ("" if mode == "production" and speedup == 1 else " (this is not that run: extra row only)"),
        f"    goal >= {GOAL_RATE} admissions/s at >= {GOAL_USAGE_PCT} % quota usage: "
        f"{'met' if goal_met(out) else 'NOT met'}; at >= {GOAL_USAGE_PCT} % running-work usage too: "
        f"{'yes' if goal_met(out, strict=True) else 'no'}",
        f"    {out.admitted:,} admissions ({out.requeues} after a preemption; {out.preemptions} preemptions), "
        f"{out.succeeded:,} of {out.workloads:,} succeeded; fixture time to the last end {out.sim_end_s:.1f} s",
        f"    {out.ticks} iterations, {out.rounds} rounds"
        + (f" ({out.skipped_rounds} skipped: another round was committing)" if out.skipped_rounds else "")
        + f"; busy: submit {out.submit_s:.1f} s, executor ticks "
        f"{out.tick_s:.1f} s, rounds "
        f"{out.round_s:.1f} s (load {out.phases_ms['load'] / 1e3:.1f} s, core "
        f"{out.phases_ms['compute'] / 1e3:.1f} s, commit {out.phases_ms['commit'] / 1e3:.1f} s, follow-up "
        f"{out.phases_ms['followup'] / 1e3:.1f} s)",
        f"    CPU of the benchmark's process(es) {out.cpu_s:.1f} s in {out.wall_s:.1f} s of wall time (the rest: "
        "PostgreSQL and waiting)",
    ]
    lines += [f"    {note}" for note in out.notes]
    if out.held_by_window:
        names = " / ".join(c.name for c in fx.classes)
        busy = out.worker_busy_by_window
        lines.append(f"    GPUs held per {out.window_s:g} s of fixture time, % of the {fx.capacity} ({names}): what "
                     "the wall time is spent on" + ("; and the share of it the worker ran tasks (100 % per process)"
                                                   if busy else ""))
        lines += [f"      {f'{start:g}-{start + out.window_s:g} s':>10} {sum(use.values()):>4.0f} %  ("
                  + " / ".join(f"{use[c.name]:.0f}" for c in fx.classes) + ")"
                  + (f"   worker busy {busy[i]:.0f} %" if i < len(busy) else "")
                  for i, (start, use) in enumerate(out.held_by_window)]
    if out.held_idle_ms:
        names = [c.name for c in fx.classes if c.name in out.held_idle_ms]
        lines.append(
            f"    GPUs held but not running, mean per GPU of a job ({' / '.join(names)}): from the admission to the "
            "job's start " + " / ".join(f"{out.held_idle_ms[n][0]:.0f}" for n in names) + " ms, from the run's end "
            "to the release " + " / ".join(f"{out.held_idle_ms[n][1]:.0f}" for n in names) + " ms of fixture time "
            "(the quota usage beyond the running work, requeued runs aside)")
    if out.free_before_ms:
        names = [c.name for c in fx.classes if c.name in out.free_before_ms]
        lines.append(
            f"    GPUs free between a release and the next admission on them, median per GPU of the job admitted "
            f"({' / '.join(names)}): " + " / ".join(f"{out.free_before_ms[n]:.0f}" for n in names)
            + " ms of fixture time (with the line above, a GPU's turn-around from one job to the next)")
    if mode == "stepped":
        lines += [
            f"    real-time check: {out.slow_ticks} of {out.ticks} ticks took longer than the {fx.tick_ms} ms they "
            f"stand for (slowest {out.max_tick_ms:.0f} ms)",
            "    (Kueue: averages of its 5 reference runs in rangespec.yaml, real time in envtest; here the clock "
            "waits for the scheduler, so waits measure decisions and the wall time measures speed)",
        ]
    elif speedup == 1:
        lines.append(
            "    (Kueue: averages of its 5 reference runs in rangespec.yaml, real time in envtest, its client "
            "limited to 50 creations/s. Here too the fixture runs in real time: a slow round or tick leaves GPUs "
            "idle and work waiting, which the running-work usage shows)"
        )
    else:
        lines.append(
            "    (Kueue: averages of its 5 reference runs in rangespec.yaml, real time in envtest. Here the clock "
            "runs faster than real time: a slow round leaves GPUs idle and work waiting, which the running-work "
            "usage shows)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Kueue's baseline scheduler-performance fixture through Fleetdeck")
    ap.add_argument("--scale", type=float, default=1.0, help="workloads per queue x this (0.1: a quick run)")
    ap.add_argument("--workloads", type=int, default=None, help="about this many workloads in all (sets --scale)")
    ap.add_argument(
        "--submit",
        choices=["bulk", "service"],
        default="bulk",
        help="bulk: one insert per tick writing workload_submit's rows; service: workload_submit each",
    )
    ap.add_argument("--mode", choices=sorted(MODES), default="production", help="; ".join(
        f"{name}: {text}" for name, text in MODES.items()).format(
        tick=100, speedup=DEFAULT_SPEEDUP, api_workers="N", workers="W Celery worker processes", debounce=0.05,
        period=2))
    ap.add_argument("--api-workers", type=int, default=DEFAULT_API_WORKERS,
                    help="production mode: API worker processes submitting (each takes every N-th queue)")
    ap.add_argument("--worker-processes", type=int, default=DEFAULT_WORKER_PROCESSES,
                    help="production mode: Celery worker processes running the tasks (a prefork pool's; "
                    "`celery worker` starts one per CPU)")
    ap.add_argument(
        "--speedup",
        type=_speedups,
        default=(DEFAULT_SPEEDUP,),
        help="production, realtime and concurrent modes: the clock runs this many times faster than the fixture "
        "(Kueue, and the headline: 1x); "
        "several, comma-separated (4,5,6), run one after another, each on a fresh database, then side by side",
    )
    ap.add_argument("--node-gpus", type=int, default=8)
    ap.add_argument(
        "--priority-preemption",
        action="store_true",
        help="every class may preempt lower priorities fleet-wide (default: only cohort reclaim)",
    )
    ap.add_argument("--profile", metavar="FILE", help="write cProfile stats of the run to FILE and print the top")
    ap.add_argument("--keep", action="store_true", help="keep the scratch database for inspection")
    args = ap.parse_args(argv)
    fx = Fixture(node_gpus=args.node_gpus, preemption=args.priority_preemption)
    scale = args.scale
    if args.workloads is not None:
        if args.workloads < len(fx.queues) * len(fx.classes):
            print(f"error: --workloads must be at least {len(fx.queues) * len(fx.classes)}", file=sys.stderr)
            return 2
        scale = args.workloads / fx.total
    if args.mode != "stepped" and not all(0 < speedup <= 1000 for speedup in args.speedup):
        print("error: --speedup must be in (0, 1000]", file=sys.stderr)
        return 2
    if not 0 < scale <= 10:
        print("error: --scale must be in (0, 10]", file=sys.stderr)
        return 2
    if not 1 <= args.api_workers <= 64:
        print("error: --api-workers must be in [1, 64]", file=sys.stderr)
        return 2
    if not 1 <= args.worker_processes <= 64:
        print("error: --worker-processes must be in [1, 64]", file=sys.stderr)
        return 2
    if args.mode == "production":
        # Round requests meet in Redis, as in production (without it each process would keep its own mark).
        os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    fx = scaled(fx, scale)
    try:
        fx.check()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        print("error: set DATABASE_URL=postgres://... (a scratch database is created next to it)", file=sys.stderr)
        return 2
    if args.mode == "stepped" or len(args.speedup) == 1:
        _run(args, fx, url, args.speedup[0])
        return 0
    if args.profile or args.keep:
        print("error: --profile and --keep take a single --speedup", file=sys.stderr)
        return 2
    ctx = multiprocessing.get_context("fork")  # each run sets Django up in a child, on a fresh database
    outcomes = []
    for speedup in args.speedup:
        results = ctx.Queue()
        child = ctx.Process(target=_run_child, args=(args, fx, url, speedup, results))
        child.start()
        outcome = _outcome_of(child, results)
        child.join()
        if child.exitcode or outcome is None:
            print(f"error: the run at {speedup:g}x failed", file=sys.stderr)
            return 1
        outcomes.append((speedup, outcome))
        print()
    print(sweep_table(outcomes))
    return 0


def _speedups(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or a comma-separated list of numbers: {text!r}") from None


def sweep_table(outcomes: list[tuple[float, Outcome]]) -> str:
    lines = [
        "side by side (each speed-up on a fresh database, one after another):",
        "",
        "| speed-up | wall (s) | admissions/s | quota usage (%) | running work (%) | time to admission "
        "small / medium / large (s) | goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for speedup, out in outcomes:
        waits = " / ".join(f"{v:.1f}" for v in out.time_to_admission_s.values())
        lines.append(
            f"| {speedup:g}x | {out.wall_s:.1f} | {out.admitted / out.wall_s:.0f} | {out.usage_pct:.1f} | "
            f"{out.work_pct:.1f} | {waits} | {'met' if goal_met(out) else 'not met'} |"
        )
    return "\n".join(lines)


def _outcome_of(child, results) -> Outcome | None:
    """The child's Outcome, or None once it has died without one (killed, out of memory)."""
    while True:
        try:
            return results.get(timeout=5)
        except queue_mod.Empty:
            if not child.is_alive():
                return None


def _run_child(args, fx: Fixture, url: str, speedup: float, results) -> None:
    out = None
    try:
        out = _run(args, fx, url, speedup)
    finally:
        results.put(out)


def _run(args, fx: Fixture, url: str, speedup: float) -> Outcome:
    """One run on a scratch database next to `url`, its report printed."""
    t0 = time.perf_counter()
    scratch = scratch_database(url, suffix=SCRATCH_SUFFIX)
    try:
        django_setup(scratch)
        fixture_load(fx)
        setup_s = time.perf_counter() - t0
        host = host_reference()
        profiler = cProfile.Profile() if args.profile else None
        if profiler:
            profiler.enable()
        if args.mode == "production":
            out = simulate_production(fx, speedup=speedup, api_workers=args.api_workers,
                                      worker_processes=args.worker_processes)
        elif args.mode == "concurrent":
            out = simulate_concurrent(fx, speedup=speedup, submit=args.submit)
        else:
            out = simulate(fx, submit=args.submit, speedup=None if args.mode == "stepped" else speedup)
        if profiler:
            profiler.disable()
            profiler.dump_stats(args.profile)
        submit = "service" if args.mode == "production" else args.submit
        print(report(fx, out, submit, setup_s, args.mode, speedup, args.api_workers, args.worker_processes, host),
              flush=True)
        if profiler:
            print()
            pstats.Stats(args.profile).sort_stats("cumulative").print_stats(30)
        return out
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            drop_database(scratch)


if __name__ == "__main__":
    raise SystemExit(main())
