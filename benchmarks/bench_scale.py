"""How Fleetcast scales: wall time, peak memory and output size as a run grows.

    python benchmarks/bench_scale.py                     # both cases at 10k, 100k and 1M requests
    python benchmarks/bench_scale.py a --sizes 10000 100000
    python benchmarks/bench_scale.py --month             # a synthetic month, steps bucketed
    python benchmarks/bench_scale.py --tree /tmp/old     # the same runs of another checkout too

Cases (issue 14):
  (a) Llama-2-7B on one A100-80G, vLLM, Poisson at 6 requests/s, 512 prompt / 128 output tokens;
  (b) Llama-3.1-8B on 8 H100-SXM replicas, vLLM, Poisson at 40 requests/s, 512 / 128 tokens.
  month: 30 days of the ``daily`` workload's diurnal profile at a mean of 0.5 requests/s
         (~1.3M requests) on case (a)'s deployment, with ``output.steps=bucketed``.

Each run is a fresh ``python -m sim ... output_dir=TMP`` process, as a user runs it: the time is
the whole process (start-up, simulation, files written), the peak is the process's maximum
resident set size (``wait4``'s ``ru_maxrss``), the sizes are the files it wrote. For each case the
script first runs one request (the fixed cost: start-up and writing), then says how the time
beyond that fixed cost, the peak memory and the output size grow between the two largest sizes,
as the exponent ``k`` of ``n^k`` (1 = linear, 0 = flat), and whether that is linear. Time and
output should grow linearly; memory sub-linearly, since rows stream to disk as the run goes.
What memory holds beyond start-up is bounded by constants (up to one row group of request rows,
``ROW_GROUP_ROWS`` = 1Mi rows or ~100 MB, waiting to be written; the step spill's
``SPILL_BYTES``; at the end, one row group of steps being encoded) plus what grows with the
requests: the workload's arrays and the summary's per-request columns (~130 bytes a request).
Below a million requests the constants are still filling up, so the exponent of the peak says
less than the bytes per request printed with it.

``--tree PATH`` runs every measurement a second time with ``PYTHONPATH=PATH`` (another checkout,
for example the commit before a change) in the same invocation, so before/after figures come
from one machine at one time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench_speed import SCENARIOS  # this folder is on sys.path when a benchmark runs

# (a) is bench_speed's (a) with the request count left to --sizes
DEPLOYMENTS = {
    "a": [o for o in SCENARIOS["a"] if not o.startswith("workload.num_requests=")],
    "b": [
        "model=llama31_8b",
        "hardware=h100_sxm",
        "fleet.replicas=8",
        "scheduler=vllm",
        "workload=poisson",
        "workload.qps=40",
        "workload.prompt_tokens=512",
        "workload.output_tokens=128",
    ],
}
MONTH = [
    *(o for o in DEPLOYMENTS["a"] if not o.startswith("workload")),  # (a)'s deployment
    "workload=daily",
    "workload.qps=0.5",
    f"workload.duration_s={30 * 86400}",
    "workload.prompt_tokens=512",
    "workload.output_tokens=128",
    "output.steps=bucketed",
]
SIZES = (10_000, 100_000, 1_000_000)
TARGET_S, TARGET_GB = 60.0, 2.0  # issue 14's targets for a million requests on 2 cores
LINEAR = (0.85, 1.15)  # exponents k of n^k read as linear growth


@dataclass(frozen=True)
class Measure:
    wall_s: float
    peak_gb: float
    files_mb: dict[str, float]
    num_requests: int


def measure(overrides: list[str], tree: str | None) -> Measure:
    """One ``python -m sim`` process: its wall time, peak RSS and the files it wrote."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = tree
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "sim", *overrides, "sim.progress=false", f"output_dir={out}"]
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=out, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode() if proc.stderr else ""
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err}")
        files = {p.name: p.stat().st_size / 1e6 for p in Path(out).glob("*.parquet")}
        summary = json.loads((Path(out) / "summary.json").read_text())
    # ru_maxrss is in KiB on Linux
    return Measure(wall, usage.ru_maxrss * 1024 / 1e9, files, summary["num_requests"])


