"""The agent loop: register the inventory once, then post heartbeats with health and Xid events.

Public API:
    Agent(facade, client, node=, hostname=, interval_s=, clock=)
        .inventory() -> RegisterPayload
        .heartbeat(events) -> HeartbeatPayload
        .run(once=False, max_heartbeats=None) -> None     raises AgentError on a fatal server answer
        .report_burn_in(report) -> dict                   register, then one heartbeat carrying the result
    AgentClient(server, token, transport=None)            httpx client posting to REGISTER_PATH / HEARTBEAT_PATH
    AgentError                                            one-line, user-facing failure
    xid_event_payload(event, node) -> payloads.XidEvent
    burn_in_run(command, timeout_s) -> BurnInReport       run a burn-in test; passed = exit status 0
"""
from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx

from health.core.policy import make_dedup_key
from health.core.xid_catalog import Action, Category, action_for, lookup

from .nvml import DeviceInfo, NvmlEvent, nvlink_groups
from .payloads import (
    HEARTBEAT_PATH,
    MAX_BURN_IN_DETAILS,
    REGISTER_PATH,
    BurnInReport,
    GpuHealthReport,
    GpuInventory,
    HeartbeatPayload,
    MigInstance,
    RegisterPayload,
    XidEvent,
)

AGENT_VERSION = "0.1.0"


class AgentError(RuntimeError):
    """A failure the agent cannot retry its way out of; the message is printed as one line."""


class Facade(Protocol):
    def driver_version(self) -> str | None: ...
    def devices(self) -> list[DeviceInfo]: ...
    def health(self, index: int, uuid: str) -> GpuHealthReport: ...
    def wait_xid_events(self, timeout_ms: int) -> list[NvmlEvent]: ...


class AgentClient:
    def __init__(self, server: str, token: str, *, transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(
            base_url=server.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "User-Agent": f"fleetdeck-agent/{AGENT_VERSION}"},
            timeout=10.0,
            transport=transport,
        )

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self._http.post(path, json=body)

    def close(self) -> None:
        self._http.close()


def _now_iso(clock: Callable[[], datetime]) -> str:
    return clock().isoformat()


def xid_event_payload(event: NvmlEvent, node: str) -> XidEvent:
    if event.xid is None:
        kind, category, action = "gpu_lost", Category.PCIE, Action.REBOOT_NODE
    else:
        kind, category, action = "xid", lookup(event.xid).category, action_for(event.xid)
    return XidEvent(
        kind=kind, xid=event.xid, gpu_uuid=event.gpu_uuid, pci_bus_id=event.pci_bus_id, at=event.at.isoformat(),
        category=category.value, action=action.value,
        dedup_key=make_dedup_key(node=node, gpu_uuid=event.gpu_uuid, kind=kind, xid=event.xid, at=event.at),
    )


def _lost_event(health: GpuHealthReport, device: DeviceInfo | None, node: str, at: datetime) -> XidEvent:
    # No timestamp in the key: a GPU stays lost for many heartbeats and is one event.
    key = make_dedup_key(node=node, gpu_uuid=health.uuid, kind="gpu_lost", xid=None, raw=f"lost:{health.uuid}")
    return XidEvent(
        kind="gpu_lost", xid=None, gpu_uuid=health.uuid, pci_bus_id=device.pci_bus_id if device else None,
        at=at.isoformat(), category=Category.PCIE.value, action=Action.REBOOT_NODE.value, dedup_key=key,
    )


def burn_in_run(command: str, timeout_s: float) -> BurnInReport:
    """Run a burn-in test (e.g. `dcgmi diag -r 3`): exit status 0 passes. A test that hangs past
    `timeout_s` fails; a command that cannot start at all is the operator's mistake (AgentError),
    never reported as a failed burn-in."""
    argv = shlex.split(command)
    if not argv:
        raise AgentError("--burn-in-cmd is empty")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)  # noqa: S603
    except FileNotFoundError as exc:
        raise AgentError(f"burn-in command not found: {argv[0]}") from exc
    except PermissionError as exc:
        raise AgentError(f"burn-in command not executable: {argv[0]}") from exc
    except subprocess.TimeoutExpired as exc:
        output = _text(exc.stdout) + _text(exc.stderr)
        return BurnInReport(passed=False, details=_details(f"`{command}` did not finish within {timeout_s:g} s",
                                                           output))
    head = f"`{command}` exited with status {done.returncode}"
    return BurnInReport(passed=done.returncode == 0, details=_details(head, done.stdout + done.stderr))


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""


def _details(head: str, output: str) -> str:
    # The end of a diagnostic's output holds its verdict: keep the tail when it is too long.
    room = MAX_BURN_IN_DETAILS - len(head) - 1
    output = output.strip()
    if len(output) > room:
        output = "…" + output[-(room - 1):]
    return f"{head}\n{output}" if output else head


