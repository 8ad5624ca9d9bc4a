"""bench/prometheus_pages.py runs end to end at a toy size, in a process of its own (as one runs it):
both paths find the same idle GPUs and the Prometheus path stores no minute row, with either way of
filling the two stores (promtool and the scrape path; the Go block writer and SQL, used at full size)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import missing_service
from tests.integrations.prometheus.servers import binaries

ROOT = Path(__file__).resolve().parents[2]


def _run(*extra: str) -> str:
    if binaries() is None:
        missing_service("prometheus and promtool (Debian package prometheus)")
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE"}}
    result = subprocess.run(
        [sys.executable, "bench/prometheus_pages.py", "--gpus", "160", "--days", "1", "--history-hours", "0.6",
         "--repeat", "1", *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "SCALED DOWN (--history-hours 0.6)" in out
    # 160 GPUs x 37 minute rows (36 minutes back and the latest one) in the built-in store.
    assert "built-in: 5,920 minute rows" in out
    # 160 GPUs x 145 samples (36 minutes at 15 s), and a day of 15 s samples (5,761) for each queue series.
    samples = int(out.split("prometheus: ")[1].split(" samples")[0].replace(",", ""))
    assert samples > 160 * 145 and (samples - 160 * 145) % 5761 == 0
    found = [line for line in out.splitlines() if "idle allocated GPUs found" in line]
    assert len(found) == 2 and found[0].split(":")[1] == found[1].split(":")[1]
    assert "Prometheus  GET / (overview)" in out and "0 rows 0.00 GB/day" in out
    assert "the Prometheus path stored 0 minute rows" in out
    return out


@pytest.mark.slow
def test_the_prometheus_pages_bench_runs_at_a_toy_size():
    out = _run()

    assert "backfilled with promtool" in out and "readings_store every minute" in out


@pytest.mark.slow
def test_the_full_size_fills_block_writer_and_sql_give_the_same_stores_at_a_toy_size(require_postgres):
    if shutil.which("go") is None:
        missing_service("go (builds bench/tsdb_backfill)")
    out = _run("--backfill", "blockwriter", "--builtin-fill", "sql")

    assert "backfilled with tsdb.BlockWriter" in out and "INSERT ... SELECT" in out
