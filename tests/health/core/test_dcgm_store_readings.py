"""parse_for_store and a shape's plan give what the reference path gives, to the type of every value.

A steady scrape of a known shape is read by its plan (which line's value lands in which field was worked
out once); anything else (a blank or NaN kept value, a first value that might be blank, a summed family
with several lines for a GPU, another shape) goes through the general reading and must agree as well."""
from __future__ import annotations

import random

import pytest

from health.core import dcgm
from health.core.dcgm import StoreReading, parse_exposition, parse_exposition_reference, parse_for_store

from .test_dcgm_fast_path import payload, plain_payload, rescrape

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


def steady(rng: random.Random, *, mps: bool = False, value=None) -> str:
    """An exposition whose every value surely is not blank (integers and %f floats)."""
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
            lines.append(f"{family}{{{block}}} {value(family) if value else text}")
    return "\n".join(lines) + "\n"


def as_store(readings: list[dcgm.GpuReading]) -> list[StoreReading]:
    return [StoreReading.of(r) for r in readings]


def same(got: list, expected: list) -> None:
    """Equal, and every value of the same type (0 == 0.0, but an int field must hold an int)."""
    assert got == expected
    assert [[type(v) for v in row] for row in got] == [[type(v) for v in row] for row in expected]


def check(text: str) -> None:
    expected = parse_exposition_reference(text, all_metrics=False)
    same(as_store(parse_exposition(text, all_metrics=False)), as_store(expected))
    assert parse_exposition(text, all_metrics=False) == expected
    same(parse_for_store(text), as_store(expected))


def test_a_steady_rescrape_is_read_by_the_plan_like_the_reference(monkeypatch):
    rng = random.Random(3)
    dcgm.clear_caches()
    check(steady(rng))  # learns the shape
    monkeypatch.setattr(dcgm, "_build", lambda *args: pytest.fail("read without the plan"))
    for _ in range(5):
        text = steady(rng)
        expected = parse_exposition_reference(text, all_metrics=False)
        got = parse_exposition(text, all_metrics=False)
        assert got == expected
        same(as_store(got), as_store(expected))
        same(parse_for_store(text), as_store(expected))
        same(parse_for_store(text.encode()), as_store(expected))


def test_pods_sharing_a_gpu_read_the_same_without_a_plan(monkeypatch):
    """Both pods' lines report the summed and maxed families: the plan, which places one value a field,
    is not made, and the general reading combines them (parse_for_store reads the shape's value texts
    once: it does not go round through parse_exposition)."""
    rng = random.Random(4)
    dcgm.clear_caches()
    check(steady(rng, mps=True))
    text = steady(rng, mps=True)
    assert dcgm._TEMPLATES[text[:text.find("}") + 1]].plan is None
    check(text)
    expected = as_store(parse_exposition_reference(text, all_metrics=False))
    monkeypatch.setattr(dcgm, "parse_exposition", lambda *args, **kwargs: pytest.fail("read twice"))
    same(parse_for_store(text), expected)
    monkeypatch.undo()
    gpu1 = parse_for_store(text)[1]
    assert gpu1.pod == "job-1" and gpu1.xid_count == sum(
        int(line.rsplit(" ", 1)[1]) for line in text.split("\n")
        if line.startswith("DCGM_EXP_XID_ERRORS_COUNT{") and 'UUID="GPU-1"' in line)


def test_the_plan_reads_what_it_learned_from_the_first_scrape_values_aside():
    rng = random.Random(5)
    dcgm.clear_caches()
    parse_exposition(steady(rng), all_metrics=False)
    text = steady(rng)
    template = dcgm._TEMPLATES[text[:text.find("}") + 1]]
    assert template.plan is not None and template.plan.values(template.rests(text)) is not None
    (gpu0, gpu1, mig1, mig2, idle) = parse_for_store(text)
    assert (mig1.mig_instance_id, mig2.mig_profile, gpu1.pod, idle.pod) == (1, "1g.10gb", "job-1", None)
    assert idle.sm_active == idle.gpu_util / 100.0


NOT_BY_PLAN = {
    "a blank kept value": lambda family: "9223372036854775794" if family == "DCGM_FI_DEV_GPU_TEMP" else "7",
    "a NaN kept value": lambda family: "NaN" if family == "DCGM_FI_DEV_POWER_USAGE" else "7",
    "a first value that might be blank": lambda family: "1e3" if family == "DCGM_FI_DEV_SM_CLOCK" else "7",
    "a blank first value": lambda family: "2147483632" if family == "DCGM_FI_DEV_SM_CLOCK" else "7",
    "an infinite kept value": lambda family: "+Inf" if family == "DCGM_FI_DEV_FB_USED" else "7",
    "a negative infinite kept value": lambda family: "-Inf" if family == "DCGM_FI_DEV_FB_USED" else "7",
}


@pytest.mark.parametrize("name", sorted(NOT_BY_PLAN))
def test_values_the_plan_does_not_hold_for_read_like_the_reference(name):
    rng = random.Random(11)
    dcgm.clear_caches()
    parse_exposition(steady(rng), all_metrics=False)
    text = steady(rng, value=NOT_BY_PLAN[name])
    template = dcgm._TEMPLATES[text[:text.find("}") + 1]]
    assert template.rests(text) is not None  # the same shape
    if name != "a negative infinite kept value":  # -Inf is no blank: the plan reads it
        assert template.plan.values(template.rests(text)) is None
    check(text)


def test_a_refused_kept_value_is_refused_by_parse_for_store_with_the_reference_message():
    rng = random.Random(13)
    dcgm.clear_caches()
    parse_exposition(steady(rng), all_metrics=False)
    text = steady(rng, value=lambda family: "hot" if family == "DCGM_FI_DEV_GPU_TEMP" else "7")
    with pytest.raises(ValueError) as refused:
        parse_exposition_reference(text, all_metrics=False)
    with pytest.raises(ValueError) as got:
        parse_for_store(text)
    assert str(got.value) == str(refused.value)


def test_several_lines_of_a_summed_family_for_one_gpu_make_no_plan_and_read_the_same():
    rng = random.Random(17)
    text = steady(rng)
    extra = ('DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-0",modelName="NVIDIA H100 80GB HBM3",Hostname="n1",'
             'xid="%s"} %d\n')
    text += "".join(extra % (xid, count) for xid, count in (("13", 2), ("79", 1)))
    dcgm.clear_caches()
    check(text)
    template = dcgm._TEMPLATES[text[:text.find("}") + 1]]
    assert template.plan is None
    again = text.replace("} 2\n", "} 5\n")
    check(again)
    assert parse_for_store(again)[0].xid_count - parse_for_store(text)[0].xid_count == 3


@pytest.mark.parametrize("seed", range(40))
def test_generated_payloads_and_their_rescrapes_read_the_same(seed):
    dcgm.clear_caches()
    check(payload(seed))
    text = plain_payload(seed)
    check(text)
    rng = random.Random(seed)
    for _ in range(3):
        check(rescrape(text, rng))


def test_captured_dumps_read_the_same_first_and_again(dcgm_dir):
    for path in sorted(dcgm_dir.glob("*.prom")):
        text = path.read_text()
        dcgm.clear_caches()
        check(text)
        check(text)  # through its shape
