"""The fast DCGM parse reads every exposition exactly like prometheus_client reading it as written.

parse_exposition_reference is the plain path (every line through the parser unchanged); the fast path
must give the same readings on every captured dump and on generated payloads full of the cases its
shortcuts have to get right, in both modes, without falling back to the reference path."""
from __future__ import annotations

import random

import prometheus_client.parser
import pytest

from health.core import dcgm
from health.core.dcgm import FIELD_METRICS, parse_exposition, parse_exposition_reference

USED = sorted(FIELD_METRICS)
UNUSED = ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_PROF_DRAM_ACTIVE",
          "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
BLANKS = ["9223372036854775794", "9223372036854775792", "2147483632", "2147483634", "140737488355328",
          "1.40737488355331e+14", "NaN"]
HELP_TEXTS = ["doc", 'doc with "quotes" and \\ escapes', ""]
ODD_VALUES = ['pod \\"quoted\\"', "back\\\\slash", "line\\nbreak", "brace } inside", "open { brace", "a,b=c",
              "uni-ü-code", " spaced "]


@pytest.fixture
def no_fallback(monkeypatch):
    """Fails the test if the fast path gives up on a text (the reference path would hide that)."""
    def refuse(text, keep):
        raise AssertionError("the fast path fell back to the reference path")

    monkeypatch.setattr(dcgm, "_parse_reference", refuse)


def same_in_both_modes(text: str) -> None:
    for all_metrics in (True, False):
        assert parse_exposition(text, all_metrics=all_metrics) == parse_exposition_reference(
            text, all_metrics=all_metrics), all_metrics


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


def test_prometheus_client_is_not_patched():
    assert prometheus_client.parser.parse_labels.__module__ == "prometheus_client.parser"
    assert not hasattr(prometheus_client.parser.parse_labels, "__wrapped__")


def test_every_captured_dump_reads_the_same_without_falling_back(dcgm_dir, monkeypatch):
    dumps = sorted(dcgm_dir.glob("*.prom"))
    assert len(dumps) == 5
    texts = [path.read_text() for path in dumps]
    expected = [[parse_exposition_reference(text, all_metrics=mode) for mode in (True, False)] for text in texts]
    monkeypatch.setattr(dcgm, "_parse_reference", lambda text, keep: pytest.fail("fell back"))
    for path, text, (full, lean) in zip(dumps, texts, expected, strict=True):
        assert parse_exposition(text) == full, path.name
        assert parse_exposition(text, all_metrics=False) == lean, path.name


@pytest.mark.parametrize("seed", range(60))
def test_generated_payloads_read_the_same(seed):
    text = payload(seed)
    dcgm.clear_caches()
    same_in_both_modes(text)
    same_in_both_modes(text)  # again with the label blocks cached


def test_generated_payloads_take_the_fast_path(no_fallback):
    for seed in range(60):
        parse_exposition(payload(seed))
        parse_exposition(payload(seed), all_metrics=False)


def test_store_mode_keeps_only_the_named_fields_and_the_same_gpus(dcgm_dir):
    text = (dcgm_dir / "t4_driver460_datadog-integrations-core.prom").read_text()
    (full,) = parse_exposition(text)
    (lean,) = parse_exposition(text, all_metrics=False)
    assert set(lean.metrics) == set(full.metrics) & FIELD_METRICS
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


@pytest.mark.parametrize("name", sorted(CASES))
def test_edge_cases_read_the_same(name):
    dcgm.clear_caches()
    same_in_both_modes(CASES[name])


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
]


@pytest.mark.parametrize("text", BROKEN)
def test_broken_text_is_refused_with_the_same_message(text):
    with pytest.raises(ValueError) as reference:
        parse_exposition_reference(text)
    with pytest.raises(ValueError) as fast:
        parse_exposition(text)
    assert str(fast.value) == str(reference.value)


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


# --- the lean path (store mode) and its value memo ---------------------------------------------------


@pytest.fixture
def lean_only(monkeypatch):
    """Fails the test if store mode leaves the lean path for the general fast path."""
    general = dcgm._parse_fast

    def refuse(text, keep):
        if keep is not None:
            raise AssertionError("store mode left the lean path")
        return general(text, keep)

    monkeypatch.setattr(dcgm, "_parse_fast", refuse)


