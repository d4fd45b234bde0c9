"""How often the stability verdict is right: stable and overloaded M/D/1 runs over many seeds.

    python benchmarks/bench_stability.py [--seeds 100]

One replica serving one request per 10 ms step (``scheduler.max_num_seqs=1``, one-token
outputs): an M/D/1 queue whose load is the arrival rate over 100 requests/s. For each load and
run length it prints how many seeds get each verdict (sim/output/stability.py). Below load 1
every verdict but ``stable`` is a false alarm; above it, ``unstable`` is right.
"""

from __future__ import annotations

import argparse
import copy
from collections import Counter

from sim.config.compose import compose_config
from sim.run import simulate

VERDICTS = ("stable", "near_saturation", "undetermined", "unstable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    args = parser.parse_args()
    print(f"{'load':>5} {'requests':>9} " + " ".join(f"{v:>16}" for v in VERDICTS))
    for load in (0.5, 0.9, 0.95, 1.1, 1.2, 2.0):
        for n in (300, 1000):
            base = compose_config(
                [
                    "fleet.replicas=1",
                    "step_time=constant",
                    "step_time.seconds=0.01",
                    "scheduler.max_num_seqs=1",
                    "workload=poisson",
                    f"workload.num_requests={n}",
                    f"workload.qps={load * 100:g}",
                    "workload.prompt_tokens=16",
                    "workload.output_tokens=1",
                    "sim.progress=false",
                ]
            )
            counts: Counter[str] = Counter()
            for seed in range(args.seeds):
                cfg = copy.deepcopy(base)
                cfg["seed"] = seed
                counts[simulate(cfg).summary["stability"]["verdict"]] += 1
            print(f"{load:>5} {n:>9} " + " ".join(f"{counts[v]:>16}" for v in VERDICTS))


if __name__ == "__main__":
    main()
