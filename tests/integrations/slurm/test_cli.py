"""SlurmCli against fake Slurm commands on a fake PATH: which command answers what."""
from __future__ import annotations

import json
import textwrap

import pytest

from integrations.slurm.cli import SlurmCli, SlurmCommandFailed, SlurmUnavailable

SCONTROL_O = (
    "NodeName=gpu01 Arch=x86_64 CPUTot=256 Gres=gpu:l40s:4(S:0-1) NodeAddr=10.1.0.1 NodeHostName=gpu01 "
    "RealMemory=1547680 State=MIXED+DRAIN Partitions=gpu Reason=nvlink <errors> [root@2025-08-15T20:39:06]\n"
    "NodeName=gpu02 Arch=x86_64 CPUTot=256 Gres=gpu:l40s:4(S:0-1) NodeAddr=10.1.0.2 NodeHostName=gpu02 "
    "RealMemory=1547680 State=MIXED+DRAIN Partitions=gpu Reason=nvlink <errors> [root@2025-08-15T20:39:06]\n"
)


@pytest.fixture
def fake(tmp_path):
    """Write fake commands: fake("sinfo", "shell body"). Calls are logged to tmp_path/calls."""

    def write(command: str, body: str) -> None:
        script = tmp_path / command
        script.write_text(f"#!/bin/bash\necho \"{command} $*\" >> {tmp_path}/calls\n{textwrap.dedent(body)}")
        script.chmod(0o755)

    write.cli = SlurmCli(bin_dir=str(tmp_path), timeout=5)
    write.calls = lambda: (tmp_path / "calls").read_text().splitlines()
    def output(name: str, text: str) -> str:
        (tmp_path / name).write_text(text)
        return f"cat {tmp_path / name}"

    write.out = output
    return write


def test_nodes_come_from_sinfo_json_when_it_has_every_field(fake):
    doc = {"nodes": [{"name": "n3", "state": "idle", "state_flags": ["DRAIN"], "gres": "gpu:8",
                      "reason": "xid 79 Comment=x; a<b #1", "reason_set_by_user": "root", "address": "10.0.0.3",
                      "hostname": "n3", "partitions": ["gpu"], "cpus": 16, "real_memory": 64000}]}
    fake("sinfo", fake.out("sinfo.json", json.dumps(doc)))
    fake("scontrol", "exit 1")

    (node,) = fake.cli.nodes()

    assert (node.name, node.address, node.gpus.count, node.state.drained) == ("n3", "10.0.0.3", 8, True)
    assert (node.reason.text, node.reason.user) == ("xid 79 Comment=x; a<b #1", "root")
    assert fake.calls() == ["sinfo --json"]


def test_grouped_sinfo_json_gets_the_node_addresses_from_scontrol(fake):
    doc = {"sinfo": [{"node": {"state": ["MIXED", "DRAIN"]}, "nodes": {"nodes": ["gpu[01-02]"]},
                      "gres": {"total": "gpu:l40s:4(S:0-1)", "used": "gpu:l40s:1(IDX:0)"},
                      "partition": {"name": "gpu"}, "reason": {"description": "nvlink <errors>", "user": "root"}}]}
    fake("sinfo", fake.out("sinfo.json", json.dumps(doc)))
    fake("scontrol", fake.out("scontrol.txt", SCONTROL_O))

    nodes = fake.cli.nodes()

    assert [(n.name, n.address, n.hostname, n.gpus_used) for n in nodes] == [
        ("gpu01", "10.1.0.1", "gpu01", 1), ("gpu02", "10.1.0.2", "gpu02", 1)]
    assert fake.calls() == ["sinfo --json", "scontrol -o show node"]


def test_a_slurm_without_sinfo_json_is_read_with_scontrol(fake):
    fake("sinfo", "echo \"sinfo: unrecognized option '--json'\" >&2; exit 1")
    fake("scontrol", fake.out("scontrol.txt", SCONTROL_O))

    nodes = fake.cli.nodes()

    assert [n.name for n in nodes] == ["gpu01", "gpu02"]
    assert nodes[0].reason.text == "nvlink <errors>" and nodes[0].state.draining


def test_an_unreachable_controller_is_not_papered_over_with_scontrol(fake):
    fake("sinfo", 'echo "slurm_load_node error: Unable to contact slurm controller (connect failure)" >&2; exit 1')
    fake("scontrol", fake.out("scontrol.txt", SCONTROL_O))

    with pytest.raises(SlurmUnavailable, match="Unable to contact slurm controller"):
        fake.cli.nodes()
    assert fake.calls() == ["sinfo --json"]


def test_sbatch_without_a_job_id_is_a_failure(fake):
    fake("sbatch", "echo 'sbatch: queued somewhere'")
    with pytest.raises(SlurmCommandFailed, match="no job id"):
        fake.cli.sbatch("#!/bin/bash\ntrue\n")
