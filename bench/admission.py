"""Admission benchmark: Kueue's baseline scheduler-performance fixture through Fleetdeck's real
path (PostgreSQL, placement rounds, the simulated executor), side by side with Kueue's numbers.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleetdeck_admission \
        .venv/bin/python bench/admission.py [--speedup 4 | --speedup 4,5,6] [--scale 0.1 | --workloads N]

30 queues in 5 cohorts (nominal 20 GPUs, borrowing limit 100) on 600 GPUs (75 nodes x 8);
15,000 workloads: small/medium/large asking 1/5/20 GPUs, running 200 ms/500 ms/1 s, one every
100/500/1,200 ms per queue. Prints wall time, admissions per wall second, mean quota usage and
mean time to admission per class; with several speed-ups, one run each and a table side by
side. The goal (issue 6): >= 430 admissions/s at >= 55.9 % quota usage. A scratch database
`<name>_admission_bench` is created next to DATABASE_URL's and dropped afterwards. Details:
bench/admission_loop.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.admission_loop import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
