"""Validating and importing fleet files: every error reported with its path, nothing changed on
error, idempotent re-import, and updates that touch only what changed."""
from __future__ import annotations

import copy
import json

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from core.models import AuditEvent
from fleet.choices import NodeState
from fleet.importer import FleetFileError, parse_fleet_text, validate_fleet
from fleet.models import Gpu, GpuFlavor, Node, Rack, Spine
from scheduling.models import Allocation, PodSet, PriorityClass, Queue, Team, Workload

from .inventory import EXAMPLE, example_doc, fleet_doc, gpu, import_doc


def db_state() -> list:
    """Everything an import may change, as comparable values."""
    return [
        list(Spine.objects.values_list("name")),
        list(Rack.objects.values_list("name", "spine__name")),
        list(GpuFlavor.objects.values_list("name", "product", "memory_mib")),
        list(Node.objects.values()),
        list(Gpu.objects.order_by("uuid").values()),
        AuditEvent.objects.count(),
    ]


# --- pure validation -------------------------------------------------------------------------


def test_the_example_file_is_valid():
    assert validate_fleet(example_doc()) == []


def test_it_reports_a_wrong_gpu_count_with_the_node_path():
    doc = fleet_doc("n1", "n2", "n3", "n4")
    doc["nodes"][3]["gpus"].pop()
    assert validate_fleet(doc) == ["nodes[3].gpus: expected 8 entries, got 7"]


def test_it_reports_an_unknown_rack():
    doc = fleet_doc("n1")
    doc["nodes"][0]["rack"] = "r9"
    assert validate_fleet(doc) == ["nodes[0].rack: unknown rack 'r9'"]


def test_a_rack_known_elsewhere_is_accepted():
    doc = fleet_doc("n1")
    doc["racks"], doc["spines"] = [], []
    doc["nodes"][0]["rack"] = "r7"
    assert validate_fleet(doc, known_racks={"r7"}) == []


def test_it_lists_every_problem_at_once():
    doc = fleet_doc("n1", "n2", gpus=2)
    doc["colour"] = "blue"
    doc["spines"].append({"name": "s1"})
    doc["racks"][1]["spine"] = "s9"
    doc["nodes"][1]["name"] = "n1"
    doc["nodes"][0]["executor"] = "nomad"
    doc["nodes"][0]["cpu_cores"] = "many"
    doc["nodes"][0]["gpus"][1]["uuid"] = doc["nodes"][0]["gpus"][0]["uuid"]
    doc["nodes"][1]["gpus"][1]["index"] = 0
    doc["nodes"][1]["gpus"][0]["sharing_mode"] = "shared"
    doc["nodes"][1]["gpus"][0]["wattage"] = 700
    errors = validate_fleet(doc)
    assert errors == [
        "colour: unknown top-level key (allowed: nodes, racks, spines)",
        "spines[1].name: duplicate spine name 's1' (also spines[0].name)",
        "racks[1].spine: unknown spine 's9'",
        "nodes[0].executor: 'nomad' is not one of simulated, slurm, kubernetes",
        "nodes[0].cpu_cores: expected an integer, got str",
        "nodes[0].gpus[1].uuid: duplicate GPU uuid 'GPU-n1-0000' (also nodes[0].gpus[0].uuid)",
        "nodes[1].gpus[0].wattage: unknown key (allowed: index, memory_mib, mig_enabled, mig_instances, "
        "numa_node, nvlink_group, pci_bus_id, product, sharing_mode, sharing_replicas, uuid)",
        "nodes[1].gpus[0].sharing_mode: 'shared' is not one of exclusive, time_slicing, mps",
        "nodes[1].gpus[1].index: duplicate GPU index 0 (also nodes[1].gpus[0].index)",
        "nodes[1].name: duplicate node name 'n1' (also nodes[0].name)",
    ]


def test_it_refuses_mixed_flavors_in_one_node():
    doc = fleet_doc("n1", gpus=2)
    doc["nodes"][0]["gpus"][1].update(product="NVIDIA A100-SXM4-80GB", memory_mib=81920)
    assert validate_fleet(doc) == [
        "nodes[0].gpus: mixed flavors in one node: A100-SXM-80GB (index 1); H100-SXM-80GB (index 0)"
    ]