def exponent(small: tuple[int, float], large: tuple[int, float]) -> float:
    """``k`` in ``value ~ n^k`` between two sizes."""
    (n1, v1), (n2, v2) = small, large
    return math.log(v2 / v1) / math.log(n2 / n1)


def growth_word(k: float) -> str:
    if k < LINEAR[0]:
        return "sub-linear"
    return "linear" if k <= LINEAR[1] else "SUPER-LINEAR"


def growth_verdict(sizes: list[int], runs: list[Measure], fixed: Measure) -> list[str]:
    """For time beyond the fixed cost, peak memory and output size: the exponent ``k`` of
    ``n^k`` between the two largest sizes, and whether that is linear growth."""
    if len(sizes) < 2:
        return ["one size only: no growth to judge"]
    (n1, small), (n2, large) = (sizes[-2], runs[-2]), (sizes[-1], runs[-1])
    quantities = {
        "time beyond the fixed cost": (
            max(small.wall_s - fixed.wall_s, 1e-3),
            max(large.wall_s - fixed.wall_s, 1e-3),
        ),
        "peak memory": (small.peak_gb, large.peak_gb),
        "output size": (sum(small.files_mb.values()), sum(large.files_mb.values())),
    }
    lines = []
    for name, (v1, v2) in quantities.items():
        k = exponent((n1, v1), (n2, v2))
        lines.append(f"{name}: n^{k:.2f} from {n1:,} to {n2:,} requests, {growth_word(k)}")
    per_request = (large.peak_gb - small.peak_gb) * 1e9 / (n2 - n1)
    lines.append(f"peak memory added per request: {per_request:,.0f} bytes")
    return lines


def run_case(name: str, overrides: list[str], sizes: list[int], trees: list[str | None]) -> None:
    for tree in trees:
        label = f"({name})" + (f" PYTHONPATH={tree}" if tree else "")
        one = measure([*overrides, "workload.num_requests=1"], tree)
        print(
            f"{label}  one request (the fixed cost): {one.wall_s:.2f} s, peak {one.peak_gb:.2f} GB"
        )
        runs = []
        for n in sizes:
            m = measure([*overrides, f"workload.num_requests={n}"], tree)
            runs.append(m)
            files = ", ".join(f"{k} {v:,.1f} MB" for k, v in sorted(m.files_mb.items()))
            print(
                f"    {n:>9,} requests: {m.wall_s:7.1f} s  peak {m.peak_gb:5.2f} GB  {files}",
                flush=True,
            )
            if n == 1_000_000:
                ok = m.wall_s < TARGET_S and m.peak_gb < TARGET_GB
                print(
                    f"        target < {TARGET_S:.0f} s and < {TARGET_GB:.0f} GB: "
                    f"{'met' if ok else 'MISSED'}"
                )
        for line in growth_verdict(sizes, runs, one):
            print(f"    {line}", flush=True)


def run_month(trees: list[str | None]) -> None:
    for tree in trees:
        m = measure(MONTH, tree)
        files = ", ".join(f"{k} {v:,.1f} MB" for k, v in sorted(m.files_mb.items()))
        print(
            f"(month){' PYTHONPATH=' + tree if tree else ''} 30 days, {m.num_requests:,} "
            f"requests: {m.wall_s:.1f} s  peak {m.peak_gb:.2f} GB  {files}",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", metavar="{a,b}", help="which cases (default: both)")
    parser.add_argument(
        "--sizes", nargs="+", type=int, default=list(SIZES), help="request counts per case"
    )
    parser.add_argument("--month", action="store_true", help="only the synthetic month's replay")
    parser.add_argument(
        "--tree", help="also measure this checkout (PYTHONPATH=TREE), in the same invocation"
    )
    args = parser.parse_args()
    for key in args.cases:
        if key not in DEPLOYMENTS:
            parser.error(f"unknown case {key!r}; choose from {', '.join(DEPLOYMENTS)}")
    if any(n < 1 for n in args.sizes):
        parser.error(f"--sizes must be positive request counts, got {args.sizes}")
    trees: list[str | None] = [None] + ([args.tree] if args.tree else [])
    if args.month:
        run_month(trees)
    else:
        for key in args.cases or sorted(DEPLOYMENTS):
            run_case(key, DEPLOYMENTS[key], sorted(args.sizes), trees)
