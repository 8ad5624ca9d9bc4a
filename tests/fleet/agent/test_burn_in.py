"""`fleetdeck-agent --burn-in-*` end to end: the real CLI, its httpx client routed into Django's
test client, the real heartbeat endpoint and the health app's repair tickets."""
from __future__ import annotations

import json
import shlex
import sys

import httpx
import pytest
from django.test import Client

from core.actors import Actor
from fleet.agent import cli
from fleet.agent.nvml import DeviceInfo
from fleet.agent.payloads import HEARTBEAT_PATH, MAX_BURN_IN_DETAILS, REGISTER_PATH, BurnInReport, HeartbeatPayload
from fleet.agent.runner import burn_in_run
from fleet.models import Node, NodeAgentToken
from health.models import RepairTicket
from health.services import ticket_open, ticket_transition

from .fakes import FakeFacade

pytestmark = pytest.mark.django_db
OPS = Actor(label="olga")


class DjangoTransport(httpx.BaseTransport):
    """Hands each request of the agent's httpx client to Django's test client."""

    def __init__(self) -> None:
        self.client = Client()
        self.paths: list[str] = []
        self.bodies: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        self.paths.append(request.url.path)
        self.bodies.append(body)
        response = self.client.generic(
            request.method, request.url.path, data=body, content_type=request.headers.get("content-type", ""),
            HTTP_AUTHORIZATION=request.headers.get("authorization", ""),
        )
        return httpx.Response(response.status_code, content=response.content,
                              headers={"content-type": response.get("Content-Type", "")})


def n1_devices() -> list[DeviceInfo]:
    return [DeviceInfo(index=i, uuid=f"GPU-H100-SXM-80GB-1-{i}", name="NVIDIA H100 80GB HBM3", memory_mib=81559,
                       pci_bus_id=f"0000:{0x1a + i * 16:02x}:00", numa_node=0) for i in range(8)]


@pytest.fixture
def n1_in_burn_in(cluster):  # noqa: F811
    ticket, _ = ticket_open(node=Node.objects.get(name="n1"), evidence="Xid 79 on GPU 5", actor=OPS,
                            out_of_service=True)
    for to in ("diagnosing", "repaired", "burn_in"):
        ticket_transition(ticket=ticket, to_state=to, reason=f"to {to}", actor=OPS)
    return ticket


def agent(argv: list[str], capsys) -> tuple[int, str, str, DjangoTransport]:
    transport = DjangoTransport()
    token = NodeAgentToken.issue(Node.objects.get(name="n1"))
    code = cli.main(["--server", "http://testserver", "--node", "n1", "--token", token, *argv],
                    facade_factory=lambda: FakeFacade(n1_devices()), transport=transport)
    out, err = capsys.readouterr()
    return code, out, err, transport


def python(code: str) -> str:
    return shlex.join([sys.executable, "-c", code])


def test_a_passing_burn_in_command_returns_the_node_to_service(n1_in_burn_in, capsys):
    code, out, err, transport = agent(["--burn-in-cmd", python("print('dcgmi diag -r 3: Pass')")], capsys)

    assert (code, err) == (0, "")
    assert out.splitlines() == [f"burn-in passed: recorded on repair ticket #{n1_in_burn_in.pk} of node n1"]
    assert transport.paths == [REGISTER_PATH, HEARTBEAT_PATH]
    ticket = RepairTicket.objects.get(pk=n1_in_burn_in.pk)
    assert ticket.state == "returned"
    result = ticket.burn_ins.get()
    assert (result.passed, result.reported_by, result.actor) == (True, "agent", "automation:agent:n1")
    assert "exited with status 0" in result.details and "dcgmi diag -r 3: Pass" in result.details
    assert Node.objects.get(name="n1").state == "ready"


def test_a_failing_burn_in_command_sends_the_ticket_back_to_open(n1_in_burn_in, capsys):
    code, out, _, _ = agent(["--burn-in-cmd", python("import sys; print('GPU 5: PCIe replay'); sys.exit(3)")],
                            capsys)

    assert code == 0 and out.startswith("burn-in failed: recorded on repair ticket")
    ticket = RepairTicket.objects.get(pk=n1_in_burn_in.pk)
    assert ticket.state == "open"
    result = ticket.burn_ins.get()
    assert not result.passed and "status 3" in result.details and "PCIe replay" in result.details
    assert Node.objects.get(name="n1").state == "in_repair"


