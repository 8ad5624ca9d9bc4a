"""`fleetdeck-agent`: the NVML node agent.

    fleetdeck-agent --server https://fleetdeck.example --node gpu-017 --token-file /etc/fleetdeck/token
    FLEETDECK_AGENT_TOKEN=... fleetdeck-agent --server http://10.0.0.5:8000 --once

Burn-in of a node under repair (its repair ticket is in burn-in): report a result, or run the test
and report its exit status; either sends one heartbeat carrying the result and exits.

    fleetdeck-agent ... --burn-in-cmd "dcgmi diag -r 3" [--burn-in-timeout 3600]
    fleetdeck-agent ... --burn-in-passed --details "dcgmi diag -r 3: all tests passed"

It prints one line saying what the server recorded. Exit status 0 once the server recorded the
result (passed or failed), 1 with one line on stderr when it did not (no ticket in burn-in) or the
result could not be delivered.

Exit status: 0 after --once succeeded (or on Ctrl-C), 1 with exactly one line on stderr for anything
the agent cannot fix by retrying: no NVML (checked first: `NVML not found: is the NVIDIA driver
installed?`), no server or token, a refused token or payload. Network errors in
the loop are logged and retried on the next interval.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from .nvml import NvmlFacade, NvmlUnavailable, default_hostname
from .payloads import MAX_BURN_IN_DETAILS, BurnInReport
from .runner import Agent, AgentClient, AgentError, burn_in_run


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
    burn_in = parser.add_argument_group("burn-in", "report a burn-in result for the node's repair ticket and exit")
    result = burn_in.add_mutually_exclusive_group()
    result.add_argument("--burn-in-passed", dest="burn_in", action="store_const", const="passed",
                        help="Report that the burn-in passed")
    result.add_argument("--burn-in-failed", dest="burn_in", action="store_const", const="failed",
                        help="Report that the burn-in failed")
    result.add_argument("--burn-in-cmd", metavar="CMD",
                        help="Run CMD (no shell) and report pass (exit status 0) or fail, with its output")
    burn_in.add_argument("--details", default=None, help="What the burn-in showed (with --burn-in-passed/-failed)")
    burn_in.add_argument("--burn-in-timeout", type=float, default=3600.0,
                         help="Seconds CMD may run before it counts as failed (default 3600)")
    return parser


def _options_error(args: argparse.Namespace) -> str | None:
    if not args.server:
        return "--server is required (or set FLEETDECK_SERVER)"
    if args.interval <= 0:
        return "--interval must be positive"
    if args.details is not None and not args.burn_in:
        return "--details needs --burn-in-passed or --burn-in-failed"
    if args.details is not None and len(args.details) > MAX_BURN_IN_DETAILS:
        return f"--details is longer than {MAX_BURN_IN_DETAILS} characters"
    if args.burn_in_timeout <= 0:
        return "--burn-in-timeout must be positive"
    return None


def _burn_in_report(agent: Agent, args: argparse.Namespace) -> None:
    if args.burn_in_cmd is not None:
        report = burn_in_run(args.burn_in_cmd, args.burn_in_timeout)
    else:
        report = BurnInReport(passed=args.burn_in == "passed", details=args.details or "")
    answer = agent.report_burn_in(report)
    recorded = answer.get("burn_in")
    outcome = "passed" if report.passed else "failed"
    if not isinstance(recorded, dict):
        raise AgentError(f"the server did not record the burn-in result ({outcome}): node {agent.node} has no "
                         "repair ticket in burn-in")
    print(f"burn-in {outcome}: recorded on repair ticket #{recorded.get('ticket')} of node {agent.node}")


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
    # NVML first: on a machine without the driver nothing else matters, whatever the options say.
    facade = facade_factory()
    try:
        facade.init()  # type: ignore[attr-defined]
    except NvmlUnavailable as exc:
        print(exc, file=sys.stderr)
        return 1
    problem = _options_error(args)
    if problem:
        facade.shutdown()  # type: ignore[attr-defined]
        print(f"fleetdeck-agent: {problem}", file=sys.stderr)
        return 1
    client = None
    try:
        client = AgentClient(args.server, _token(args), transport=transport)
        agent = Agent(facade, client, node=args.node or default_hostname(), hostname=default_hostname(),  # type: ignore[arg-type]
                      interval_s=args.interval)
        if args.burn_in or args.burn_in_cmd is not None:
            _burn_in_report(agent, args)
        else:
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
