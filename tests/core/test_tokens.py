"""Personal access tokens through the API a script sees: shown once, stored hashed, expiring,
revocable, scoped; and DRF's old plain-text tokens keep working after the upgrade."""
from __future__ import annotations

import hashlib
import importlib
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps
from django.db import connection
from rest_framework.test import APIClient

from core.models import AuditEvent, PersonalAccessToken
from tests.cluster import FLAVOR, api_for

pytestmark = pytest.mark.django_db
REFUSED = (401, 403)  # 403 while session authentication comes first (no WWW-Authenticate to offer)
CORDON = "/api/v1/nodes/n1/cordon/"
SUBMIT = {
    "name": "eval-1", "team": "research", "priority_class": "eval",
    "pod_sets": [{"name": "w", "replicas": 1, "gpus_per_replica": 1, "flavor": FLAVOR}],
}


def _create(user, **body) -> dict:
    response = api_for(user).post("/api/v1/tokens/", {"name": "ci", **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _with(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_the_key_is_shown_once_and_only_its_hash_is_stored(operator, cluster):
    created = _create(operator)
    key = created["key"]

    row = PersonalAccessToken.objects.get(pk=created["id"])
    assert row.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key not in {row.name, row.prefix, row.key_hash} and key.startswith(row.prefix)
    listed = api_for(operator).get("/api/v1/tokens/").json()["results"]
    assert [t["prefix"] for t in listed] == [row.prefix] and "key" not in listed[0]
    assert _with(key).get("/api/v1/nodes/").status_code == 200


def test_a_token_expires_after_90_days_by_default_and_at_most_a_year(operator, cluster, time_machine):
    time_machine.move_to(datetime(2026, 3, 1, 12, tzinfo=UTC), tick=False)
    key = _create(operator)["key"]
    assert PersonalAccessToken.objects.get().expires_at == datetime(2026, 5, 30, 12, tzinfo=UTC)

    time_machine.move_to(datetime(2026, 5, 30, 12, 1, tzinfo=UTC), tick=False)
    response = _with(key).get("/api/v1/nodes/")
    assert response.status_code in REFUSED and "expired on 2026-05-30" in response.json()["detail"]

    too_long = api_for(operator).post("/api/v1/tokens/", {"name": "x", "expires_in_days": 366}, format="json")
    assert too_long.status_code == 400 and "365" in too_long.json()["expires_in_days"][0]


def test_a_revoked_token_is_refused_and_the_revocation_audited(operator, cluster):
    created = _create(operator)
    response = _with(created["key"]).post(f"/api/v1/tokens/{created['id']}/revoke/")
    assert response.status_code == 200 and response.json()["revoked_at"]

    refused = _with(created["key"]).get("/api/v1/nodes/")
    assert refused.status_code in REFUSED and "revoked" in refused.json()["detail"]
    assert AuditEvent.objects.filter(verb="token.revoke", target_id=str(created["id"])).exists()


def test_a_read_only_token_reads_but_any_write_is_a_403_naming_the_scope(operator, cluster):
    key = _create(operator, scopes=["read"])["key"]

    assert _with(key).get("/api/v1/nodes/n1/").status_code == 200
    response = _with(key).post(CORDON, {"reason": "scripted"}, format="json")
    assert response.status_code == 403 and "'read' scope only" in response.json()["detail"]
    assert not AuditEvent.objects.filter(verb="node.cordon").exists()


def test_a_submit_token_submits_for_the_team_but_takes_no_operator_action(research_queue, team_member, operator):
    member_key = _create(team_member, scopes=["submit"])["key"]
    assert _with(member_key).post("/api/v1/workloads/", SUBMIT, format="json").status_code == 201

    operator_key = _create(operator, scopes=["submit"])["key"]
    response = _with(operator_key).post(CORDON, {"reason": "scripted"}, format="json")
    assert response.status_code == 403 and "lacks the 'operate' scope" in response.json()["detail"]

    operate_key = _create(operator, scopes=["operate"])["key"]
    cordoned = _with(operate_key).post(CORDON, {"reason": "scripted"}, format="json")
    assert cordoned.status_code == 200
    prefix = operate_key[:12]
    assert AuditEvent.objects.get(verb="node.cordon").actor == f"olga (token {prefix}…)"


def test_a_scoped_token_cannot_create_a_wider_one(operator, cluster):
    key = _create(operator, scopes=["submit"])["key"]

    wider = _with(key).post("/api/v1/tokens/", {"name": "escalate"}, format="json")
    assert wider.status_code == 403 and "'operate'" in wider.json()["detail"]
    same = _with(key).post("/api/v1/tokens/", {"name": "same", "scopes": ["submit"]}, format="json")
    assert same.status_code == 201


def test_bad_input_names_the_field(operator, cluster):
    client = api_for(operator)
    assert "name" in client.post("/api/v1/tokens/", {"name": ""}, format="json").json()
    bad_scope = client.post("/api/v1/tokens/", {"name": "x", "scopes": ["root"]}, format="json")
    assert bad_scope.status_code == 400 and "scopes" in bad_scope.json()


@pytest.mark.parametrize("name", [5, 1.5, True, ["ci"], None])
def test_a_name_that_is_not_a_string_is_a_400_and_no_token(operator, cluster, name):
    response = api_for(operator).post("/api/v1/tokens/", {"name": name}, format="json")

    assert response.status_code == 400 and "name" in response.json()
    assert not PersonalAccessToken.objects.exists()


def test_a_form_encoded_body_is_a_415_as_the_schema_offers_json_only(operator, cluster):
    response = api_for(operator).post("/api/v1/tokens/", {"name": "ci"}, format="multipart")

    assert response.status_code == 415
    assert not PersonalAccessToken.objects.exists()


def test_last_use_is_recorded_to_the_minute(operator, cluster, time_machine):
    time_machine.move_to(datetime(2026, 3, 1, 12, tzinfo=UTC), tick=False)
    key = _create(operator)["key"]
    _with(key).get("/api/v1/nodes/")
    first = PersonalAccessToken.objects.get().last_used_at
    assert first == datetime(2026, 3, 1, 12, tzinfo=UTC)

    time_machine.move_to(datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC), tick=False)
    _with(key).get("/api/v1/nodes/")
    assert PersonalAccessToken.objects.get().last_used_at == first

    time_machine.move_to(datetime(2026, 3, 1, 12, 5, tzinfo=UTC), tick=False)
    _with(key).get("/api/v1/nodes/")
    assert PersonalAccessToken.objects.get().last_used_at == datetime(2026, 3, 1, 12, 5, tzinfo=UTC)


def test_another_persons_token_cannot_be_revoked(operator, viewer, cluster):
    created = _create(operator)
    assert api_for(viewer).post(f"/api/v1/tokens/{created['id']}/revoke/").status_code == 404


def test_drf_tokens_from_before_the_upgrade_keep_working_for_90_days(operator, cluster, time_machine):
    time_machine.move_to(datetime(2026, 3, 1, 12, tzinfo=UTC), tick=False)
    old_key = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamp with time zone,"
                       " user_id integer)" if connection.vendor == "postgresql" else
                       "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created datetime, user_id integer)")
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, %s)",
                       [old_key, datetime(2025, 1, 1, tzinfo=UTC), operator.pk])
    migration = importlib.import_module("core.migrations.0003_drf_tokens_to_personal_access_tokens")
    migration.drf_tokens_copy(apps, connection)

    assert "authtoken_token" not in connection.introspection.table_names()
    assert _with(old_key).get("/api/v1/nodes/").status_code == 200
    token = PersonalAccessToken.objects.get()
    assert token.prefix == old_key[:8] and token.expires_at == datetime(2026, 5, 30, 12, tzinfo=UTC)
    time_machine.move_to(datetime(2026, 5, 31, tzinfo=UTC), tick=False)
    assert _with(old_key).get("/api/v1/nodes/").status_code in REFUSED
    assert timedelta(days=90) == token.expires_at - datetime(2026, 3, 1, 12, tzinfo=UTC)
