"""Quota request services: filing, review, applying, expiry, notifications."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.actors import Actor
from core.models import AuditEvent
from scheduling.choices import QuotaRequestState as S
from scheduling.choices import WorkloadState
from scheduling.models import QueueQuota, QuotaRequest
from scheduling.quota_requests import services


def quota(queue, flavor) -> QueueQuota:
    return QueueQuota.objects.get(queue=queue, flavor=flavor)


def errors_of(excinfo) -> dict[str, list[str]]:
    return excinfo.value.message_dict


# --- filing --------------------------------------------------------------------------------------


def test_it_files_a_request_with_an_audit_row(filed, team_member):
    assert filed.state == S.SUBMITTED
    assert filed.team.name == "research"
    assert filed.requested_by == team_member
    event = AuditEvent.objects.for_target(filed).get()
    assert event.verb == "quota_request.submit"
    assert event.after["requested_nominal"] == 12


@pytest.mark.parametrize(
    ("kwargs", "field", "fragment"),
    [
        ({"nominal": 0}, "requested_nominal", "positive whole number"),
        ({"nominal": -3}, "requested_nominal", "positive whole number"),
        ({"nominal": 17}, "requested_nominal", "only 16 H100"),
        ({"nominal": 8}, "requested_nominal", "already has 8"),
        ({"nominal": 12, "requested_borrowing_limit": -1}, "requested_borrowing_limit", "0 or more"),
        ({"nominal": 12, "requested_borrowing_limit": 40}, "requested_borrowing_limit", "only 16"),
        ({"nominal": 12, "starts_on_days": -1}, "starts_on", "past"),
        ({"nominal": 12, "ends_on_days": 0}, "ends_on", "after the start"),
        ({"nominal": 12, "justification": "  "}, "justification", "Explain"),
    ],
    ids=[
        "zero",
        "negative",
        "beyond-capacity",
        "unchanged",
        "negative-borrowing",
        "borrowing-beyond-capacity",
        "start-in-past",
        "end-not-after-start",
        "blank-justification",
    ],
)
def test_it_refuses_invalid_requests_naming_the_field(
    make_request, team_member, research_queue, h100, today, kwargs, field, fragment
):
    nominal = kwargs.pop("nominal")
    if "starts_on_days" in kwargs:
        kwargs["starts_on"] = today + dt.timedelta(days=kwargs.pop("starts_on_days"))
    if "ends_on_days" in kwargs:
        kwargs["ends_on"] = today + dt.timedelta(days=kwargs.pop("ends_on_days"))
    with pytest.raises(ValidationError) as excinfo:
        make_request(team_member, research_queue, h100, nominal, **kwargs)
    assert fragment in " ".join(errors_of(excinfo)[field])
    assert not QuotaRequest.objects.exists()


def test_it_refuses_a_request_for_another_team(make_request, other_member, research_queue, h100):
    with pytest.raises(PermissionDenied):
        make_request(other_member, research_queue, h100, 12)


def test_an_operator_may_file_for_any_team(make_request, operator, research_queue, h100):
    assert make_request(operator, research_queue, h100, 10).team == research_queue.team


def test_a_second_open_request_for_the_same_flavor_is_refused(filed, make_request, team_member, research_queue, h100):
    with pytest.raises(ValidationError) as excinfo:
        make_request(team_member, research_queue, h100, 14)
    assert f"#{filed.pk}" in errors_of(excinfo)["flavor"][0]
    assert QuotaRequest.objects.count() == 1


def test_the_database_constraint_catches_a_racing_double_submission(
    filed, make_request, team_member, research_queue, h100, monkeypatch
):
    # Both submissions passed validation before either committed: only the index stops the second.
    monkeypatch.setattr(services, "quota_request_validate", lambda **kwargs: None)
    with pytest.raises(ValidationError) as excinfo:
        make_request(team_member, research_queue, h100, 14)
    assert "already has an open request" in errors_of(excinfo)["flavor"][0]
    assert QuotaRequest.objects.filter(state=S.SUBMITTED).count() == 1


def test_the_constraint_itself_holds(filed):
    with pytest.raises(IntegrityError), transaction.atomic():
        QuotaRequest.objects.create(
            team=filed.team,
            queue=filed.queue,
            flavor=filed.flavor,
            requested_nominal=9,
            starts_on=filed.starts_on,
            justification="x",
        )


def test_after_withdrawing_the_team_may_file_again(filed, make_request, team_member, research_queue, h100):
    services.quota_request_withdraw(actor=Actor.for_user(team_member), quota_request=filed)
    again = make_request(team_member, research_queue, h100, 14)
    assert again.state == S.SUBMITTED


# --- withdrawing ---------------------------------------------------------------------------------


def test_a_team_member_withdraws_an_open_request(filed, team_member):
    done = services.quota_request_withdraw(actor=Actor.for_user(team_member), quota_request=filed)
    assert done.state == S.WITHDRAWN
    assert AuditEvent.objects.for_target(filed).filter(verb="quota_request.withdraw").exists()


def test_another_team_cannot_withdraw(filed, other_member):
    with pytest.raises(PermissionDenied):
        services.quota_request_withdraw(actor=Actor.for_user(other_member), quota_request=filed)


def test_a_reviewed_request_cannot_be_withdrawn(filed, team_member, operator):
    services.quota_request_deny(actor=Actor.for_user(operator), quota_request=filed, comment="No room.")
    with pytest.raises(ValidationError, match="only a submitted request can be withdrawn"):
        services.quota_request_withdraw(actor=Actor.for_user(team_member), quota_request=filed)


# --- review --------------------------------------------------------------------------------------


def test_approval_applies_the_quota_at_once_when_the_start_has_come(filed, operator, research_queue, h100):
    done = services.quota_request_approve(actor=Actor.for_user(operator), quota_request=filed, comment="OK")
    assert done.state == S.APPLIED
    assert done.previous_nominal == 8
    assert quota(research_queue, h100).nominal == 12
    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert {"quota_request.approve", "quota.apply", "quota_request.apply"} <= verbs
    apply = AuditEvent.objects.get(verb="quota.apply")
    assert (apply.before["nominal"], apply.after["nominal"]) == (8, 12)


def test_approval_with_a_later_start_waits_for_the_tick(
    make_request, team_member, operator, research_queue, h100, today
):
    qr = make_request(team_member, research_queue, h100, 12, starts_on=today + dt.timedelta(days=3))
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=qr)
    qr.refresh_from_db()
    assert qr.state == S.APPROVED
    assert quota(research_queue, h100).nominal == 8

    early = services.quota_requests_tick(now=timezone.now() + dt.timedelta(days=2))
    assert early.applied == []
    result = services.quota_requests_tick(now=timezone.now() + dt.timedelta(days=3))
    assert result.applied == [qr.pk]
    assert quota(research_queue, h100).nominal == 12
    assert services.quota_requests_tick(now=timezone.now() + dt.timedelta(days=3)).applied == []


def test_approval_creates_the_quota_row_when_the_queue_had_none(
    make_request, team_member, operator, research_queue, a100
):
    qr = make_request(team_member, research_queue, a100, 4, requested_borrowing_limit=2)
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=qr)
    row = quota(research_queue, a100)
    assert (row.nominal, row.borrowing_limit) == (4, 2)
    qr.refresh_from_db()
    assert qr.previous_nominal == 0


def test_only_operators_review(filed, team_member, viewer):
    for user in (team_member, viewer):
        with pytest.raises(PermissionDenied):
            services.quota_request_approve(actor=Actor.for_user(user), quota_request=filed)
        with pytest.raises(PermissionDenied):
            services.quota_request_deny(actor=Actor.for_user(user), quota_request=filed, comment="no")


def test_denial_needs_a_comment_and_leaves_the_quota(filed, operator, research_queue, h100):
    with pytest.raises(ValidationError) as excinfo:
        services.quota_request_deny(actor=Actor.for_user(operator), quota_request=filed, comment=" ")
    assert "comment" in errors_of(excinfo)
    done = services.quota_request_deny(actor=Actor.for_user(operator), quota_request=filed, comment="Use A100s.")
    assert done.state == S.DENIED
    assert done.review_comment == "Use A100s."
    assert quota(research_queue, h100).nominal == 8


def test_a_request_is_reviewed_only_once(filed, operator):
    services.quota_request_deny(actor=Actor.for_user(operator), quota_request=filed, comment="No.")
    with pytest.raises(ValidationError, match="only a submitted request can be approved"):
        services.quota_request_approve(actor=Actor.for_user(operator), quota_request=filed)


# --- oversubscription ----------------------------------------------------------------------------


def test_an_approval_beyond_capacity_is_refused_without_override(
    make_request, team_member, operator, research_queue, other_queue, h100
):
    qr = make_request(team_member, research_queue, h100, 13)  # 13 + 4 > 16 GPUs
    with pytest.raises(ValidationError) as excinfo:
        services.quota_request_approve(actor=Actor.for_user(operator), quota_request=qr)
    message = errors_of(excinfo)["override"][0]
    assert "17 GPUs" in message and "16" in message
    qr.refresh_from_db()
    assert qr.state == S.SUBMITTED
    assert quota(research_queue, h100).nominal == 8


def test_an_override_oversubscribes_deliberately_and_is_audited(
    make_request, team_member, operator, research_queue, other_queue, h100
):
    qr = make_request(team_member, research_queue, h100, 13)
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=qr, comment="Burst", override=True)
    assert quota(research_queue, h100).nominal == 13
    event = AuditEvent.objects.get(verb="quota_request.approve")
    assert event.after["override"] is True
    assert "Oversubscription override" in event.reason


def test_the_ratio_setting_allows_planned_oversubscription(
    settings, make_request, team_member, operator, research_queue, other_queue, h100
):
    settings.FLEETDECK = {**settings.FLEETDECK, "QUOTA_OVERSUBSCRIPTION_MAX": 1.25}  # up to 20 of 16
    qr = make_request(team_member, research_queue, h100, 16)
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=qr)
    assert quota(research_queue, h100).nominal == 16


def test_two_approvals_that_together_oversubscribe_second_is_refused(
    make_request, team_member, other_member, operator, research_queue, other_queue, h100
):
    # Each fits alone (8 + 4 = 12 → 11 + 4 and 8 + 7); together 11 + 7 = 18 > 16.
    first = make_request(team_member, research_queue, h100, 11)
    second = make_request(other_member, other_queue, h100, 7)
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=first)
    with pytest.raises(ValidationError, match="18 GPUs"):
        services.quota_request_approve(actor=Actor.for_user(operator), quota_request=second)
    assert sum(QueueQuota.objects.filter(flavor=h100).values_list("nominal", flat=True)) == 15


def test_a_scheduled_approval_counts_against_capacity(
    make_request, team_member, other_member, operator, research_queue, other_queue, h100, today
):
    later = make_request(team_member, research_queue, h100, 11, starts_on=today + dt.timedelta(days=5))
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=later)
    now_request = make_request(other_member, other_queue, h100, 7)
    with pytest.raises(ValidationError, match="18 GPUs"):
        services.quota_request_approve(actor=Actor.for_user(operator), quota_request=now_request)


# --- temporary boosts ----------------------------------------------------------------------------


def test_a_temporary_boost_expires_through_the_tick(
    make_request, team_member, operator, research_queue, h100, today, django_capture_on_commit_callbacks
):
    boost = make_request(
        team_member, research_queue, h100, 14, requested_borrowing_limit=2, ends_on=today + dt.timedelta(days=7)
    )
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=boost)
    assert (quota(research_queue, h100).nominal, quota(research_queue, h100).borrowing_limit) == (14, 2)

    assert services.quota_requests_tick(now=timezone.now() + dt.timedelta(days=6)).expired == []
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        result = services.quota_requests_tick(now=timezone.now() + dt.timedelta(days=7))
    assert result.expired == [boost.pk]
    boost.refresh_from_db()
    assert boost.state == S.EXPIRED
    assert (quota(research_queue, h100).nominal, quota(research_queue, h100).borrowing_limit) == (8, None)
    revert = AuditEvent.objects.get(verb="quota.revert")
    assert (revert.before["nominal"], revert.after["nominal"]) == (14, 8)
    assert revert.actor == "automation:quota-requests"
    assert any("expired" in m.subject and "tess@example.org" in m.to for m in mail.outbox)
    # Running again changes nothing.
    assert services.quota_requests_tick(now=timezone.now() + dt.timedelta(days=8)).expired == []


def test_an_expiring_boost_keeps_a_later_permanent_change(
    make_request, team_member, operator, research_queue, h100, today
):
    boost = make_request(team_member, research_queue, h100, 12, ends_on=today + dt.timedelta(days=7))
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=boost)
    permanent = make_request(team_member, research_queue, h100, 14)
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=permanent)

    services.quota_requests_tick(now=timezone.now() + dt.timedelta(days=7))
    # 14 minus the boost's +4, not back to 8.
    assert quota(research_queue, h100).nominal == 10


def test_a_boost_whose_window_passed_before_applying_never_applies(
    make_request, team_member, operator, research_queue, h100, today
):
    boost = make_request(
        team_member,
        research_queue,
        h100,
        12,
        starts_on=today + dt.timedelta(days=1),
        ends_on=today + dt.timedelta(days=2),
    )
    services.quota_request_approve(actor=Actor.for_user(operator), quota_request=boost)
    result = services.quota_requests_tick(now=timezone.now() + dt.timedelta(days=3))
    assert result.expired == [boost.pk] and result.applied == []
    assert quota(research_queue, h100).nominal == 8


# --- notifications -------------------------------------------------------------------------------


def test_every_state_change_mails_team_and_operators_after_commit(
    make_request, team_member, operator, research_queue, h100, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        qr = make_request(team_member, research_queue, h100, 12)
    assert len(callbacks) == 1
    assert [sorted(m.to) for m in mail.outbox] == [["tess@example.org"], ["olga@example.org"]]
    assert "submitted" in mail.outbox[0].subject
    assert "More experiments." in mail.outbox[0].body

    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.quota_request_approve(actor=Actor.for_user(operator), quota_request=qr, comment="Go ahead")
    subjects = [m.subject for m in mail.outbox]
    assert sum("approved" in s for s in subjects) == 2 and sum("applied" in s for s in subjects) == 2
    assert "Go ahead" in mail.outbox[0].body


def test_a_team_address_replaces_member_addresses(
    make_request, other_member, other_queue, h100, operator, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        make_request(other_member, other_queue, h100, 6)
    assert mail.outbox[0].to == ["inference@example.org"]


def test_no_mail_leaves_when_the_transaction_rolls_back(filed, operator, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            services.quota_request_deny(actor=Actor.for_user(operator), quota_request=filed, comment="No")
            raise RuntimeError("boom")
    assert callbacks == []
    filed.refresh_from_db()
    assert filed.state == S.SUBMITTED


def _withdraw(qr, member, operator, today):
    services.quota_request_withdraw(actor=Actor.for_user(member), quota_request=qr)


def _deny(qr, member, operator, today):
    services.quota_request_deny(actor=Actor.for_user(operator), quota_request=qr, comment="Not this quarter")


def _apply_on_start(qr, member, operator, today):
    services.quota_requests_tick(now=timezone.now() + dt.timedelta(days=1))


def _expire_boost(qr, member, operator, today):
    services.quota_requests_tick(now=timezone.now() + dt.timedelta(days=2))


def _window_passes(qr, member, operator, today):
    services.quota_requests_tick(now=timezone.now() + dt.timedelta(days=3))


@pytest.mark.parametrize(
    ("later_start", "boost", "act", "announced"),
    [
        (False, False, _withdraw, ["withdrawn"]),
        (False, False, _deny, ["denied"]),
        (True, False, _apply_on_start, ["applied"]),
        (False, True, _expire_boost, ["expired"]),
        (True, True, _window_passes, ["expired"]),
    ],
    ids=["withdraw", "deny", "apply-on-start-date", "boost-expiry", "window-passed-unapplied"],
)
def test_each_later_transition_mails_team_and_operators_with_a_link(
    make_request, team_member, operator, research_queue, h100, today, settings, django_capture_on_commit_callbacks,
    later_start, boost, act, announced,
):
    settings.FLEETDECK = {**settings.FLEETDECK, "PUBLIC_URL": "https://fleet.example.org/"}
    starts = today + dt.timedelta(days=1) if later_start else today
    qr = make_request(team_member, research_queue, h100, 12, starts_on=starts,
                      ends_on=today + dt.timedelta(days=2) if boost else None)
    if later_start or boost:
        services.quota_request_approve(actor=Actor.for_user(operator), quota_request=qr)
    mail.outbox.clear()

    with django_capture_on_commit_callbacks(execute=True):
        act(qr, team_member, operator, today)

    assert [(m.subject.rsplit(": ", 1)[1], sorted(m.to)) for m in mail.outbox] == [
        (state, to) for state in announced for to in (["tess@example.org"], ["olga@example.org"])
    ]
    assert f"https://fleet.example.org/scheduling/quota-requests/{qr.pk}/" in mail.outbox[0].body


def test_suppressed_transitions_send_nothing(make_request, team_member, research_queue, h100,
                                             django_capture_on_commit_callbacks):
    from scheduling.quota_requests import notifications

    with django_capture_on_commit_callbacks(execute=True) as callbacks, notifications.suppressed():
        make_request(team_member, research_queue, h100, 12)
    assert callbacks == [] and mail.outbox == []


def test_an_approval_takes_effect_in_the_next_placement_round(
    make_request, team_member, operator, research_queue, h100
):
    from scheduling.models import PriorityClass, Workload
    from scheduling.services import placement_round_run, workload_submit

    QueueQuota.objects.filter(queue=research_queue, flavor=h100).update(borrowing_limit=0)
    PriorityClass.objects.create(name="batch", value=100)
    automation = Actor.automation("test")
    workload = workload_submit(actor=automation, spec={
        "name": "train-16", "team": "research", "queue": "research-q", "priority_class": "batch",
        "pod_sets": [{"name": "worker", "replicas": 2, "gpus_per_replica": 8, "flavor": "H100"}],
    })
    placement_round_run(actor=automation)
    workload.refresh_from_db()
    assert workload.state == WorkloadState.PENDING  # 16 GPUs against a quota of 8, no borrowing

    services.quota_request_approve(actor=Actor.for_user(operator),
                                   quota_request=make_request(team_member, research_queue, h100, 16))
    placement_round_run(actor=automation)
    workload.refresh_from_db()
    assert workload.state != WorkloadState.PENDING
    assert Workload.objects.get(pk=workload.pk).allocations.filter(released_at__isnull=True).count() == 16
