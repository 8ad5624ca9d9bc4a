"""Reading the Alibaba "openb" trace (node and pod CSVs) and building arrival sequences.

Pod CSVs come in two layouts: the full 11 columns (with `gpu_spec`) and the `multigpu*`
files with only `name,cpu_milli,memory_mib,num_gpu,gpu_milli`. Both load to `PodSpec`.
"""
from __future__ import annotations

import csv
import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

from scheduling.engine.fragmentation import Demand
from scheduling.engine.types import WHOLE

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A trace or arrivals file that cannot be used; the message names file, line and field."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class PodSpec:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU: < 1000 only for a share of one GPU
    gpu_spec: tuple[str, ...] = ()  # accepted GPU models; empty = any

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def is_share(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < WHOLE

    def demand(self) -> Demand:
        return Demand(self.cpu_milli, self.num_gpu, self.gpu_milli, frozenset(self.gpu_spec))


@dataclass(frozen=True, slots=True)
class Arrival:
    label: str  # "<trace pod name>#<k>", k counting earlier copies of the same trace pod
    pod: PodSpec


def _int(path: Path, line: int, row: dict[str, str], column: str) -> int:
    raw = (row.get(column) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        raise TraceError(f"{path}:{line}: {column} must be an integer, got {raw!r}") from None
    if value < 0:
        raise TraceError(f"{path}:{line}: {column} must not be negative, got {value}")
    return value


def _reader(path: Path, required: tuple[str, ...]) -> tuple[csv.DictReader, list[str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read ({exc})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = list(reader.fieldnames or [])
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(f"{path}: missing column(s) {', '.join(missing)} (have {', '.join(header) or 'none'})")
    return reader, header


def load_nodes(path: str | Path) -> list[NodeSpec]:
    """The node list (`openb_node_list_*.csv`); names must be unique."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such node list")
    reader, _ = _reader(path, NODE_COLUMNS)
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for line, row in enumerate(reader, start=2):
        name = (row["sn"] or "").strip()
        if not name:
            raise TraceError(f"{path}:{line}: sn is empty")
        if name in seen:
            raise TraceError(f"{path}:{line}: duplicate node {name!r}")
        seen.add(name)
        gpus = _int(path, line, row, "gpu")
        model = (row["model"] or "").strip()
        if gpus and not model:
            raise TraceError(f"{path}:{line}: node {name!r} has {gpus} GPUs but no model")
        nodes.append(NodeSpec(name, _int(path, line, row, "cpu_milli"), _int(path, line, row, "memory_mib"),
                              gpus, model if gpus else ""))
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def load_pods(path: str | Path) -> list[PodSpec]:
    """A pod list (`openb_pod_list_*.csv`), with or without the `gpu_spec` column."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such pod list")
    reader, header = _reader(path, POD_COLUMNS)
    has_spec = "gpu_spec" in header
    pods: list[PodSpec] = []
    seen: set[str] = set()
    for line, row in enumerate(reader, start=2):
        name = (row["name"] or "").strip()
        if not name or "#" in name:
            raise TraceError(f"{path}:{line}: name must be non-empty and without '#', got {name!r}")
        if name in seen:
            raise TraceError(f"{path}:{line}: duplicate pod {name!r}")
        seen.add(name)
        num_gpu = _int(path, line, row, "num_gpu")
        milli = _int(path, line, row, "gpu_milli")
        if num_gpu == 0 and milli:
            raise TraceError(f"{path}:{line}: gpu_milli {milli} without num_gpu")
        if num_gpu and not 0 < milli <= WHOLE:
            raise TraceError(f"{path}:{line}: gpu_milli must be 1..1000 for a GPU pod, got {milli}")
        if num_gpu > 1 and milli != WHOLE:
            raise TraceError(f"{path}:{line}: a share of a GPU ({milli} milli) must ask for one GPU, not {num_gpu}")
        spec = tuple(m for m in (row.get("gpu_spec") or "").split("|") if m) if has_spec else ()
        pods.append(PodSpec(name, _int(path, line, row, "cpu_milli"), _int(path, line, row, "memory_mib"),
                            num_gpu, milli, spec if num_gpu else ()))
    if not pods:
        raise TraceError(f"{path}: no pods")
    return pods


def _labelled(pods: list[PodSpec]) -> list[Arrival]:
    copies: dict[str, int] = {}
    out: list[Arrival] = []
    for pod in pods:
        k = copies.get(pod.name, 0)
        copies[pod.name] = k + 1
        out.append(Arrival(f"{pod.name}#{k}", pod))
    return out


def sample_arrivals(pods: list[PodSpec], nodes: list[NodeSpec], *, seed: int, ratio: float = 1.3) -> list[Arrival]:
    """The FGD protocol: every trace pod once, then copies drawn with replacement until the
    next draw would push the GPU request past `ratio` x fleet GPU capacity (a trace already
    above it is thinned by random removal instead); the sequence is shuffled with `seed`.

    Uses Python's RNG, so the order differs from the artifact's Go RNG; replay the
    published sequences with `load_arrivals` to compare pod for pod."""
    if ratio <= 0:
        raise TraceError(f"arrival ratio must be positive, got {ratio}")
    rng = random.Random(seed)
    target = ratio * sum(n.gpus for n in nodes) * WHOLE
    chosen = sorted(pods, key=lambda p: p.name)
    total = sum(p.total_gpu_milli for p in chosen)
    if total > target:
        while total > target and chosen:
            victim = chosen.pop(rng.randrange(len(chosen)))
            total -= victim.total_gpu_milli
    elif any(p.total_gpu_milli for p in pods):
        pool = sorted(pods, key=lambda p: p.name)
        while True:
            extra = pool[rng.randrange(len(pool))]
            if total + extra.total_gpu_milli > target:
                break
            chosen.append(extra)
            total += extra.total_gpu_milli
    rng.shuffle(chosen)
    return _labelled(chosen)


def load_arrivals(path: str | Path, pods: list[PodSpec]) -> list[Arrival]:
    """A given arrival sequence: JSON lines in arrival order with "pod": "<name>#<k>"."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such arrivals file")
    by_name = {p.name: p for p in pods}
    out: list[Arrival] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as handle:
        for line, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{path}:{line}: not JSON ({exc.msg})") from None
            label = record.get("pod") if isinstance(record, dict) else None
            if not isinstance(label, str) or "#" not in label:
                raise TraceError(f"{path}:{line}: pod must be a string '<name>#<k>', got {label!r}")
            name, _, k = label.rpartition("#")
            if not k.isdigit():
                raise TraceError(f"{path}:{line}: pod {label!r}: copy number after '#' must be an integer")
            if name not in by_name:
                raise TraceError(f"{path}:{line}: pod {name!r} is not in the pod list")
            if label in seen:
                raise TraceError(f"{path}:{line}: pod {label!r} arrives twice")
            seen.add(label)
            out.append(Arrival(label, by_name[name]))
    if not out:
        raise TraceError(f"{path}: no arrivals")
    return out