@pytest.mark.parametrize(
    ("change", "want"),
    [
        ({"pci_bus_id": "18:00"}, "nodes[0].gpus[0].pci_bus_id: '18:00' is not a valid PCI bus id (0000:18:00.0)"),
        ({"uuid": "abc"}, "nodes[0].gpus[0].uuid: 'abc' is not a valid GPU UUID (GPU-…)"),
        ({"memory_mib": 0}, "nodes[0].gpus[0].memory_mib: 0 is out of range (must be at least 1)"),
        ({"product": None}, "nodes[0].gpus[0].product: required"),
        ({"mig_enabled": "yes"}, "nodes[0].gpus[0].mig_enabled: expected true or false, got str"),
        ({"sharing_replicas": 4}, "nodes[0].gpus[0].sharing_replicas: an exclusive GPU has exactly one replica"),
        ({"mig_instances": [{"profile": "1g.10gb", "gi_id": 7}]},
         "nodes[0].gpus[0].mig_instances: MIG instances need mig_enabled: true"),
        ({"mig_enabled": True, "mig_instances": [{"profile": "big", "gi_id": 1}]},
         "nodes[0].gpus[0].mig_instances[0].profile: 'big' is not a valid MIG profile (e.g. 1g.10gb)"),
        ({"mig_enabled": True, "mig_instances": [{"profile": "1g.10gb", "gi_id": 7},
                                                 {"profile": "1g.10gb", "gi_id": 7}]},
         "nodes[0].gpus[0].mig_instances[1].gi_id: duplicate GPU instance id 7 "
         "(also nodes[0].gpus[0].mig_instances[0].gi_id)"),
    ],
    ids=["pci", "uuid", "memory", "product", "bool", "replicas", "mig-off", "mig-profile", "mig-gi"],
)
def test_it_reports_bad_gpu_values_with_their_path(change, want):
    doc = fleet_doc("n1", gpus=1)
    doc["nodes"][0]["gpus"][0].update(change)
    if change.get("product", "x") is None:
        del doc["nodes"][0]["gpus"][0]["product"]
    assert validate_fleet(doc) == [want]


def test_it_refuses_mig_on_a_part_without_mig():
    doc = fleet_doc("n1", gpus=1, product=("NVIDIA L40S", 46068))
    doc["nodes"][0]["gpus"][0]["mig_enabled"] = True
    assert validate_fleet(doc) == ["nodes[0].gpus[0].mig_enabled: NVIDIA L40S does not support MIG"]


@pytest.mark.parametrize("doc", [None, [], "nodes"], ids=["empty", "list", "string"])
def test_a_document_that_is_not_a_mapping_is_one_error(doc):
    assert len(validate_fleet(doc)) == 1


def test_it_reads_json_and_yaml_by_extension_or_content():
    doc = fleet_doc("n1", gpus=1)
    assert parse_fleet_text(json.dumps(doc), name="fleet.json") == doc
    assert parse_fleet_text(yaml.safe_dump(doc), name="fleet.yml") == doc
    assert parse_fleet_text(json.dumps(doc), name="fleet.txt") == doc
    with pytest.raises(FleetFileError, match=r"fleet.json: invalid JSON"):
        parse_fleet_text('{"nodes": [', name="fleet.json")
    with pytest.raises(FleetFileError, match=r"fleet.yaml: invalid YAML"):
        parse_fleet_text("nodes: [a, b", name="fleet.yaml")


# --- the command -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_importing_the_example_creates_the_fleet(capsys):
    call_command("import_fleet", str(EXAMPLE))
    out = capsys.readouterr().out
    assert "19 created, 0 updated, 0 unchanged, 0 removed" in out
    assert "gpus: 10 created" in out
    assert list(Node.objects.values_list("name", "rack__name", "flavor__name", "pool")) == [
        ("gpu-a01", "r1", "H100-SXM-80GB", "h100"),
        ("gpu-b01", "r2", "A100-SXM-80GB", "a100"),
        ("gpu-c01", "r2", "L40S-48GB", "l40s"),
    ]
    mig = Gpu.objects.get(node__name="gpu-b01", index=0)
    assert mig.mig_enabled and [m["profile"] for m in mig.mig_instances] == ["3g.40gb", "3g.40gb"]
    sliced = Gpu.objects.get(node__name="gpu-c01", index=1)
    assert (sliced.sharing_mode, sliced.sharing_replicas, sliced.nvlink_group) == ("time_slicing", 4, 1)
    assert AuditEvent.objects.filter(verb="node.create", actor="automation:import_fleet").count() == 3
    assert AuditEvent.objects.filter(verb="gpu.create").count() == 10


