"""What a default run pays before its first simulated event, and what each start-up piece saves.

    python benchmarks/bench_startup.py                   # this checkout, best of 11
    python benchmarks/bench_startup.py --tree /tmp/old   # and another checkout, side by side

Each try is a fresh ``python -m sim workload.num_requests=N sim.progress=false output_dir=OUT``
process (the default configuration, ``--requests`` of it) with a probe that stamps the wall
clock at each phase boundary and at the first simulated event, and lets the run go on to its
end. Two cases, each with every start-up piece on and with one piece turned off:

  first run     a command never run before: an empty compose cache (``FLEETCAST_CACHE_DIR``),
                so Hydra is imported and composes the config (in a child beside the run's
                imports, where the tree has it and the machine a second core)
  repeated run  the same command again, from the same folder: the composed config read back
                from the compose cache, without Hydra

The pieces, each timed against its absence in the case it serves:

  compose cache     ``FLEETCAST_COMPOSE_CACHE=0`` (repeated run: composed again)
  compose-ahead     ``FLEETCAST_COMPOSE_AHEAD=0`` (first run: composed in the run's process;
                    removed on 2026-12-05, ``sim.startup``: timed for a ``--tree`` that has it)
  collector pause   the probe makes ``gc.disable`` and ``gc.freeze`` do nothing (both cases):
                    the collector runs through start-up as in any Python program

All configurations are tried in turn, ``--repeat`` rounds, so that each sees the same machine;
for each the best, median and worst of its tries are printed (the machine's noise only ever
adds time: the best is the figure, the spread says how noisy the machine was), for the wall
clock to the first event and to exit, the process's own CPU time to the first event (without
a compose-ahead child's: what the run's own core does, so on an idle second core) and the CPU
time to exit (with the child's). CPU time hardly depends on what else the machine runs. A
piece's saving is its absence's figure less its presence's; it "pays" where the wall clock to
the first event, on the best tries and on the medians, saves at least ``--margin`` percent of
the start-up with it. The phases of the best try with every piece on:

  interpreter   process start to the first line of Python (interpreter, site, venv)
  start-up      importing the modules a run needs, checking the overrides and output folder and
                composing the config (or reading it back), to ``sim.run.simulate``
  build         validating the config, the deployment's memory plan, step-time model,
                schedulers, router: what ``simulate`` does before the workload
  workload      drawing the arrivals and lengths (``build_workload``; the default workload
                reads the shipped Azure trace, so this includes pyarrow's Parquet reader)
  cluster       building the cluster's replicas and SimPy processes, to the first event

The probe imports nothing of the run's itself: ``sim.run`` and ``sim.fleet.cluster`` are hooked
when the command imports them, so the command's order of importing and composing is kept.
Python's bytecode caches are used as on any machine after a first start (a first, uncounted
start per checkout writes them). ``--tree PATH`` measures another checkout
(``PYTHONPATH=PATH``) alternately with this one, so before/after figures come from one machine
at one time; a switch a tree does not have leaves its run as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASES = ("interpreter", "start-up", "build", "workload", "cluster")
TARGET_S = 0.5  # issue 14: command to first simulated event
MARKS = "bench_startup marks: "  # the probe's line on stderr
NO_GC_PAUSE = "BENCH_STARTUP_NO_GC_PAUSE"  # read by the probe only

# Runs in the child: stamps time.time() at each boundary and prints them as JSON on stderr at
# the first simulated event; the run then goes on to its end.
PROBE = r"""
import time
marks = {"python": time.time()}
import gc, importlib.machinery, json, os, sys

if os.environ.get("BENCH_STARTUP_NO_GC_PAUSE") == "1":  # the collector as in any program
    gc.disable = gc.freeze = lambda: None

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

def hook_run(module):
    module.simulate = stamp("simulate", module.simulate)
    module.build_workload = built(module.build_workload)

