"""Shared GPUs on PostgreSQL: two transactions racing to put fractional or MIG shares on one GPU
never commit more than 1000 milli, nor a share beside an exclusive holder (issue 14 §4).

The second writer blocks on the GPU's row lock until the first commits, then its statement fails;
it is the database that refuses, whatever code wrote the rows."""

from __future__ import annotations

import threading

import psycopg
import pytest

from fleet.models import Gpu
from scheduling.models import Allocation, PodSet, PriorityClass, Queue, Team, Workload

INSERT = (
    "INSERT INTO scheduling_allocation (workload_id, pod_set_id, replica, gpu_id, node_id, exclusive, milli, "
    "mig_instance, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, now())"
)


def _url(settings) -> str:
    db = settings.DATABASES["default"]
    return (f"host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} dbname={db['NAME']} "
            f"user={db['USER']} password={db.get('PASSWORD') or ''}")


def _pod_sets(n: int) -> list[PodSet]:
    team = Team.objects.create(name="share-team")
    queue = Queue.objects.create(name="share-q", team=team)
    prio = PriorityClass.objects.create(name="share-p", value=1)
    out = []
    for i in range(n):
        workload = Workload.objects.create(name=f"share-{i}", team=team, queue=queue, priority_class=prio)
        out.append(PodSet.objects.create(workload=workload, name="main", replicas=1))
    return out


def _race(settings, gpu: Gpu, first: tuple[bool, int, str], second: tuple[bool, int, str]) -> Exception | None:
    """The first share inserted and held uncommitted while the second is inserted from another
    connection; returns what the second got once the first commits."""
    pod_sets = _pod_sets(2)
    a = psycopg.connect(_url(settings))
    b = psycopg.connect(_url(settings))
    outcome: dict[str, Exception | None] = {}
    try:
        a.execute(INSERT, (pod_sets[0].workload_id, pod_sets[0].pk, 0, gpu.pk, gpu.node_id, *first))

        def other() -> None:
            try:
                with b.transaction():
                    b.execute(INSERT, (pod_sets[1].workload_id, pod_sets[1].pk, 0, gpu.pk, gpu.node_id, *second))
                outcome["error"] = None
            except psycopg.Error as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(timeout=1.0)
        assert thread.is_alive(), "the second writer must wait for the first one's lock on the GPU"
        a.commit()
        thread.join(timeout=30)
        assert not thread.is_alive()
    finally:
        a.close()
        b.close()
    return outcome["error"]


@pytest.fixture
def gpu(transactional_db, require_postgres, cluster) -> Gpu:
    return Gpu.objects.order_by("pk").first()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("first", "second"),
    [
        ((False, 600, ""), (False, 600, "")),
        ((False, 571, "MIG-a"), (False, 571, "MIG-b")),
        ((True, 1000, ""), (False, 100, "")),
        ((False, 100, ""), (True, 1000, "")),
    ],
    ids=["fractional", "mig", "share-beside-exclusive", "exclusive-beside-share"],
)
def test_racing_shares_never_overfill_a_gpu(settings, gpu, first, second):
    error = _race(settings, gpu, first, second)
    assert isinstance(error, psycopg.errors.CheckViolation), error
    assert f"GPU {gpu.pk} over-allocated" in str(error)
    assert Allocation.objects.filter(gpu=gpu, released_at__isnull=True).count() == 1


@pytest.mark.postgres
def test_shares_that_fit_both_commit_and_a_released_share_frees_its_milli(settings, gpu):
    assert _race(settings, gpu, (False, 500, ""), (False, 500, "")) is None
    assert sum(Allocation.objects.filter(gpu=gpu, released_at__isnull=True).values_list("milli", flat=True)) == 1000
    Allocation.objects.filter(gpu=gpu).update(released_at="2026-12-01T00:00:00Z")
    pod_set = PodSet.objects.create(workload=Workload.objects.first(), name="again", replicas=1)
    Allocation.objects.create(workload=pod_set.workload, pod_set=pod_set, replica=0, gpu=gpu, node=gpu.node,
                              exclusive=True, milli=1000)
    assert Allocation.objects.filter(gpu=gpu, released_at__isnull=True).count() == 1
