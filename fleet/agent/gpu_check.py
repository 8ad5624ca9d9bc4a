"""One-shot check of the real NVML facade on a GPU machine: `python -m fleet.agent.gpu_check`.

Prints one JSON document {"inventory": RegisterPayload, "health": HeartbeatPayload, "timings_ms": {...}}
built exactly as fleetdeck-agent would send them (nothing is sent). `--wait-ms N` also waits N ms for
Xid events, which land in health.events. Without NVML it prints the agent's one-line message and exits 1.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from .nvml import NvmlFacade, NvmlUnavailable, default_hostname
from .runner import Agent


class _NoClient:
    def post(self, path: str, body: dict) -> None:
        raise RuntimeError("gpu_check never talks to a server")

    def close(self) -> None:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleet.agent.gpu_check")
    parser.add_argument("--wait-ms", type=int, default=0, help="also wait this long for NVML Xid events")
    args = parser.parse_args(argv)
    facade = NvmlFacade()
    try:
        facade.init()
    except NvmlUnavailable as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        host = default_hostname()
        agent = Agent(facade, _NoClient(), node=host, hostname=host)  # type: ignore[arg-type]
        started = time.perf_counter()
        inventory = agent.inventory()
        inventory_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        events = facade.wait_xid_events(args.wait_ms)
        health = agent.heartbeat(events)
        health_ms = (time.perf_counter() - started) * 1000
        print(json.dumps({
            "inventory": inventory.to_dict(),
            "health": health.to_dict(),
            "timings_ms": {"inventory": round(inventory_ms, 1), "health": round(health_ms, 1)},
        }, indent=2))
    finally:
        facade.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
