"""The OpenAPI schema against the server (issue 14 §4): schemathesis generates requests for every
operation of the schema /api/v1/schema/ serves and runs every check on each response, as an
operator, through the WSGI application (no server process)."""
from __future__ import annotations

import datetime as dt

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings

from core.actors import Actor
from core.models import PersonalAccessToken
from core.tokens import PREFIX_LENGTH, key_hash, token_create
from tests.cluster import FLAVOR

# The schema the view serves, built the same way; loaded at collection so that each operation is
# its own test (schemathesis's fixture-based loading does not run on pytest 9).
schema = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
schema.app = get_wsgi_application()


# A schema says a reference is a string, not which strings name objects that exist. For these
# operations the research_queue fixture's fleet is there, and positive cases name its objects
# (negative cases keep what schemathesis made, so unknown names are still tried).
EXISTING = {
    "POST /api/v1/repair-tickets/": {"node": "n1"},
    "POST /api/v1/quota-requests/": {"queue": "research-q", "flavor": FLAVOR},
    "POST /api/v1/queues/": {"team": "research", "cohort": None},
    "POST /api/v1/workloads/": {"team": "research", "queue": "research-q",
                                "priority_class": "research-batch"},
}


def _label(case) -> str:
    return f"{case.method.upper()} {case.path}"


@schema.hook
def map_case(context, case):
    names = EXISTING.get(_label(case))
    if names and case.meta is not None and case.meta.generation.mode.is_positive and isinstance(case.body, dict):
        case.body = {**case.body, **{field: name for field, name in names.items() if field in case.body}}
        if _label(case) == "POST /api/v1/workloads/" and case.headers:
            # A key names one submission for a day: a reused key with another body is the 422 the
            # schema documents, so each positive case sends its own.
            case.headers = {k: v for k, v in case.headers.items() if k.lower() != "idempotency-key"}
        if _label(case) == "POST /api/v1/workloads/":
            case.body.update(_workload_rules_no_schema_states(case.body))
        if _label(case) == "POST /api/v1/quota-requests/":
            case.body.update(_quota_rules_no_schema_states(case.body))
        if _label(case) == "POST /api/v1/queues/":
            case.body.update(_queue_rules_no_schema_states(case.body))
    return case


def _workload_rules_no_schema_states(body: dict) -> dict:
    """The cross-field rules scheduling.services.specs checks and a schema cannot state: pod set
    names unique, flavors and MIG profiles that exist, a milli share or a MIG slice instead of
    whole GPUs (not both), replicas that fit the fleet's 8-GPU nodes, one pod set when elastic, a
    command that starts with a program and is short enough in all, a workload the fleet can hold."""
    pod_sets = body.get("pod_sets")
    if not isinstance(pod_sets, list) or not pod_sets:
        return {}
    if body.get("elastic_min_replicas") is not None:
        pod_sets = pod_sets[:1]
    fixed_sets = []
    for i, ps in enumerate(pod_sets):
        ps = {**ps, "name": f"ps{i}", "flavor": FLAVOR if ps.get("flavor") is not None else None,
              "accepted_products": None, "mig_profile": None, "replicas": 1 + ps.get("replicas", 1) % 8}
        if ps.get("milli_gpu") is not None:
            ps["gpus_per_replica"] = 0
        else:
            # several replicas spanning nodes take whole 8-GPU nodes
            ps["gpus_per_replica"] = 8 if ps["replicas"] > 1 else 1 + ps.get("gpus_per_replica", 1) % 8
        if ps.get("command"):  # a program to run first, and at most MAX_COMMAND_LENGTH characters in all
            ps["command"] = ["python", *(arg[:64] for arg in ps["command"][1:])]
        fixed_sets.append(ps)
    # … and that the whole fleet can hold (scheduling.services.never_fit): at most its 8 nodes of
    # 8 GPUs, and within one node or one rack of 4 when that topology is required.
    fitted, nodes = [], 0
    for ps in fixed_sets:
        need = ps["replicas"] if ps["gpus_per_replica"] == 8 else 1
        if fitted and nodes + need > 8:
            break
        fitted.append(ps)
        nodes += need
    fixed_sets = fitted
    fixed: dict = {"pod_sets": fixed_sets}
    topology = body.get("topology")
    if isinstance(topology, dict) and topology.get("mode") == "required":
        total = sum(ps["replicas"] * ps["gpus_per_replica"] for ps in fixed_sets)
        if total > {"node": 8, "rack": 32}.get(topology.get("level"), 64):
            fixed["topology"] = {**topology, "mode": "preferred"}
    if body.get("elastic_min_replicas") is not None:
        fixed["elastic_min_replicas"] = 1 + body["elastic_min_replicas"] % fixed_sets[0]["replicas"]
    return fixed


def _quota_rules_no_schema_states(body: dict) -> dict:
    """The rules QuotaRequestInputSerializer leaves to the service (the schema describes them):
    dates from today, at most the fleet's 64 GPUs of the flavor, not the queue's current 64."""
    today = timezone.localdate()
    starts_on = today + dt.timedelta(days=sum(map(ord, str(body.get("starts_on")))) % 30)
    fixed = {"requested_nominal": 1 + body.get("requested_nominal", 1) % 63, "starts_on": starts_on.isoformat()}
    if body.get("requested_borrowing_limit") is not None:
        fixed["requested_borrowing_limit"] = body["requested_borrowing_limit"] % 65
    if body.get("ends_on") is not None:
        fixed["ends_on"] = (starts_on + dt.timedelta(days=1)).isoformat()
    return fixed

def _queue_rules_no_schema_states(body: dict) -> dict:
    """What scheduling.services.policy checks across a queue's quotas: flavors that exist, each once
    (the fixture's fleet has one), a lending limit within the nominal quota."""
    quotas = body.get("quotas")
    if not isinstance(quotas, list) or not quotas:
        return {}
    quota = {**quotas[0], "flavor": FLAVOR}
    if quota.get("lending_limit") is not None:
        quota["lending_limit"] = min(quota["lending_limit"], quota["nominal"])
    return {"quotas": [quota]}


# Fixed, so that the requests schemathesis prepares while collecting carry it too.
KEY = "fdp_schemathesis-operator-key-0123456789abcdef"


@schema.auth()
class OperatorToken:
    """The operator's token as the schema's auth, so the auth checks know which credentials are
    the real ones (and send requests without them)."""

    def get(self, case, context) -> str:
        return KEY

    def set(self, case, data, context) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Token {data}"}


@pytest.fixture
def operator_token(db, operator):
    token, _ = token_create(user=operator, name="schemathesis", actor=Actor.automation("test"))
    PersonalAccessToken.objects.filter(pk=token.pk).update(prefix=KEY[:PREFIX_LENGTH], key_hash=key_hash(KEY))
    # As Django's test client does: the WSGI handler would otherwise close the test's connection
    # (and its transaction) after each request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield KEY
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
def test_every_operation_matches_its_schema(case, operator_token, request):
    if _label(case) in EXISTING:
        request.getfixturevalue("research_queue")
    case.call_and_validate()  # every check, on every operation


def test_an_api_path_that_matches_no_route_is_a_json_404(client, operator):
    client.force_login(operator)
    response = client.get("/api/v1/workloads/abc/")
    assert (response.status_code, response.json()) == (404, {"detail": "Not found."})
    assert client.get("/no-such-page/")["Content-Type"].startswith("text/html")
