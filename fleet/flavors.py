"""GPU flavor names from what NVML reports: product name and memory.

NVML names the same part inconsistently ("NVIDIA H100 80GB HBM3" is the SXM board, "NVIDIA
A100-SXM4-80GB" spells it out, "NVIDIA L40S" says nothing), while quotas need one stable name per
schedulable type. The model table below knows each family's default board and whether it has MIG;
the product string can only override the board (PCIe, NVL, SXM) and the memory size is rounded
to the marketed size, since NVML reports what is left after the driver's reservation.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

PCIE = "PCIE"
SXM = "SXM"
NVL = "NVL"


@dataclass(frozen=True)
class GpuModel:
    token: str
    # Board assumed when the product string names none; None for cards sold in one form only,
    # whose flavor names carry no board ("L40S-48GB").
    default_board: str | None
    mig_capable: bool = False


# Longer tokens first: "L40S" must win over "L40" and "L4", "H100" over "H10".
MODELS: tuple[GpuModel, ...] = (
    GpuModel("GB300", SXM, mig_capable=True),
    GpuModel("GB200", SXM, mig_capable=True),
    GpuModel("GH200", SXM, mig_capable=True),
    GpuModel("B300", SXM, mig_capable=True),
    GpuModel("B200", SXM, mig_capable=True),
    GpuModel("B100", SXM, mig_capable=True),
    GpuModel("H200", SXM, mig_capable=True),
    GpuModel("H100", SXM, mig_capable=True),
    GpuModel("H800", SXM, mig_capable=True),
    GpuModel("H20", SXM, mig_capable=True),
    GpuModel("A100", SXM, mig_capable=True),
    GpuModel("A800", SXM, mig_capable=True),
    GpuModel("A30", None, mig_capable=True),
    GpuModel("A40", None),
    GpuModel("A10G", None),
    GpuModel("A10", None),
    GpuModel("A16", None),
    GpuModel("A2", None),
    GpuModel("L40S", None),
    GpuModel("L40", None),
    GpuModel("L20", None),
    GpuModel("L4", None),
    GpuModel("V100S", None),
    GpuModel("V100", SXM),
    GpuModel("T4", None),
)

# Marketed memory sizes in GB. NVML reports a little less than the nominal GiB (ECC and driver
# reservations), so a reading maps to the smallest marketed size that holds it.
MARKETED_GB: tuple[int, ...] = (
    2, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 120, 128, 141, 144, 180, 186, 192, 279, 288,
)

_TOKEN_RE = re.compile(r"[A-Z0-9]+")
_NVIDIA_PREFIXES = ("NVIDIA ", "TESLA ", "QUADRO ", "GEFORCE ")


@dataclass(frozen=True)
class Flavor:
    name: str
    model: str
    board: str | None
    memory_gb: int
    mig_capable: bool


def marketed_memory_gb(memory_mib: int) -> int:
    """Rounds NVML's total memory (MiB) up to the marketed size: 46068 MiB → 48, 81559 → 80."""
    if memory_mib <= 0:
        raise ValueError("memory_mib must be positive")
    gib = memory_mib / 1024
    for size in MARKETED_GB:
        # 2 % slack: a few boards report marginally more than the nominal GiB.
        if gib <= size * 1.02:
            return size
    return round(gib)


def _board(product: str, model: GpuModel) -> str | None:
    if "PCIE" in product:
        return PCIE
    if re.search(r"\bNVL\b", product):
        return NVL
    if "SXM" in product or "HBM" in product:
        return SXM
    return model.default_board


def find_model(product: str) -> GpuModel | None:
    """The table entry for an NVML product name, or None for an unknown part."""
    tokens = set(_TOKEN_RE.findall(product.upper()))
    # "A100-SXM4-80GB" tokenises to A100, SXM4, 80GB; exact-token matching keeps L4 from matching L40S.
    for model in MODELS:
        if model.token in tokens:
            return model
    return None


def _fallback_name(product: str) -> str:
    upper = product.upper().strip()
    for prefix in _NVIDIA_PREFIXES:
        upper = upper.removeprefix(prefix)
    # Memory in the product name would repeat the suffix we add.
    upper = re.sub(r"\b\d+\s*GB\b", "", upper)
    return "-".join(_TOKEN_RE.findall(upper)) or "GPU"


def derive_flavor(product: str, memory_mib: int) -> Flavor:
    """The flavor of a GPU: "NVIDIA H100 80GB HBM3" + 81559 MiB → H100-SXM-80GB.

    Unknown products still get a stable name built from the product's words, so a new part
    imports without a code change; it only lacks the board and MIG knowledge."""
    memory_gb = marketed_memory_gb(memory_mib)
    model = find_model(product)
    if model is None:
        base = _fallback_name(product)
        return Flavor(name=f"{base}-{memory_gb}GB", model=base, board=None, memory_gb=memory_gb, mig_capable=False)
    board = _board(product.upper(), model)
    parts = [model.token, board, f"{memory_gb}GB"] if board else [model.token, f"{memory_gb}GB"]
    return Flavor(
        name="-".join(parts), model=model.token, board=board, memory_gb=memory_gb, mig_capable=model.mig_capable
    )


def flavor_name(product: str, memory_mib: int) -> str:
    return derive_flavor(product, memory_mib).name
