"""Sweeps: many runs of one command, watched while they run and ranked when they end.

A sweep is a Hydra multirun (``fleetcast -m key=a,b other=c,d``): one job per combination, each
writing its run into its own folder under the sweep folder. This module adds what a sweep needs
beyond Hydra:

- ``SweepMonitor``, a Hydra callback that lives in the launching process, whatever the launcher
  (local joblib workers, a Ray cluster). It counts the jobs from the sweep's overrides, shows
  jobs done, failed and the time left while they run (by watching the job folders, where a
  finished job has ``summary.json`` and a failed one ``error.txt``), and at the end prints one
  screen ranking the configurations that meet the SLO by cost, each only against those
  offered the same traffic (``TRAFFIC_KEYS``: a fleet at 4x the rate is not cheaper per token
  than at 1x, it is busier).

Whether a job folder already holds its run (resume) is ``sim.sweeps.resume``.

Left out: scheduling jobs by expected cost, retries of failed jobs.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from math import prod
from pathlib import Path
from typing import Any, cast

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from sim.output.run_files import CONFIG_FILE, ERROR_FILE, SUMMARY_FILE
from sim.resources import yaml_loader


def count_jobs(task_overrides: list[str]) -> int:
    """Jobs a basic sweep over ``task_overrides`` launches: the product of the sweep sizes."""
    parsed = OverridesParser.create().parse_overrides(list(task_overrides))
    return prod(
        len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 1 for o in parsed
    )


def swept_keys(task_overrides: list[str]) -> set[str]:
    """The keys a sweep varies (``fleet.replicas`` in ``fleet.replicas=1,2``)."""
    parsed = OverridesParser.create().parse_overrides(list(task_overrides))
    return {o.key_or_group for o in parsed if o.is_sweep_override()}


def _job_dirs(sweep_dir: Path) -> list[Path]:
    return [p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]


def _count(sweep_dir: Path, marker: str) -> int:
    if not sweep_dir.is_dir():
        return 0
    return sum(1 for d in _job_dirs(sweep_dir) if (d / marker).exists())


# "The same traffic": runs offered the same requests at the same rate. The workload group sets
# them (its kind, trace, rate, rate_scale, lengths, count) and so does sim.arrival_rate_scale
# (the plan's what-if); the seed does not (replications draw from the same traffic), nor does
# anything of the fleet. A run's cost is only comparable with runs at the same traffic: at 4x
# the rate the same fleet serves 4x the tokens per dollar.
TRAFFIC_KEYS = ("workload", "sim.arrival_rate_scale")
UNKNOWN_TRAFFIC = "unknown (no readable config.yaml)"


def is_traffic_key(key: str) -> bool:
    """Whether a config key (``workload.qps``), an override's key (``+workload.x``) or a
    collected column (``choice.workload``, ``config.workload.path``) sets the traffic."""
    key = key.lstrip("+~").removeprefix("choice.").removeprefix("config.")
    return any(key == k or key.startswith(f"{k}.") for k in TRAFFIC_KEYS)


def traffic_of(config: dict[str, Any]) -> dict[str, Any]:
    """The traffic settings of a run's resolved config, as dotted keys (``workload.qps``)."""
    flat: dict[str, Any] = {}

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict) and node:
            for child, value in node.items():
                walk(value, f"{key}.{child}")
        else:
            flat[key] = node

    for key in TRAFFIC_KEYS:
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            walk(node, key)
    return flat


def traffic_labels(traffics: list[dict[str, Any]]) -> list[str]:
    """Each traffic named by the settings in which the traffics differ
    (``workload.rate_scale=4.0``), in their order; an empty one (no readable config) is
    ``UNKNOWN_TRAFFIC``."""
    known = [t for t in traffics if t]
    keys = list(dict.fromkeys(k for t in known for k in t))
    differ = [k for k in keys if len({json.dumps(t.get(k), sort_keys=True) for t in known}) > 1]
    return [
        (", ".join(f"{k}={t.get(k)}" for k in differ) or "the sweep's") if t else UNKNOWN_TRAFFIC
        for t in traffics
    ]


