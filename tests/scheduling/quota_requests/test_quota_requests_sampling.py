"""Usage sampling, sizing signals, charts, the beat tasks and the demo data."""
from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.utils import timezone

from fleet.models import Gpu
from scheduling.choices import QuotaRequestState as S
from scheduling.choices import WorkloadState
from scheduling.models import Allocation, PodSet, PriorityClass, QueueUsageSample, QuotaRequest, Workload
from scheduling.quota_requests import charts, selectors, services, tasks

NOW = dt.datetime(2025, 3, 10, 12, 7, 30, tzinfo=dt.UTC)


@pytest.fixture
def running(research_queue, h100):
    pc = PriorityClass.objects.create(name="normal", value=10)
    w = Workload.objects.create(name="train", team=research_queue.team, queue=research_queue, priority_class=pc,
                                state=WorkloadState.RUNNING)
    ps = PodSet.objects.create(workload=w, name="main", replicas=1, gpus_per_replica=3, flavor=h100)
    for gpu in Gpu.objects.filter(node__flavor=h100).order_by("pk")[:3]:
        Allocation.objects.create(workload=w, pod_set=ps, replica=0, gpu=gpu, node=gpu.node)
    waiting = Workload.objects.create(name="next", team=research_queue.team, queue=research_queue, priority_class=pc)
    PodSet.objects.create(workload=waiting, name="main", replicas=2, gpus_per_replica=4, flavor=h100)
    return w


def test_a_sample_is_written_per_queue_and_flavor_once_per_slot(running, research_queue, other_queue, h100):
    assert services.quota_usage_sample(now=NOW) == 2
    row = QueueUsageSample.objects.get(queue=research_queue, flavor=h100)
    assert row.at == NOW.replace(minute=5, second=0)
    assert (row.nominal, row.in_use, row.pending_demand, row.utilised) == (8, 3, 8, 0.0)
    assert services.quota_usage_sample(now=NOW + dt.timedelta(minutes=2)) == 0
    assert services.quota_usage_sample(now=NOW + dt.timedelta(minutes=3)) == 2


def test_a_registered_utilisation_source_fills_utilised(running, research_queue, h100):
    seen = {}

    def source(gpus, now):
        seen.update(gpus)
        return {key: 0.5 * len(held) for key, held in gpus.items()}

    registered = services._utilisation_source  # the health app's, from HealthConfig.ready()
    services.register_utilisation_source(source)
    try:
        services.quota_usage_sample(now=NOW)
    finally:
        services.register_utilisation_source(registered)
    assert len(seen[(research_queue.pk, h100.pk)]) == 3
    assert QueueUsageSample.objects.get(queue=research_queue, flavor=h100).utilised == 1.5


def test_old_samples_are_pruned(research_queue, h100):
    QueueUsageSample.objects.create(queue=research_queue, flavor=h100, at=NOW - dt.timedelta(days=41), nominal=8,
                                    in_use=1)
    services.quota_usage_sample(now=NOW)
    assert not QueueUsageSample.objects.filter(at__lt=NOW - dt.timedelta(days=40)).exists()


def week_of(queue, flavor, *, nominal, in_use, utilised=0.0, pinned_every=None, end=NOW):
    rows = []
    for i in range(7 * 24):
        at = end - dt.timedelta(hours=i)
        use = nominal if pinned_every and i % pinned_every == 0 else in_use
        rows.append(QueueUsageSample(queue=queue, flavor=flavor, at=at, nominal=nominal, in_use=use,
                                     utilised=utilised))
    QueueUsageSample.objects.bulk_create(rows)


def test_sizing_signals_flag_pinned_and_over_provisioned_queues(research_queue, other_queue, h100,
                                                                django_assert_num_queries):
    week_of(research_queue, h100, nominal=8, in_use=5, pinned_every=2)  # pinned half the time
    week_of(other_queue, h100, nominal=10, in_use=1, utilised=0.5)  # 10 % used
    with django_assert_num_queries(3):
        signals = selectors.sizing_signals(now=NOW)
    assert [(s.team.name, s.kind) for s in signals] == [("research", "pinned"), ("inference", "over-provisioned")]
    assert signals[0].advice == "pinned — consider resizing"
    assert signals[0].stats.pinned_share == pytest.approx(0.5)


