"""Concurrent reviews and submissions on PostgreSQL, with real threads and real row locks.

The SQLite-friendly sequential versions are in test_quota_requests_services.py."""
from __future__ import annotations

import threading
import time

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from core.actors import Actor
from scheduling.choices import QuotaRequestState as S
from scheduling.models import QueueQuota, QuotaRequest
from scheduling.quota_requests import selectors, services

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def run_together(*fns) -> list[object]:
    """Start every fn at the same moment in its own thread (own DB connection); collect each
    result or raised exception."""
    barrier = threading.Barrier(len(fns))
    results: list[object] = [None] * len(fns)

    def worker(i, fn):
        try:
            barrier.wait()
            results[i] = fn()
        except Exception as exc:  # noqa: BLE001 - the test inspects what each thread raised
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def slow(monkeypatch, module, name, seconds=0.4):
    """Widen the race window: without the locks both threads would read the same state."""
    original = getattr(module, name)

    def slowed(*args, **kwargs):
        value = original(*args, **kwargs)
        time.sleep(seconds)
        return value

    monkeypatch.setattr(module, name, slowed)


def test_two_concurrent_approvals_never_silently_oversubscribe(
    require_postgres, transactional_db, monkeypatch, make_request, team_member, other_member, operator,
    research_queue, other_queue, h100,
):
    # Alone each fits (11 + 4 = 15, 8 + 7 = 15 of 16); together 11 + 7 = 18.
    first = make_request(team_member, research_queue, h100, 11)
    second = make_request(other_member, other_queue, h100, 7)
    slow(monkeypatch, selectors, "flavor_capacity")
    actor = Actor.for_user(operator)

    results = run_together(
        lambda: services.quota_request_approve(actor=actor, quota_request=first, comment="a"),
        lambda: services.quota_request_approve(actor=actor, quota_request=second, comment="b"),
    )

    refused = [r for r in results if isinstance(r, ValidationError)]
    approved = [r for r in results if isinstance(r, QuotaRequest)]
    assert len(refused) == 1 and len(approved) == 1, results
    assert "override" in refused[0].message_dict
    assert sum(QueueQuota.objects.filter(flavor=h100).values_list("nominal", flat=True)) <= 16
    states = sorted(QuotaRequest.objects.values_list("state", flat=True))
    assert states == sorted([S.APPLIED, S.SUBMITTED])


def test_a_concurrent_double_submission_leaves_one_open_request(
    require_postgres, transactional_db, monkeypatch, team_member, research_queue, h100, today,
):
    slow(monkeypatch, services, "quota_request_validate")  # both pass the friendly check first
    actor = Actor.for_user(team_member)

    def submit():
        return services.quota_request_create(actor=actor, queue=research_queue, flavor=h100, requested_nominal=12,
                                             starts_on=today, justification="twice")

    results = run_together(submit, submit)

    assert sum(isinstance(r, QuotaRequest) for r in results) == 1, results
    [error] = [r for r in results if isinstance(r, ValidationError)]
    assert "already has an open request" in error.message_dict["flavor"][0]
    assert QuotaRequest.objects.filter(state=S.SUBMITTED).count() == 1