def _job_traffic(job: Path) -> dict[str, Any]:
    """The job's traffic from its ``config.yaml`` (none recorded, or unreadable: ``{}``, so
    the ranking still prints)."""
    try:
        config = yaml.load((job / CONFIG_FILE).read_text(), yaml_loader())
    except (OSError, yaml.YAMLError):
        return {}
    return traffic_of(config) if isinstance(config, dict) else {}


def rank_table(
    sweep_dir: Path, min_slo_attainment: float, width: int = 8, keys: set[str] | None = None
) -> str:
    """One screen: the cheapest configurations that meet the SLO, cheapest first; each named
    by its overrides of ``keys`` (all of them when None). An unstable run (its summary's
    stability verdict) is left out whatever its latencies: they grow with its length.

    Runs are ranked only against runs of the same traffic (``TRAFFIC_KEYS``): a sweep over
    the traffic gets one table per traffic, each headed by it and its rows labelled without
    it; a sweep at one traffic, one table as ever. ``width`` rows per table."""
    groups: dict[str, dict[str, Any]] = {}  # traffic -> its settings, rows and counts
    failed = 0
    for job in sorted(_job_dirs(sweep_dir), key=lambda p: (len(p.name), p.name)):
        if (job / ERROR_FILE).exists():
            failed += 1
            continue
        if not (job / SUMMARY_FILE).exists():
            continue
        s = json.loads((job / SUMMARY_FILE).read_text())
        traffic = _job_traffic(job)
        group = groups.setdefault(
            json.dumps(traffic, sort_keys=True),
            {"traffic": traffic, "rows": [], "missed": 0, "unstable": 0, "overrides": {}},
        )
        overrides_file = job / ".hydra" / "overrides.yaml"
        overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.exists() else []
        group["overrides"][job.name] = list(overrides or [])
        if (s.get("stability") or {}).get("verdict") == "unstable":
            group["unstable"] += 1
            continue
        attained = slo_attainment(s)
        if attained is None or attained < min_slo_attainment:
            group["missed"] += 1
            continue
        cost = s["cost"]
        group["rows"].append(
            (
                cost["usd_per_hour"],
                cost.get("usd_per_million_output_tokens") or 0.0,
                job.name,
                attained,
                s["ttft_s"]["p99"],
                s["tpot_s"]["p99"],
            )
        )
    several = len(groups) > 1
    meeting = sum(len(g["rows"]) for g in groups.values())
    missed = sum(g["missed"] for g in groups.values())
    unstable = sum(g["unstable"] for g in groups.values())
    lines = [
        f"{meeting} configuration(s) meet the SLO for >= {min_slo_attainment:.0%} of "
        f"requests; {missed} miss it; {unstable} unstable; {failed} failed. "
        + (
            f"Ranked within each of the {len(groups)} traffics (a configuration is compared "
            "only with those offered the same traffic), cheapest first:"
            if several
            else "Cheapest first:"
        )
    ]
    labels = traffic_labels([g["traffic"] for g in groups.values()])
    for label, group in zip(labels, groups.values(), strict=True):
        rows = sorted(group["rows"])
        if several:
            lines.append(
                f"\ntraffic {label}: {len(rows)} meet the SLO; {group['missed']} miss it; "
                f"{group['unstable']} unstable"
            )
        lines += _rank_rows(rows, group["overrides"], keys, drop_traffic=several, width=width)
        if len(rows) > width:
            lines.append(f"... and {len(rows) - width} more (fleetcast collect {sweep_dir})")
    return "\n".join(lines)


