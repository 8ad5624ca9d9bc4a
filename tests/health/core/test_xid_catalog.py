"""The catalog table agrees with ../shared/telemetry/xid/xid_catalog.md, row by row."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from health.core.xid_catalog import (
    CATALOG,
    NODE_REMEDIATION,
    RECOVERY_XID,
    Action,
    Category,
    action_for,
    is_node_remediation,
    is_recovery_directive,
    lookup,
    recovery_action_for_code,
    recovery_action_from_text,
)

# Words the catalog file's "Category (ours)" / mnemonic / description cells use for each of our categories.
CATEGORY_WORDS = {
    Category.APPLICATION: ("app",),
    Category.SYMPATHETIC: ("sympathetic",),
    Category.DRIVER: ("driver",),
    Category.FIRMWARE: ("firmware", "gsp"),
    Category.MEMORY: ("ecc", "memory", "retirement"),
    Category.PCIE: ("pcie",),
    Category.NVLINK: ("nvlink",),
    Category.HARDWARE: ("fatal", "hw", "c2c"),
    Category.RECOVERY: ("recovery",),
    Category.INFO: ("info",),
    Category.UNKNOWN: ("legacy", "unknown"),
}


def catalog_rows(xid_dir: Path) -> list[tuple[int, list[str]]]:
    """(code, cells) for every row of the Xid table; ranges such as 144–150 and 171 / 172 expanded."""
    rows = []
    for line in (xid_dir / "xid_catalog.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or not re.match(r"^\d", cells[0]):
            continue
        if match := re.match(r"^(\d+)\s*[–-]\s*(\d+)$", cells[0]):
            codes = range(int(match[1]), int(match[2]) + 1)
        else:
            codes = [int(code) for code in re.findall(r"\d+", cells[0])]
        rows.extend((code, cells) for code in codes)
    return rows


def test_every_code_of_the_catalog_file_is_in_the_table(xid_dir):
    codes = [code for code, _ in catalog_rows(xid_dir)]
    assert len(codes) >= 45
    assert set(codes) <= set(CATALOG), set(codes) - set(CATALOG)
    assert set(CATALOG) == set(codes)


def test_mnemonics_and_categories_match_the_file(xid_dir):
    for code, cells in catalog_rows(xid_dir):
        info = CATALOG[code]
        mnemonic_cell = cells[1]
        if 144 <= code <= 150:
            assert info.mnemonic.startswith("NVLINK_") and info.mnemonic.endswith("_ERROR")
        elif code == 172:
            assert info.mnemonic == "UNCORRECTABLE_SRAM_ERROR"
        else:
            assert mnemonic_cell.startswith(info.mnemonic), (code, mnemonic_cell)
        text = " ".join((cells[1], cells[2], cells[6])).lower()
        assert any(word in text for word in CATEGORY_WORDS[info.category]), (code, info.category, cells[6])


def test_nvidia_immediate_action_is_copied_from_the_file(xid_dir):
    for code, cells in catalog_rows(xid_dir):
        expected = "" if cells[4] == "(blank)" else cells[4]
        assert CATALOG[code].nvidia_action == expected, code


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_application_faults_only_annotate_the_workload(code):
    assert lookup(code).action is Action.ANNOTATE_WORKLOAD
    assert not lookup(code).remediates_node


@pytest.mark.parametrize("code", [48, 64, 74, 79, 94, 95, 119, 120])
def test_faults_needing_reset_or_drain_remediate_the_node(code):
    assert is_node_remediation(action_for(code, ""))


def test_xid_79_needs_a_reboot_and_74_a_drain():
    assert lookup(79).action is Action.REBOOT_NODE
    assert lookup(74).action is Action.DRAIN_AND_RESET
    assert NODE_REMEDIATION == {Action.RESET_GPU, Action.DRAIN_AND_RESET, Action.REBOOT_NODE}


def test_row_remap_success_is_only_suspect_but_failure_remediates():
    ok = "Row Remapper: New row (0x0000000018f31d80) marked for remapping, reset gpu to activate."
    assert action_for(63, ok) is Action.MARK_SUSPECT
    assert action_for(63, "Row Remapper: row remapping failed for row 0x10") is Action.RESET_GPU
    assert action_for(64, "Dynamic Page Retirement: Blacklisting failed.") is Action.RESET_GPU


@pytest.mark.parametrize(
    ("message", "label", "action"),
    [
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "GPU Reset Required",
         Action.RESET_GPU),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "Node Reboot Required",
         Action.REBOOT_NODE),
        ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "Drain and Reset",
         Action.DRAIN_AND_RESET),
        ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", "Drain P2P", Action.DRAIN_AND_RESET),
        ("GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)", "GPU Reset Required",
         Action.RESET_GPU),
        ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", "None", Action.NONE),
        # One public file labels 0x1 "(Drain and Reset)": the label decides, not the number.
        ("GPU recovery action changed from 0x0 (None) to 0x1 (Drain and Reset)", "Drain and Reset",
         Action.DRAIN_AND_RESET),
    ],
)
def test_xid_154_takes_its_action_from_the_recovery_label(message, label, action):
    recovery = recovery_action_from_text(message)
    assert recovery is not None and recovery.to_label == label
    assert action_for(154, message) is action


def test_xid_154_without_a_label_falls_back_to_the_nvml_value():
    assert action_for(154, "GPU recovery action changed from 0x0 to 0x2") is Action.REBOOT_NODE
    assert action_for(154, "garbled") is Action.ALERT


def test_nvlink5_fatal_drains_and_nonfatal_only_logs():
    assert action_for(145, "NVLINK: RLW Error Fatal XC0 i0 Link 05") is Action.DRAIN_AND_RESET
    assert action_for(145, "NVLINK: RLW Error Nonfatal XC0 i0 Link 05") is Action.NONE
    assert action_for(145, "NVLINK: RLW Error Non-fatal Link 05") is Action.NONE


def test_unknown_codes_raise_an_alert():
    info = lookup(999)
    assert info.category is Category.UNKNOWN and info.action is Action.ALERT


def test_text_refinement_is_a_column_of_the_table():
    refined = {code: info.refine for code, info in CATALOG.items() if info.refine}
    assert refined == {63: "remap", 64: "remap", **dict.fromkeys(range(144, 151), "nvlink5"), 154: "recovery"}
    assert RECOVERY_XID == 154 and is_recovery_directive(154) and not is_recovery_directive(79)


@pytest.mark.parametrize(
    ("code", "action"),
    [(0, Action.NONE), (1, Action.RESET_GPU), (2, Action.REBOOT_NODE), (3, Action.DRAIN_AND_RESET),
     (4, Action.DRAIN_AND_RESET), (7, Action.REBOOT_NODE), (99, Action.ALERT)],
)
def test_nvml_recovery_values_mean_what_the_xid_154_labels_mean(code, action):
    assert recovery_action_for_code(code) is action
    assert action_for(154, f"GPU recovery action changed from 0x0 (None) to {code:#x}") is action


# Comparisons of an Xid (or a catalog code) with a number literal: what the table replaces.
_CODE_CHAIN = re.compile(
    r"\b(?:xid\w*|code)\s*(?:==|!=|<=|>=|<|>|(?:not\s+)?in)\s*[\(\[\{]?\s*\d"
    r"|\b\d+\s*(?:<=|<)\s*(?:xid\w*|code)\b",
    re.IGNORECASE,
)


def test_no_code_outside_the_catalog_branches_on_xid_numbers():
    root = Path(__file__).resolve().parents[3]
    sources = [*root.glob("health/**/*.py"), *root.glob("fleet/agent/*.py"), *root.glob("integrations/**/*.py")]
    offenders = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in sources
        if path.name != "xid_catalog.py" and "migrations" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if _CODE_CHAIN.search(line.split("#")[0])
    ]
    assert offenders == []
