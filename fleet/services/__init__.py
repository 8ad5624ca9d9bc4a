"""Every write of inventory rows: node state moves (nodes), GPU rows (gpus), fleet files (imports).

Other apps call these; none writes a Node or Gpu row itself."""
from .gpus import (
    PARKING_INDEX,
    GpuReconcileResult,
    GpuWanted,
    Retire,
    gpu_health_set,
    gpu_pci_bus_id_set,
    gpus_reconcile,
)
from .imports import ImportResult, KindCounts, fleet_import
from .nodes import (
    TRANSITIONS,
    Mover,
    NodeStateConflict,
    node_cordon,
    node_create,
    node_heartbeat_record,
    node_hostname_set,
    node_labels_set,
    node_state_move,
    node_uncordon,
    node_update,
    nodes_heartbeat_record,
)

__all__ = [
    "PARKING_INDEX", "TRANSITIONS", "GpuReconcileResult", "GpuWanted", "ImportResult", "KindCounts", "Mover",
    "NodeStateConflict", "Retire", "fleet_import", "gpu_health_set", "gpu_pci_bus_id_set", "gpus_reconcile",
    "node_cordon", "node_create", "node_heartbeat_record", "node_hostname_set", "node_labels_set",
    "node_state_move", "node_uncordon", "node_update", "nodes_heartbeat_record",
]
