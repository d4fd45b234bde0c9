"""How many simulation jobs a sweep completes per minute on this machine.

    python benchmarks/bench_sweep.py              # the 200-job sweep (issue 4's target)
    python benchmarks/bench_sweep.py --jobs 40    # a smaller one

Each job is a realistic one: the first 10 minutes of the Azure 2023 conversation trace (2,867
requests) on a small fleet. The sweep is 2 GPU types x 2 weight precisions x 5 replica counts x
10 ``max_num_seqs`` values = 200 jobs, run with the default launcher (Hydra's joblib launcher,
one worker per core) through the ``fleetcast -m`` command, so start-up, launcher overhead and
file writing are all counted. BLIS (Go) reports 1,000 configurations in about 13 minutes, about
77 a minute.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = {
    "hardware": ["h100_sxm", "h200"],
    "precision.weights": ["bf16", "fp8"],
    "fleet.replicas": ["1", "2", "3", "4", "5"],
    "scheduler.max_num_seqs": ["8", "16", "32", "48", "64", "96", "128", "192", "256", "512"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs to run (a prefix of the grid)")
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="parallel jobs (2: the figure is for a 2-core machine)",
    )
    args = parser.parse_args()
    grid = dict(GRID)
    # shrink the last axes first until the grid has at most --jobs combinations
    while _size(grid) > args.jobs:
        key = max(grid, key=lambda k: len(grid[k]))
        grid[key] = grid[key][:-1]
    n = _size(grid)
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            "-m",
            "sim",
            "-m",
            *(f"{k}={','.join(v)}" for k, v in grid.items()),
            f"hydra.launcher.n_jobs={args.workers}",
            f"output_dir={out}",
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"sweep failed:\n{proc.stderr[-2000:]}")
        done = sum(1 for p in Path(out).iterdir() if (p / "summary.json").exists())
    print(
        f"{done}/{n} jobs in {wall:.1f} s with {args.workers} workers on {os.cpu_count()} "
        f"cores: {done / wall * 60:.0f} jobs/minute (target: 200 jobs in under 120 s)"
    )


def _size(grid: dict) -> int:
    size = 1
    for values in grid.values():
        size *= len(values)
    return size


if __name__ == "__main__":
    main()