def test_captured_dumps_take_the_lean_path(dcgm_dir, lean_only):
    for path in sorted(dcgm_dir.glob("*.prom")):
        text = path.read_text()
        dcgm.clear_caches()
        expected = parse_exposition_reference(text, all_metrics=False)
        assert parse_exposition(text, all_metrics=False) == expected, path.name
        assert parse_exposition(text, all_metrics=False) == expected, path.name  # values memoised


@pytest.mark.parametrize("seed", range(60))
def test_generated_payloads_leave_the_lean_path_only_for_blocks_it_cannot_cut(seed, monkeypatch):
    text = payload(seed)
    dcgm.clear_caches()
    left = []
    general = dcgm._parse_fast
    monkeypatch.setattr(dcgm, "_parse_fast", lambda text, keep: left.append(keep) or general(text, keep))
    assert parse_exposition(text, all_metrics=False) == parse_exposition_reference(text, all_metrics=False)
    # Escapes and a "}" inside a label value are the general path's (it gives such lines as written).
    samples = [line for line in text.split("\n") if not line.lstrip().startswith("#")]
    assert bool(left) == any("\\" in line or "} inside" in line for line in samples)


LEAN_CASES = {
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
}


@pytest.mark.parametrize("name", sorted(LEAN_CASES))
def test_lean_cases_read_the_same(name, lean_only):
    dcgm.clear_caches()
    expected = parse_exposition_reference(LEAN_CASES[name], all_metrics=False)
    assert parse_exposition(LEAN_CASES[name], all_metrics=False) == expected
    assert parse_exposition(LEAN_CASES[name], all_metrics=False) == expected  # from the value memo


VALUE_TEXTS = [" 40", " 0", " 0.000000", " 345.123000", " 9223372036854775794", " 2147483632", " NaN", " +Inf",
               " -Inf", " 1e3", " 40 1700000000000", "\t12\t1700000000000", "40", " -0", "  7  "]


def parser_value(text: str):
    (family,) = prometheus_client.parser.text_string_to_metric_families(f"DCGM_FI_DEV_GPU_TEMP{{gpu=\"0\"}}{text}\n")
    return family.samples[0].value


def same_value(a, b) -> bool:
    return type(a) is type(b) and (a == b or (a != a and b != b))


def test_the_value_memo_gives_what_prometheus_client_reads_and_parses_each_text_once(monkeypatch):
    dcgm.clear_caches()
    texts = VALUE_TEXTS + VALUE_TEXTS[:3]  # repeats in one call are parsed once
    first = dcgm._VALUES.values(list(texts))
    assert all(same_value(got, parser_value(text)) for got, text in zip(first, texts, strict=True))
    assert isinstance(first[0], int) and isinstance(first[2], float)  # as the parser returns them
    monkeypatch.setattr(dcgm, "_parse_values", lambda texts: pytest.fail(f"parsed again: {texts}"))
    again = dcgm._VALUES.values(list(texts))
    assert all(same_value(a, b) for a, b in zip(first, again, strict=True))


def test_the_value_memo_is_bounded_and_keeps_texts_in_use(monkeypatch):
    dcgm.clear_caches()
    monkeypatch.setattr(dcgm, "_VALUES_PER_GENERATION", 4)
    memo = dcgm._VALUES
    memo.values([" 1", " 2", " 3", " 4", " 5"])  # a full young generation becomes the old one
    assert memo.young == {} and len(memo.old) == 5
    memo.values([" 1", " 6"])  # " 1" is taken back from the old generation, " 6" parsed
    assert set(memo.young) == {" 1", " 6"}
    memo.values([" 7", " 8", " 9"])  # the young generation fills again: " 2" ... " 5" are forgotten
    assert set(memo.old) == {" 1", " 6", " 7", " 8", " 9"} and memo.young == {}


@pytest.mark.parametrize("value", ["hot", "1 2 3 x", "", "1_000", "0x10"])
def test_a_kept_value_the_parser_refuses_is_refused_with_the_reference_message_and_not_memoised(value):
    dcgm.clear_caches()
    text = f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-1"}} 40\nDCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-1"}} {value}\n'
    with pytest.raises(ValueError) as reference:
        parse_exposition_reference(text, all_metrics=False)
    with pytest.raises(ValueError) as lean:
        parse_exposition(text, all_metrics=False)
    assert str(lean.value) == str(reference.value) and "line 2" in str(lean.value)
    assert f" {value}" not in dcgm._VALUES.young
    (gpu,) = parse_exposition(text.replace(f" {value}\n", " 300.5\n"), all_metrics=False)
    assert (gpu.temperature_c, gpu.power_w) == (40.0, 300.5)


