"""Running Slurm's commands: sinfo, scontrol, sbatch, squeue and scancel.

Every call has a timeout (a hung slurmctld otherwise blocks sinfo and scontrol for minutes)
and failures come back as two kinds of exception, so callers can retry only what is worth
retrying: SlurmUnavailable (the controller did not answer: retry later) and
SlurmCommandFailed (Slurm answered "no": retrying will not help)."""
from __future__ import annotations

import logging
import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from django.conf import settings

from . import parsers

log = logging.getLogger(__name__)

# stderr fragments that mean "the controller could not be reached", not "the request is bad".
_TRANSIENT = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "zero bytes were transmitted",
    "slurm_receive_msg",
    "communication connection failure",
    "slurmctld is down",
    "resource temporarily unavailable",
)


class SlurmError(Exception):
    """A Slurm command did not do what was asked."""

    def __init__(self, message: str, *, command: Sequence[str] = (), returncode: int | None = None, stderr: str = ""):
        super().__init__(message)
        self.message = message
        self.command = list(command)
        self.returncode = returncode
        self.stderr = stderr


class SlurmUnavailable(SlurmError):
    """The controller did not answer in time (or the command is missing): worth retrying."""


class SlurmCommandFailed(SlurmError):
    """Slurm refused the request (bad node name, invalid state...): retrying will not help."""


@dataclass(frozen=True)
class SlurmCli:
    """The Slurm client commands, run with a timeout. `bin_dir` empty means use $PATH."""

    bin_dir: str = ""
    timeout: float = 10.0
    env: Mapping[str, str] = field(default_factory=dict)

    def _binary(self, name: str) -> str:
        return str(Path(self.bin_dir) / name) if self.bin_dir else name

    def run(self, command: str, *args: str, timeout: float | None = None) -> str:
        argv = [self._binary(command), *args]
        shown = shlex.join([command, *args])
        try:
            done = subprocess.run(  # noqa: S603 - argv list, no shell
                argv,
                capture_output=True,
                text=True,
                timeout=timeout or self.timeout,
                env={**os.environ, **self.env},
                check=False,
            )
        except FileNotFoundError as exc:
            raise SlurmUnavailable(f"{command}: not installed or not on PATH", command=argv) from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnavailable(
                f"`{shown}` did not finish within {timeout or self.timeout:g} s (slurmctld not answering?)",
                command=argv,
            ) from exc
        if done.returncode != 0:
            stderr = (done.stderr or done.stdout).strip()
            first = stderr.splitlines()[-1] if stderr else f"exit status {done.returncode}"
            kind = SlurmUnavailable if any(t in stderr.lower() for t in _TRANSIENT) else SlurmCommandFailed
            raise kind(f"`{shown}` failed: {first}", command=argv, returncode=done.returncode, stderr=stderr)
        return done.stdout

    # --- reading -----------------------------------------------------------------------------

    def ping(self) -> bool:
        try:
            return "is UP" in self.run("scontrol", "ping", timeout=min(self.timeout, 5.0))
        except SlurmError:
            return False

    def nodes(self) -> list[parsers.SlurmNode]:
        """Every node with its state, flags, reason and GRES, from `sinfo --json`.

        `scontrol -o show node` fills in what the JSON lacks: everything on a Slurm without
        `--json` (before 21.08, or without a data_parser plugin), the node addresses where the
        JSON groups nodes (23.02 and later)."""
        try:
            found = parsers.parse_sinfo_json(self.run("sinfo", "--json"))
        except (SlurmCommandFailed, parsers.SlurmParseError) as exc:
            log.info("sinfo --json unusable (%s); reading nodes with scontrol -o show node", exc)
            return self._scontrol_nodes()
        if all(node.address for node in found):
            return found
        shown = {node.name: node for node in self._scontrol_nodes()}
        return [
            replace(node, address=shown[node.name].address, hostname=shown[node.name].hostname)
            if not node.address and node.name in shown else node
            for node in found
        ]

    def _scontrol_nodes(self) -> list[parsers.SlurmNode]:
        return parsers.parse_scontrol_show_node(self.run("scontrol", "-o", "show", "node"))

    def node(self, name: str) -> parsers.SlurmNode:
        found = parsers.parse_scontrol_show_node(self.run("scontrol", "-o", "show", "node", name))
        if len(found) != 1:
            raise SlurmCommandFailed(f"scontrol show node {name}: expected one node, got {len(found)}")
        return found[0]

    def topology(self) -> parsers.SlurmTopology:
        """Switches of topology/tree; empty when the cluster has no tree topology."""
        try:
            return parsers.parse_topology(self.run("scontrol", "show", "topology"))
        except SlurmCommandFailed:
            return parsers.SlurmTopology(switches={})

    def cluster_name(self) -> str:
        for line in self.run("scontrol", "show", "config").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "ClusterName":
                return value.strip()
        return "slurm"

    def reasons(self) -> list[parsers.SinfoReason]:
        return parsers.parse_sinfo_reasons(self.run("sinfo", "-R"))

    def jobs(self, job_ids: Sequence[str] = ()) -> list[parsers.SlurmJob]:
        args = ["--json"]
        if job_ids:
            args += ["--jobs", ",".join(job_ids)]
        try:
            return parsers.parse_squeue_json(self.run("squeue", *args))
        except SlurmCommandFailed as exc:
            # squeue --jobs fails when every listed job has left the controller's memory.
            if "invalid job id" in exc.stderr.lower():
                return []
            raise

    # --- changing ----------------------------------------------------------------------------

    def node_drain(self, name: str, reason: str) -> None:
        # Slurm refuses DRAIN without a reason; argv passes spaces and quotes through unharmed.
        text = " ".join(reason.split()) or "cordoned in Fleetdeck"
        self.run("scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={text}")

    def node_resume(self, name: str) -> None:
        """Clear a drain. RESUME exits 1 ("Invalid node state specified") on a node that never
        registered or that is not drained, although the drain is gone: check the node instead."""
        try:
            self.run("scontrol", "update", f"NodeName={name}", "State=RESUME")
        except SlurmCommandFailed as exc:
            if "invalid node state" not in exc.stderr.lower():
                raise
            if self.node(name).state.drain:
                raise

    def sbatch(self, script: str, *args: str, env: Mapping[str, str] | None = None) -> str:
        """Submit a batch script; returns the job id. `env` is exported to the job only."""
        argv = ["--parsable", *args]
        if env:
            # --export takes a comma list, so values with commas go through the script instead.
            safe = {k: v for k, v in env.items() if "," not in v}
            argv.append("--export=" + ",".join(["ALL", *(f"{k}={v}" for k, v in sorted(safe.items()))]))
            script = _with_exports(script, {k: v for k, v in env.items() if k not in safe})
        path = _write_script(script)
        try:
            out = self.run("sbatch", *argv, str(path))
        finally:
            path.unlink(missing_ok=True)
        job_id = out.strip().split(";", 1)[0]
        if not job_id.replace("+", "").isdigit():
            raise SlurmCommandFailed(f"sbatch printed no job id: {out.strip()!r}")
        return job_id

    def scancel(self, job_ids: Sequence[str], *, signal: str | None = None) -> None:
        """Cancel the jobs, or only send them `signal`. A signal goes to the batch shell, then to
        every step's tasks: not with --full, which also hits each srun, and srun answers
        SIGTERM by killing its tasks instead of letting them checkpoint."""
        if not job_ids:
            return
        if not signal:
            self.run("scancel", *job_ids)
            return
        self.run("scancel", f"--signal={signal}", "--batch", *job_ids)
        self.run("scancel", f"--signal={signal}", *job_ids)


