"""The schema documents the node agent's and the ingest endpoints' bodies as the server reads them
(issue 14 §4: they were an untyped `object`): required fields, bounds, UUID prefixes, event kinds,
and the DCGM endpoint's text/plain body."""
from __future__ import annotations

import pytest

from fleet.agent.payloads import INT_BOUNDS, MAX_UUID
from tests.cluster import api_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(operator):
    return api_for(operator).get("/api/v1/schema/", {"format": "json"}).json()


def _body(schema, path, media="application/json"):
    return schema["paths"][path]["post"]["requestBody"]["content"][media]["schema"]


def test_the_heartbeat_body_says_what_the_agent_must_send_and_its_bounds(schema):
    body = _body(schema, "/api/v1/agent/heartbeat/")
    assert set(body["required"]) == {"node", "seq", "sent_at", "gpus"}
    gpu = body["properties"]["gpus"]["items"]
    assert set(gpu["required"]) == {"uuid", "index"}
    assert gpu["properties"]["uuid"]["pattern"] == "^(?:GPU\\-)" and gpu["properties"]["uuid"]["maxLength"] == MAX_UUID
    assert gpu["properties"]["temperature_c"] == {"type": "number", "nullable": True}
    event = body["properties"]["events"]["items"]["properties"]
    assert (event["xid"]["minimum"], event["xid"]["maximum"]) == INT_BOUNDS[("XidEvent", "xid")]
    assert event["kind"]["enum"] == ["xid", "gpu_lost"]
    assert body["properties"]["burn_in"]["properties"]["details"]["maxLength"] == 4000
    assert body["properties"]["schema"]["enum"] == [1]


def test_the_register_body_bounds_slots_and_mig_uuids(schema):
    gpu = _body(schema, "/api/v1/agent/register/")["properties"]["gpus"]["items"]
    assert (gpu["properties"]["index"]["minimum"], gpu["properties"]["index"]["maximum"]) == (0, 1023)
    assert gpu["properties"]["mig_instances"]["items"]["properties"]["uuid"]["pattern"] == "^(?:MIG\\-)"
    assert gpu["properties"]["pci_bus_id"] == {"type": "string", "nullable": True}


def test_the_kernel_log_and_dcgm_bodies_are_typed(schema):
    kernel = _body(schema, "/api/v1/telemetry/kernel-log/")
    assert kernel["required"] == ["node", "lines"] and kernel["properties"]["lines"]["minItems"] == 1
    dcgm = schema["paths"]["/api/v1/telemetry/dcgm/"]["post"]
    assert set(dcgm["requestBody"]["content"]) == {"text/plain", "application/json"}
    assert _body(schema, "/api/v1/telemetry/dcgm/")["required"] == ["node", "text"]
    assert {"name": "node", "in": "query"}.items() <= dcgm["parameters"][0].items()
