"""The Slurm parsers over every stored real sample, plus edge cases crafted from Slurm's formats."""
from __future__ import annotations

import json

import pytest

from integrations.slurm import parsers as p

SAMPLES = "telemetry/slurm"


def sample(shared_dir, name: str) -> str:
    return (shared_dir / SAMPLES / name).read_text()


def test_every_stored_sample_file_is_covered_by_a_test_here(shared_dir):
    names = {path.name for path in (shared_dir / SAMPLES).glob("*.txt")}
    assert names == set(COVERED), "a new sample needs a parser test"


# --- scontrol show node ---------------------------------------------------------------------


def test_it_reads_both_8_gpu_nodes_of_a_24_11_multi_line_dump(shared_dir):
    nodes = p.parse_scontrol_show_node(sample(shared_dir, COVERED[2]))
    assert [n.name for n in nodes] == ["worker-1", "worker-0"]
    worker = nodes[0]
    assert worker.state == p.SlurmNodeState("IDLE", frozenset({"DYNAMIC_NORM"}))
    assert (worker.gpus.count, worker.gpus.type) == (8, "nvidia_h100_80gb_hbm3")
    assert worker.gpus_used == 0
    assert worker.partitions == ("main", "background")
    assert worker.reason is None
    assert worker.cpus == 128 and worker.real_memory_mib == 1570840
    # Values with spaces stay whole; trailing spaces and whitespace-only lines are dropped.
    assert worker.fields["BootTime"] == "2026-01-14 13:48:23.UTC"
    assert worker.fields["OS"] == "Linux 5.15.0-164-generic #174-Ubuntu SMP Fri Nov 14 20:25:16 UTC 2025"
    assert worker.fields["InstanceId"] == "computeinstance-e00rcsvhgse853pyd2"
    assert worker.fields["CoresPerSocket"] == "32"
    assert p.parse_slurm_time(worker.fields["BootTime"]).isoformat() == "2026-01-14T13:48:23+00:00"


def test_it_reads_a_mixed_node_whose_tres_lists_typed_and_untyped_gpus_once(shared_dir):
    (node,) = p.parse_scontrol_show_node(sample(shared_dir, COVERED[1]))
    assert node.name == "n23g0002"
    assert node.state.base == "MIXED" and node.state.busy and not node.state.drain
    assert (node.gpus.count, node.gpus.type) == (4, "hopper")
    assert node.gpus_used == 4  # AllocTRES gres/gpu=4,gres/gpu:hopper=4 is 4, not 8
    assert node.fields["CfgTRES"] == "cpu=96,mem=499800M,billing=96,gres/gpu=4,gres/gpu:hopper=4"


def test_it_reads_a_down_drained_not_responding_node_and_its_admin_reason(shared_dir):
    (node,) = p.parse_scontrol_show_node(sample(shared_dir, COVERED[0]))
    assert node.state == p.SlurmNodeState("DOWN", frozenset({"DRAIN", "NOT_RESPONDING"}))
    assert node.state.drained and node.state.down and not node.state.responding
    assert node.reason == p.Reason("gets too hot", user="mw445520", at="2024-12-03T17:06:40")
    assert node.gpus.count == 4 and node.gpus_used == 0
    assert node.fields["BootTime"] == "None"
    assert p.parse_slurm_time("None") is None


def test_it_cuts_reasons_with_equals_signs_and_a_following_comment_out_of_one_line_records(shared_dir):
    text = sample(shared_dir, COVERED[3])
    lines = [line.strip().removeprefix("... ").removesuffix(" ...") for line in text.splitlines()]
    # The author's fragments, joined back into two plausible -o lines.
    first = f"{lines[0]} State=IDLE+DRAIN {lines[1]} {lines[2]}"
    second = f"{lines[0].replace('n23g0007', 'n23g0008')} State=DOWN+DRAIN {lines[1]} {lines[3]}"
    nodes = p.parse_scontrol_show_node(first + "\n" + second + "\n")
    assert nodes[0].reason == p.Reason("Not responding", "slurmadm", "2024-12-05T16:14:59")
    assert nodes[0].comment == "BadPerformance. Testing."
    assert nodes[0].fields["CPUAlloc"] == "0"  # after a double space
    assert nodes[1].reason == p.Reason(
        "Ueberhitzung! CPU: 42 <= 92_CPULIMIT GPU: 83 > 82_GPULIMIT; NEC-Ticket #4942", "root", "2025-11-05T12:26:23"
    )
    assert nodes[1].gpus.count == 4  # from CfgTRES: the fragments have no Gres=
    assert p.parse_fields(lines[4]) == {"Comment": "RMA; NEC-Ticket #3615"}


