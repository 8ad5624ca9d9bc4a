"""Ingest benchmark: DCGM exposition and kernel-log parsing, ours vs naive baselines, side by side.

    .venv/bin/python bench/ingest.py                       # 1,000 nodes x 8 GPUs, 200,000 kernel-log lines
    .venv/bin/python bench/ingest.py --nodes 200 --log-lines 50000
    .venv/bin/python bench/ingest.py --store               # also time the Django store path (see STORE_HOOK),
                                                           # in a scratch SQLite database
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleetdeck .venv/bin/python bench/ingest.py --store
                                                           # PostgreSQL: in a scratch database next to that one
                                                           # (fleetdeck_bench), created if missing

Every time is wall clock (time.perf_counter); the machine's load changes it, so compare rows of one run.

DCGM: one exposition payload per node (8 GPUs x 43 metrics with dcgm-exporter's names and labels, pods on
GPUs 0-5, GPUs 6-7 idle), scraped 15 s apart: the same labels and lines, values of each moment. Values
have the shapes of the captured dumps in shared/telemetry/dcgm (see SOURCES.md there): integer
temperatures (55-85 C busy, 25-40 idle), integer utilisation 0-100, integer FB_USED/FB_FREE MiB summing to
81,559 (a job's memory stays put between scrapes), power with milliwatt resolution printed "%f" (8.969000),
6-decimal profiling ratios (0.000000 on idle GPUs), integer counters, fault counters at 0 and the
NOT_SUPPORTED blank sentinel for memory temperature. "GPU-samples" are GPU readings (one GPU at one
scrape); metric samples are exposition lines. Parsers, compared doing the same work: every metric family
(ours = health.core.dcgm.parse_exposition; prometheus_client as written = parse_exposition_reference, the
whole text through its parser; naive regex = one regex per line, no escapes, no sentinels, no HELP/TYPE
checks: fast and wrong on edge cases), then only the families the store reads (FIELD_METRICS; ours in
the store path's mode, the reference in the same mode, naive regex skipping other names before reading
labels).
Store (--store): bench.ingest_store.store_payloads, i.e. health.services.dcgm_ingest_many in batches of
health.services.scrape.BATCH nodes, as the scrape runs it, parse included, wall clock (the database's
work counts; it runs on the same CPUs). Each measurement runs in worker processes forked from this one
before it stored anything (as Celery's prefork pool starts its children); each opens its own database
connection inside its first timed scrape. Headline: a new worker's first scrape of the whole fleet
(cold: fresh connection and server backend, SQL not yet built, a new minute, so minute rows are
inserted). Beside it, the same worker's next scrapes: 15 s later (the latest rows updated, the minute's
rows already there: 3 scrapes in 4) and a minute later (a new minute's rows too: 1 in 4). The latest
rows of every GPU exist before (an untimed scrape by another child). Beside them, the CPU a scrape costs
per 1,000 readings in the worker and in its PostgreSQL backend (read from /proc), and what the machine's
CPUs can therefore run for all workers together: the ceiling the scaling rows meet when the workers and
the database share the CPUs. Scaling: 1, 2 and 4 worker
processes at once, each its own share of the nodes, after one untimed scrape each; GPU-samples/s is all
their readings over the wall time from their common start to the last one's end. Payloads are generated
and the inventory created before, untimed; each timed run starts after a full garbage collection.
Kernel log: noise lines mixed with Xid lines in every prefix format plus near misses (SXid, _kgspLogXid119).
ours = health.core.kernel_log.parse_lines; naive = one big regex on every line, no pre-filter.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import multiprocessing
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import django  # noqa: E402
import psycopg  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402
from psycopg import sql  # noqa: E402

from health.core import dcgm, kernel_log  # noqa: E402

# Contract for the Django store path, implemented by the health app (not here):
#   store_payloads(payloads: Sequence[tuple[str, str]], *, now: datetime, latencies=None, nodes=None) -> int
#   payloads are (node_name, exposition_text) with node names bench-0000...; the function prepares
#   whatever rows it needs, stores every reading through the real ingest service, and returns the
#   number of GPU readings stored.
STORE_HOOK = "bench.ingest_store:store_payloads"

GAUGES = [
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_EXP_XID_ERRORS_COUNT",
]
COUNTERS = [
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
    "DCGM_FI_DEV_RELIABILITY_VIOLATION",
]
HEALTHY_ZERO = frozenset({
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
    "DCGM_FI_DEV_RELIABILITY_VIOLATION",
})
H100_BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
FB_TOTAL_MIB = 81559  # H100 80GB HBM3: FB_USED + FB_FREE (FB_RESERVED printed as 0 here)
BUSY_GPUS = 6  # GPUs 0-5 of every node run a pod; 6 and 7 idle


class SimulatedNode:
    """What stays put between two scrapes of a node: its GPUs' UUIDs and labels, which GPUs run a job,
    the memory each job holds (a training job's framebuffer use is flat), its energy counters."""

    def __init__(self, node: int, rng: random.Random) -> None:
        self.node = node
        self.host = f"bench-{node:04d}"
        self.labels = []
        for gpu, bus in enumerate(H100_BUSES):
            uuid = f"GPU-{node:08x}-{gpu:04x}-4cc8-97e4-e817{rng.getrandbits(24):06x}"
            base = (f'gpu="{gpu}",UUID="{uuid}",pci_bus_id="00000000:{bus}:00.0",device="nvidia{gpu}",'
                    f'modelName="NVIDIA H100 80GB HBM3",Hostname="{self.host}",DCGM_FI_DRIVER_VERSION="565.57.01"')
            if gpu < BUSY_GPUS:
                base += f',container="trainer",namespace="team-{node % 7}",pod="train-{node}-{gpu // 2}"'
            self.labels.append(base)
        self.fb_used = [rng.randint(20_000, 80_000) if gpu < BUSY_GPUS else 0 for gpu in range(len(H100_BUSES))]
        self.energy = [rng.randint(10**9, 10**11) for _ in H100_BUSES]


def _value(rng: random.Random, name: str, state: SimulatedNode, gpu: int) -> str:
    """A value as dcgm-exporter prints it (shapes from the captured dumps in shared/telemetry/dcgm):
    integers for temperatures, utilisation, clocks, MiB and counters, 6-decimal floats for power and
    profiling ratios, the NOT_SUPPORTED sentinel for memory temperature."""
    busy = gpu < BUSY_GPUS
    if name == "DCGM_FI_DEV_MEMORY_TEMP":
        return "9223372036854775794"  # NOT_SUPPORTED sentinel, as on the dcgm-exporter README
    if name in HEALTHY_ZERO:
        return "0"  # a healthy fleet: fault counters at zero, so the store path measures storing, not remediation
    if name == "DCGM_FI_DEV_GPU_TEMP":
        return str(rng.randint(55, 85) if busy else rng.randint(25, 40))
    if name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"):
        return str(rng.randint(60, 100) if busy else 0)
    if name == "DCGM_FI_DEV_SM_CLOCK":
        return "1980" if busy else "345"
    if name == "DCGM_FI_DEV_MEM_CLOCK":
        return "2619"
    if name == "DCGM_FI_DEV_FB_USED":
        return str(state.fb_used[gpu])
    if name == "DCGM_FI_DEV_FB_FREE":
        return str(FB_TOTAL_MIB - state.fb_used[gpu])
    if name == "DCGM_FI_DEV_POWER_USAGE":  # milliwatt resolution, printed %f ("8.969000")
        return f"{rng.randint(250_000, 700_000) / 1000 if busy else rng.randint(60_000, 80_000) / 1000:.6f}"
    if name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
        state.energy[gpu] += rng.randint(1_000_000, 10_000_000)  # mJ since boot: 15 s at 70-700 W
        return str(state.energy[gpu])
    if name in ("DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"):
        return str(rng.randint(10**6, 10**9) if busy else rng.randint(0, 10**4))
    if name.startswith("DCGM_FI_PROF_"):
        return f"{rng.random():.6f}" if busy else "0.000000"
    if name == "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS":
        return rng.choice(["0", "1", "4"])
    return str(rng.randint(0, 10**6))  # NVLink bytes, violation microseconds: counters that grow


def node_payload(state: SimulatedNode, rng: random.Random) -> str:
    """One scrape of the node: the same families, labels and order every time, values of this moment."""
    lines: list[str] = []
    for name in GAUGES + COUNTERS:
        lines.append(f"# HELP {name} {name.lower().replace('_', ' ')}.")
        lines.append(f"# TYPE {name} {'counter' if name in COUNTERS else 'gauge'}")
        for gpu, label in enumerate(state.labels):
            lines.append(f"{name}{{{label}}} {_value(rng, name, state, gpu)}")
    return "\n".join(lines) + "\n"


_NAIVE_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}\s+(\S+)$')
_NAIVE_LABEL = re.compile(r'(\w+)="([^"]*)"')