def _rank_rows(
    rows: list[tuple],
    overrides: dict[str, list[str]],
    keys: set[str] | None,
    *,
    drop_traffic: bool,
    width: int,
) -> list[str]:
    """The table of ``rows`` (cheapest first), each labelled by its job's ``overrides`` of
    ``keys`` (all when None), the traffic's left out when ``drop_traffic`` (its heading
    names it)."""
    if not rows:
        return []

    def label(job: str) -> str:
        named = [
            o
            for o in overrides.get(job, [])
            if (keys is None or o.split("=")[0].lstrip("+~") in keys)
            and not (drop_traffic and is_traffic_key(o.split("=")[0]))
        ]
        return " ".join(named) or job

    lines = [
        f"{'job':>5} {'$/hour':>9} {'$/M out':>8} {'SLO met':>8} {'TTFT p99':>9} "
        f"{'TPOT p99':>9}  overrides"
    ]
    for usd_h, usd_m, name, attained, ttft, tpot in rows[:width]:
        lines.append(
            f"{name:>5} {usd_h:9.2f} {usd_m:8.3f} {attained:8.1%} {ttft:8.3f}s "
            f"{(tpot or 0):8.4f}s  {label(name)}"
        )
    return lines


def slo_attainment(summary: dict) -> float | None:
    """Share of all requests (rejected and unfinished included) that met every SLO bound."""
    good, span, n = (
        summary.get("goodput_requests_per_s"),
        summary.get("duration_s"),
        summary.get("num_requests"),
    )
    if good is None or not span or not n:
        return None
    return good * span / n


class SweepMonitor(Callback):
    """Progress while a sweep runs, and the ranking table when it ends (parent process only)."""

    def __init__(
        self, min_slo_attainment: float = 0.99, poll_s: float = 0.5, table_rows: int = 8
    ) -> None:
        self.min_slo_attainment = float(min_slo_attainment)
        self.poll_s = float(poll_s)
        self.table_rows = int(table_rows)
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Launchers pickle the callbacks along with each job; the watcher stays home.
        return {**self.__dict__, "_stop": None, "_thread": None}

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        total = count_jobs(_overrides_as_written(config))
        # Jobs already complete (a resumed sweep) are not counted as work still to do.
        before = _count(sweep_dir, SUMMARY_FILE)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, daemon=True, args=(sweep_dir, total, before)
        )
        self._thread.start()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._thread is not None:
            assert self._stop is not None  # set with the thread
            self._stop.set()
            self._thread.join()
        sweep_dir = Path(config.hydra.sweep.dir)
        print(
            rank_table(
                sweep_dir,
                self.min_slo_attainment,
                self.table_rows,
                swept_keys(_overrides_as_written(config)),
            ),
            flush=True,
        )
        failed = _count(sweep_dir, ERROR_FILE)
        if failed:  # the others ran; the command still says something went wrong
            print(f"{failed} job(s) failed: see {sweep_dir}/*/{ERROR_FILE}", file=sys.stderr)
            raise SystemExit(1)

    def _watch(self, sweep_dir: Path, total: int, before: int) -> None:
        assert self._stop is not None  # set before the thread starts
        start = time.monotonic()
        shown = ""
        while True:
            stopping = self._stop.wait(self.poll_s)
            done = _count(sweep_dir, SUMMARY_FILE)
            failed = _count(sweep_dir, ERROR_FILE)
            new = max(done - before, 0)
            elapsed = time.monotonic() - start
            left = total - done - failed
            eta = f"{elapsed / new * left:.0f} s left" if new and left > 0 else "-"
            line = f"sweep: {done}/{total} done, {failed} failed, {elapsed:.0f} s elapsed, {eta}"
            if sys.stderr.isatty():
                print("\r" + line.ljust(len(shown)), end="", file=sys.stderr, flush=True)
            elif line.split(",")[0] != shown.split(",")[0] or stopping:
                # no terminal: one line per change in the done count, not a repainting bar
                print(line, file=sys.stderr, flush=True)
            shown = line
            if stopping:
                if sys.stderr.isatty():
                    print(file=sys.stderr)
                return


def _overrides_as_written(config: DictConfig) -> list[str]:
    """The sweep's overrides as written: an override's ``${...}`` is for its jobs to resolve
    (or refuse, each in its own error.txt), not for the monitor."""
    task = cast(list[Any], OmegaConf.to_container(config.hydra.overrides.task))
    return [str(override) for override in task]
