"""Admission benchmark: Kueue's baseline scheduler-performance fixture through Fleetdeck's
production path (PostgreSQL, Redis, workload_submit per workload, the round task as
round_request queues it, the beat's round and executor tick), side by side with Kueue's numbers.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleetdeck [REDIS_URL=redis://127.0.0.1:6379/0] \
        .venv/bin/python bench/admission.py [--speedup 1] [--api-workers 4] [--worker-processes 1]
        [--scale 0.1 | --workloads N]
        [--mode concurrent|realtime|stepped --submit bulk|service --speedup 4,5,6: extra rows]

30 queues in 5 cohorts (nominal 20 GPUs, borrowing limit 100) on 600 GPUs (75 nodes x 8);
15,000 workloads: small/medium/large asking 1/5/20 GPUs, running 200 ms/500 ms/1 s, one every
100/500/1,200 ms per queue. Prints wall time, admissions per wall second, both usages and mean
time to admission per class, next to the fixture's lower bound (66.8 s in real time: 39,600
GPU-seconds on 600 GPUs, none before it arrives) and Kueue's published run. The headline is the
default: production mode in real time (--speedup 1); issue 18's goal there: wall <= 80 s and every
class's wait below Kueue's. A scratch database `<name>_admission_bench` is created next to
DATABASE_URL's and dropped afterwards. Details: bench/admission_loop.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.admission_loop import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