def naive_dcgm(text: str, keep: frozenset[str] | None = None) -> int:
    """Baseline: regex per line into {uuid: {metric: value}}; returns the GPU count. `keep`: read only
    those metric names (the store's families), others skipped before their labels are read."""
    gpus: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        match = _NAIVE_SAMPLE.match(line)
        if match is None or (keep is not None and match.group(1) not in keep):
            continue
        labels = dict(_NAIVE_LABEL.findall(match.group(2)))
        gpus.setdefault(labels.get("UUID", ""), {})[match.group(1)] = float(match.group(3))
    return len(gpus)


def ours_store_mode(text: str) -> int:
    return len(dcgm.parse_exposition(text, all_metrics=False))


def ours_all_metrics(text: str) -> int:
    return len(dcgm.parse_exposition(text))


def reference_dcgm(text: str) -> int:
    return len(dcgm.parse_exposition_reference(text))


def reference_store_mode(text: str) -> int:
    return len(dcgm.parse_exposition_reference(text, all_metrics=False))


def naive_store_mode(text: str) -> int:
    return naive_dcgm(text, dcgm.FIELD_METRICS)


def time_payloads(fn: Callable[[str], int], payloads: Sequence[str]) -> tuple[float, int, list[float]]:
    """Wall seconds for all payloads, GPUs read, wall seconds per payload."""
    latencies = []
    gpus = 0
    gc.collect()
    started = time.perf_counter()
    for text in payloads:
        t0 = time.perf_counter()
        gpus += fn(text)
        latencies.append(time.perf_counter() - t0)
    return time.perf_counter() - started, gpus, latencies


