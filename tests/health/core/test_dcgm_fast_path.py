"""The fast DCGM parse reads every exposition exactly like prometheus_client reading it as written.

parse_exposition_reference is the oracle (the whole text through the parser unchanged); parse_exposition
must give the same readings, to the type of every value, on every captured dump and on generated payloads
full of the cases a fast reading has to get right, in both modes, and refuse broken text with the same
message."""
from __future__ import annotations

import random
from dataclasses import fields

import prometheus_client.parser
import pytest

from health.core.dcgm import FIELD_METRICS, parse_exposition, parse_exposition_reference

USED = sorted(FIELD_METRICS)
UNUSED = ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_PROF_DRAM_ACTIVE",
          "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
BLANKS = ["9223372036854775794", "9223372036854775792", "2147483632", "2147483634", "140737488355328",
          "1.40737488355331e+14", "NaN"]
HELP_TEXTS = ["doc", 'doc with "quotes" and \\ escapes', ""]
ODD_VALUES = ['pod \\"quoted\\"', "back\\\\slash", "line\\nbreak", "brace } inside", "open { brace", "a,b=c",
              "uni-ü-code", " spaced "]



def typed(readings: list) -> list:
    """Readings with each field's type beside its value (0 == 0.0, but an int field must hold an int)."""
    return [[(f.name, getattr(r, f.name), type(getattr(r, f.name))) for f in fields(r)] for r in readings]


def same_in_both_modes(text: str) -> None:
    for all_metrics in (True, False):
        expected = parse_exposition_reference(text, all_metrics=all_metrics)
        got = parse_exposition(text, all_metrics=all_metrics)
        assert got == expected, all_metrics
        assert typed(got) == typed(expected), all_metrics


def label_block(rng: random.Random, node: int, gpu: int, mig: int | None) -> str:
    labels = [("gpu", str(gpu)), ("UUID", f"GPU-{node:04x}-{gpu:04x}"), ("pci_bus_id", f"00000000:{gpu + 16:02X}:00.0"),
              ("device", f"nvidia{gpu}"), ("modelName", "NVIDIA H100 80GB HBM3"), ("Hostname", f"node-{node}")]
    if mig is not None:
        labels += [("GPU_I_PROFILE", "1g.10gb"), ("GPU_I_ID", str(mig))]
    if rng.random() < 0.5:
        labels += [("container", "main"), ("namespace", f"team-{rng.randint(0, 3)}"),
                   ("pod", rng.choice(ODD_VALUES) if rng.random() < 0.4 else f"pod-{rng.randint(0, 9)}")]
    if rng.random() < 0.2:
        labels.append(("vgpu", str(rng.randint(0, 3))))  # pods sharing a GPU: label sets vary in a family
    rng.shuffle(labels)
    if rng.random() < 0.1:  # UUID missing: keyed by index and hostname
        labels = [pair for pair in labels if pair[0] != "UUID"]
    return ",".join(f'{name}="{value}"' for name, value in labels)


def value(rng: random.Random, name: str) -> str:
    draw = rng.random()
    if draw < 0.12:
        return rng.choice(BLANKS)
    if draw < 0.2:
        return rng.choice(["0", "-1", "1e3", "+Inf", "79", "0.000000", "12345678901"])
    if name.endswith("HEALTH_STATUS"):
        return rng.choice(["0", "10", "20"])
    return f"{rng.uniform(0, 500):.6f}" if rng.random() < 0.5 else str(rng.randint(0, 90000))


def payload(seed: int) -> str:
    """One exposition mixing what the fast path must not get wrong."""
    rng = random.Random(seed)
    gpus = [(gpu, mig) for gpu in range(rng.randint(1, 4))
            for mig in ([None] if rng.random() < 0.7 else [rng.randint(1, 9), rng.randint(10, 14)])]
    blocks = {key: [label_block(rng, seed, *key) for _ in range(rng.randint(1, 2))] for key in gpus}
    families = rng.sample(USED + UNUSED, k=rng.randint(3, len(USED) + len(UNUSED)))
    lines = []
    for name in families:
        kind = "counter" if name.endswith("TOTAL") or "COUNTER" in name or "ENERGY" in name else "gauge"
        if rng.random() < 0.8:
            lines.append(f"# HELP {name} {rng.choice(HELP_TEXTS)}".rstrip())
            lines.append(f"# TYPE {name} {kind}")
        for key in gpus:
            if rng.random() < 0.15:
                continue  # a GPU missing from a family
            for block in blocks[key][: rng.randint(1, len(blocks[key]))]:
                extra = f',xid="{rng.choice([13, 79])}"' if name.startswith("DCGM_EXP_XID") else ""
                stamp = f" {rng.randint(1, 2**40)}" if rng.random() < 0.1 else ""
                lines.append(f"{name}{{{block}{extra}}} {value(rng, name)}{stamp}")
        if rng.random() < 0.1:
            lines.append(f"{name} {rng.randint(0, 9)}")  # no labels: never a GPU's
        if rng.random() < 0.1:
            lines.append("# a plain comment")
    text = "\n".join(lines) + "\n"
    if seed % 5 == 0:
        text = text.replace("\n", "\r\n")
    if seed % 7 == 0:
        text = "\n".join("  " + line if i % 3 == 0 else line for i, line in enumerate(text.split("\n")))
    return text