@pytest.mark.django_db
def test_importing_the_same_file_twice_changes_nothing(capsys):
    call_command("import_fleet", str(EXAMPLE))
    before = db_state()
    capsys.readouterr()
    call_command("import_fleet", str(EXAMPLE))
    assert "0 created, 0 updated, 19 unchanged, 0 removed" in capsys.readouterr().out
    assert db_state() == before


@pytest.mark.django_db
def test_an_invalid_file_lists_every_error_exits_non_zero_and_changes_nothing(tmp_path, capsys):
    call_command("import_fleet", str(EXAMPLE))
    before = db_state()
    doc = example_doc()
    doc["nodes"][0]["hostname"] = "changed.example"  # a valid change that must not be applied either
    doc["nodes"][1]["rack"] = "r9"
    doc["nodes"][2]["gpus"].pop()
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    with pytest.raises(CommandError, match=r"2 error\(s\); nothing was imported"):
        call_command("import_fleet", str(path))
    assert capsys.readouterr().err.splitlines() == [
        "nodes[1].rack: unknown rack 'r9'",
        "nodes[2].gpus: expected 2 entries, got 1",
    ]
    assert db_state() == before


@pytest.mark.django_db
def test_an_unreadable_file_is_a_one_line_error(tmp_path):
    with pytest.raises(CommandError, match=r"cannot read"):
        call_command("import_fleet", str(tmp_path / "missing.yaml"))
    bad = tmp_path / "fleet.json"
    bad.write_text("{")
    with pytest.raises(CommandError, match=r"invalid JSON"):
        call_command("import_fleet", str(bad))


@pytest.mark.django_db
def test_a_dry_run_reports_but_saves_nothing(capsys):
    call_command("import_fleet", str(EXAMPLE), "--dry-run")
    assert "Dry run of" in capsys.readouterr().out
    assert not Node.objects.exists() and not AuditEvent.objects.exists()


# --- the service: updates ----------------------------------------------------------------------


@pytest.mark.django_db
def test_changing_one_value_updates_and_audits_only_that_value():
    doc = fleet_doc("n1", "n2")
    import_doc(doc)
    doc["nodes"][1]["hostname"] = "n2.example"
    doc["nodes"][1]["gpus"][3]["numa_node"] = 1
    result = import_doc(doc)
    assert (result.created, result.updated, result.removed) == (0, 2, 0)
    node_event = AuditEvent.objects.get(verb="node.update")
    assert (node_event.target_repr, node_event.before, node_event.after) == (
        "n2", {"hostname": ""}, {"hostname": "n2.example"})
    gpu_event = AuditEvent.objects.get(verb="gpu.update")
    assert (gpu_event.before, gpu_event.after) == ({"numa_node": 0}, {"numa_node": 1})


@pytest.mark.django_db
def test_an_import_leaves_runtime_state_alone():
    doc = fleet_doc("n1")
    import_doc(doc)
    Node.objects.filter(name="n1").update(state=NodeState.CORDONED, cordon_reason="Xid 79")
    Gpu.objects.filter(index=3).update(health="unhealthy")
    doc["nodes"][0]["cpu_cores"] = 224
    import_doc(doc)
    node = Node.objects.get(name="n1")
    assert (node.state, node.cordon_reason, node.cpu_cores) == (NodeState.CORDONED, "Xid 79", 224)
    assert Gpu.objects.get(index=3).health == "unhealthy"