def test_it_reads_reason_lines_with_and_without_a_user_stamp(shared_dir):
    lines = sample(shared_dir, COVERED[4]).splitlines()
    reasons = [p.parse_reason_value(line.strip().removeprefix("Reason=")) for line in lines]
    assert reasons[0] == p.Reason("gres/gpu count reported lower than configured (0 < 8)")
    assert reasons[1] == p.Reason(
        "gres/gpu GRES core specification 12-15 doesn't match socket boundaries. (Socket 0 is cores 0-16)",
        "slurm",
        "2025-04-25T10:52:59",
    )
    assert reasons[2] == p.Reason("Kill task failed", "root", "2025-02-21T18:19:11")
    (node,) = p.parse_scontrol_show_node(f"NodeName=g1 State=IDLE+DRAIN+INVALID_REG Gres=gpu:8\n{lines[1]}\n")
    assert node.reason == reasons[1]
    assert node.state.drained and "INVALID_REG" in node.state.flags


@pytest.mark.parametrize(
    "reason",
    [
        "xid 79 Comment=fake; GPU<3> #7",
        "say \"hi\" it's = ok",
        "a=b c=d",
    ],
)
def test_a_reason_that_itself_looks_like_fields_survives_the_one_line_form(reason):
    line = f"NodeName=n3 Gres=gpu:8 State=IDLE+DRAIN Partitions=gpu  Reason={reason} [root@2026-11-29T11:54:21]   "
    (node,) = p.parse_scontrol_show_node(line)
    assert node.reason == p.Reason(reason, "root", "2026-11-29T11:54:21")
    assert node.partitions == ("gpu",)
    multi = (
        f"NodeName=n3 Arch=x86_64\n   Gres=gpu:8\n   State=IDLE+DRAIN \n"
        f"   Reason={reason} [root@2026-11-29T11:54:21] \n"
    )
    assert p.parse_scontrol_show_node(multi)[0].reason == node.reason


def test_a_record_without_state_is_an_error_not_a_guess():
    with pytest.raises(p.SlurmParseError, match="n9: no State"):
        p.parse_scontrol_show_node("NodeName=n9 Gres=gpu:8\n")


# --- GRES and states ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gres", "count", "gpu_type"),
    [
        ("gpu:8", 8, None),
        ("gpu:hopper:4(S:0-7)", 4, "hopper"),
        ("gpu:nvidia_h100_80gb_hbm3:8(S:0-1)", 8, "nvidia_h100_80gb_hbm3"),
        ("gpu:nvidiah100pcie:6,mps:nvidiah100pcie:600", 6, "nvidiah100pcie"),
        ("gpu:A100_80GB:8(S:0-1),shard:A100_80GB:640(S:0-1)", 8, "A100_80GB"),
        ("gpu:(null):4(IDX:0-3)", 4, None),
        ("gpu:titanx:0(IDX:N/A)", 0, "titanx"),
        ("gpu:4,gpu:hopper:4", 4, "hopper"),  # the same devices typed and untyped: counted once
        ("gpu:a100:2,gpu:v100:2(S:0)", 4, "a100"),
        ("tmpsize:7T,gpu:l40s:4(S:0-1)", 4, "l40s"),
        ("shard:640", 0, None),
        ("(null)", 0, None),
        ("", 0, None),
    ],
)
def test_gres_strings_count_gpus_once_and_never_count_shards(gres, count, gpu_type):
    parsed = p.parse_gpu_gres(gres)
    assert (parsed.count, parsed.type) == (count, gpu_type)