NOISE = [
    "[ {t:.6f}] usb 1-1: new high-speed USB device number 2 using xhci_hcd",
    "[ {t:.6f}] mlx5_core 0000:{b}:00.0: mlx5_cmd_out_err:838: QUERY_HCA_CAP(0x100) op_mod(0x0) failed",
    "May  7 09:01:02 {h} systemd[1]: Started Session 42 of user root.",
    "May  7 09:01:02 {h} kernel: [ {t:.6f}] EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode.",
    "2024-05-07T09:01:02.123456+00:00 {h} kernel: audit: type=1400 audit({t:.3f}:7): apparmor=\"STATUS\"",
    "May  7 09:01:02 {h} kubelet[2211]: I0507 09:01:02.123 4112 kubelet.go:2412] SyncLoop (PLEG)",
    "[ {t:.6f}] eth0: renamed from veth3f2a1b9",
    "May  7 09:01:02 {h} containerd[1022]: time=\"2024-05-07T09:01:02Z\" level=info msg=\"StartContainer\"",
]
# Lines a sloppy matcher mistakes for Xids; they make up `near_miss_share` of the log.
NEAR_MISSES = [
    "[ {t:.6f}] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  565.57.01  Thu Oct 10 12:29:05 UTC 2024",
    "[ {t:.6f}] nvidia-nvswitch2: SXid (PCI:0000:{b}:00.0): 24007, Severity 1 Engine instance 12",
    "[ {t:.6f}] NVRM: _kgspLogXid119: ******************** GSP Timeout ********************",
    "[ {t:.6f}] NVRM: GPU0 _kgspRpcGspEventPmuHalted: Received signal from GSP that PMU has halted.",
]
XID_LINES = [
    "[ {t:.6f}] NVRM: Xid (PCI:0000:{b}:00): 79, pid=0, GPU has fallen off the bus.",
    "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:{b}:00): 13, pid='<unknown>', name=<unknown>, Graphics SM",
    "May  7 09:01:02 {h} kernel: [ {t:.6f}] NVRM: Xid (PCI:0000:{b}:00): 48, pid='<unknown>', name=<unknown>, DBE",
    "2024-05-07T09:01:02.123456+00:00 {h} kernel: NVRM: Xid (PCI:0000:{b}:00): 119, pid=1, name=python, Timeout",
    '{{"log":"NVRM: Xid (PCI:0000:{b}:00): 31, pid=7, name=a, MMU Fault\\n","time":"2024-05-07T09:01:02Z"}}',
    "NVRM: Xid (0000:{b}:00): 13, 0001 00000000 0000a097",
]


