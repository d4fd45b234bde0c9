"""How fast Fleetcast simulates: simulated requests per wall-clock second.

    python benchmarks/bench_speed.py            # all six scenarios, best of 3
    python benchmarks/bench_speed.py a --repeat 5
    python benchmarks/bench_speed.py a --tree build/compiled   # the loop here and there

The figures are those of the build that ``sim`` is imported from: the interpreted tree, or the
compiled build (``FLEETCAST_COMPILE=1``; ``make compiled`` builds it in build/compiled, and
``cd build/compiled && PYTHONPATH=$PWD python benchmarks/bench_speed.py`` measures it); the
first line says which.

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

``--tree PATH`` compares the loop alone with another checkout's (an older commit's worktree, or
build/compiled): each tree's loop runs in fresh processes (``PYTHONPATH=PATH``), alternately,
best of two runs per process and of ``--repeat`` processes per tree, then the ratio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sim.fleet.replica
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


class TimedCluster:
    """The run's ``Cluster``, with the wall time and SimPy event count of ``run`` alone
    recorded. A wrapper rather than a subclass: the compiled build's ``Cluster`` is a native
    class, whose methods cannot be replaced."""

    last: TimedCluster | None = None

    def __init__(self, *args, **kwargs):
        self._cluster = Cluster(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._cluster, name)

    def run(self):
        t0 = time.perf_counter()
        self._cluster.run()
        self.loop_s = time.perf_counter() - t0
        self.num_events = next(self._cluster.env._eid)
        TimedCluster.last = self


def build_of(module) -> str:
    """``compiled`` when ``module`` is a C extension (the compiled build), else ``interpreted``."""
    # (sim.signature.compiled's test, written out: --tree imports this file against checkouts
    # older than that function)
    return "compiled" if module.__file__.endswith((".so", ".pyd")) else "interpreted"


def loop_here(overrides: list[str], runs: int = 2) -> tuple[float, str]:
    """The best loop of ``runs`` runs of ``overrides`` with this process's ``sim``, in
    seconds, and which build that is."""
    cfg = compose_config(overrides)
    run_module.Cluster = TimedCluster
    best = float("inf")
    for _ in range(runs):
        run_module.simulate(cfg)
        best = min(best, TimedCluster.last.loop_s)
    return best, build_of(sim.fleet.replica)


# this file's loop_here, in a process whose ``sim`` is another checkout's (PYTHONPATH): what it
# imports from sim, every checkout since the scenarios were written has
LOOP_PROBE = "import sys; sys.path.insert(0, sys.argv[1]); import bench_speed; " + (
    "print(*bench_speed.loop_here(sys.argv[2:]))"
)


def loop_elsewhere(tree: Path, overrides: list[str]) -> tuple[float, str]:
    """The best of two loops of ``overrides`` in a process running checkout ``tree``."""
    proc = subprocess.run(
        [sys.executable, "-c", LOOP_PROBE, str(Path(__file__).resolve().parent), *overrides],
        cwd=tree,
        env=dict(os.environ, PYTHONPATH=str(tree)),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the loop probe failed in {tree}:\n{proc.stderr[-3000:]}")
    seconds, build = proc.stdout.split()
    return float(seconds), build


def compare(name: str, overrides: list[str], tree: Path, repeat: int) -> None:
    """Print the loop of one scenario here and in ``tree``, alternately, each in a fresh
    process, and the ratio (the noise of a shared machine falls on both)."""
    overrides = overrides + ["sim.progress=false"]
    here = Path(__file__).resolve().parent.parent
    best = {here: float("inf"), tree: float("inf")}
    builds = {}
    for _ in range(repeat):
        for where in (here, tree):
            seconds, builds[where] = loop_elsewhere(where, overrides)
            best[where] = min(best[where], seconds)
    print(
        f"({name}) loop, best of {2 * repeat} in {repeat} processes each: "
        f"this tree ({builds[here]}) {best[here]:.3f} s, {tree} ({builds[tree]}) "
        f"{best[tree]:.3f} s: {best[tree] / best[here]:.2f}x"
    )
    sys.stdout.flush()


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
    parser.add_argument(
        "--tree",
        type=Path,
        help="another checkout (or build/compiled): compare the loops only, alternately",
    )
    args = parser.parse_args()
    for key in args.scenarios:
        if key not in SCENARIOS:
            parser.error(f"unknown scenario {key!r}; choose from {', '.join(SCENARIOS)}")
    args.scenarios = args.scenarios or sorted(SCENARIOS)
    if args.tree is not None:
        if not (args.tree / "sim" / "run.py").is_file():
            parser.error(f"--tree {args.tree}: no sim/run.py there")
        for key in args.scenarios:
            compare(key, SCENARIOS[key], args.tree.resolve(), args.repeat)
        raise SystemExit(0)
    source = Path(sim.fleet.replica.__file__).parent.parent
    print(f"build: {build_of(sim.fleet.replica)} (sim from {source})")
    per_request = {key: bench(key, SCENARIOS[key], args.repeat) for key in args.scenarios}
    if "a" in per_request and "b" in per_request:
        print(f"(b)/(a) loop cost per request: {per_request['b'] / per_request['a']:.2f}")
    if "d" in per_request and "e" in per_request:
        speed = per_request["d"] / per_request["e"]
        print(f"(e)/(d) loop speed with the prefix cache on: {speed:.2f} (target: at least 0.5)")
