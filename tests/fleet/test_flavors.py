"""Flavor names from NVML product strings and memory sizes."""
import pytest

from fleet.flavors import derive_flavor, flavor_name, marketed_memory_gb

CASES = [
    # (NVML product, memory MiB as NVML reports it, flavor)
    ("NVIDIA H100 80GB HBM3", 81559, "H100-SXM-80GB"),
    ("NVIDIA H100 PCIe", 81559, "H100-PCIE-80GB"),
    ("NVIDIA H100 NVL", 95830, "H100-NVL-94GB"),
    ("NVIDIA H200", 143771, "H200-SXM-141GB"),
    ("NVIDIA H200 NVL", 143771, "H200-NVL-141GB"),
    ("NVIDIA B200", 183359, "B200-SXM-180GB"),
    ("NVIDIA A100-SXM4-80GB", 81920, "A100-SXM-80GB"),
    ("NVIDIA A100-SXM4-40GB", 40960, "A100-SXM-40GB"),
    ("NVIDIA A100-PCIE-40GB", 40536, "A100-PCIE-40GB"),
    ("NVIDIA A100 80GB PCIe", 81920, "A100-PCIE-80GB"),
    ("NVIDIA L40S", 46068, "L40S-48GB"),
    ("NVIDIA L40", 46068, "L40-48GB"),
    ("NVIDIA L4", 23034, "L4-24GB"),
    ("NVIDIA A10G", 23028, "A10G-24GB"),
    ("NVIDIA A10", 23028, "A10-24GB"),
    ("NVIDIA A30", 24576, "A30-24GB"),
    ("Tesla V100-SXM2-32GB", 32510, "V100-SXM-32GB"),
    ("Tesla V100-PCIE-16GB", 16160, "V100-PCIE-16GB"),
    ("Tesla T4", 15360, "T4-16GB"),
    ("NVIDIA RTX 6000 Ada Generation", 49140, "RTX-6000-ADA-GENERATION-48GB"),
]


@pytest.mark.parametrize(("product", "memory_mib", "want"), CASES, ids=[c[2] for c in CASES])
def test_it_names_the_flavor_of_each_known_part(product, memory_mib, want):
    assert flavor_name(product, memory_mib) == want


@pytest.mark.parametrize(
    ("memory_mib", "want"), [(81559, 80), (46068, 48), (23034, 24), (143771, 141), (81920, 80), (15360, 16)]
)
def test_it_rounds_reported_memory_up_to_the_marketed_size(memory_mib, want):
    assert marketed_memory_gb(memory_mib) == want


def test_it_refuses_a_non_positive_memory_size():
    with pytest.raises(ValueError):
        marketed_memory_gb(0)


def test_it_knows_which_parts_support_mig():
    assert derive_flavor("NVIDIA A100-SXM4-80GB", 81920).mig_capable
    assert derive_flavor("NVIDIA H100 80GB HBM3", 81559).mig_capable
    assert not derive_flavor("NVIDIA L40S", 46068).mig_capable
    assert not derive_flavor("Some Future GPU", 100000).mig_capable


def test_l4_does_not_match_inside_l40s():
    flavor = derive_flavor("NVIDIA L40S", 46068)
    assert (flavor.model, flavor.board, flavor.memory_gb) == ("L40S", None, 48)