def test_a_queue_pinned_less_than_half_the_time_is_not_flagged(research_queue, h100):
    week_of(research_queue, h100, nominal=8, in_use=5, pinned_every=3)
    assert selectors.sizing_signals(now=NOW) == []


def test_review_context_reports_the_week(filed, research_queue, h100):
    week_of(research_queue, h100, nominal=8, in_use=4, utilised=2.0, pinned_every=4)
    ctx = selectors.review_contexts([filed], now=NOW)[filed.pk]
    assert ctx.stats.mean_in_use == pytest.approx(5.0)
    assert ctx.stats.mean_utilised == pytest.approx(2.0)
    assert ctx.stats.pinned_share == pytest.approx(0.25)


def test_the_sizing_include_renders(client, operator, research_queue, h100):
    week_of(research_queue, h100, nominal=8, in_use=8, end=timezone.now())
    client.force_login(operator)
    body = client.get("/scheduling/quota-requests/").content.decode()
    assert "pinned — consider resizing" in body


def test_the_usage_figure_has_every_series():
    points = [selectors.HourPoint(at=NOW, nominal=8, in_use=6, utilised=4, borrowed=0, lent=1, pending_demand=2)]
    fig = charts.usage_history_figure(points, flavor_name="H100", span=dt.timedelta(days=7), span_label="7 days")
    assert [t.name for t in fig.data] == [label for _, label, _, _ in charts.SERIES]
    assert list(fig.data[1].y) == [6]
    assert fig.layout.title.text == "H100: last 7 days (hourly means)"


def test_the_30_day_figure_spans_30_days_however_short_the_history():
    points = [selectors.HourPoint(at=NOW, nominal=8, in_use=6, utilised=4, borrowed=0, lent=1, pending_demand=2)]
    fig = charts.usage_history_figure(points, flavor_name="H100", span=dt.timedelta(days=30), span_label="30 days",
                                      now=NOW)
    assert tuple(fig.layout.xaxis.range) == (NOW - dt.timedelta(days=30), NOW)
    fig = charts.usage_history_figure(points, flavor_name="H100", span=dt.timedelta(hours=1), span_label="hour",
                                      step_seconds=300, now=NOW)
    assert tuple(fig.layout.xaxis.range) == (NOW - dt.timedelta(hours=1), NOW)
    assert fig.layout.title.text == "H100: last hour (5-minute means)"


def test_the_beat_schedule_runs_both_tasks():
    tasks_named = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {tasks.quota_usage_sample_task.name, tasks.quota_requests_tick_task.name} <= tasks_named


def test_the_tick_task_applies_due_requests(filed, operator, research_queue, h100):
    from core.actors import Actor

    QuotaRequest.objects.filter(pk=filed.pk).update(starts_on=timezone.localdate() + dt.timedelta(days=1))
    filed.refresh_from_db()
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=filed)
    QuotaRequest.objects.filter(pk=filed.pk).update(starts_on=timezone.localdate())
    assert tasks.quota_requests_tick_task() == {"applied": [filed.pk], "expired": []}
    filed.refresh_from_db()
    assert filed.state == S.APPLIED


def test_the_tick_task_ends_a_boost_on_its_end_date(make_request, team_member, operator, research_queue, h100,
                                                   django_capture_on_commit_callbacks):
    from django.core import mail

    from core.actors import Actor
    from core.models import AuditEvent
    from scheduling.models import QueueQuota

    filed_at = timezone.now() - dt.timedelta(days=3)
    boost = make_request(team_member, research_queue, h100, 14, starts_on=timezone.localdate(filed_at),
                         ends_on=timezone.localdate(), now=filed_at)
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=boost, now=filed_at)
    assert QueueQuota.objects.get(queue=research_queue, flavor=h100).nominal == 14

    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.quota_requests_tick_task() == {"applied": [], "expired": [boost.pk]}
    assert QueueQuota.objects.get(queue=research_queue, flavor=h100).nominal == 8
    assert AuditEvent.objects.filter(verb="quota.revert", actor="automation:quota-requests").count() == 1
    assert {m.subject for m in mail.outbox} == {f"[Fleetdeck] Quota request #{boost.pk} for research: expired"}
    assert tasks.quota_requests_tick_task() == {"applied": [], "expired": []}