def rescrape(text: str, rng: random.Random) -> str:
    """The same exposition with new values (blanks, NaN, timestamps too) on every sample line."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        end = line.rfind("}")
        if end > 0 and not line.lstrip().startswith("#"):
            lines[i] = line[:end + 1] + " " + value(rng, "x")
    return "\n".join(lines)



FAMILIES = ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_MEM_CLOCK"]


def blocks(mps: bool) -> list[str]:
    """GPUs 0-3 of one node: 0 and 1 run pods (with `mps`, two pods share GPU 1), 2 holds two MIG
    instances, 3 is idle; GPU 3 reports no SM activity (utilisation stands in)."""
    out = []
    for gpu in range(4):
        base = f'gpu="{gpu}",UUID="GPU-{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"'
        if gpu == 2:
            out += [base + f',GPU_I_ID="{i}",GPU_I_PROFILE="1g.10gb"' for i in (1, 2)]
        elif gpu < 2:
            out.append(base + f',namespace="team",pod="job-{gpu}",container="main"')
            if mps and gpu == 1:
                out.append(base + ',namespace="team",pod="job-other",container="main"')
        else:
            out.append(base)
    return out


def steady(rng: random.Random, *, mps: bool = False) -> str:
    """A node's exposition as an exporter prints it every scrape: integers and %f floats."""
    lines = []
    for family in FAMILIES:
        lines += [f"# HELP {family} help.", f"# TYPE {family} gauge"]
        for block in blocks(mps):
            if family == "DCGM_FI_PROF_SM_ACTIVE" and 'gpu="3"' in block:
                continue
            if family == "DCGM_EXP_GPU_HEALTH_STATUS":
                text = rng.choice(["0", "10", "20"])
            elif family == "DCGM_EXP_XID_ERRORS_COUNT":
                text = str(rng.randint(0, 3))
            else:
                text = f"{rng.uniform(0, 500):.6f}" if rng.random() < 0.5 else str(rng.randint(0, 90000))
            lines.append(f"{family}{{{block}}} {text}")
    return "\n".join(lines) + "\n"


def test_prometheus_client_is_not_patched():
    assert prometheus_client.parser.parse_labels.__module__ == "prometheus_client.parser"
    assert not hasattr(prometheus_client.parser.parse_labels, "__wrapped__")


def test_every_captured_dump_reads_the_same(dcgm_dir):
    dumps = sorted(dcgm_dir.glob("*.prom"))
    assert len(dumps) == 5
    for path in dumps:
        text = path.read_text()
        same_in_both_modes(text)
        assert parse_exposition(text.encode()) == parse_exposition_reference(text), path.name


@pytest.mark.parametrize("seed", range(60))
def test_generated_payloads_and_their_rescrapes_read_the_same(seed):
    text = payload(seed)
    same_in_both_modes(text)
    rng = random.Random(seed)
    for _ in range(2):
        same_in_both_modes(rescrape(text, rng))


@pytest.mark.parametrize("mps", [False, True], ids=["one pod a GPU", "pods sharing a GPU"])
def test_steady_scrapes_of_a_node_read_the_same(mps):
    rng = random.Random(3)
    for _ in range(5):
        same_in_both_modes(steady(rng, mps=mps))


def test_a_steady_scrape_reads_mig_instances_pods_and_utilisation_for_missing_sm_activity():
    (gpu0, gpu1, mig1, mig2, idle) = parse_exposition(steady(random.Random(5)), all_metrics=False)
    assert (mig1.mig_instance_id, mig2.mig_profile, gpu1.pod, idle.pod) == (1, "1g.10gb", "job-1", None)
    assert idle.sm_active == idle.gpu_util / 100.0


