"""How many simulations `fleetcast plan`'s search needs, against a full grid over the same
replica range.

    python benchmarks/bench_plan.py [--max-replicas 32]

Plans the first 10 minutes of the Azure 2023 conversation trace at 10x its rate (P99 TTFT
<= 2 s, P99 TPOT <= 0.1 s) on three GPUs with the roofline, without the what-ifs, and counts
the simulations of each candidate's search (every replication of every count tried). A full
grid simulates every count from 1 to ``--max-replicas`` at the minimum replications per count
(3) at least: the figure printed is the search's share of that (target: a third or less).
"""

from __future__ import annotations

import argparse
import tempfile
import time

from sim.plan.planner import run_plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-replicas", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleetcast_bench_plan_") as folder:
        started = time.perf_counter()
        _, plan = run_plan(
            [
                "workload.rate_scale=10",
                "plan.slo=[ttft_s.p99 <= 2, tpot_s.p99 <= 0.1]",
                "plan.grid={hardware: [a100_80g, h100_sxm, h200]}",
                f"plan.max_replicas={args.max_replicas}",
                "plan.step_time_scales=[]",
                "plan.rate_scales=[]",
                "plan.max_headroom=null",
                f"plan.output_dir={folder}",
            ],
            progress=False,
        )
        elapsed = time.perf_counter() - started
    grid = args.max_replicas * 3
    total = 0
    print(
        f"{'candidate':<22}{'replicas':>9}{'counts':>8}{'simulations':>13}{'grid':>6}{'share':>8}"
    )
    for c in plan["candidates"]:
        sims = sum(p["replications"] for p in c["evaluated"])
        total += sims
        print(
            f"{c['candidate']:<22}{c['replicas'] or '-':>9}{len(c['evaluated']):>8}"
            f"{sims:>13}{grid:>6}{sims / grid:>8.0%}"
        )
    count = len(plan["candidates"])
    print(
        f"all: {total} simulations against {grid * count} for a full grid "
        f"({total / (grid * count):.0%}); {elapsed:.1f} s wall"
    )


if __name__ == "__main__":
    main()
