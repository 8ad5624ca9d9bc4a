"""Team pages: who sees which team, usage against quota, workloads with their queue position."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.models import Gpu
from scheduling.choices import WorkloadState
from scheduling.models import Allocation, PodSet, PriorityClass, QueueUsageSample, Workload
from scheduling.quota_requests import selectors


@pytest.fixture
def priorities(db):
    return {
        "high": PriorityClass.objects.create(name="high", value=100),
        "normal": PriorityClass.objects.create(name="normal", value=10),
    }


def workload(
    queue, priority, *, gpus: int, state=WorkloadState.PENDING, flavor=None, name=None, reason="", age_minutes=0
):
    w = Workload.objects.create(
        name=name or f"w{Workload.objects.count()}",
        team=queue.team,
        queue=queue,
        priority_class=priority,
        state=state,
        pending_reason=reason,
    )
    if age_minutes:
        Workload.objects.filter(pk=w.pk).update(submitted_at=timezone.now() - dt.timedelta(minutes=age_minutes))
    PodSet.objects.create(workload=w, name="main", replicas=1, gpus_per_replica=gpus, flavor=flavor)
    return w


def run_on(w, gpus):
    pod_set = w.pod_sets.get()
    for gpu in gpus:
        Allocation.objects.create(workload=w, pod_set=pod_set, replica=0, gpu=gpu, node=gpu.node)


@pytest.fixture
def busy(research_queue, other_queue, priorities, h100):
    """research (8 nominal) runs 10 H100s, borrowing 2 that inference (4 nominal, 1 used) lends;
    research also waits for 8 more GPUs in two workloads."""
    gpus = list(Gpu.objects.filter(node__flavor=h100).order_by("node__name", "index"))
    run_on(
        workload(
            research_queue, priorities["normal"], gpus=10, state=WorkloadState.RUNNING, flavor=h100, name="train-big"
        ),
        gpus[:10],
    )
    run_on(
        workload(other_queue, priorities["normal"], gpus=1, state=WorkloadState.RUNNING, flavor=h100, name="serve"),
        gpus[10:11],
    )
    workload(
        research_queue,
        priorities["normal"],
        gpus=2,
        flavor=h100,
        name="old-normal",
        reason="QuotaExceeded",
        age_minutes=30,
    )
    workload(research_queue, priorities["high"], gpus=6, name="any-flavor-high", reason="NoCapacity", age_minutes=5)
    return research_queue


@pytest.mark.parametrize(
    ("persona", "list_", "own", "other"),
    [("anonymous", 302, 302, 302), ("viewer", 200, 200, 200), ("member", 200, 200, 403), ("operator", 200, 200, 200)],
)
def test_team_page_access(
    client, viewer, team_member, operator, research_queue, other_queue, persona, list_, own, other
):
    user = {"viewer": viewer, "member": team_member, "operator": operator}.get(persona)
    if user:
        client.force_login(user)
    responses = [
        client.get(url)
        for url in (
            "/scheduling/teams/",
            f"/scheduling/teams/{research_queue.team_id}/",
            f"/scheduling/teams/{other_queue.team_id}/",
        )
    ]
    assert [r.status_code for r in responses] == [list_, own, other]


def test_a_missing_team_is_404(client, operator, db):
    client.force_login(operator)
    assert client.get("/scheduling/teams/999/").status_code == 404


def test_a_member_lists_only_their_team_and_a_viewer_all(client, team_member, viewer, research_queue, other_queue):
    client.force_login(team_member)
    assert [t.name for t, _ in client.get("/scheduling/teams/").context["rows"]] == ["research"]
    client.force_login(viewer)
    assert [t.name for t, _ in client.get("/scheduling/teams/").context["rows"]] == ["inference", "research"]


def test_usage_shows_in_use_borrowed_lent_and_pending(client, operator, busy, other_queue, h100):
    client.force_login(operator)
    rows = {r.queue.name: r.usage for r in client.get(f"/scheduling/teams/{busy.team_id}/").context["usage_rows"]}
    research = rows["research-q"]
    assert (research.nominal, research.in_use, research.borrowed, research.lent) == (8, 10, 2, 0)
    # The any-flavor workload counts against the queue's only flavor.
    assert research.pending_demand == 8
    other = {
        r.queue.name: r.usage for r in client.get(f"/scheduling/teams/{other_queue.team_id}/").context["usage_rows"]
    }["inference-q"]
    assert (other.in_use, other.lent) == (1, 2)


def test_waiting_workloads_show_position_and_reason(client, team_member, busy):
    client.force_login(team_member)
    response = client.get(f"/scheduling/teams/{busy.team_id}/")
    waiting = {w.name: w for w in response.context["workloads"] if w.position}
    # Priority first, then submission time.
    assert (waiting["any-flavor-high"].position, waiting["old-normal"].position) == (1, 2)
    body = response.content.decode()
    assert "QuotaExceeded" in body and "NoCapacity" in body and "#1" in body


def test_history_charts_come_from_usage_samples(client, team_member, research_queue, h100):
    now = timezone.now()
    QueueUsageSample.objects.bulk_create(
        QueueUsageSample(
            queue=research_queue, flavor=h100, at=now - dt.timedelta(hours=h), nominal=8, in_use=6, utilised=4.5
        )
        for h in range(0, 24 * 10, 2)
    )
    client.force_login(team_member)
    response = client.get(f"/scheduling/teams/{research_queue.team_id}/")
    [chart] = response.context["charts"]
    assert chart["flavor"] == "H100"
    body = response.content.decode()
    assert f'id="usage-7d-{h100.pk}"' in body and "vendor/plotly-basic.min.js" in body
    assert '<a href="?range=7d" aria-current="true">7d</a>' in body and '<a href="?range=30d">30d</a>' in body
    assert [r.utilised for r in response.context["usage_rows"]] == [4.5]


def test_the_history_chart_has_a_time_range(client, team_member, research_queue, h100):
    now = timezone.now()
    QueueUsageSample.objects.bulk_create(
        QueueUsageSample(queue=research_queue, flavor=h100, at=now - dt.timedelta(minutes=5 * i), nominal=8,
                         in_use=i % 4, utilised=1.0)
        for i in range(0, 12 * 24 * 31)  # 31 days of 5-minute samples
    )
    client.force_login(team_member)
    url = f"/scheduling/teams/{research_queue.team_id}/"
    seen = {}
    for chart_range in ("1h", "24h", "7d", "30d"):
        response = client.get(url, {"range": chart_range})
        assert response.status_code == 200
        [chart] = response.context["charts"]
        assert f'id="usage-{chart_range}-{h100.pk}"' in chart["chart"]
        [points] = selectors.usage_history(queue_ids=[research_queue.pk], since=now - {
            "1h": dt.timedelta(hours=1), "24h": dt.timedelta(days=1), "7d": dt.timedelta(days=7),
            "30d": dt.timedelta(days=30)}[chart_range], step_seconds=300 if chart_range in ("1h", "24h") else 3600
        ).values()
        seen[chart_range] = points
    # 5-minute buckets for the hour and the day (each sample its own point), hourly means for the week
    # and the month (± a partial bucket at each end).
    assert 12 <= len(seen["1h"]) <= 13 and 288 <= len(seen["24h"]) <= 289
    assert {p.in_use for p in seen["1h"]} == {0, 1, 2, 3}
    assert 168 <= len(seen["7d"]) <= 169 and 720 <= len(seen["30d"]) <= 721
    assert {p.in_use for p in seen["7d"][1:-1]} == {1.5}


def test_an_unknown_time_range_is_a_400_naming_the_choices(client, team_member, research_queue):
    client.force_login(team_member)
    response = client.get(f"/scheduling/teams/{research_queue.team_id}/", {"range": "2y"})
    assert response.status_code == 400
    assert response.content.decode() == "range: must be one of 1h, 24h, 7d, 30d, not '2y'"


def test_the_history_selector_sums_queues_per_hour(research_queue, h100):
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1)
    QueueUsageSample.objects.bulk_create(
        [
            QueueUsageSample(queue=research_queue, flavor=h100, at=start, nominal=8, in_use=4),
            QueueUsageSample(
                queue=research_queue, flavor=h100, at=start + dt.timedelta(minutes=5), nominal=8, in_use=6
            ),
        ]
    )
    [point] = selectors.usage_history(queue_ids=[research_queue.pk], since=start - dt.timedelta(hours=1))[h100.pk]
    assert (point.nominal, point.in_use) == (8, 5)


def test_the_team_page_takes_constant_queries(client, operator, busy, priorities, h100):
    client.force_login(operator)
    url = f"/scheduling/teams/{busy.team_id}/"
    client.get(url)
    with CaptureQueriesContext(connection) as before:
        client.get(url)
    for _ in range(5):
        workload(busy, priorities["normal"], gpus=1, flavor=h100)
    with CaptureQueriesContext(connection) as after:
        client.get(url)
    assert len(after) == len(before)


def test_current_usage_takes_six_queries(django_assert_num_queries, busy):
    with django_assert_num_queries(6):
        selectors.usage_now()
