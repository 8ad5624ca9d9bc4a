"""PCI bus id normalisation shared by the kernel-log, DCGM and NVML paths.

Public API:
    normalize_pci_bus_id(text) -> str | None
        "00000000:1A:00.0" (NVML/DCGM), "0000:3b:00" (Xid), "PCI:0003:00:00", "01:00" (no domain)
        all become "<domain 4 hex>:<bus 2 hex>:<device 2 hex>" in lower case, e.g. "0000:1a:00".
        The PCI function (".0") is dropped: Xid lines never carry it, and a GPU is always function 0.
        Returns None for text that is not a PCI address.

Every source writes the address differently, so joining an Xid line to a GPU row only works if
all of them go through this one function.
"""
from __future__ import annotations

import re

_PCI = re.compile(
    r"^(?:PCI:)?(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{1,2}):(?P<dev>[0-9A-Fa-f]{1,2})(?:\.[0-7])?$"
)


def normalize_pci_bus_id(text: str | bytes | None) -> str | None:
    """Canonical "dddd:bb:dd" form of a PCI address, or None when `text` is not one."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    match = _PCI.match(text.strip())
    if match is None:
        return None
    domain = int(match["domain"] or "0", 16)
    return f"{domain:04x}:{int(match['bus'], 16):02x}:{int(match['dev'], 16):02x}"
