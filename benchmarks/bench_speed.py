"""How fast Fleetcast simulates: simulated requests per wall-clock second.

    python benchmarks/bench_speed.py            # all six scenarios, best of 3
    python benchmarks/bench_speed.py a --repeat 5

Scenarios (issue 2):
  (a) Llama-2-7B on one A100-80G, vLLM, 20,000 requests of 512 prompt / 128 output tokens,
      Poisson at 6 requests/s;
  (b) the same with 1,024 output tokens at 1 request/s;
  (c) the whole Azure 2023 conversation trace (19,366 requests) on 4 H100-SXM replicas;
  (d) the whole Mooncake conversation trace (12,031 requests) on 4 H100-SXM replicas;
  (e) the same with the prefix cache on (kv.prefix_caching=true, its hash_ids replayed);
  (f) the whole Azure 2023 conversation trace on a disaggregated fleet (issue 12): 1 prefill
      and 3 decode H100-SXM replicas, the KV over InfiniBand (target: the process under 5 s).

For each it prints the wall time of the simulation loop (``Cluster.run``), of the whole
``simulate`` call (config to tables) and of the whole command in a fresh process
(``python -m sim ...``, start-up, Hydra and file writing included), with simulated requests,
scheduler steps and SimPy events per second of the loop. Each figure is the best of
``--repeat`` runs (the machine's noise only ever adds time), and the last line compares the
per-request loop cost of (b) with (a), and the loop speed of (e) with (d), each pair measured in
the same invocation.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

from sim import run as run_module
from sim.config.compose import compose_config
from sim.fleet.cluster import Cluster

SCENARIOS = {
    "a": [
        "model=llama2_7b",
        "hardware=a100_80g",
        "fleet.replicas=1",
        "scheduler=vllm",
        "workload=poisson",
        "workload.num_requests=20000",
        "workload.qps=6",
        "workload.prompt_tokens=512",
        "workload.output_tokens=128",
    ],
    "b": [
        "model=llama2_7b",
        "hardware=a100_80g",
        "fleet.replicas=1",
        "scheduler=vllm",
        "workload=poisson",
        "workload.num_requests=20000",
        "workload.qps=1",
        "workload.prompt_tokens=512",
        "workload.output_tokens=1024",
    ],
    "c": [
        "model=llama31_8b",
        "hardware=h100_sxm",
        "fleet.replicas=4",
        "scheduler=vllm",
        "workload=azure_conv",
        "workload.duration_s=null",
    ],
    "d": [
        "model=llama31_8b",
        "hardware=h100_sxm",
        "fleet.replicas=4",
        "scheduler=vllm",
        "workload=mooncake_conv",
        "workload.duration_s=null",
    ],
}
SCENARIOS["e"] = [*SCENARIOS["d"], "kv.prefix_caching=true"]
SCENARIOS["f"] = [*SCENARIOS["c"], "placement=disaggregated", "placement.prefill.replicas=1"]


class TimedCluster(Cluster):
    """Records the wall time and SimPy event count of ``run`` alone."""

    last: TimedCluster | None = None

    def run(self):
        t0 = time.perf_counter()
        super().run()
        self.loop_s = time.perf_counter() - t0
        self.num_events = next(self.env._eid)
        TimedCluster.last = self


def bench(name: str, overrides: list[str], repeat: int) -> float:
    """Print the figures of one scenario; return the loop's wall seconds per request."""
    overrides = overrides + ["sim.progress=false"]
    cfg = compose_config(overrides)
    run_module.Cluster = TimedCluster
    loop_s = simulate_s = process_s = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = run_module.simulate(cfg)
        simulate_s = min(simulate_s, time.perf_counter() - t0)
        loop_s = min(loop_s, TimedCluster.last.loop_s)
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "sim", *overrides, f"output_dir={out}"],
                cwd=out,
                check=True,
                capture_output=True,
            )
            process_s = min(process_s, time.perf_counter() - t0)
    events = TimedCluster.last.num_events
    n_req = result.summary["num_requests"]
    n_steps = result.summary["num_steps"]
    print(
        f"({name}) {n_req:,} requests, {n_steps:,} steps, {events:,} SimPy events, "
        f"{result.summary['duration_s']:,.0f} s simulated (best of {repeat})"
    )
    print(
        f"    loop:     {loop_s:6.2f} s  {n_req / loop_s:9,.0f} req/s  "
        f"{n_steps / loop_s:10,.0f} steps/s  {events / loop_s:9,.0f} events/s"
    )
    print(f"    simulate: {simulate_s:6.2f} s  {n_req / simulate_s:9,.0f} req/s")
    print(
        f"    process:  {process_s:6.2f} s  {n_req / process_s:9,.0f} req/s  "
        "(python -m sim, files written)"
    )
    sys.stdout.flush()
    return loop_s / n_req


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "scenarios", nargs="*", metavar="{a,b,c,d,e,f}", help="which scenarios (default: all)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is kept")
    args = parser.parse_args()
    for key in args.scenarios:
        if key not in SCENARIOS:
            parser.error(f"unknown scenario {key!r}; choose from {', '.join(SCENARIOS)}")
    args.scenarios = args.scenarios or sorted(SCENARIOS)
    per_request = {key: bench(key, SCENARIOS[key], args.repeat) for key in args.scenarios}
    if "a" in per_request and "b" in per_request:
        print(f"(b)/(a) loop cost per request: {per_request['b'] / per_request['a']:.2f}")
    if "d" in per_request and "e" in per_request:
        speed = per_request["d"] / per_request["e"]
        print(f"(e)/(d) loop speed with the prefix cache on: {speed:.2f} (target: at least 0.5)")