@pytest.mark.django_db
def test_swapping_two_gpus_indices_is_applied():
    doc = fleet_doc("n1", gpus=2)
    import_doc(doc)
    gpus = doc["nodes"][0]["gpus"]
    gpus[0]["index"], gpus[1]["index"] = 1, 0
    result = import_doc(doc)
    assert result.by_kind["gpus"].updated == 2
    assert dict(Gpu.objects.values_list("uuid", "index")) == {"GPU-n1-0000": 1, "GPU-n1-0001": 0}
    assert sorted(e.after["index"] for e in AuditEvent.objects.filter(verb="gpu.update")) == [0, 1]


@pytest.mark.django_db
def test_a_gpu_moved_to_another_node_keeps_its_index_and_uuid():
    doc = fleet_doc("n1", "n2", gpus=2)
    import_doc(doc)
    moved = doc["nodes"][0]["gpus"].pop(1)
    doc["nodes"][0]["gpu_count"] = 1
    doc["nodes"][1]["gpus"][1] = moved
    import_doc(doc)
    assert Gpu.objects.get(uuid=moved["uuid"]).node.name == "n2"
    assert not Gpu.objects.filter(uuid="GPU-n2-0001").exists()


@pytest.mark.django_db
def test_a_gpu_missing_from_the_file_is_removed_and_audited():
    doc = fleet_doc("n1", gpus=2)
    import_doc(doc)
    doc["nodes"][0]["gpus"].pop()
    doc["nodes"][0]["gpu_count"] = 1
    result = import_doc(doc)
    assert result.by_kind["gpus"].removed == 1
    assert list(Gpu.objects.values_list("uuid", flat=True)) == ["GPU-n1-0000"]
    assert AuditEvent.objects.get(verb="gpu.remove").before["uuid"] == "GPU-n1-0001"


@pytest.mark.django_db
def test_a_gpu_with_allocation_records_is_never_removed():
    doc = fleet_doc("n1", gpus=2)
    import_doc(doc)
    team = Team.objects.create(name="t")
    workload = Workload.objects.create(
        name="w", team=team, queue=Queue.objects.create(name="q", team=team),
        priority_class=PriorityClass.objects.create(name="p", value=1),
    )
    pod_set = PodSet.objects.create(workload=workload, name="main", replicas=1)
    Allocation.objects.create(workload=workload, pod_set=pod_set, replica=0, gpu=Gpu.objects.get(index=1))
    before = db_state()
    doc["nodes"][0]["gpus"].pop()
    doc["nodes"][0]["gpu_count"] = 1
    doc["nodes"][0]["hostname"] = "changed"
    with pytest.raises(ValidationError) as exc:
        import_doc(doc)
    assert exc.value.messages == [
        "nodes[0].gpus: GPU GPU-n1-0001 (index 1) is missing from the file but has allocation records, "
        "so it cannot be removed"
    ]
    assert db_state() == before


@pytest.mark.django_db
def test_a_second_file_can_add_nodes_to_existing_racks():
    import_doc(fleet_doc("n1"))
    more = {"nodes": [{"name": "n9", "rack": "r2", "gpus": [gpu("n9", 0)]}]}
    result = import_doc(more)
    assert result.by_kind["nodes"].created == 1
    assert Node.objects.get(name="n9").rack.spine.name == "s1"
    assert Node.objects.count() == 2


@pytest.mark.django_db
def test_the_service_validates_too():
    doc = copy.deepcopy(fleet_doc("n1"))
    doc["nodes"][0]["rack"] = "nowhere"
    with pytest.raises(ValidationError) as exc:
        import_doc(doc)
    assert exc.value.messages == ["nodes[0].rack: unknown rack 'nowhere'"]
    assert not Node.objects.exists()


# --- hostile and careless files (issue 14 §2) --------------------------------------------------


@pytest.mark.django_db
def test_a_truncated_file_imports_nothing(tmp_path, capsys):
    """Cut off after a node's `gpus:` key, the file used to import that node with no GPUs."""
    text = yaml.safe_dump(fleet_doc("n1", "n2", gpus=2), sort_keys=False)
    cut = text[: text.rindex("gpus:") + len("gpus:")] + "\n"
    path = tmp_path / "cut.yaml"
    path.write_text(cut)
    with pytest.raises(CommandError, match=r"2 error\(s\); nothing was imported"):
        call_command("import_fleet", str(path))
    assert capsys.readouterr().err.splitlines() == [
        "nodes[1].gpus: required (a list; `gpus: []` for a node without GPUs)",
        "nodes[1].gpus: expected 2 entries, got 0",
    ]
    assert not Node.objects.exists()