def test_pods_sharing_a_gpu_sum_its_xid_count_series():
    text = steady(random.Random(4), mps=True)
    gpu1 = parse_exposition(text, all_metrics=False)[1]
    assert gpu1.pod == "job-1" and gpu1.xid_count == sum(
        int(line.rsplit(" ", 1)[1]) for line in text.split("\n")
        if line.startswith("DCGM_EXP_XID_ERRORS_COUNT{") and 'UUID="GPU-1"' in line)


def test_store_mode_keeps_only_the_named_fields_and_the_same_gpus(dcgm_dir):
    text = (dcgm_dir / "t4_driver460_datadog-integrations-core.prom").read_text()
    (full,) = parse_exposition(text)
    (lean,) = parse_exposition(text, all_metrics=False)
    assert set(lean.metrics) == {key for key in full.metrics if key.split("{")[0] in FIELD_METRICS}
    assert full.metrics["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 128996013
    assert (lean.uuid, lean.temperature_c, lean.power_w) == (full.uuid, full.temperature_c, full.power_w)
    # A GPU reported only through families Fleetdeck does not read still gets its (empty) reading.
    (readme,) = parse_exposition(
        (dcgm_dir / "readme_k8s_example_blank_sentinel_dcgm-exporter-README.prom").read_text(), all_metrics=False)
    assert readme.uuid and readme.metrics == {} and readme.temperature_c is None


CASES = {
    "escaped label values": 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",pod="a\\"}b\\\\",namespace="x\\ny"} 40\n'
                            'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",pod="a\\"}b\\\\",namespace="x\\ny"} 1\n',
    "brace inside a value": 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",pod="{x}"} 40\n',
    "first sample blank, pod only on a later row": (
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",pod="p1",namespace="n"} 9223372036854775794\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-2"} 50\n'
        'DCGM_FI_DEV_MEM_CLOCK{gpu="0",UUID="GPU-1",pod="p1",namespace="n"} 405\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\n'),
    "labels only in an unused family": (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\n'
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",Hostname="h",modelName="T4",pod="p"} 300\n'),
    "blank probes until a value that cannot be blank": (
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",pod="p"} 2147483632\n'
        'DCGM_FI_DEV_MEM_CLOCK{gpu="0",UUID="GPU-1",pod="p"} 1e9\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-2"} 30\n'),
    "quoted metric name": '{"DCGM_FI_DEV_GPU_TEMP", gpu="0", UUID="GPU-1"} 40\n',
    "counter renamed by its TYPE": (
        "# TYPE DCGM_FI_DEV_GPU_TEMP_total counter\n"
        'DCGM_FI_DEV_GPU_TEMP_total{gpu="0",UUID="GPU-1"} 40\n'),
    "same suffix interrupted by another family": (
        "# TYPE DCGM_FI_DEV_GPU_TEMP_total counter\n"
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1"} 1\n'
        'DCGM_FI_DEV_GPU_TEMP_total{gpu="0",UUID="GPU-1"} 40\n'),
    "timestamps and tabs": 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"}\t40\t1700000000000\n',
    "value glued to the brace": 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"}40\n',
    "spaces around the label block": 'DCGM_FI_DEV_GPU_TEMP {gpu="0",UUID="GPU-1"} 40\n',
    "summary and histogram suffixes": (
        "# TYPE DCGM_FI_DEV_GPU_TEMP summary\n"
        'DCGM_FI_DEV_GPU_TEMP_count{gpu="0",UUID="GPU-1"} 2\nDCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\n'
        "# TYPE DCGM_FI_DEV_POWER_USAGE histogram\n"
        'DCGM_FI_DEV_POWER_USAGE_bucket{gpu="0",UUID="GPU-1",le="+Inf"} 1\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-1"} 300\n'),
    "same labels written in another order": (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\nDCGM_FI_DEV_POWER_USAGE{UUID="GPU-1", gpu="0",} 300\n'),
    "MIG rows and their parent": (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-1",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7"} 0.5\n'
        'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",UUID="GPU-1",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7"} 2\n'),
    "sums and maxima": (
        'DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-1",xid="79"} 2\n'
        'DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-1",xid="48"} 1\n'
        'DCGM_EXP_GPU_HEALTH_STATUS{gpu="0",UUID="GPU-1",health_system="pcie"} 20\n'
        'DCGM_EXP_GPU_HEALTH_STATUS{gpu="0",UUID="GPU-1",health_system="memory"} 10\n'),
}


