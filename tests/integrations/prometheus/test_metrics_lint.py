"""Fleetdeck's own /metrics passes `promtool check metrics` (names with units, `_total` only on
counters), with every collector reporting something: a running gang, a repair ticket, rounds."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.cluster import api_for, run_round, submit, training
from tests.conftest import missing_service


@pytest.fixture
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        missing_service("promtool (Debian package prometheus)")
    return path


def test_metrics_pass_promtool_check_metrics(research_queue, team_member, client, promtool, allocation_collector):
    submit(api_for(team_member), **training("train-A", 16))
    run_round()

    text = client.get("/metrics").content

    assert b"fleetdeck_gpu_allocated_share{" in text
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert result.returncode == 0 and not result.stdout and not result.stderr, (result.stdout + result.stderr).decode()