# --- shapes: the next scrape of an exporter is checked against the last one's lines ----------------


def rescrape(text: str, rng: random.Random) -> str:
    """The same exposition with new values (blanks, NaN, timestamps too) on every sample line."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        end = line.rfind("}")
        if end > 0 and not line.lstrip().startswith("#"):
            lines[i] = line[:end + 1] + " " + value(rng, "x")
    return "\n".join(lines)


def template_for(text: str):
    return dcgm._TEMPLATES.get(text[:text.find("}") + 1])


def plain_payload(seed: int) -> str:
    """The first generated payload from `seed` on without escapes or a "}" in a label value (those
    go to the general path, which keeps no shape)."""
    while True:
        text = payload(seed)
        samples = [line for line in text.split("\n") if not line.lstrip().startswith("#")]
        if not any("\\" in line or "} inside" in line for line in samples):
            return text
        seed += 1000


@pytest.mark.parametrize("seed", range(60))
def test_a_rescrape_of_the_same_shape_is_read_through_its_template_the_same(seed, lean_only):
    text = plain_payload(seed)
    dcgm.clear_caches()
    parse_exposition(text, all_metrics=False)
    rng = random.Random(seed)
    for _ in range(3):
        again = rescrape(text, rng)
        template = template_for(again)
        if template is None:  # a comment with a "}": no shape is kept for such text
            assert any("}" in line for line in text.split("\n") if line.lstrip().startswith("#"))
            return
        assert template.rests(again) is not None
        assert parse_exposition(again, all_metrics=False) == parse_exposition_reference(again, all_metrics=False)


SHAPE = ('# HELP DCGM_FI_DEV_SM_CLOCK SM clock.\n# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n'
         'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",pod="a"} 1980\nDCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-2"} 1980\n'
         '# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n'
         'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",pod="a"} 40\nDCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-2"} 41\n'
         '# TYPE DCGM_FI_DEV_MEM_CLOCK gauge\n'
         'DCGM_FI_DEV_MEM_CLOCK{gpu="0",UUID="GPU-1",pod="a"} 2619\nDCGM_FI_DEV_MEM_CLOCK{gpu="1",UUID="GPU-2"} 2619\n')
SAME_SHAPE = {"the first value of a GPU blank this time",  # the template then reads one line more
              "a value the parser refuses"}
NOT_THE_SHAPE = {
    "a \"}\" in the rest of a line the scan skips": SHAPE.replace("2619\nDCGM_FI_DEV_MEM_CLOCK",
                                                                 "2619 }\nDCGM_FI_DEV_MEM_CLOCK"),
    "a \"{\" in a comment": SHAPE.replace("SM clock.", "SM clock {MHz}."),
    "a new pod on a GPU": SHAPE.replace('gpu="1",UUID="GPU-2"} 41', 'gpu="1",UUID="GPU-2",pod="b"} 41'),
    "another family": SHAPE.replace("DCGM_FI_DEV_MEM_CLOCK{", "DCGM_FI_DEV_POWER_USAGE{"),
    "a line more": SHAPE + 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-3"} 7\n',
    "a line less": SHAPE.rsplit("DCGM_FI_DEV_MEM_CLOCK", 1)[0],
    "a blank line gains a sample": SHAPE + 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-3"} 7',
    "a label block that ends early": SHAPE.replace('GPU-2"} 41', 'GPU-2"} 41 x="y"}'),
    "the first value of a GPU blank this time": SHAPE.replace("} 1980\nDCGM_FI_DEV_SM_CLOCK",
                                                              "} NaN\nDCGM_FI_DEV_SM_CLOCK"),
    "a value the parser refuses": SHAPE.replace("} 41", "} hot"),
}


@pytest.mark.parametrize("name", sorted(NOT_THE_SHAPE))
def test_a_text_off_the_shape_reads_as_the_reference_reads_it(name):
    dcgm.clear_caches()
    parse_exposition(SHAPE, all_metrics=False)
    assert template_for(SHAPE) is not None
    text = NOT_THE_SHAPE[name]
    template = template_for(text)
    if name in SAME_SHAPE:
        assert template.rests(text) is not None
    else:
        assert template is None or template.rests(text) is None
    try:
        expected = parse_exposition_reference(text, all_metrics=False)
    except ValueError as refused:
        with pytest.raises(ValueError) as got:
            parse_exposition(text, all_metrics=False)
        assert str(got.value) == str(refused)
    else:
        assert parse_exposition(text, all_metrics=False) == expected
