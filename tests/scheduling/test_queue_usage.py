"""Every page that shows a queue's quota numbers shows the same ones: the queues page, the queues
API and the team page read lent, borrowed, in use and pending demand from one computation."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from scheduling.models import Queue, QueueQuota
from tests.cluster import FLAVOR, api_for, make_cluster, run_round, submit


@pytest.fixture
def cohort_borrowing(db, team, classes, cohort, clock):
    """One cohort of 16 GPUs: alpha (2 nominal) runs 5 GPUs, borrowing 3 from beta (6 nominal,
    idle) and gamma (3 nominal, idle). Alpha also waits for 3 replicas of half a GPU (2 GPUs
    of quota). Lending in name order would charge all 3 to beta; in proportion to what each
    can lend, beta lent 2 and gamma 1."""
    flavor = make_cluster(nodes=2, per_rack=2)
    for name, nominal in (("alpha-q", 2), ("beta-q", 6), ("gamma-q", 3)):
        queue = Queue.objects.create(name=name, team=team, cohort=cohort)
        QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=nominal)
    ops = User.objects.create_superuser("root", password="pw-root")
    client = api_for(ops)
    pod_set = {"name": "worker", "replicas": 1, "gpus_per_replica": 5, "flavor": FLAVOR}
    submit(client, name="borrower", team="research", queue="alpha-q", priority_class="eval", pod_sets=[pod_set])
    run_round(clock)
    shares = {"name": "shards", "replicas": 3, "gpus_per_replica": 0, "milli_gpu": 500, "flavor": FLAVOR}
    submit(client, name="halves", team="research", queue="alpha-q", priority_class="eval", pod_sets=[shares])
    return ops


def numbers(row) -> tuple[int, int, int, int]:
    return row["used"], row["borrowed"], row["lent"], row["pending_demand"]


def test_the_queues_page_the_api_and_the_team_page_show_the_same_lent(client, cohort_borrowing, team):
    client.force_login(cohort_borrowing)
    page = {row["queue"]: numbers(row) for row in client.get("/scheduling/queues/").context["usage"]}
    api = {row["queue"]: numbers(row) for row in api_for(cohort_borrowing).get("/api/v1/queues/usage/").json()}
    team_rows = client.get(f"/scheduling/teams/{team.pk}/").context["usage_rows"]
    team_page = {
        r.queue.name: (r.usage.in_use, r.usage.borrowed, r.usage.lent, r.usage.pending_demand) for r in team_rows
    }

    assert page == api == team_page
    assert page["alpha-q"][:3] == (5, 3, 0)
    assert (page["beta-q"][2], page["gamma-q"][2]) == (2, 1)


def test_a_waiting_workload_asks_for_what_its_queue_shows_as_pending_demand(client, cohort_borrowing, team):
    client.force_login(cohort_borrowing)
    page = client.get("/scheduling/queues/").context
    [halves] = page["waiting"]["alpha-q"]
    [team_waiting] = [w for w in client.get(f"/scheduling/teams/{team.pk}/").context["workloads"] if w.position]
    demand = {row["queue"]: row["pending_demand"] for row in page["usage"]}["alpha-q"]
    # Three halves of a GPU are charged as two GPUs, on every page that counts them.
    assert halves.gpus_asked == team_waiting.gpus_asked == demand == 2
