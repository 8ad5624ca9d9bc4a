"""bench/prometheus_pages.py runs end to end at a toy size, in a process of its own (as one runs it):
both paths find the same idle GPUs and the Prometheus path stores no minute row."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import missing_service
from tests.integrations.prometheus.servers import binaries

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_prometheus_pages_bench_runs_at_a_toy_size():
    if binaries() is None:
        missing_service("prometheus and promtool (Debian package prometheus)")
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE"}}
    result = subprocess.run(
        [sys.executable, "bench/prometheus_pages.py", "--gpus", "160", "--days", "1", "--history-hours", "0.6",
         "--repeat", "1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "SCALED DOWN (--history-hours 0.6)" in out
    found = [line for line in out.splitlines() if "idle allocated GPUs found" in line]
    assert len(found) == 2 and found[0].split(":")[1] == found[1].split(":")[1]
    assert "Prometheus  GET / (overview)" in out and "0 rows 0.00 GB/day" in out
    assert "the Prometheus path stored 0 minute rows" in out
