"""What a default run pays before its first simulated event, phase by phase.

    python benchmarks/bench_startup.py                   # this checkout, best of 7
    python benchmarks/bench_startup.py --tree /tmp/old   # and another checkout, side by side

Each try is a fresh ``python -m sim sim.progress=false output_dir=OUT`` process (the default
configuration) with a probe that stamps the wall clock at each phase boundary and stops the
process at the first simulated event. Three cases are timed, alternately:

  first run     a command never run before: an empty compose cache (``FLEETCAST_CACHE_DIR``),
                so Hydra is imported and composes the config, in a child process beside the
                run's imports where the machine has a second core (``sim.config.compose_ahead``)
  in-process    the same, composed in the run's own process (``FLEETCAST_COMPOSE_AHEAD=0``):
                what the child buys
  repeated      the same command again, from the same folder: the composed config is read back
                from the cache (``sim.config.compose_cache``), without Hydra

For a tree without the cache all three are its first run; for one without the child the first
two are the same. The phases:

  interpreter   process start to the first line of Python (interpreter, site, venv)
  start-up      importing the modules a run needs (``sim.run``, the cluster, and what they
                import: numpy, pydantic, pyarrow, SimPy, OmegaConf), and, one after the other
                or side by side, checking the overrides and output folder and composing the
                config (importing Hydra and composing the config groups, or reading the cached
                result back), to where the run starts (``sim.run.simulate``)
  build         validating the config, the deployment's memory plan, step-time model,
                schedulers, router: what ``simulate`` does before the workload
  workload      drawing the arrivals and lengths (``build_workload``; the default workload
                reads the shipped Azure trace, so this includes pyarrow's Parquet reader)
  cluster       building the cluster's replicas and SimPy processes, to the first event

The probe does what the command does first: it pauses the garbage collector for the start-up
(``sim.cli.STARTUP``, where the tree has it) before it imports anything, and it imports
nothing of the run's itself: ``sim.run`` and ``sim.fleet.cluster`` are hooked when the command
imports them, so the command's order of importing and composing is kept.
Python's bytecode caches are used as on any machine after a first start (a first, uncounted
start per checkout writes them, even where ``PYTHONDONTWRITEBYTECODE`` is set). The phase times
of the try with the smallest total are printed (the machine's noise only ever adds time).
``--tree PATH`` measures another checkout (``PYTHONPATH=PATH``) alternately with this one,
so before/after figures come from one machine at one time. Only functions both layouts have are
hooked (``sim.run.simulate``, ``sim.run.build_workload``, ``sim.fleet.cluster.Cluster.run``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASES = ("interpreter", "start-up", "build", "workload", "cluster")
TARGET_S = 0.5  # issue 14: command to first simulated event

# Runs in the child: stamps time.time() at each boundary, prints them as JSON on stderr's last
# line, and leaves at the first simulated event.
PROBE = r"""
import time
marks = {"python": time.time()}
import importlib.machinery, json, sys

def stamp(name, fn):
    def wrapped(*args, **kwargs):
        marks.setdefault(name, time.time())
        return fn(*args, **kwargs)
    return wrapped

def built(fn):
    def wrapped(*args, **kwargs):
        marks.setdefault("workload", time.time())
        out = fn(*args, **kwargs)
        marks.setdefault("workload built", time.time())
        return out
    return wrapped

def first_event(self):
    marks["first event"] = time.time()
    print(json.dumps(marks), file=sys.stderr)
    raise SystemExit(0)

def hook_run(module):
    module.simulate = stamp("simulate", module.simulate)
    module.build_workload = built(module.build_workload)

def hook_cluster(module):
    module.Cluster.run = first_event

HOOKS = {"sim.run": hook_run, "sim.fleet.cluster": hook_cluster}

class Hooked:  # a meta path finder needs only find_spec
    # hooks a module when the command imports it, not before: importing it here would move
    # the command's imports ahead of its composing
    def find_spec(self, name, path, target=None):
        if name not in HOOKS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        load = spec.loader.exec_module
        def load_and_hook(module):
            load(module)
            HOOKS[name](module)
        spec.loader.exec_module = load_and_hook
        return spec

sys.meta_path.insert(0, Hooked())
import sim.cli
if hasattr(sim.cli, "STARTUP"):  # as sim.cli.main does first, where the tree does it
    sim.cli.STARTUP.begin(freeze=True)