def test_used_gres_reports_the_indexes_in_use():
    assert p.parse_gpu_gres("gpu:(null):4(IDX:0-1,5,7)").indexes == (0, 1, 5, 7)


def test_a_malformed_gres_count_is_an_error():
    with pytest.raises(p.SlurmParseError, match="bad GRES count"):
        p.parse_gpu_gres("gpu:h100:eight:x")


@pytest.mark.parametrize(
    ("text", "base", "flags", "drained", "draining", "down"),
    [
        ("IDLE", "IDLE", set(), False, False, False),
        ("MIXED+DRAIN", "MIXED", {"DRAIN"}, False, True, False),
        ("ALLOCATED+DRAIN", "ALLOCATED", {"DRAIN"}, False, True, False),
        ("IDLE+DRAIN", "IDLE", {"DRAIN"}, True, False, False),
        ("IDLE+DRAIN+INVALID_REG", "IDLE", {"DRAIN", "INVALID_REG"}, True, False, False),
        ("DOWN+NOT_RESPONDING", "DOWN", {"NOT_RESPONDING"}, False, False, True),
        ("DOWN*+DRAIN", "DOWN", {"DRAIN", "NOT_RESPONDING"}, True, False, True),
        ("IDLE+COMPLETING+DRAIN", "IDLE", {"COMPLETING", "DRAIN"}, False, True, False),
        ("drng@", "ALLOCATED", {"DRAIN", "REBOOT_REQUESTED"}, False, True, False),
        ("drain", "IDLE", {"DRAIN"}, True, False, False),
        ("drained", "IDLE", {"DRAIN"}, True, False, False),
        ("down*", "DOWN", {"NOT_RESPONDING"}, False, False, True),
        ("down$", "DOWN", {"MAINTENANCE"}, False, False, True),
        ("fail*", "DOWN", {"FAIL", "NOT_RESPONDING"}, False, False, True),
        ("maint", "IDLE", {"MAINTENANCE"}, False, False, False),
        ("mix", "MIXED", set(), False, False, False),
        ("idle*", "IDLE", {"NOT_RESPONDING"}, False, False, True),
        ("idle~", "IDLE", {"POWERED_DOWN"}, False, False, False),
        ("inval", "IDLE", {"INVALID_REG"}, False, False, False),
    ],
)
def test_node_states_and_flags(text, base, flags, drained, draining, down):
    state = p.parse_node_state(text)
    assert (state.base, set(state.flags)) == (base, flags)
    assert (state.drained, state.draining, state.down) == (drained, draining, down)


# --- sinfo ----------------------------------------------------------------------------------


def test_a_json_node_with_drain_in_state_flags_is_drained(shared_dir):
    fragment = sample(shared_dir, COVERED[5]).strip().rstrip(",")
    doc = json.loads('{"nodes": [{"name": "gpu01", "gres": "gpu:8", ' + fragment + "}]}")
    (node,) = p.parse_sinfo_json(json.dumps(doc))
    assert node.state.base == "IDLE" and node.state.drained


SINFO_V0038 = {
    "meta": {"plugin": {"type": "openapi/v0.0.38"}, "Slurm": {"release": "22.05.8"}},
    "errors": [],
    "nodes": [
        {
            "name": "n3", "state": "idle", "state_flags": ["DRAIN"], "gres": "gpu:8", "gres_used": "gpu:0",
            "reason": "xid 79 Comment=x; a<b #1", "reason_set_by_user": "root", "reason_changed_at": 1795953261,
            "partitions": ["gpu"], "address": "127.0.0.1", "hostname": "localhost", "cpus": 16, "real_memory": 64000,
        },
        {
            "name": "n8", "state": "down", "state_flags": ["NOT_RESPONDING"], "gres": "gpu:8",
            "gres_used": "gpu:(null):2(IDX:0-1)", "reason": "Not responding", "reason_set_by_user": "slurm",
            "reason_changed_at": 0, "partitions": ["gpu"],
        },
    ],
}

