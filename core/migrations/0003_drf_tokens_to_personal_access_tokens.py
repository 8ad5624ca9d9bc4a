"""DRF's plain-text tokens become personal access tokens stored as SHA-256 hashes, each expiring
90 days from this migration, so scripts keep working with the key they have until then; the
plain-text table is dropped. Read with SQL: rest_framework.authtoken is no longer installed."""
import hashlib
from datetime import UTC, timedelta

from django.db import migrations
from django.utils import timezone
from django.utils.dateparse import parse_datetime

DRF_TABLE = "authtoken_token"
MIGRATED_DAYS = 90


def _aware(value):
    """A raw read gives SQLite's text or a naive UTC datetime, PostgreSQL's an aware one."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value


def drf_tokens_migrate(apps, schema_editor):
    drf_tokens_copy(apps, schema_editor.connection)


def drf_tokens_copy(apps, connection):
    if DRF_TABLE not in connection.introspection.table_names():
        return
    Token = apps.get_model("core", "PersonalAccessToken")
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {connection.ops.quote_name('key')}, user_id, created FROM {DRF_TABLE}")
        rows = cursor.fetchall()
    Token.objects.bulk_create(
        Token(user_id=user_id, name="API token (migrated)", prefix=key[:8], key_hash=hashlib.sha256(key.encode()).hexdigest(),
              scopes=[], created_at=_aware(created) or now, expires_at=now + timedelta(days=MIGRATED_DAYS))
        for key, user_id, created in rows
    )
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {DRF_TABLE}")


class Migration(migrations.Migration):
    dependencies = [("core", "0002_personal_access_tokens")]

    operations = [migrations.RunPython(drf_tokens_migrate, migrations.RunPython.noop)]
