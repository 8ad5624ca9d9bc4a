"""The agent loop and CLI against a fake facade and an httpx MockTransport server."""
from __future__ import annotations

import json

import httpx
import pynvml
import pytest

from fleet.agent import cli
from fleet.agent.nvml import NvmlEvent
from fleet.agent.payloads import HEARTBEAT_PATH, REGISTER_PATH, HeartbeatPayload, RegisterPayload
from fleet.agent.runner import Agent, AgentClient, AgentError
from health.core.policy import make_dedup_key

from .fakes import AT, FakeFacade, two_gpu_devices


class Server:
    """Records requests; `answers` maps a path to the status codes to give, in order (then 200)."""

    def __init__(self, answers: dict[str, list[int]] | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.answers = answers or {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        queue = self.answers.get(request.url.path, [])
        status = queue.pop(0) if queue else 200
        return httpx.Response(status, json={"ok": status < 300})

    def bodies(self, path: str) -> list[dict]:
        return [json.loads(r.content) for r in self.requests if r.url.path == path]


def agent_with(server: Server, facade: FakeFacade | None = None) -> tuple[Agent, FakeFacade]:
    facade = facade or FakeFacade(two_gpu_devices())
    client = AgentClient("http://fleet.test", "tok-123", transport=httpx.MockTransport(server))
    agent = Agent(facade, client, node="gpu-017", hostname="gpu-017.lab", interval_s=0.01, clock=lambda: AT)
    return agent, facade


def test_inventory_payload():
    agent, _ = agent_with(Server())
    data = agent.inventory().to_dict()
    assert (data["schema"], data["node"], data["hostname"], data["driver_version"]) == (
        1, "gpu-017", "gpu-017.lab", "565.57.01")
    assert data["sent_at"] == "2026-03-01T12:00:00+00:00"
    gpu0, gpu1 = data["gpus"]
    assert gpu0 == {
        "index": 0, "uuid": "GPU-a", "name": "NVIDIA H200", "memory_mib": 143771, "pci_bus_id": "0000:18:00",
        "numa_node": 0, "mig_enabled": False, "mig_instances": [], "nvlink_peers": ["0000:2a:00"], "nvlink_group": 0,
    }
    assert gpu1["mig_instances"] == [{"profile": "1g.18gb", "gi_id": 9, "uuid": "MIG-b9"}]
    assert gpu1["nvlink_group"] == 0
    assert RegisterPayload.from_dict(json.loads(json.dumps(data))).to_dict() == data


def test_heartbeat_payload_carries_health_and_forwards_xids_with_catalog_actions():
    agent, facade = agent_with(Server())
    agent.inventory()
    facade.lost = {"GPU-b"}
    payload = agent.heartbeat([NvmlEvent(xid=13, gpu_uuid="GPU-a", pci_bus_id="0000:18:00", at=AT),
                               NvmlEvent(xid=79, gpu_uuid="GPU-b", pci_bus_id="0000:2a:00", at=AT)])
    data = payload.to_dict()
    gpu_a, gpu_b = data["gpus"]
    assert (gpu_a["uuid"], gpu_a["gpu_util_pct"], gpu_a["power_w"], gpu_a["lost"]) == ("GPU-a", 87.0, 455.5, False)
    assert gpu_a["ecc"] == {"volatile_dbe": 0, "volatile_sbe": 3, "aggregate_dbe": 0, "aggregate_sbe": 9}
    assert gpu_b["lost"] is True
    app, bus, lost = data["events"]
    assert (app["kind"], app["xid"], app["category"], app["action"]) == ("xid", 13, "application", "annotate_workload")
    assert (bus["xid"], bus["category"], bus["action"]) == (79, "pcie", "reboot_node")
    assert bus["dedup_key"] == make_dedup_key(node="gpu-017", gpu_uuid="GPU-b", kind="xid", xid=79, at=AT)
    assert (lost["kind"], lost["gpu_uuid"], lost["pci_bus_id"], lost["action"]) == (
        "gpu_lost", "GPU-b", "0000:2a:00", "reboot_node")
    assert HeartbeatPayload.from_dict(json.loads(json.dumps(data))).to_dict() == data


def test_lost_gpu_event_keeps_one_dedup_key_across_heartbeats():
    agent, facade = agent_with(Server())
    agent.inventory()
    facade.lost = {"GPU-a"}
    first, second = agent.heartbeat([]), agent.heartbeat([])
    assert first.events[0].dedup_key == second.events[0].dedup_key


def test_run_posts_register_then_heartbeats_with_the_bearer_token():
    server = Server()
    facade = FakeFacade(two_gpu_devices(), events=[[], [NvmlEvent(xid=48, gpu_uuid="GPU-a", pci_bus_id=None, at=AT)]])
    agent, _ = agent_with(server, facade)
    agent.run(max_heartbeats=2)
    assert [(r.method, r.url.path) for r in server.requests] == [
        ("POST", REGISTER_PATH), ("POST", HEARTBEAT_PATH), ("POST", HEARTBEAT_PATH)]
    assert {r.headers["authorization"] for r in server.requests} == {"Bearer tok-123"}
    assert all(r.headers["content-type"] == "application/json" for r in server.requests)
    beats = server.bodies(HEARTBEAT_PATH)
    assert [b["seq"] for b in beats] == [0, 1]
    assert beats[0]["events"] == [] and [e["xid"] for e in beats[1]["events"]] == [48]


def test_events_survive_a_failed_heartbeat():
    server = Server({HEARTBEAT_PATH: [503]})
    facade = FakeFacade(two_gpu_devices(), events=[[NvmlEvent(xid=79, gpu_uuid="GPU-a", pci_bus_id=None, at=AT)]])
    agent, _ = agent_with(server, facade)
    logged: list[str] = []
    agent.log = logged.append
    agent.run(max_heartbeats=2)
    first, second = server.bodies(HEARTBEAT_PATH)
    assert [e["xid"] for e in first["events"]] == [79] and [e["xid"] for e in second["events"]] == [79]
    assert (first["seq"], second["seq"]) == (0, 0)
    assert logged == ["fleetdeck-agent: heartbeat answered HTTP 503"]


def test_a_heartbeat_answered_409_registers_again():
    server = Server({HEARTBEAT_PATH: [409]})
    agent, _ = agent_with(server)
    agent.run(max_heartbeats=2)
    assert [r.url.path for r in server.requests] == [REGISTER_PATH, HEARTBEAT_PATH, REGISTER_PATH, HEARTBEAT_PATH]


def test_a_refused_token_is_fatal():
    agent, _ = agent_with(Server({REGISTER_PATH: [401]}))
    with pytest.raises(AgentError, match=r"rejected the agent token for node gpu-017 \(HTTP 401\)"):
        agent.run(once=True)


def run_cli(argv, *, facade=None, server=None, capsys):
    code = cli.main(argv, facade_factory=(lambda: facade) if facade else cli.NvmlFacade,
                    transport=httpx.MockTransport(server) if server else None)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_once_against_a_mock_server(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("tok-from-file\n")
    server, facade = Server(), FakeFacade(two_gpu_devices())
    code, out, err = run_cli(
        ["--server", "http://fleet.test/", "--node", "n1", "--token-file", str(token), "--once"],
        facade=facade, server=server, capsys=capsys,
    )
    assert (code, out, err) == (0, "", "")
    assert [r.url.path for r in server.requests] == [REGISTER_PATH, HEARTBEAT_PATH]
    assert {r.headers["authorization"] for r in server.requests} == {"Bearer tok-from-file"}
    assert server.bodies(REGISTER_PATH)[0]["node"] == "n1"
    assert facade.initialised and facade.shut_down


def test_cli_takes_the_token_from_the_environment(monkeypatch, capsys):
    monkeypatch.setenv("FLEETDECK_AGENT_TOKEN", "tok-env")
    server = Server()
    code, _, _ = run_cli(["--server", "http://fleet.test", "--node", "n1", "--once"],
                         facade=FakeFacade(two_gpu_devices()), server=server, capsys=capsys)
    assert code == 0 and server.requests[0].headers["authorization"] == "Bearer tok-env"


def test_cli_without_nvml_prints_one_line_and_exits_1(monkeypatch, capsys):
    def missing() -> None:
        raise pynvml.NVMLError_LibraryNotFound(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    code = cli.main(["--server", "http://fleet.test", "--token", "t", "--once"])
    out, err = capsys.readouterr()
    assert code == 1
    assert (out + err).splitlines() == ["NVML not found: is the NVIDIA driver installed?"]


def test_gpu_check_without_nvml_prints_one_line_and_exits_1(monkeypatch, capsys):
    from fleet.agent import gpu_check

    def missing() -> None:
        raise pynvml.NVMLError_LibraryNotFound(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    assert gpu_check.main([]) == 1
    out, err = capsys.readouterr()
    assert (out + err).splitlines() == ["NVML not found: is the NVIDIA driver installed?"]


@pytest.mark.parametrize(
    ("argv", "answers", "message"),
    [
        (["--server", "http://fleet.test", "--once"], {},
         "no agent token: pass --token-file or set FLEETDECK_AGENT_TOKEN"),
        (["--server", "http://fleet.test", "--token", "bad", "--once"], {REGISTER_PATH: [403]},
         "rejected the agent token for node n9 (HTTP 403)"),
        (["--server", "http://fleet.test", "--token", "t", "--once"], {REGISTER_PATH: [400]},
         "server refused the /api/v1/agent/register/ payload"),
        (["--server", "http://fleet.test", "--token-file", "/nonexistent/token", "--once"], {},
         "cannot read --token-file /nonexistent/token"),
    ],
)
def test_cli_failures_are_one_line_exit_1(argv, answers, message, monkeypatch, capsys):
    monkeypatch.delenv("FLEETDECK_AGENT_TOKEN", raising=False)
    code, out, err = run_cli([*argv, "--node", "n9"], facade=FakeFacade(two_gpu_devices()), server=Server(answers),
                             capsys=capsys)
    assert code == 1 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("fleetdeck-agent: ") and message in line


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("node"), "node: missing"),
        (lambda d: d["gpus"][0].pop("uuid"), "gpus[0].uuid: missing"),
        (lambda d: d["gpus"][1].update(memory_mib="lots"), "gpus[1].memory_mib: expected an integer"),
        (lambda d: d["gpus"][0].update(mig_enabled=1), "gpus[0].mig_enabled: expected true or false"),
        (lambda d: d.update(schema=2), "schema: unsupported version 2"),
        (lambda d: d.update(gpus={}), "gpus: expected a list"),
    ],
)
def test_register_payload_validation_names_the_field(mutate, message):
    agent, _ = agent_with(Server())
    data = json.loads(json.dumps(agent.inventory().to_dict()))
    mutate(data)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        RegisterPayload.from_dict(data)


def test_heartbeat_payload_validation_names_nested_fields():
    agent, _ = agent_with(Server())
    agent.inventory()
    data = json.loads(json.dumps(agent.heartbeat([]).to_dict()))
    data["gpus"][1]["ecc"]["volatile_dbe"] = "two"
    with pytest.raises(ValueError, match=r"gpus\[1\]\.ecc\.volatile_dbe: expected an integer"):
        HeartbeatPayload.from_dict(data)
    with pytest.raises(ValueError, match="body: expected an object"):
        HeartbeatPayload.from_dict([])


def test_cli_checks_nvml_before_its_options(monkeypatch, capsys):
    """`fleetdeck-agent` with nothing set up, on a machine without the driver: the driver is the news."""
    def missing() -> None:
        raise pynvml.NVMLError_LibraryNotFound(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    monkeypatch.delenv("FLEETDECK_SERVER", raising=False)
    assert cli.main([]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", "NVML not found: is the NVIDIA driver installed?\n")


def test_cli_without_a_server_says_so_once_nvml_works(monkeypatch, capsys):
    monkeypatch.delenv("FLEETDECK_SERVER", raising=False)
    facade = FakeFacade(two_gpu_devices())
    assert cli.main(["--token", "t"], facade_factory=lambda: facade) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", "fleetdeck-agent: --server is required (or set FLEETDECK_SERVER)\n")
    assert facade.shut_down


def _nvml_loads() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_nvml_loads(), reason="this machine has an NVIDIA driver")
@pytest.mark.parametrize(
    "command",
    [
        ["-m", "fleet.agent.gpu_check"],
        ["-m", "fleet.agent.cli"],
        ["-m", "fleet.agent.cli", "--server", "http://127.0.0.1:9", "--token", "t", "--once"],
    ],
)
def test_the_real_entry_points_without_a_driver_print_one_line_and_exit_1(command):
    """The real pynvml, no driver: what an operator sees on a machine without NVML."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, cwd=root, timeout=60,
                          check=False)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", "NVML not found: is the NVIDIA driver installed?\n")


def test_the_console_script_is_the_cli():
    """pyproject's `fleetdeck-agent` entry point names cli.main (installed by `make install`)."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"fleetdeck-agent": "fleet.agent.cli:main"}
    packages = set(project["tool"]["setuptools"]["packages"])
    # The agent imports only these: the wheel for a GPU node holds them.
    assert {"fleet", "fleet.agent", "health", "health.core"} <= packages


@pytest.mark.skipif(_nvml_loads(), reason="this machine has an NVIDIA driver")
def test_the_installed_fleetdeck_agent_without_a_driver_prints_one_line_and_exits_1():
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "fleetdeck-agent"
    if not script.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("fleetdeck-agent is not installed: `make install` runs pip install -e .")
        pytest.skip("fleetdeck-agent not installed (pip install -e .)")
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", "NVML not found: is the NVIDIA driver installed?\n")