SINFO_V0040 = {
    "sinfo": [
        {
            "node": {"state": ["MIXED", "DRAIN"]},
            "nodes": {"nodes": ["gpu[01-02]"], "total": 2},
            "gres": {"total": "tmpsize:7T,gpu:l40s:4(S:0-1)", "used": "gpu:l40s:1(IDX:0),tmpsize:10737418240"},
            "partition": {"name": "gpu"},
            "cpus": {"maximum": 256},
            "memory": {"maximum": 1547680},
            "reason": {"description": "nvlink <errors>", "user": "root", "time": {"set": True, "number": 1755290346}},
        },
        {
            "node": {"state": ["MIXED", "DRAIN"]},
            "nodes": {"nodes": ["gpu01"]},
            "gres": {"total": "gpu:l40s:4(S:0-1)", "used": "gpu:l40s:1(IDX:0)"},
            "partition": {"name": "debug"},
            "reason": {"description": "nvlink <errors>", "user": "root", "time": {"set": True, "number": 1755290346}},
        },
    ],
    "errors": [],
}


def test_sinfo_json_v0_0_38_from_22_05():
    nodes = {n.name: n for n in p.parse_sinfo_json(json.dumps(SINFO_V0038))}
    assert nodes["n3"].state.drained
    assert nodes["n3"].reason == p.Reason("xid 79 Comment=x; a<b #1", "root", "1795953261")
    assert nodes["n8"].state.down and nodes["n8"].gpus_used == 2
    assert nodes["n8"].reason == p.Reason("Not responding", "slurm", None)
    assert nodes["n3"].cpus == 16 and nodes["n3"].real_memory_mib == 64000


def test_sinfo_json_v0_0_40_groups_expand_to_nodes_listed_once_with_all_partitions():
    nodes = p.parse_sinfo_json(json.dumps(SINFO_V0040))
    assert [n.name for n in nodes] == ["gpu01", "gpu02"]
    assert nodes[0].partitions == ("gpu", "debug")
    assert nodes[0].state.draining and nodes[0].gpus.count == 4 and nodes[0].gpus_used == 1
    assert nodes[0].reason == p.Reason("nvlink <errors>", "root", "1755290346")
    assert p.parse_slurm_time(1755290346).year == 2025


def test_sinfo_json_errors_are_reported():
    with pytest.raises(p.SlurmParseError, match="not JSON"):
        p.parse_sinfo_json("slurm_load_node error")
    with pytest.raises(p.SlurmParseError, match="neither"):
        p.parse_sinfo_json('{"meta": {}}')


def test_the_default_sinfo_table_of_two_partitions(shared_dir):
    rows = p.parse_sinfo_table(sample(shared_dir, COVERED[7]))
    assert [(r["PARTITION"], r["STATE"]) for r in rows] == [("main*", "idle"), ("background", "idle")]
    assert p.expand_hostlist(rows[0]["NODELIST"]) == ["worker-0", "worker-1"]
    assert p.parse_node_state(rows[0]["STATE"]) == p.SlurmNodeState("IDLE")


def test_a_custom_sinfo_table_with_shards_counts_8_gpus_per_node(shared_dir):
    rows = p.parse_sinfo_table(sample(shared_dir, COVERED[6]))
    assert len(rows) == 4
    by_node = {r["NODELIST"]: p.parse_gpu_gres(r["GRES"]) for r in rows}
    assert {n: (g.count, g.type) for n, g in by_node.items()} == {
        "ana": (8, "A100_80GB"),
        "axa": (8, "A100"),
        "ixh": (8, "H100"),
    }
    assert all(p.parse_gpu_gres(r["GRES_USED"]).count == 0 for r in rows)
    assert rows[0]["CPUS(A/I/O/T)"] == "0/112/0/112"


SINFO_R = """REASON               USER      TIMESTAMP           NODELIST
xid 79 Comment=x; a< root      2026-11-29T11:54:21 n3
Not responding       slurm     2026-11-29T11:55:48 n[7-8]
gpu hot              root      Unknown             n5
"""