sys.argv = ["sim", *sys.argv[1:]]
sim.cli.main()
"""


CASES = ("first run", "in-process", "repeated")


def environment(tree: Path, cache: Path, ahead: bool = True) -> dict[str, str]:
    """A process whose ``sim`` comes from ``tree``, its compose cache (on) in ``cache``,
    composing in a child where it can (``ahead``) or in its own process."""
    env = dict(os.environ, PYTHONPATH=str(tree), FLEETCAST_CACHE_DIR=str(cache))
    env.pop("FLEETCAST_COMPOSE_CACHE", None)
    env["FLEETCAST_COMPOSE_AHEAD"] = "1" if ahead else "0"
    # as Python runs by default: modules compiled once, then read from __pycache__
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def one_try(tree: Path, folder: Path, cache: Path, ahead: bool = True) -> dict[str, float]:
    """Phase durations of one fresh process whose ``sim`` comes from ``tree``, run in
    ``folder`` with its compose cache in ``cache`` (``ahead``: as ``environment``)."""
    env = environment(tree, cache, ahead)
    start = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "sim.progress=false", f"output_dir={folder / 'out'}"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not proc.stderr.strip():
        raise SystemExit(f"the probe failed in {tree}:\n{proc.stderr}")
    marks = json.loads(proc.stderr.strip().splitlines()[-1])
    edges = [
        start,
        marks["python"],
        marks["simulate"],
        marks["workload"],
        marks["workload built"],
        marks["first event"],
    ]
    return {name: edges[i + 1] - edges[i] for i, name in enumerate(PHASES)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="tries per tree; the best is kept")
    parser.add_argument("--tree", type=Path, help="another checkout to measure alongside")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    trees = [REPO] + ([args.tree.resolve()] if args.tree else [])
    for tree in trees:
        if not (tree / "sim" / "cli.py").is_file():
            parser.error(f"--tree {tree}: no sim/cli.py there")
    with tempfile.TemporaryDirectory() as scratch:
        # one folder and one cache per tree for the repeated command, kept across its tries
        kept = {tree: Path(scratch) / f"tree{i}" for i, tree in enumerate(trees)}
        for tree in trees:
            kept[tree].mkdir()
            one_try(tree, kept[tree], kept[tree] / "cache")  # uncounted: the bytecode caches
            # the whole command, once: a run keeps its composed config when it has finished
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "sim",
                    "sim.progress=false",
                    f"output_dir={kept[tree] / 'out'}",
                ],
                cwd=kept[tree],
                env=environment(tree, kept[tree] / "cache"),
                capture_output=True,
                check=True,
            )
        best: dict[tuple[Path, str], dict[str, float]] = {}
        for i in range(args.repeat):
            for tree in trees:  # alternate, so every case sees the same machine
                fresh = Path(scratch) / f"first{i}-{trees.index(tree)}"
                fresh.mkdir()
                tries = {
                    "first run": one_try(tree, fresh, fresh / "cache"),
                    "in-process": one_try(tree, fresh, fresh / "cache-in", ahead=False),
                    "repeated": one_try(tree, kept[tree], kept[tree] / "cache"),
                }
                for case, phases in tries.items():
                    slot = (tree, case)
                    if slot not in best or sum(phases.values()) < sum(best[slot].values()):
                        best[slot] = phases
    slots = [(tree, case) for tree in trees for case in CASES]
    labels = [f"{'this checkout' if tree == REPO else tree.name}, {case}" for tree, case in slots]
    width = max(24, *(len(label) + 2 for label in labels))
    print(f"command to first simulated event, default config, best of {args.repeat} (ms)")
    print(f"{'phase':<13}" + "".join(f"{label:>{width}}" for label in labels))
    for phase in PHASES:
        print(f"{phase:<13}" + "".join(f"{best[slot][phase] * 1e3:>{width}.0f}" for slot in slots))
    totals = {slot: sum(best[slot].values()) for slot in slots}
    print(f"{'total':<13}" + "".join(f"{totals[slot] * 1e3:>{width}.0f}" for slot in slots))
    for case in CASES:
        verdict = "met" if totals[(REPO, case)] < TARGET_S else "MISSED"
        print(f"target < {TARGET_S * 1e3:.0f} ms for this checkout, {case}: {verdict}")


if __name__ == "__main__":
    main()