def test_a_node_without_gpus_says_so_explicitly():
    doc = fleet_doc("n1", gpus=0)
    del doc["nodes"][0]["gpu_count"]
    assert validate_fleet(doc) == []
    del doc["nodes"][0]["gpus"]
    assert validate_fleet(doc) == ["nodes[0].gpus: required (a list; `gpus: []` for a node without GPUs)"]


ALIAS_BOMB = "\n".join(
    ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    + ["nodes: [*i]"]
)


@pytest.mark.django_db
def test_a_yaml_alias_bomb_is_refused_in_one_line(tmp_path, capsys):
    assert len(ALIAS_BOMB) < 800  # 9**9 = 387 million strings once expanded
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    with pytest.raises(CommandError, match=r"invalid YAML: .*anchors \(&a\) are not allowed"):
        call_command("import_fleet", str(path))
    assert capsys.readouterr().err == ""


def test_aliases_are_refused_even_when_small():
    with pytest.raises(FleetFileError, match=r"aliases \(\*r\) are not allowed"):
        parse_fleet_text("racks: [{name: r1}]\nnodes: [{rack: *r}]", name="f.yaml")


def test_a_deeply_nested_file_is_a_clear_error():
    with pytest.raises(FleetFileError, match="nested too deeply"):
        parse_fleet_text("[" * 100_000 + "]" * 100_000, name="deep.json")


@pytest.mark.django_db
def test_errors_are_capped_at_fifty_and_counted(tmp_path, capsys):
    doc = fleet_doc(*[f"n{i}" for i in range(120)], gpus=1)
    for node in doc["nodes"]:
        node["rack"] = "r9"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CommandError, match=r"120 error\(s\); nothing was imported"):
        call_command("import_fleet", str(path))
    lines = capsys.readouterr().err.splitlines()
    assert lines[:2] == ["nodes[0].rack: unknown rack 'r9'", "nodes[1].rack: unknown rack 'r9'"]
    assert lines[50:] == ["… and 70 more error(s)"]


@pytest.mark.django_db
def test_nul_characters_are_refused_before_the_database_sees_them():
    doc = fleet_doc("n1", gpus=1)
    doc["nodes"][0]["hostname"] = "n1\x00"
    doc["nodes"][0]["labels"] = {"zone": "a\x00"}
    assert validate_fleet(doc) == [
        "nodes[0].hostname: contains a NUL character",
        "nodes[0].labels.'zone': contains a NUL character",
    ]


@pytest.mark.django_db
def test_gpus_swapped_between_nodes_in_different_batches_keep_their_rows(monkeypatch):
    import fleet.services.imports as imports

    monkeypatch.setattr(imports, "BATCH", 4)  # two nodes of 2 GPUs per reconcile batch at most
    doc = fleet_doc("n1", "n2", "n3", "n4", gpus=2)
    import_doc(doc)
    ids = dict(Gpu.objects.values_list("uuid", "pk"))
    first, last = doc["nodes"][0]["gpus"][1], doc["nodes"][3]["gpus"][1]
    doc["nodes"][0]["gpus"][1], doc["nodes"][3]["gpus"][1] = last, first
    import_doc(doc)
    assert Gpu.objects.get(uuid=first["uuid"]).node.name == "n4"
    assert Gpu.objects.get(uuid=last["uuid"]).node.name == "n1"
    assert dict(Gpu.objects.values_list("uuid", "pk")) == ids
    assert not AuditEvent.objects.filter(verb="gpu.remove").exists()


@pytest.mark.slow
@pytest.mark.django_db
def test_a_fleet_larger_than_sqlites_variable_limit_imports():
    """4,200 nodes of 8 GPUs: 33,600 UUIDs, past SQLite's 32,766 bound parameters per query."""
    doc = fleet_doc(*[f"n{i:04d}" for i in range(4200)], gpus=8)
    result = import_doc(doc)
    assert result.by_kind["nodes"].created == 4200
    assert Gpu.objects.count() == 33_600
    assert import_doc(doc).changed is False