def test_sinfo_r_rows_with_truncated_reasons():
    rows = p.parse_sinfo_reasons(SINFO_R)
    assert rows[0] == p.SinfoReason(("n3",), "xid 79 Comment=x; a<", "root", "2026-11-29T11:54:21", truncated=True)
    assert rows[1].nodes == ("n7", "n8") and not rows[1].truncated
    assert rows[2].text == "gpu hot" and rows[2].at == "Unknown"
    assert p.reason_matches("xid 79 Comment=x; a<b #1", rows[0].text)
    assert not p.reason_matches("xid 79 Comment=y", rows[0].text)


def test_sinfo_r_rejects_other_output():
    with pytest.raises(p.SlurmParseError, match="not sinfo -R"):
        p.parse_sinfo_reasons("PARTITION AVAIL\n")


# --- topology, config, host lists, squeue ----------------------------------------------------

TOPOLOGY = """SwitchName=r1 Level=0 LinkSpeed=1 Nodes=n[1-4]
SwitchName=r2 Level=0 LinkSpeed=1 Nodes=n[5-8]
SwitchName=spine Level=1 LinkSpeed=1 Nodes=n[1-8] Switches=r[1-2]
"""


def test_topology_gives_each_node_its_leaf_switch_and_each_leaf_its_spine():
    topo = p.parse_topology(TOPOLOGY)
    assert topo.leaf_of("n3").name == "r1" and topo.leaf_of("n5").name == "r2"
    assert topo.parent_of("r2").name == "spine" and topo.parent_of("spine") is None
    assert topo.leaf_of("n9") is None
    assert p.parse_topology("").switches == {}


def test_slurm_conf_node_lines_and_gres_conf(shared_dir):
    text = sample(shared_dir, COVERED[8])
    lines = p.parse_conf_lines(text, "NodeName")
    gpu_nodes = [line for line in lines if p.parse_gpu_gres(line.get("Gres")).count == 8]
    assert len(p.expand_hostlist(gpu_nodes[0]["NodeName"])) == 33
    assert p.expand_hostlist(gpu_nodes[0]["NodeName"])[:2] == ["a001", "a002"]
    assert p.expand_hostlist(lines[1]["NodeName"]) == ["c001", "c002", "c003", "c004"]
    gres_conf = [line for line in lines if "File" in line]
    assert p.expand_hostlist(gres_conf[0]["File"]) == [f"/dev/nvidia{i}" for i in range(8)]
    assert "login-node" not in text.split("#")[0]  # the commented-out line is skipped
    assert all("login-node" not in line["NodeName"] for line in lines)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("n[1-3,5]", ["n1", "n2", "n3", "n5"]),
        ("a0[08-10]", ["a008", "a009", "a010"]),
        ("n1,m[1-2]", ["n1", "m1", "m2"]),
        ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
        ("", []),
    ],
)
def test_host_lists(text, names):
    assert p.expand_hostlist(text) == names


def test_a_backwards_host_range_is_an_error():
    with pytest.raises(p.SlurmParseError, match="bad host range"):
        p.expand_hostlist("n[5-1]")


def test_squeue_json_in_both_generations():
    old = {"jobs": [{"job_id": 17, "name": "fleetdeck-w3-r0", "job_state": "RUNNING", "nodes": "n[1-2]",
                     "het_job_id": 17, "comment": "", "state_reason": "None"}]}
    new = {"jobs": [{"job_id": 525, "name": "x", "job_state": ["PENDING"], "nodes": "",
                     "het_job_id": {"set": True, "number": 0}, "exit_code": {"return_code": {"number": 0}}}]}
    (a,) = p.parse_squeue_json(json.dumps(old))
    (b,) = p.parse_squeue_json(json.dumps(new))
    assert (a.job_id, a.state, a.nodes, a.het_job_id) == ("17", "RUNNING", ("n1", "n2"), "17")
    assert (b.job_id, b.state, b.nodes, b.het_job_id, b.exit_code) == ("525", "PENDING", (), "", 0)


