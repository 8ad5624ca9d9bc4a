"""Builders for tiny fleets and pod lists, plus the real openb files from ../shared."""
from __future__ import annotations

from pathlib import Path

import pytest

from scheduling.replay.trace import Arrival, NodeSpec, PodSpec


def node(name: str, gpus: int = 8, model: str = "G2", cpu: int = 96_000, mem: int = 393_216) -> NodeSpec:
    return NodeSpec(name, cpu, mem, gpus, model if gpus else "")


def pod(name: str, *, cpu: int = 4_000, mem: int = 8_192, gpus: int = 1, milli: int = 1000,
        spec: tuple[str, ...] = ()) -> PodSpec:
    return PodSpec(name, cpu, mem, gpus, milli if gpus else 0, spec)


def arrivals(*pods: PodSpec) -> list[Arrival]:
    seen: dict[str, int] = {}
    out = []
    for p in pods:
        k = seen.get(p.name, 0)
        seen[p.name] = k + 1
        out.append(Arrival(f"{p.name}#{k}", p))
    return out


@pytest.fixture
def openb(shared_dir: Path) -> Path:
    return shared_dir / "traces" / "alibaba-gpu-v2023"
