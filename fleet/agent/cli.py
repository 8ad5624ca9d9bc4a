"""`fleetdeck-agent`: the NVML node agent.

    fleetdeck-agent --server https://fleetdeck.example --node gpu-017 --token-file /etc/fleetdeck/token
    FLEETDECK_AGENT_TOKEN=... fleetdeck-agent --server http://10.0.0.5:8000 --once

Exit status: 0 after --once succeeded (or on Ctrl-C), 1 with exactly one line on stderr for anything
the agent cannot fix by retrying: no NVML, no token, a refused token or payload. Network errors in
the loop are logged and retried on the next interval.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from .nvml import NvmlFacade, NvmlNotFound, default_hostname
from .runner import Agent, AgentClient, AgentError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleetdeck-agent", description="Report GPU inventory and health.")
    parser.add_argument("--server", default=os.environ.get("FLEETDECK_SERVER"),
                        help="Fleetdeck base URL (env FLEETDECK_SERVER)")
    parser.add_argument("--node", default=None, help="Node name as known to Fleetdeck (default: host name)")
    parser.add_argument("--token-file", default=None, help="File holding the node's agent token")
    parser.add_argument("--token", default=os.environ.get("FLEETDECK_AGENT_TOKEN"),
                        help="Agent token (env FLEETDECK_AGENT_TOKEN); prefer --token-file")
    parser.add_argument("--interval", type=float, default=15.0, help="Seconds between heartbeats (default 15)")
    parser.add_argument("--once", action="store_true", help="Register, send one heartbeat and exit")
    return parser


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise AgentError(f"cannot read --token-file {args.token_file}: {exc.strerror}") from exc
        if not token:
            raise AgentError(f"--token-file {args.token_file} is empty")
        return token
    if args.token:
        return args.token.strip()
    raise AgentError("no agent token: pass --token-file or set FLEETDECK_AGENT_TOKEN")


def main(
    argv: Sequence[str] | None = None,
    *,
    facade_factory: Callable[[], object] = NvmlFacade,
    transport: httpx.BaseTransport | None = None,
) -> int:
    args = build_parser().parse_args(argv)
    if not args.server:
        print("fleetdeck-agent: --server is required (or set FLEETDECK_SERVER)", file=sys.stderr)
        return 1
    if args.interval <= 0:
        print("fleetdeck-agent: --interval must be positive", file=sys.stderr)
        return 1
    facade = facade_factory()
    try:
        facade.init()  # type: ignore[attr-defined]
    except NvmlNotFound as exc:
        print(exc, file=sys.stderr)
        return 1
    client = None
    try:
        client = AgentClient(args.server, _token(args), transport=transport)
        agent = Agent(facade, client, node=args.node or default_hostname(), hostname=default_hostname(),  # type: ignore[arg-type]
                      interval_s=args.interval)
        agent.run(once=args.once)
    except AgentError as exc:
        print(f"fleetdeck-agent: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if client is not None:
            client.close()
        facade.shutdown()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