COVERED = [
    "scontrol-show-node_rwth-claix23_h100x4-hopper_down-drain-not-responding_gets-too-hot.txt",
    "scontrol-show-node_rwth-claix23_h100x4-hopper_mixed.txt",
    "scontrol-show-nodes_soperator_h100x8_idle-dynamic-norm_2nodes.txt",
    "scontrol-o-fragments_rwth-claix23_reason-with-equals-and-comment.txt",
    "reason-lines_gpu-drain.txt",
    "node-json-fragment_state-flags-drain_ubccr-slurm-exporter-11.txt",
    "sinfo-custom-format_frida_a100-h100-x8_gres-shard.txt",
    "sinfo_soperator_h100x8_2nodes_idle.txt",
    "config_llm-jp-sakura_h100x8_slurm-conf-nodes_and_gres-conf.txt",
]


# --- sinfo tables without a header, and --Node --long (issue 14 §3) ----------------------------

NO_HEADER = (
    "main*         up   infinite      2   idle worker-[0-1]\n"
    "background    up   infinite      2   idle worker-[0-1]\n"
)


def test_sinfo_without_a_header_is_refused_rather_than_losing_its_first_row():
    with pytest.raises(p.SlurmParseError, match=r"no header row \(sinfo -h\?\)"):
        p.parse_sinfo_table(NO_HEADER)
    with pytest.raises(p.SlurmParseError, match="no header row"):
        p.parse_sinfo_table(NO_HEADER.splitlines()[0])


def test_sinfo_without_a_header_is_read_with_the_format_it_was_asked_for():
    rows = p.parse_sinfo_table(NO_HEADER, fmt=p.SINFO_DEFAULT_FORMAT)
    assert [(r["PARTITION"], r["NODES"], r["STATE"], r["NODELIST"]) for r in rows] == [
        ("main*", "2", "idle", "worker-[0-1]"), ("background", "2", "idle", "worker-[0-1]"),
    ]
    fragment = "ana    gpu:A100_80GB:8(S:0-1)   mixed\naxa    gpu:A100:8(S:0-1)   drain*\n"
    rows = p.parse_sinfo_table(fragment, fmt="%10N %50G %.6t")
    assert [(r["NODELIST"], p.parse_gpu_gres(r["GRES"]).count, r["STATE"]) for r in rows] == [
        ("ana", 8, "mixed"), ("axa", 8, "drain*"),
    ]


def test_a_row_that_does_not_fit_the_format_is_an_error_not_a_lost_row():
    with pytest.raises(p.SlurmParseError, match=r"row 3 has 5 columns, header 6"):
        p.parse_sinfo_table(NO_HEADER + "gpu up infinite 1 idle\n", fmt=p.SINFO_DEFAULT_FORMAT)
    with pytest.raises(p.SlurmParseError, match=r"unsupported sinfo format '%P %Q'"):
        p.sinfo_columns("%P %Q")


SINFO_NODE_LONG = """Tue Dec  1 20:20:41 2026
NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON
gpu01          1      gpu*        idle   64   2:16:2 515000        0      1   (null) none
gpu02          1      gpu*     drained   64   2:16:2 515000        0      1   (null) gets too hot
gpu03          1      gpu*       mixed   64   2:16:2 515000        0      1   (null) none
"""


def test_sinfo_node_long_with_its_time_line_parses_with_free_text_reasons():
    rows = p.parse_sinfo_table(SINFO_NODE_LONG)
    assert [(r["NODELIST"], r["STATE"], r["REASON"]) for r in rows] == [
        ("gpu01", "idle", "none"), ("gpu02", "drained", "gets too hot"), ("gpu03", "mixed", "none"),
    ]
    assert p.parse_node_state(rows[1]["STATE"]).drained
    headerless = "\n".join(SINFO_NODE_LONG.splitlines()[2:])
    assert p.parse_sinfo_table(headerless, fmt=p.SINFO_NODE_LONG_FORMAT)[1]["REASON"] == "gets too hot"


def test_a_header_alone_is_an_empty_table():
    assert p.parse_sinfo_table("PARTITION AVAIL TIMELIMIT NODES STATE NODELIST\n") == []
