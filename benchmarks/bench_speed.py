"""How fast Fleetcast simulates: simulated requests per wall-clock second.

    python benchmarks/bench_speed.py            # all three scenarios
    python benchmarks/bench_speed.py a          # one of them

Scenarios (issue 2):
  (a) Llama-2-7B on one A100-80G, vLLM, 20,000 requests of 512 prompt / 128 output tokens,
      Poisson at 6 requests/s;
  (b) the same with 1,024 output tokens at 1 request/s;
  (c) the whole Azure 2023 conversation trace (19,366 requests) on 4 H100-SXM replicas.

For each it prints the wall time of the simulation loop (``Cluster.run``), of the whole
``simulate`` call (config to tables) and of the whole command in a fresh process
(``python -m sim ...``, start-up, Hydra and file writing included), with simulated requests,
scheduler steps and SimPy events per second of the loop.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from sim import run as run_module
from sim.cluster import Cluster
from sim.config import CONFIG_DIR, REPO_ROOT

SCENARIOS = {
    "a": ["model=llama2_7b", "hardware=a100_80g", "fleet.replicas=1", "scheduler=vllm",
          "workload=poisson", "workload.num_requests=20000", "workload.qps=6",
          "workload.prompt_tokens=512", "workload.output_tokens=128"],
    "b": ["model=llama2_7b", "hardware=a100_80g", "fleet.replicas=1", "scheduler=vllm",
          "workload=poisson", "workload.num_requests=20000", "workload.qps=1",
          "workload.prompt_tokens=512", "workload.output_tokens=1024"],
    "c": ["model=llama31_8b", "hardware=h100_sxm", "fleet.replicas=4", "scheduler=vllm",
          "workload=azure_conv", "workload.duration_s=null"],
}


class TimedCluster(Cluster):
    """Records the wall time and SimPy event count of ``run`` alone."""

    last: "TimedCluster | None" = None

    def run(self, horizon_s=None):
        t0 = time.perf_counter()
        super().run(horizon_s)
        self.loop_s = time.perf_counter() - t0
        self.num_events = next(self.env._eid)
        TimedCluster.last = self


def bench(name: str, overrides: list[str]) -> None:
    overrides = overrides + ["sim.progress=false"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    run_module.Cluster = TimedCluster
    t0 = time.perf_counter()
    result = run_module.simulate(cfg)
    simulate_s = time.perf_counter() - t0
    cluster = TimedCluster.last
    n_req = result.summary["num_requests"]
    n_steps = result.summary["num_steps"]
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sim", *overrides, f"output_dir={out}"],
                       cwd=REPO_ROOT, check=True, capture_output=True)
        process_s = time.perf_counter() - t0
    print(f"({name}) {n_req:,} requests, {n_steps:,} steps, {cluster.num_events:,} SimPy events, "
          f"{result.summary['duration_s']:,.0f} s simulated")
    print(f"    loop:     {cluster.loop_s:6.2f} s  {n_req / cluster.loop_s:9,.0f} req/s  "
          f"{n_steps / cluster.loop_s:10,.0f} steps/s  {cluster.num_events / cluster.loop_s:9,.0f} events/s")
    print(f"    simulate: {simulate_s:6.2f} s  {n_req / simulate_s:9,.0f} req/s")
    print(f"    process:  {process_s:6.2f} s  {n_req / process_s:9,.0f} req/s  (python -m sim, files written)")
    sys.stdout.flush()


if __name__ == "__main__":
    for key in sys.argv[1:] or sorted(SCENARIOS):
        bench(key, SCENARIOS[key])
