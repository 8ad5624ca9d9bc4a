"""`manage.py replay` end to end on tiny files: no database, JSON lines out, chart without a CDN."""
from __future__ import annotations

import json
import re

import pytest
from django.core.management import CommandError, call_command

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,131072,2,T4\nn2,64000,262144,4,G2\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    "p1,4000,8192,1,500,,LS,Running,0,10,0\n"
    "p2,8000,16384,1,1000,T4,LS,Running,0,10,0\n"
    "p3,2000,4096,0,0,,BE,Running,0,10,0\n"
    "p4,16000,32768,4,1000,,LS,Running,0,10,0\n"
)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    return tmp_path


def _replay(files, *extra):
    out = files / "placements.jsonl"
    call_command("replay", "--nodes", str(files / "nodes.csv"), "--pods", str(files / "pods.csv"),
                 "--out", str(out), "--no-progress", *extra)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_it_writes_one_line_per_arrival_in_order(files, capsys):
    lines = _replay(files, "--policy", "fleetdeck", "--seed", "42")
    assert len(lines) > 4
    counts: dict[str, int] = {}
    for line in lines:
        name, _, k = line["pod"].rpartition("#")
        assert int(k) == counts.get(name, 0)  # copies numbered from 0 in arrival order
        counts[name] = int(k) + 1
        if "failed" in line:
            assert set(line) == {"pod", "failed"} and line["failed"]
        else:
            assert set(line) == {"pod", "node", "gpus"}
            assert all(set(g) == {"index", "milli"} and 0 < g["milli"] <= 1000 for g in line["gpus"])
    assert any(line.get("gpus") == [] for line in lines)  # the CPU-only pod
    assert "| fleetdeck | 1 |" in capsys.readouterr().out


def test_it_replays_a_given_arrival_sequence(files):
    (files / "arrivals.jsonl").write_text('{"pod": "p2#0", "gpu_milli": 1000}\n{"pod": "p1#0"}\n{"pod": "p2#1"}\n'
                                          '{"pod": "p2#2"}\n{"pod": "p2#3"}\n')
    lines = _replay(files, "--policy", "bestfit", "--arrivals", str(files / "arrivals.jsonl"))
    assert [line["pod"] for line in lines] == ["p2#0", "p1#0", "p2#1", "p2#2", "p2#3"]
    # bestfit puts the share next to the T4 pod, so the next T4 pod finds no whole T4 left
    assert [line.get("node") for line in lines[:2]] == ["n1", "n1"]
    assert lines[2] == {"pod": "p2#1", "failed": "no node with 1 free whole GPU(s)"}


def test_several_policies_and_seeds_are_tagged_and_charted(files):
    chart = files / "chart.html"
    lines = _replay(files, "--policy", "fgd", "--policy", "random", "--seed", "1", "--seed", "2",
                    "--plot", str(chart))
    assert {(line["policy"], line["seed"]) for line in lines} == {("fgd", 1), ("fgd", 2), ("random", 1),
                                                                 ("random", 2)}
    html = chart.read_text()
    assert "Plotly.newPlot" in html
    assert not re.search(r"<script[^>]+src=", html)  # plotly.js is inline: no CDN


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "bestfit", "--pods", "missing.csv"], "no such pod list"),
        (["--policy", "bestfit", "--arrival", "0"], "--arrival must be positive"),
        (["--policy", "bestfit", "--arrivals", "a.jsonl", "--seed", "1", "--seed", "2"], "at most one --seed"),
    ],
)
def test_bad_input_is_a_one_line_error(files, args, message):
    base = {"--nodes": str(files / "nodes.csv"), "--pods": str(files / "pods.csv"),
            "--out": str(files / "o.jsonl")}
    for i, a in enumerate(args):
        if a in base:
            base[a] = str(files / args[i + 1])
    argv = [x for kv in base.items() for x in kv] + [a for i, a in enumerate(args)
                                                     if a not in base and (i == 0 or args[i - 1] not in base)]
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("replay", *argv)
