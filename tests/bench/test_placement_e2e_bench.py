"""bench/placement_e2e.py runs end to end at a toy size on PostgreSQL, in a process of its own (as
one runs it), and ends with the issue's three goal lines."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.db import connection

from tests.conftest import missing_service

ROOT = Path(__file__).resolve().parents[2]


def test_the_end_to_end_round_bench_prints_the_three_goals_at_a_toy_size():
    db = connection.settings_dict
    if connection.vendor != "postgresql":
        missing_service("PostgreSQL (DATABASE_URL=postgres://...)")
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"} | {"DATABASE_URL": url}
    result = subprocess.run(
        [sys.executable, "-m", "bench.placement_e2e", "--nodes", "40", "--pending", "160", "--sizes", "40"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "considered 160, admitted" in out
    goals = out.split("goals (issue 18 §2) at 40 nodes, load average ")[1].splitlines()
    assert [line.split(")")[0].strip() for line in goals[1:4]] == ["(a", "(b", "(c"]
    assert all("(the goals are set for 5,000 nodes)" in line for line in goals[1:4])
    assert "nothing changed since the last" in goals[1] and "placements/s cold" in goals[3]
