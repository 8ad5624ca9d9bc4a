"""NVIDIA Xid catalog as data: code -> mnemonic, category and the automatic action Fleetdeck takes.

Built from ../shared/telemetry/xid/xid_catalog.md (NVIDIA "Analyzing Xid Errors with the Xid
Catalog", Ampere and newer). Mnemonic, description and NVIDIA's immediate action are NVIDIA's words;
`category` and `action` are our reading for a cordon-and-requeue control plane.

Public API:
    Category            str enum: application, sympathetic, driver, firmware, memory, pcie, nvlink,
                        hardware, recovery, info, nvswitch, unknown
    Action              str enum of automatic actions, mildest first:
                        NONE (log only), ANNOTATE_WORKLOAD (application fault: note it on the job),
                        MARK_SUSPECT (keep schedulable, flag the GPU), ALERT (flag + repair ticket),
                        RESET_GPU, DRAIN_AND_RESET, REBOOT_NODE (these three are node remediation:
                        cordon, stop and requeue gangs, open a repair ticket)
    NODE_REMEDIATION    frozenset of the three remediation actions; `is_node_remediation(action)`
    XidInfo             frozen dataclass (code, mnemonic, description, category, action, nvidia_action)
    CATALOG             dict[int, XidInfo] covering every code of the catalog file
    lookup(code)        XidInfo; unknown codes get Category.UNKNOWN / Action.ALERT
    action_for(code, message)
                        the action for one concrete event: the table's action refined by the text as
                        the row's `refine` column says (63/64 remap failure, 144-150 Fatal/Nonfatal,
                        154 recovery action)
    is_recovery_directive(code), RECOVERY_XID
                        the Xid (154) whose text carries a recovery action
    recovery_action_for_code(code) -> Action
                        NVML's recovery-action value (the agent's field read) as our action
    recovery_action_from_text(message) -> RecoveryAction | None
                        parses Xid 154 "... changed from 0x0 (None) to 0x1 (GPU Reset Required)"
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class Category(StrEnum):
    APPLICATION = "application"
    SYMPATHETIC = "sympathetic"
    DRIVER = "driver"
    FIRMWARE = "firmware"
    MEMORY = "memory"
    PCIE = "pcie"
    NVLINK = "nvlink"
    HARDWARE = "hardware"
    RECOVERY = "recovery"
    INFO = "info"
    NVSWITCH = "nvswitch"
    UNKNOWN = "unknown"


class Action(StrEnum):
    NONE = "none"
    ANNOTATE_WORKLOAD = "annotate_workload"
    MARK_SUSPECT = "mark_suspect"
    ALERT = "alert"
    RESET_GPU = "reset_gpu"
    DRAIN_AND_RESET = "drain_and_reset"
    REBOOT_NODE = "reboot_node"


NODE_REMEDIATION = frozenset({Action.RESET_GPU, Action.DRAIN_AND_RESET, Action.REBOOT_NODE})

# Severity order, so callers can keep "the worst action seen" for a node or a burst.
ACTION_SEVERITY = {action: rank for rank, action in enumerate(Action)}


# NVIDIA's catalog ends in the hundreds; a larger number is no Xid (and HealthEvent.xid takes no 2^31).
MAX_XID = 65535


def is_xid_number(value: float) -> bool:
    """A whole number from 1 to MAX_XID: 79.5 is no Xid 79, and -5 or 2^31 no Xid at all."""
    return value == int(value) and 1 <= value <= MAX_XID


def is_node_remediation(action: Action) -> bool:
    return action in NODE_REMEDIATION


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    mnemonic: str
    description: str
    category: Category
    action: Action
    nvidia_action: str
    # How the event text refines `action`: "" (never), "remap" (63/64: "failed" escalates), "nvlink5"
    # (144-150: "Fatal" escalates), "recovery" (154: the target recovery action decides).
    refine: str = ""

    @property
    def remediates_node(self) -> bool:
        return self.action in NODE_REMEDIATION


C, A = Category, Action
REMAP, NVLINK5, RECOVERY = "remap", "nvlink5", "recovery"
# (code, mnemonic, NVIDIA description, category, default action, NVIDIA immediate action[, text refinement])
_ROWS: tuple[tuple, ...] = (
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", C.APPLICATION, A.ANNOTATE_WORKLOAD,
     "RESTART_APP"),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", C.APPLICATION, A.ANNOTATE_WORKLOAD,
     "RESTART_APP"),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", C.APPLICATION, A.ANNOTATE_WORKLOAD,
     "RESTART_APP"),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", C.PCIE, A.ANNOTATE_WORKLOAD,
     "RESTART_APP"),
    (38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", C.DRIVER, A.NONE, "IGNORE"),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", C.APPLICATION, A.ANNOTATE_WORKLOAD,
     "IGNORE"),
    (44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", C.DRIVER, A.NONE,
     "IGNORE"),
    # 45 follows Ctrl-C, kills and other Xids: it tells the job's story, never the GPU's.
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors", C.SYMPATHETIC,
     A.ANNOTATE_WORKLOAD, "WORKFLOW_XID_45"),
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", C.HARDWARE, A.RESET_GPU, "RESET_GPU"),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", C.MEMORY, A.RESET_GPU, "WORKFLOW_XID_48"),
    (61, "PMU_BREAKPOINT", "Unused (in Ampere+ catalog)", C.UNKNOWN, A.ALERT, "CONTACT_SUPPORT"),
    (62, "PMU_HALT_ERROR", "Internal micro-controller halt (newer drivers)", C.FIRMWARE, A.RESET_GPU, "RESET_GPU"),
    # 63 is a successful remap pending a reset; only its failure wording escalates (see action_for).
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", C.MEMORY, A.MARK_SUSPECT, "IGNORE",
     REMAP),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", C.MEMORY, A.RESET_GPU, "RESET_GPU",
     REMAP),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", C.APPLICATION, A.ANNOTATE_WORKLOAD, "RESTART_APP"),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", C.APPLICATION, A.ANNOTATE_WORKLOAD,
     "RESTART_APP"),
    # 74 may be the remote end's fault, but the link is down for every multi-GPU job on the node.
    (74, "NVLINK_ERROR", "NVLINK Error", C.NVLINK, A.DRAIN_AND_RESET, "WORKFLOW_NVLINK_ERR"),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", C.PCIE, A.REBOOT_NODE,
     "RESTART_BM"),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", C.MEMORY, A.ALERT, "IGNORE"),
    (93, "INFOROM_ERASE_LIMIT_EXCEEDED", "Non-fatal violation of provisioned InfoROM wear limit", C.INFO, A.NONE,
     "IGNORE"),
    # NVIDIA: contained to one app, "reset the GPU when convenient"; we drain so the reset happens.
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", C.MEMORY, A.RESET_GPU, "RESTART_APP"),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", C.MEMORY, A.RESET_GPU, "RESET_GPU"),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", C.HARDWARE, A.RESET_GPU,
     "RESET_GPU"),
    (110, "SEC_FAULT_ERROR", "Security Fault Error", C.HARDWARE, A.RESET_GPU, "RESET_GPU"),
    (119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", C.FIRMWARE, A.RESET_GPU, "RESET_GPU"),
    (120, "GSP_ERROR", "GSP Error", C.FIRMWARE, A.RESET_GPU, "RESET_GPU"),
    (121, "C2C_ERROR", "C2C Error", C.HARDWARE, A.NONE, "IGNORE"),
    (136, "ALI_TRAINING_FAIL", "Link Training Failed", C.NVLINK, A.RESET_GPU, "RESET_GPU"),
    (137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", C.APPLICATION, A.ANNOTATE_WORKLOAD, "IGNORE"),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", C.MEMORY, A.RESET_GPU, "RESET_GPU"),
    (143, "GPU_INIT_ERROR", "GPU Initialization Error", C.HARDWARE, A.RESET_GPU, "RESET_GPU"),
    # 144-150: the line says Fatal or Nonfatal; the default (no token) is to log (see action_for).
    (144, "NVLINK_SAW_ERROR", "NVLINK: SAW Error", C.NVLINK, A.NONE, "WORKFLOW_NVLINK5_ERR", NVLINK5),
    (145, "NVLINK_RLW_ERROR", "NVLINK: RLW Error", C.NVLINK, A.NONE, "WORKFLOW_NVLINK5_ERR", NVLINK5),
    (146, "NVLINK_TLW_ERROR", "NVLINK: TLW Error", C.NVLINK, A.NONE, "WORKFLOW_NVLINK5_ERR", NVLINK5),
    (147, "NVLINK_TREX_ERROR", "NVLINK: TREX Error", C.NVLINK, A.NONE, "WORKFLOW_NVLINK5_ERR", NVLINK5),
    (148, "NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", C.NVLINK, A.NONE, "WORKFLOW_NVLINK5_ERR", NVLINK5),
    (149, "NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", C.NVLINK, A.NONE, "WORKFLOW_NVLINK5_ERR", NVLINK5),
    (150, "NVLINK_MSE_ERROR", "NVLINK: MSE Error", C.NVLINK, A.NONE, "WORKFLOW_NVLINK5_ERR", NVLINK5),
    # 154 carries the directive for the Xid it accompanies; the action comes from its text.
    (154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", C.RECOVERY, A.ALERT, "XID_154",
     RECOVERY),
    # Intentional link-down (incl. SLEEP) also raises 155: too false-positive prone to reset on.
    (155, "NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", C.NVLINK, A.ALERT, "RESET_GPU"),
    (156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", C.MEMORY, A.DRAIN_AND_RESET, "RESET_GPU"),
    (157, "RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", C.MEMORY, A.ALERT, "IGNORE"),
    (158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", C.HARDWARE, A.RESET_GPU, "RESET_GPU"),
    # 171/172 only say which memory a 48 hit; the 48 itself carries the action.
    (171, "UNCORRECTABLE_DRAM_ERROR", "Additional to Xid 48 providing more details on DRAM", C.MEMORY, A.NONE, ""),
    (172, "UNCORRECTABLE_SRAM_ERROR", "Additional to Xid 48 providing more details on SRAM", C.MEMORY, A.NONE, ""),
)
del C, A

CATALOG: dict[int, XidInfo] = {row[0]: XidInfo(*row) for row in _ROWS}


def lookup(code: int) -> XidInfo:
    """The catalog row for `code`; codes outside the catalog are unknown and raise an alert."""
    info = CATALOG.get(code)
    if info is None:
        return XidInfo(code, "UNKNOWN", f"Xid {code} is not in the catalog", Category.UNKNOWN, Action.ALERT, "")
    return info


@dataclass(frozen=True, slots=True)
class RecoveryAction:
    """Xid 154 / NVML nvmlDeviceGpuRecoveryAction_t transition."""

    from_code: int | None
    from_label: str
    to_code: int | None
    to_label: str
    action: Action


# Keyed on the label, not the number: one public test file labels 0x1 "(Drain and Reset)".
RECOVERY_LABEL_ACTIONS: dict[str, Action] = {
    "none": Action.NONE,
    "gpu reset required": Action.RESET_GPU,
    "bus reset required": Action.RESET_GPU,
    "node reboot required": Action.REBOOT_NODE,
    "system reboot required": Action.REBOOT_NODE,
    "drain p2p": Action.DRAIN_AND_RESET,
    "drain and reset": Action.DRAIN_AND_RESET,
    "recover imex domain": Action.ALERT,
}
# NVML values, used only when the label is missing or unfamiliar.
RECOVERY_CODE_ACTIONS: dict[int, Action] = {
    0: Action.NONE,
    1: Action.RESET_GPU,
    2: Action.REBOOT_NODE,
    3: Action.DRAIN_AND_RESET,
    4: Action.DRAIN_AND_RESET,
    5: Action.ALERT,
    6: Action.RESET_GPU,
    7: Action.REBOOT_NODE,
}

_RECOVERY = re.compile(
    r"(?:recovery action\s+)?changed from\s+(?:(?P<from_code>0x[0-9a-fA-F]+|\d+)\s*)?(?:\((?P<from_label>[^)]*)\))?"
    r"\s*to\s+(?:(?P<to_code>0x[0-9a-fA-F]+|\d+)\s*)?(?:\((?P<to_label>[^)]*)\))?",
    re.IGNORECASE,
)
_REMAP_FAILURE = re.compile(r"fail", re.IGNORECASE)
_NVLINK5_FATAL = re.compile(r"(?<![Nn]on)(?<![Nn]on-)(?<![Nn]on )\bfatal\b", re.IGNORECASE)


def _int(text: str | None) -> int | None:
    if not text:
        return None
    return int(text, 16) if text.lower().startswith("0x") else int(text)


def recovery_action_from_text(message: str) -> RecoveryAction | None:
    """Parse an Xid 154 message; None when the text has no recovery-action transition."""
    match = _RECOVERY.search(message)
    if match is None or (match["to_code"] is None and match["to_label"] is None):
        return None
    to_code, to_label = _int(match["to_code"]), (match["to_label"] or "").strip()
    action = RECOVERY_LABEL_ACTIONS.get(to_label.lower())
    if action is None:
        action = RECOVERY_CODE_ACTIONS.get(to_code, Action.ALERT) if to_code is not None else Action.ALERT
    return RecoveryAction(
        _int(match["from_code"]), (match["from_label"] or "").strip(), to_code, to_label, action
    )


def _refine_remap(info: XidInfo, message: str) -> Action:
    # Page-retirement and row-remap wordings both say "failed" when the repair did not happen.
    return Action.RESET_GPU if _REMAP_FAILURE.search(message) else info.action


def _refine_nvlink5(info: XidInfo, message: str) -> Action:
    return Action.DRAIN_AND_RESET if _NVLINK5_FATAL.search(message) else info.action


def _refine_recovery(info: XidInfo, message: str) -> Action:
    recovery = recovery_action_from_text(message)
    return recovery.action if recovery is not None else info.action


# The table's `refine` column names one of these.
_REFINERS: dict[str, Callable[[XidInfo, str], Action]] = {
    REMAP: _refine_remap,
    NVLINK5: _refine_nvlink5,
    RECOVERY: _refine_recovery,
}


def action_for(code: int, message: str = "") -> Action:
    """The automatic action for one Xid event: the catalog's default refined by the event text."""
    info = lookup(code)
    refine = _REFINERS.get(info.refine)
    return info.action if refine is None else refine(info, message)


def is_recovery_directive(code: int) -> bool:
    """Xid 154 and its kind: the event carries a recovery action for an Xid it accompanies."""
    return lookup(code).refine == RECOVERY


def recovery_action_for_code(code: int) -> Action:
    """Our action for an NVML nvmlDeviceGpuRecoveryAction_t value (the agent reads it as a field)."""
    return RECOVERY_CODE_ACTIONS.get(code, Action.ALERT)


# The Xid whose message (or NVML field) carries a recovery action, from the table.
RECOVERY_XID = next(code for code, info in CATALOG.items() if info.refine == RECOVERY)