class Agent:
    def __init__(
        self,
        facade: Facade,
        client: AgentClient,
        *,
        node: str,
        hostname: str,
        interval_s: float = 15.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        log: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    ) -> None:
        self.facade = facade
        self.client = client
        self.node = node
        self.hostname = hostname
        self.interval_s = interval_s
        self.clock = clock
        self.log = log
        self.seq = 0
        self._devices: list[DeviceInfo] = []
        self._unsent: list[XidEvent] = []

    def inventory(self) -> RegisterPayload:
        self._devices = self.facade.devices()
        groups = nvlink_groups(self._devices)
        gpus = [
            GpuInventory(
                index=d.index, uuid=d.uuid, name=d.name, memory_mib=d.memory_mib, pci_bus_id=d.pci_bus_id,
                numa_node=d.numa_node, mig_enabled=d.mig_enabled,
                mig_instances=[MigInstance(profile, gi_id, uuid) for profile, gi_id, uuid in d.mig_instances],
                nvlink_peers=list(d.nvlink_peers), nvlink_group=groups[d.uuid],
            )
            for d in self._devices
        ]
        return RegisterPayload(
            node=self.node, hostname=self.hostname, agent_version=AGENT_VERSION,
            driver_version=self.facade.driver_version(), sent_at=_now_iso(self.clock), gpus=gpus,
        )

    def heartbeat(self, events: list[NvmlEvent]) -> HeartbeatPayload:
        now = self.clock()
        by_uuid = {d.uuid: d for d in self._devices}
        gpus = [self.facade.health(d.index, d.uuid) for d in self._devices]
        payload_events = [xid_event_payload(event, self.node) for event in events]
        payload_events += [_lost_event(h, by_uuid.get(h.uuid), self.node, now) for h in gpus if h.lost]
        return HeartbeatPayload(node=self.node, seq=self.seq, sent_at=now.isoformat(), gpus=gpus,
                                events=payload_events)

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response | None:
        """POST; None on a transient failure (logged), AgentError on a refusal that retrying cannot fix."""
        try:
            response = self.client.post(path, body)
        except httpx.HTTPError as exc:
            self.log(f"fleetdeck-agent: {path} failed: {exc}")
            return None
        if response.status_code in (401, 403):
            raise AgentError(f"server rejected the agent token for node {self.node} (HTTP {response.status_code})")
        if response.status_code == 400:
            raise AgentError(f"server refused the {path} payload: {response.text[:300]}")
        return response

    def register(self) -> bool:
        response = self._post(REGISTER_PATH, self.inventory().to_dict())
        if response is None or response.status_code >= 300:
            if response is not None:
                self.log(f"fleetdeck-agent: register answered HTTP {response.status_code}")
            return False
        return True

    def beat(self, events: list[NvmlEvent]) -> bool:
        payload = self.heartbeat(events)
        payload.events = self._unsent + payload.events
        return self._deliver(payload) is not None

    def report_burn_in(self, report: BurnInReport) -> dict[str, Any]:
        """Register, then send one heartbeat carrying the burn-in result; returns the server's
        answer. AgentError when it cannot be delivered."""
        if not self.register():
            raise AgentError("could not register with the server")
        for _attempt in range(2):  # a 409 re-registers inside _deliver; the second try then lands
            payload = self.heartbeat(self.facade.wait_xid_events(0))
            payload.events = self._unsent + payload.events
            payload.burn_in = report
            answer = self._deliver(payload)
            if answer is not None:
                return answer
        raise AgentError("could not deliver the burn-in result")

    def _deliver(self, payload: HeartbeatPayload) -> dict[str, Any] | None:
        """POST the heartbeat; the server's answer, or None when it must be sent again."""
        response = self._post(HEARTBEAT_PATH, payload.to_dict())
        if response is not None and response.status_code == 409:
            self.register()  # the server forgot us (node re-created): tell it again, resend next time
            response = None
        if response is None or response.status_code >= 300:
            if response is not None:
                self.log(f"fleetdeck-agent: heartbeat answered HTTP {response.status_code}")
            self._unsent = payload.events  # Xids are rare and precious: keep them for the next beat
            return None
        self._unsent = []
        self.seq += 1
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        return answer if isinstance(answer, dict) else {}

    def run(self, *, once: bool = False, max_heartbeats: int | None = None) -> None:
        while not self.register():
            if once:
                raise AgentError("could not register with the server")
            time.sleep(self.interval_s)
        sent = 0
        events = self.facade.wait_xid_events(0)
        while True:
            ok = self.beat(events)
            sent += 1
            if once:
                if not ok:
                    raise AgentError("could not deliver the heartbeat")
                return
            if max_heartbeats is not None and sent >= max_heartbeats:
                return
            events = self._collect_for(self.interval_s)

    def _collect_for(self, seconds: float) -> list[NvmlEvent]:
        """Wait out the interval inside NVML's event wait; an Xid cuts the wait short so it is sent at once."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            events = self.facade.wait_xid_events(max(1, int(left * 1000)))
            if events:
                return events
        return []