def _with_exports(script: str, extra: Mapping[str, str]) -> str:
    if not extra:
        return script
    lines = script.splitlines()
    head = lines[:1] if lines and lines[0].startswith("#!") else []
    body = lines[len(head) :]
    # After the #SBATCH block: sbatch stops reading directives at the first command.
    split = next((i for i, line in enumerate(body) if line.strip() and not line.startswith("#")), len(body))
    exports = [f"export {k}={shlex.quote(v)}" for k, v in sorted(extra.items())]
    return "\n".join(head + body[:split] + exports + body[split:]) + "\n"


def _write_script(script: str) -> Path:
    fd, name = tempfile.mkstemp(prefix="fleetdeck-", suffix=".sbatch")
    with os.fdopen(fd, "w") as handle:
        handle.write(script)
    return Path(name)


def get_cli() -> SlurmCli:
    """The client configured by settings.FLEETDECK (SLURM_BIN_DIR, SLURM_COMMAND_TIMEOUT, SLURM_CONF)."""

    conf = settings.FLEETDECK
    env = {"SLURM_CONF": conf["SLURM_CONF"]} if conf.get("SLURM_CONF") else {}
    return SlurmCli(
        bin_dir=conf.get("SLURM_BIN_DIR", ""), timeout=float(conf.get("SLURM_COMMAND_TIMEOUT", 10)), env=env
    )