def test_the_sample_task_writes_samples(research_queue):
    tasks.quota_usage_sample_task()
    assert QueueUsageSample.objects.filter(queue=research_queue).exists()


def test_the_demo_tells_a_story_a_new_user_can_walk(db, django_capture_on_commit_callbacks):
    from django.core import mail

    from core.models import AuditEvent
    from demo import quota_requests as demo
    from demo.fleet import A100_FLAVOR, H100_FLAVOR, demo_load
    from scheduling.models import QueueQuota

    demo_load()
    with django_capture_on_commit_callbacks(execute=True):
        first = demo.load(now=NOW)

    # alice's open request fits the four H100s evaluation gave back: approvable without override.
    assert first.request.state == S.SUBMITTED and first.request.requested_by.username == "alice"
    assert first.request.flavor.name == H100_FLAVOR
    giveback, inference = first.others
    assert (giveback.team.name, giveback.state, giveback.previous_nominal) == ("evaluation", S.APPLIED, 8)
    assert QueueQuota.objects.get(queue__team__name="evaluation", flavor__name=H100_FLAVOR).nominal == 4
    contexts = selectors.review_contexts([first.request, inference], now=NOW)
    assert not contexts[first.request.pk].oversubscribed
    assert contexts[first.request.pk].flavor_sum_after == contexts[first.request.pk].capacity == 64
    # bob's A100 boost shows the oversubscription warning.
    assert inference.flavor.name == A100_FLAVOR and contexts[inference.pk].oversubscribed

    # The give-back happened days ago: its audit trail says so, and nobody is mailed about it today.
    trail = AuditEvent.objects.for_target(giveback).order_by("at", "id")
    assert [e.verb for e in trail] == ["quota_request.submit", "quota_request.approve", "quota_request.apply"]
    assert all(e.at <= NOW - demo.GIVEBACK_REVIEWED for e in trail)
    assert not any(f"#{giveback.pk} " in m.subject for m in mail.outbox)
    setup = AuditEvent.objects.filter(verb="queuequota.create")
    assert setup.exists() and all(e.at < trail[0].at for e in setup)
    assert {m.subject.split(" for ")[1] for m in mail.outbox} == {"research: submitted", "inference: submitted"}

    # 30 days of history; evaluation's H100 nominal drops from 8 to 4 when the give-back applied.
    assert first.samples > 9 * (6 * 24 * 6 + 2 * 24 * 22)  # every 10 min for a week, every 30 before
    oldest = QueueUsageSample.objects.order_by("at").first().at
    assert NOW - dt.timedelta(days=30, minutes=1) <= oldest < NOW - dt.timedelta(days=29)
    evaluation = QueueUsageSample.objects.filter(queue__team__name="evaluation", flavor__name=H100_FLAVOR)
    assert set(evaluation.filter(at__lt=giveback.applied_at).values_list("nominal", flat=True)) == {8}
    assert set(evaluation.filter(at__gt=giveback.applied_at).values_list("nominal", flat=True)) == {4}

    again = demo.load(now=NOW)
    assert (again.samples, again.request, again.others) == (0, None, [])
    assert again.summary() == "Quota usage samples: 0; quota requests: already there"
    kinds = {(s.team.name, s.flavor.name): s.kind for s in selectors.sizing_signals(now=NOW)}
    assert kinds[("research", H100_FLAVOR)] == "pinned"
    assert kinds[("evaluation", H100_FLAVOR)] == "over-provisioned"
    assert ("inference", H100_FLAVOR) not in kinds