def test_an_explicit_result_with_details_is_reported(n1_in_burn_in, capsys):
    code, _, _, transport = agent(["--burn-in-failed", "--details", "fieldiag: HBM test failed"], capsys)

    assert code == 0
    heartbeat = HeartbeatPayload.from_dict(json.loads(transport.bodies[-1]))
    assert heartbeat.burn_in == BurnInReport(passed=False, details="fieldiag: HBM test failed")
    assert RepairTicket.objects.get(pk=n1_in_burn_in.pk).burn_ins.get().details == "fieldiag: HBM test failed"


def test_a_result_for_a_node_without_a_ticket_in_burn_in_is_an_error(cluster, capsys):  # noqa: F811
    code, out, err, transport = agent(["--burn-in-passed"], capsys)

    assert (code, out) == (1, "")
    assert err.splitlines() == ["fleetdeck-agent: the server did not record the burn-in result (passed): node n1 "
                                "has no repair ticket in burn-in"]
    assert transport.paths == [REGISTER_PATH, HEARTBEAT_PATH]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--burn-in-cmd", "no-such-burn-in-tool --all"], "burn-in command not found: no-such-burn-in-tool"),
        (["--burn-in-cmd", "  "], "--burn-in-cmd is empty"),
        (["--details", "ok"], "--details needs --burn-in-passed or --burn-in-failed"),
        (["--burn-in-passed", "--details", "x" * (MAX_BURN_IN_DETAILS + 1)], "--details is longer than 4000"),
        (["--burn-in-cmd", "true", "--burn-in-timeout", "0"], "--burn-in-timeout must be positive"),
    ],
    ids=["missing command", "empty command", "details alone", "details too long", "zero timeout"],
)
def test_bad_burn_in_options_are_one_line_exit_1_and_send_nothing(argv, message, n1_in_burn_in, capsys):
    code, out, err, transport = agent(argv, capsys)

    assert (code, out) == (1, "")
    (line,) = err.splitlines()
    assert line.startswith("fleetdeck-agent: ") and message in line
    assert transport.paths == []
    assert RepairTicket.objects.get(pk=n1_in_burn_in.pk).state == "burn_in"


def test_both_results_at_once_are_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--server", "http://x", "--burn-in-passed", "--burn-in-cmd", "true"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_a_burn_in_that_hangs_fails_and_a_long_output_keeps_its_tail():
    hung = burn_in_run(python("import time; print('started', flush=True); time.sleep(30)"), timeout_s=0.5)
    assert not hung.passed and "did not finish within 0.5 s" in hung.details

    chatty = burn_in_run(python("print('x' * 10000); print('VERDICT: pass')"), timeout_s=20)
    assert chatty.passed and len(chatty.details) <= MAX_BURN_IN_DETAILS
    assert chatty.details.endswith("VERDICT: pass")


def test_the_heartbeat_schema_validates_burn_in():
    base = {"node": "n1", "seq": 1, "sent_at": "", "gpus": []}
    assert "burn_in" not in HeartbeatPayload.from_dict(base).to_dict()
    both = HeartbeatPayload.from_dict({**base, "burn_in": {"passed": True, "details": "ok"}})
    assert both.to_dict()["burn_in"] == {"passed": True, "details": "ok"}
    for bad, message in [
        ({"passed": "yes"}, "burn_in.passed: expected true or false"),
        ({"details": "x"}, "burn_in.passed: missing"),
        ([True], "burn_in: expected an object"),
        ({"passed": True, "details": 7}, "burn_in.details: expected a string"),
        ({"passed": True, "details": "x" * 4001}, "burn_in.details: longer than 4000 characters"),
    ]:
        with pytest.raises(ValueError, match=message):
            HeartbeatPayload.from_dict({**base, "burn_in": bad})


def test_the_endpoint_refuses_a_bad_burn_in_naming_the_field(n1_in_burn_in):
    token = NodeAgentToken.issue(Node.objects.get(name="n1"))
    body = {"node": "n1", "seq": 1, "sent_at": "", "gpus": [], "burn_in": {"passed": True, "details": "x" * 4001}}
    response = Client().post(HEARTBEAT_PATH, body, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 400
    assert response.json()["extra"] == {"burn_in.details": ["longer than 4000 characters"]}
    assert not RepairTicket.objects.get(pk=n1_in_burn_in.pk).burn_ins.exists()