def hook_cluster(module):
    run = module.Cluster.run
    def first_event(self, *args, **kwargs):
        marks["first event"] = time.time()
        marks["cpu"] = time.process_time()  # this process's own, not the child's
        print("bench_startup marks: " + json.dumps(marks), file=sys.stderr, flush=True)
        return run(self, *args, **kwargs)
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
sys.argv = ["sim", *sys.argv[1:]]
sim.cli.main()
"""


@dataclass(frozen=True)
class Configuration:
    """One way of starting a run: ``case`` (first or repeated), with the start-up piece
    ``without`` turned off (None: every piece on) by the environment ``switch``."""

    case: str
    without: str | None
    switch: tuple[str, str] | None

    @property
    def label(self) -> str:
        return self.case + (f", no {self.without}" if self.without else "")


FIRST, REPEATED = "first run", "repeated run"
CONFIGURATIONS = (
    Configuration(FIRST, None, None),
    Configuration(FIRST, "compose-ahead", ("FLEETCAST_COMPOSE_AHEAD", "0")),
    Configuration(FIRST, "collector pause", (NO_GC_PAUSE, "1")),
    Configuration(REPEATED, None, None),
    Configuration(REPEATED, "compose cache", ("FLEETCAST_COMPOSE_CACHE", "0")),
    Configuration(REPEATED, "collector pause", (NO_GC_PAUSE, "1")),
)


@dataclass(frozen=True)
class Try:
    """One process: its phases to the first event, its whole time to exit, and the CPU time
    it used to the first event (its own) and to exit (with the child it reaped), in seconds."""

    phases: dict[str, float]
    exit_s: float
    cpu_first_event_s: float
    cpu_s: float

    @property
    def first_event_s(self) -> float:
        return sum(self.phases.values())


def environment(tree: Path, cache: Path, switch: tuple[str, str] | None) -> dict[str, str]:
    """A process whose ``sim`` comes from ``tree``, its compose cache in ``cache``, every
    start-up piece on but the one ``switch`` turns off."""
    env = dict(os.environ, PYTHONPATH=str(tree), FLEETCAST_CACHE_DIR=str(cache))
    for name in ("FLEETCAST_COMPOSE_CACHE", "FLEETCAST_COMPOSE_AHEAD", NO_GC_PAUSE):
        env.pop(name, None)
    if switch is not None:
        env[switch[0]] = switch[1]
    # as Python runs by default: modules compiled once, then read from __pycache__
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def command(folder: Path, requests: int) -> list[str]:
    return [
        f"workload.num_requests={requests}",
        "sim.progress=false",
        f"output_dir={folder / 'out'}",
    ]


def one_try(
    tree: Path, folder: Path, cache: Path, requests: int, switch: tuple[str, str] | None = None
) -> Try:
    """One fresh process whose ``sim`` comes from ``tree``, run in ``folder`` with its compose
    cache in ``cache``."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *command(folder, requests)],
        cwd=folder,
        env=environment(tree, cache, switch),
        capture_output=True,
        text=True,
    )
    end = time.time()
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
    lines = [line for line in proc.stderr.splitlines() if line.startswith(MARKS)]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"the probe failed in {tree}:\n{proc.stderr}")
    marks = json.loads(lines[-1][len(MARKS) :])
    edges = [
        start,
        marks["python"],
        marks["simulate"],
        marks["workload"],
        marks["workload built"],
        marks["first event"],
    ]
    phases = {name: edges[i + 1] - edges[i] for i, name in enumerate(PHASES)}
    return Try(phases, end - start, marks["cpu"], cpu_s)


def measure(
    trees: list[Path], repeat: int, requests: int
) -> dict[tuple[Path, Configuration], list[Try]]:
    """Every configuration of every tree, ``repeat`` rounds, in turn."""
    tries: dict[tuple[Path, Configuration], list[Try]] = {
        (tree, config): [] for tree in trees for config in CONFIGURATIONS
    }
    with tempfile.TemporaryDirectory() as scratch:
        # one folder and one cache per tree for the repeated command, kept across its tries
        kept = {tree: Path(scratch) / f"tree{i}" for i, tree in enumerate(trees)}
        for tree in trees:
            kept[tree].mkdir()
            # uncounted: writes the bytecode caches, and keeps the command's composed config
            one_try(tree, kept[tree], kept[tree] / "cache", requests)
        for i in range(repeat):
            for t, tree in enumerate(trees):
                for c, config in enumerate(CONFIGURATIONS):
                    if config.case == REPEATED:
                        folder = kept[tree]
                    else:  # a folder and a cache never used before
                        folder = Path(scratch) / f"first{i}-{t}-{c}"
                        folder.mkdir()
                    outcome = one_try(tree, folder, folder / "cache", requests, config.switch)
                    tries[(tree, config)].append(outcome)
    return tries


