"""Property tests: any text into the fleet importer gives a spec or a list of 'path: message'
errors (or a one-line FleetFileError when it cannot be read); nothing else escapes (issue 14 §4)."""
from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.importer import MAX_ERRORS, FleetFileError, FleetSpec, check_fleet, parse_fleet_text

from .inventory import fleet_doc

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

VALID = yaml.safe_dump(fleet_doc("n1", "n2", gpus=2), sort_keys=False)
PIECES = [
    "spines:\n", "racks:\n", "nodes:\n", "- name: n1\n", "  rack: r1\n", "  gpus:\n", "  gpus: []\n",
    "  - uuid: GPU-a\n", "    index: 0\n", "    index: -1\n", "    index: 99999999999999999999\n",
    "    product: NVIDIA H100 80GB HBM3\n", "    memory_mib: 81559\n", "    mig_enabled: true\n",
    "  labels: {a: b}\n", "  labels: [1]\n", "&a ", "*a", "!!python/object:os.system ", "!!binary aGk=\n",
    "? [1, 2]\n: 3\n", "{", "}", "[", "]", ":", "- ", "\t", "\x00", "\ud800", "2026-12-01\n", "~\n", "'", '"',
    "  cpu_cores: .inf\n", "  executor: slurm\n", "  exporter_url: http://x:9400/metrics\n",
]
fleet_text = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=40).map("".join),
    st.integers(min_value=0, max_value=len(VALID)).map(lambda cut: VALID[:cut]),
)


def _outcome(text: str, name: str):
    try:
        data = parse_fleet_text(text, name=name)
    except FleetFileError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(name)
        return None
    spec, errors = check_fleet(data)
    if spec is None:
        assert errors and all(isinstance(e, str) and e for e in errors)
        assert len(errors) <= MAX_ERRORS + 1
    else:
        assert isinstance(spec, FleetSpec) and errors == []
    return spec


@PROPERTY
@given(fleet_text, st.sampled_from(["fleet.yaml", "fleet.json", "fleet.txt"]))
def test_any_text_into_the_importer_gives_a_spec_or_clear_errors(text, name):
    _outcome(text, name)


@PROPERTY
@given(st.integers(min_value=0, max_value=len(VALID) - 1))
def test_a_file_cut_anywhere_never_yields_a_node_with_fewer_gpus_than_it_lists(cut):
    spec = _outcome(VALID[:cut], "fleet.yaml")
    if spec is not None:
        assert all(len(node.gpus) == 2 for node in spec.nodes)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=30,
)


@PROPERTY
@given(st.fixed_dictionaries({}, optional={"spines": json_values, "racks": json_values, "nodes": json_values}))
def test_any_json_document_gives_a_spec_or_clear_errors(doc):
    _outcome(json.dumps(doc), "fleet.json")


@pytest.mark.parametrize("mutation", ["gpus", "uuid", "index", "memory_mib"])
def test_each_required_field_missing_is_one_named_error(mutation):
    doc = fleet_doc("n1", gpus=1)
    del doc["nodes"][0]["gpu_count"]
    target = doc["nodes"][0] if mutation == "gpus" else doc["nodes"][0]["gpus"][0]
    del target[mutation]
    spec, errors = check_fleet(doc)
    assert spec is None and len(errors) == 1 and mutation in errors[0]