def kernel_log_lines(
    count: int, rng: random.Random, xid_share: float = 0.01, near_miss_share: float = 0.02
) -> list[str]:
    lines = []
    for _ in range(count):
        draw = rng.random()
        pool = XID_LINES if draw < xid_share else NEAR_MISSES if draw < xid_share + near_miss_share else NOISE
        template = rng.choice(pool)
        lines.append(template.format(t=rng.uniform(1, 900000), b=rng.choice(H100_BUSES).lower(), h="gpu-017"))
    return lines


_NAIVE_XID = re.compile(r"Xid.*?\((?:PCI:)?([0-9A-Fa-f:.]+)\):\s*(\d+),?\s*(.*)")


def naive_kernel_log(lines: Sequence[str]) -> int:
    """Baseline: one big regex on every line, no pre-filter (and no idea what an SXid is)."""
    return sum(1 for line in lines if _NAIVE_XID.search(line))


def ours_kernel_log(lines: Sequence[str]) -> int:
    return sum(1 for event in kernel_log.parse_lines(lines) if event.kind == kernel_log.KIND_XID)


def _ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000 if len(values) > 1 else values[0] * 1000


Scrapes = list[list[tuple[str, str]]]  # per scrape: (node name, exposition text) per node


def bench_dcgm(nodes: int, rng: random.Random) -> Scrapes:
    """Three scrapes of the fleet, 15 s apart: the same nodes, labels and families, values of each moment."""
    print(f"generating DCGM payloads: {nodes} nodes x 8 GPUs x {len(GAUGES) + len(COUNTERS)} metrics, 3 scrapes ...")
    states = [SimulatedNode(n, rng) for n in range(nodes)]
    scrapes = [[node_payload(state, rng) for state in states] for _scrape in range(3)]
    samples = sum(text.count("\n") for text in scrapes[0]) - nodes * 2 * (len(GAUGES) + len(COUNTERS))
    print(f"\nDCGM exposition: {nodes} payloads a scrape, {samples:,} metric samples (wall clock)")
    print(f"{'parser':50} {'GPU-samples/s':>14} {'metric samples/s':>17} {'p50 ms/payload':>15} "
          f"{'p99 ms/payload':>15} {'GPUs':>7}")
    for group, parsers in (
        ("every metric family", (("ours", ours_all_metrics), ("prometheus_client as written (reference)",
                                 reference_dcgm), ("naive regex per line (baseline)", naive_dcgm))),
        ("only the families the store reads", (("ours, store mode", ours_store_mode), (
            "prometheus_client as written, store mode", reference_store_mode),
            ("naive regex per line, store's names only", naive_store_mode))),
    ):
        print(f"  {group}:")
        for label, fn in parsers:
            seconds, gpus, latencies = time_payloads(fn, scrapes[0])
            print(f"  {label:48} {gpus / seconds:14,.0f} {samples / seconds:17,.0f} {_ms(latencies, 50):15.2f} "
                  f"{_ms(latencies, 99):15.2f} {gpus:7,}")
    return [[(state.host, text) for state, text in zip(states, texts, strict=True)] for texts in scrapes]


def bench_kernel_log(count: int, rng: random.Random) -> None:
    lines = kernel_log_lines(count, rng)
    rows = []
    for label, fn in (("ours (pre-filter + regex)", ours_kernel_log),
                      ("naive: one regex on every line (baseline)", naive_kernel_log)):
        started = time.perf_counter()
        found = fn(lines)
        rows.append((label, count / (time.perf_counter() - started), found))
    true_xids = sum(1 for line in lines if "NVRM: Xid" in line)
    print(f"\nKernel log: {count:,} lines, {true_xids:,} real Xid lines (plus SXid / _kgspLogXid119 near misses)")
    print(f"{'parser':42} {'lines/s':>14} {'Xids reported':>14}")
    for label, rate, found in rows:
        print(f"{label:42} {rate:14,.0f} {found:14,}")


SCALING = (1, 2, 4)  # worker processes at once
BENCH_SUFFIX = "_bench"