def spread(values: list[float]) -> str:
    """Best / median / worst, in ms."""
    ms = [v * 1e3 for v in values]
    return f"{min(ms):.0f} / {statistics.median(ms):.0f} / {max(ms):.0f}"


def saving(
    on: list[Try],
    off: list[Try],
    measure: Callable[[Try], float],
    pick: Callable[[list[float]], float],
) -> float:
    """What a piece saves: ``measure`` of its absence's tries (``off``) less that of its
    presence's (``on``), each summed up by ``pick`` (the best, the median)."""
    return pick([measure(run) for run in off]) - pick([measure(run) for run in on])


def print_tree(name: str, tries: dict[Configuration, list[Try]], margin: float) -> None:
    """The table of one tree: every configuration, then what each piece saves."""
    width = max(len(config.label) for config in CONFIGURATIONS) + 2
    measures = {  # column: (what of a try, in seconds)
        "to first event": lambda run: run.first_event_s,
        "own CPU to 1st event": lambda run: run.cpu_first_event_s,
        "to exit": lambda run: run.exit_s,
        "CPU to exit": lambda run: run.cpu_s,
    }
    print(f"\n{name}")
    print(f"  {'configuration':<{width}}" + "".join(f"{m:>22}" for m in measures))
    for config in CONFIGURATIONS:
        runs = tries[config]
        figures = [spread([measure(run) for run in runs]) for measure in measures.values()]
        print(f"  {config.label:<{width}}" + "".join(f"{f:>22}" for f in figures))
    print(
        f"\n  what each piece saves: its absence less its presence (ms); it pays where the best "
        f"and the median to the first event both save >= {margin:g}% of the start-up"
    )
    header = ["first event: best", "median", "own CPU median", "exit: best", "CPU median"]
    print(f"  {'piece, case':<{width}}" + "".join(f"{h:>18}" for h in header) + "  verdict")
    for config in CONFIGURATIONS:
        if config.without is None:
            continue
        on, off = tries[Configuration(config.case, None, None)], tries[config]
        median = statistics.median
        savings = [
            saving(on, off, measures["to first event"], min),
            saving(on, off, measures["to first event"], median),
            saving(on, off, measures["own CPU to 1st event"], median),
            saving(on, off, measures["to exit"], min),
            saving(on, off, measures["CPU to exit"], median),
        ]
        start_up = min(run.first_event_s for run in on)
        pays = min(savings[0], savings[1]) >= start_up * margin / 100
        figures = [f"{savings[0] * 1e3:.0f} ({savings[0] / start_up:.0%})"]
        figures += [f"{value * 1e3:.0f}" for value in savings[1:]]
        label = f"{config.without}, {config.case}"
        print(
            f"  {label:<{width}}"
            + "".join(f"{f:>18}" for f in figures)
            + f"  {'pays' if pays else 'does not pay'}"
        )
    best = min(tries[CONFIGURATIONS[0]], key=lambda run: run.first_event_s)
    phases = ", ".join(f"{phase} {best.phases[phase] * 1e3:.0f}" for phase in PHASES)
    print(f"\n  first run, best try, phases (ms): {phases}")
    for case in (FIRST, REPEATED):
        fastest = min(run.first_event_s for run in tries[Configuration(case, None, None)])
        verdict = "met" if fastest < TARGET_S else "MISSED"
        print(f"  target < {TARGET_S * 1e3:.0f} ms to the first event, {case}: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11, help="tries per configuration")
    parser.add_argument("--requests", type=int, default=200, help="workload.num_requests")
    parser.add_argument("--tree", type=Path, help="another checkout to measure alongside")
    parser.add_argument(
        "--margin", type=float, default=10.0, help="saving a piece must show, percent"
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.requests < 1:
        parser.error(f"--requests must be at least 1, got {args.requests}")
    trees = [REPO] + ([args.tree.resolve()] if args.tree else [])
    for tree in trees:
        if not (tree / "sim" / "cli.py").is_file():
            parser.error(f"--tree {tree}: no sim/cli.py there")
    tries = measure(trees, args.repeat, args.requests)
    print(
        f"default config, workload.num_requests={args.requests}, {args.repeat} tries each, "
        f"configurations in turn, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        "best / median / worst (ms)"
    )
    for tree in trees:
        name = "this checkout" if tree == REPO else str(tree)
        print_tree(name, {config: tries[(tree, config)] for config in CONFIGURATIONS}, args.margin)


if __name__ == "__main__":
    main()
