"""Pure-Python health core: no Django (ruff TID251 enforces it).

Modules:
    xid_catalog  Xid code -> category and automatic action (data, not if-chains)
    kernel_log   NVRM Xid / fallen-off-the-bus / GPU-mapping / SXid events from kernel logs
    dcgm         dcgm-exporter /metrics text -> one DcgmSample per GPU or MIG instance
    policy       HealthSignal -> control-plane actions; dedup keys, storm collapsing, watchdogs
    pci          PCI bus id normalisation shared by all of the above
"""