def _scratch_database() -> tempfile.TemporaryDirectory | None:
    """Never the developer's own database: DATABASE_URL's PostgreSQL database with "_bench" appended
    (created where missing), or without DATABASE_URL a scratch SQLite file (the directory returned)."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        scratch = tempfile.TemporaryDirectory(prefix="fleetdeck-bench-")
        os.environ["DATABASE_URL"] = f"sqlite:///{Path(scratch.name) / 'bench.sqlite3'}"
        return scratch
    parts = urlsplit(url)
    if parts.scheme.startswith("postgres"):
        name = parts.path.lstrip("/") or "fleetdeck"
        name = name if name.endswith(BENCH_SUFFIX) else name + BENCH_SUFFIX
        with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as admin:
            if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path="/" + name))
    return None


def _store_hook():
    module_name, _, function_name = STORE_HOOK.partition(":")
    module = importlib.import_module(module_name)
    return module, getattr(module, function_name)


# One store run in a worker: (index into the scrapes, the scrape's time, whether it waits for the others first).
Run = tuple[int, datetime, bool]


class _Timed(NamedTuple):
    started: float
    ended: float
    cpu: float
    stored: int
    latencies: list[float]
    server_cpu: float | None  # the run's database backend CPU seconds (None: not readable here)


def _server_cpu() -> float | None:
    """CPU seconds the default connection's PostgreSQL backend has used, read from /proc (the server
    runs on this machine, as in the bench's runs); None for SQLite, no connection yet, or a server whose
    backend this machine cannot see. The server's background processes (WAL writer, checkpointer) are
    not counted."""
    connection = connections["default"]
    if connection.vendor != "postgresql" or connection.connection is None:
        return None
    pid = connection.connection.info.backend_pid
    try:
        if b"postgres" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _worker(scrapes: Scrapes, share: slice, nodes: dict, runs: list[Run], barrier, results) -> None:
    """One worker process: its own connection (opened inside its first run), then its runs in order."""
    connections.close_all()  # a forked child never shares its parent's connection
    _module, store = _store_hook()
    timed = []
    for scrape, now, together in runs:
        payloads = scrapes[scrape][share]
        gc.collect()
        if together:
            barrier.wait()
        server_before = _server_cpu() or 0.0  # 0 before the first run: its backend starts inside it
        started, cpu = time.perf_counter(), time.process_time()
        latencies: list[float] = []
        stored = store(payloads, now=now, nodes=nodes, latencies=latencies)
        ended, cpu = time.perf_counter(), time.process_time() - cpu
        server = _server_cpu()
        timed.append(_Timed(started, ended, cpu, stored, latencies, None if server is None else server - server_before))
    results.put(timed)
    connections.close_all()


def _in_workers(scrapes: Scrapes, nodes: dict, shares: list[slice], runs: list[Run]) -> list[list[_Timed]]:
    """Each share of the nodes in a worker process of its own, forked from this one, all at once."""
    context = multiprocessing.get_context("fork")  # the children inherit the generated payloads
    barrier, results = context.Barrier(len(shares)), context.Queue()
    connections.close_all()
    children = [context.Process(target=_worker, args=(scrapes, share, nodes, runs, barrier, results))
                for share in shares]
    for child in children:
        child.start()
    out = [results.get(timeout=900) for _ in children]
    for child in children:
        child.join()
        if child.exitcode:
            raise RuntimeError(f"a bench worker failed (exit code {child.exitcode})")
    return out


def _row(label: str, runs: list[_Timed], note: str = "") -> None:
    stored = sum(run.stored for run in runs)
    wall = max(run.ended for run in runs) - min(run.started for run in runs)
    latencies = [x for run in runs for x in run.latencies]
    cpu = f"{stored / sum(run.cpu for run in runs):12,.0f}" if len(runs) == 1 else f"{'':12}"
    print(f"{label:58} {stored / wall:14,.0f} {cpu} {_ms(latencies, 50):15.2f} {_ms(latencies, 99):15.2f}  {note}")


def _next_minute(module) -> datetime:
    """A minute after anything the scratch database holds (earlier runs wrote minutes ahead of the clock)."""
    latest = module.latest_minute()
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return max(now, latest or now) + timedelta(minutes=1)


def bench_store(scrapes: Scrapes) -> int:
    """Parse + store (the store hook: health.services.dcgm_ingest_many, batches of nodes), in worker
    processes forked from this one: a new worker's first scrape, its next two, then 1, 2 and 4 at once."""
    scratch = _scratch_database()  # kept alive (a TemporaryDirectory) until the bench returns
    try:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        django.setup()
        call_command("migrate", verbosity=0, interactive=False)
        module, _store = _store_hook()
    except (ImportError, AttributeError) as exc:
        print(f"\n--store: the Django store path {STORE_HOOK} is not importable ({exc}).")
        print("Hint: the health app provides store_payloads(payloads, *, now) -> int; see STORE_HOOK in this file.")
        return 2
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    count = len(scrapes[0])
    nodes = module.prepare_payloads(scrapes[0])  # creating the inventory is not timed
    base = _next_minute(module)
    everything = [slice(None)]
    # The latest row of every GPU exists before the timed runs, as in a running fleet (untimed, in a child).
    _in_workers(scrapes, nodes, everything, [(0, base + timedelta(seconds=5), False)])
    gpus = sum(len(dcgm.parse_exposition(text)) for _, text in scrapes[0][:1]) * count
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nStore path ({STORE_HOOK}, {engine}, {os.cpu_count()} CPUs shared with the database, "
          f"load average {load}): {count} node payloads a scrape, {gpus:,} GPU readings, wall clock")
    print(f"{'path':58} {'GPU-samples/s':>14} {'(CPU time)':>12} {'p50 ms/payload':>15} {'p99 ms/payload':>15}"
          f"  (batches of {module.BATCH}; ms/payload = a batch's wall time / its payloads)")
    minute = base + timedelta(minutes=1)
    cold, steady, next_minute = _in_workers(scrapes, nodes, everything, [
        (0, minute + timedelta(seconds=5), False), (1, minute + timedelta(seconds=20), False),
        (2, minute + timedelta(seconds=65), False)])[0]
    _row("parse + store, a new worker's 1st scrape (cold)", [cold], "headline")
    _row("parse + store, its next scrape, 15 s later (steady)", [steady], "3 scrapes in 4: no new minute rows")
    _row("parse + store, its scrape a minute later (steady)", [next_minute], "1 in 4: the new minute's rows too")
    for label, run in (("cold", cold), ("15 s later", steady)):
        if run.server_cpu is not None:
            per_k = (run.cpu + run.server_cpu) / run.stored * 1000
            print(f"CPU per 1,000 GPU readings ({label}): worker {run.cpu / run.stored * 1e6:.0f} ms (parse and store "
                  f"threads), its database backend {run.server_cpu / run.stored * 1e6:.0f} ms: {os.cpu_count()} CPUs "
                  f"run at most {os.cpu_count() / per_k * 1000:,.0f} GPU-samples/s for all workers together")
    print(f"\nScaling: worker processes at once, each its own share of the {count} nodes, the scrape 15 s after an "
          f"untimed one; {os.cpu_count()} CPUs for the workers and the database together")
    print(f"{'workers':58} {'GPU-samples/s':>14} {'per worker':>12} {'vs 1 worker':>15}")
    one = None
    for k, workers in enumerate(SCALING):
        minute = base + timedelta(minutes=3 + 2 * k)
        runs = _in_workers(scrapes, nodes, [slice(i, None, workers) for i in range(workers)],
                           [(0, minute + timedelta(seconds=5), False), (1, minute + timedelta(seconds=20), True)])
        timed = [worker[-1] for worker in runs]
        rate = sum(t.stored for t in timed) / (max(t.ended for t in timed) - min(t.started for t in timed))
        one = one or rate
        print(f"{f'{workers} worker process' + ('es' if workers > 1 else ''):58} {rate:14,.0f} "
              f"{rate / workers:12,.0f} {rate / one:14.2f}x")
    print("target: >= 10,000 GPU-samples/s per worker (wall clock, cold headline); 2 workers >= 1.7x one")
    del scratch
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--log-lines", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--store", action="store_true", help=f"also time the Django store path ({STORE_HOOK})")
    args = parser.parse_args(argv)
    if args.nodes < 2 or args.log_lines < 1:
        parser.error("--nodes must be at least 2 and --log-lines at least 1")
    rng = random.Random(args.seed)
    scrapes = bench_dcgm(args.nodes, rng)
    bench_kernel_log(args.log_lines, rng)
    return bench_store(scrapes) if args.store else 0


if __name__ == "__main__":
    raise SystemExit(main())
