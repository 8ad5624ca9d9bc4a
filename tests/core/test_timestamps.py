"""Timestamps come back from PostgreSQL exactly as written, aware and in UTC as Django gives them
(core.timestamps parses them with psycopg's C loader instead of Django's Python one)."""
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection
from django.utils import timezone as dj_timezone

from scheduling.models import PlacementRound

WRITTEN = [
    datetime(2026, 12, 7, 14, 43, 24, 123456, tzinfo=UTC),
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2026, 3, 29, 3, 30, tzinfo=timezone(timedelta(hours=2))),  # an offset: the same instant in UTC
]


@pytest.mark.django_db
def test_timestamps_read_back_equal_and_in_utc(require_postgres):
    with connection.cursor() as cursor:
        cursor.execute("SELECT unnest(%s::timestamptz[])", [WRITTEN])
        read = [row[0] for row in cursor.fetchall()]
    assert read == WRITTEN
    assert all(value.tzinfo is UTC for value in read)
    assert read[-1] == datetime(2026, 3, 29, 1, 30, tzinfo=UTC) and read[-1].hour == 1

    with dj_timezone.override("Europe/Berlin"):  # the active time zone does not change what is read
        rounds = [PlacementRound.objects.create(started_at=at, actor="test") for at in WRITTEN]
        assert list(PlacementRound.objects.filter(pk__in=[r.pk for r in rounds]).order_by("pk")
                    .values_list("started_at", flat=True)) == WRITTEN
        assert PlacementRound.objects.get(pk=rounds[0].pk).started_at.tzinfo is UTC