MORE_CASES = {
    "GPUs in another order in each family": (
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1"} 1\nDCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-2"} 1\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-2"} 41\nDCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-1"} 100.5\nDCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-2"} 200.5\n'),
    "a GPU missing from one family and a block only some rows carry": (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\nDCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-2"} 41\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-2"} 7\n'
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",pod="p",namespace="n"} 10\n'
        'DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-2"} 5\n'
        'DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-1"} 1\nDCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-2"} 2\n'),
    "a block that is a longer block's prefix": (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\nDCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",pod="a"} 41\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 3\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",pod="a"} 4\n'),
    "the same family twice with a comment between": (
        "# HELP DCGM_FI_DEV_GPU_TEMP t {with braces}\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\n# a comment\nDCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 45\n'
        '  DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-2"} 9 1700000000000\n'),
    "blocks without a GPU among GPUs": (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\nDCGM_FI_DEV_GPU_TEMP{job="x"} 3\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-2"} 41\nDCGM_FI_DEV_SM_CLOCK{job="x"} 2\n'),
    "sentinels, NaN, infinities, exponents and timestamps as kept values": "".join(
        f'DCGM_FI_DEV_{name}{{gpu="{i}",UUID="GPU-{i}"}} {value}\n'
        for i, value in enumerate(["9223372036854775794", "NaN", "+Inf", "-Inf", "1e3", "0.000000", "40 1700000000000",
                                   "2147483632", "1.40737488355331e+14", "-0", "\t12\t1700000000000"])
        for name in ("GPU_TEMP", "POWER_USAGE")),
    # Blocks the split reader of plain labels must take exactly as parse_labels does, or leave to it.
    "plain blocks with braces, commas and equals signs in values": (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",pod="a,b=c}d{"} 40\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-2",pod=""} 41\n'),
    "a trailing comma and spaces": (
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-2",} 41\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="4", UUID="GPU-5"} 43\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu ="5",UUID="GPU-6"} 44\n'),
}




@pytest.mark.parametrize("name", sorted(CASES | MORE_CASES))
def test_edge_cases_read_the_same(name):
    same_in_both_modes((CASES | MORE_CASES)[name])


BROKEN = [
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 30\nDCGM_FI_DEV_GPU_UTIL{gpu="0" 2\n',
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} hot\n',
    'DCGM_FI_DEV_GPU_TEMP{gpu=0} 1\n',
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",__name__="x"} 1\n',
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 1 {\n',
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"}\n',
    "# TYPE DCGM_FI_DEV_GPU_TEMP\n",
    "# TYPE DCGM_FI_DEV_GPU_TEMP sideways\nDCGM_FI_DEV_GPU_TEMP 1\n",
    'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1"} 1 2 3 x\n',
    "garbage {{{\n",
    'DCGM_FI_DEV_GPU_TEMP{gpu="0"}UUID="x"} 5\n',  # a "}" ends the block early
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1\\"} 1\n',  # an escaped quote leaves the value open
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",gpu="3"} 40\n',  # a label twice
    'DCGM_FI_DEV_GPU_TEMP{gpu="2",UUID="GPU-3",__x="y"} 42\n',  # a reserved name
]



@pytest.mark.parametrize("text", BROKEN)
def test_broken_text_is_refused_with_the_same_message(text):
    with pytest.raises(ValueError) as reference:
        parse_exposition_reference(text)
    with pytest.raises(ValueError) as fast:
        parse_exposition(text)
    assert str(fast.value) == str(reference.value)


@pytest.mark.parametrize("value", ["hot", "1 2 3 x", "", "1_000", "0x10"])
def test_a_kept_value_the_parser_refuses_is_refused_with_the_reference_message(value):
    text = f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-1"}} 40\nDCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-1"}} {value}\n'
    with pytest.raises(ValueError) as reference:
        parse_exposition_reference(text, all_metrics=False)
    with pytest.raises(ValueError) as fast:
        parse_exposition(text, all_metrics=False)
    assert str(fast.value) == str(reference.value) and "line 2" in str(fast.value)
    (gpu,) = parse_exposition(text.replace(f" {value}\n", " 300.5\n"), all_metrics=False)
    assert (gpu.temperature_c, gpu.power_w) == (40.0, 300.5)


def test_store_mode_does_not_read_lines_of_unused_families_once_their_gpu_is_known():
    text = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\n'
            'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1"} not-a-number\n')
    with pytest.raises(ValueError, match="line 2"):
        parse_exposition(text)
    (gpu,) = parse_exposition(text, all_metrics=False)
    assert gpu.temperature_c == 40.0
    # ... but a line it needs (the first of a GPU) is read and refused.
    with pytest.raises(ValueError, match="line 1"):
        parse_exposition('DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1"} x\nDCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 4\n',
                         all_metrics=False)
