"""``fleetcast compare RUN_DIR FILE [--index N]``: a simulated run beside a measured benchmark.

Every statistic the benchmark file holds (mean, median and the percentiles from the median up
that it kept, for TTFT, TPOT, ITL and E2E under the tool's own names) is computed from the
run's ``requests.parquet`` in that tool's definition (``simulated``), then the request and
output-token throughputs and the completed count; each row shows simulated, measured and the
relative error ``simulated / measured - 1``. The definitions are printed under the table, so a
GuideLLM "time per output token" is never read as vLLM's TPOT.

The run should be the benchmark's load (same requests, lengths, rate or concurrency): the
comparison does not check it, but says so when the completed counts differ.

Left out on purpose: running the simulation (the run is simulated first, with the benchmark's
load; this command reads two files), and standard deviations (not every harness keeps them,
and the spread is better read from the percentiles).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from sim.errors import ConfigError
from sim.harness.formats import pick, read_benchmark
from sim.harness.results import ROLES, MeasuredRun
from sim.harness.simulated import (
    SimulatedRequests,
    mean,
    output_tokens_per_s,
    per_request,
    percentile,
    read_run,
    requests_per_s,
)

# the low percentiles some tools keep (GuideLLM's p0.1 to p25) say little about serving and
# would double the table
MIN_PERCENTILE = 50.0
ROLE_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "chunk_gap": "chunk gap", "e2e": "E2E"}


@dataclass(frozen=True)
class Row:
    """One compared figure: latencies in seconds, throughputs per second, counts."""

    metric: str
    unit: str
    simulated: float | None
    measured: float

    @property
    def relative_error(self) -> float | None:
        if self.simulated is None or self.measured == 0:
            return None
        return self.simulated / self.measured - 1


def _percentile_name(q: float) -> str:
    return "median" if q == 50.0 else f"p{q:g}"


def comparison(run: SimulatedRequests, measured: MeasuredRun) -> list[Row]:
    """The rows of the table: each measured figure beside the simulated one."""
    rows = []
    for role in ROLES:
        stat = measured.latency.get(role)
        if stat is None:
            continue
        values, weights = per_request(run, stat.definition)
        # the tool's own name beside ours, unless they are the same (vLLM's ``ttft``)
        same = stat.name.lower() == ROLE_NAMES[role].lower()
        label = ROLE_NAMES[role] if same else f"{ROLE_NAMES[role]} ({stat.name})"
        if stat.mean_s is not None:
            rows.append(Row(f"{label} mean", "s", mean(values, weights), stat.mean_s))
        for q, value in stat.percentiles_s.items():
            if q < MIN_PERCENTILE:
                continue
            simulated = percentile(values, weights, q)
            rows.append(Row(f"{label} {_percentile_name(q)}", "s", simulated, value))
    if measured.request_throughput_per_s is not None:
        rows.append(
            Row(
                "request throughput",
                "req/s",
                requests_per_s(run),
                measured.request_throughput_per_s,
            )
        )
    if measured.output_throughput_tokens_per_s is not None:
        rows.append(
            Row(
                "output throughput",
                "tok/s",
                output_tokens_per_s(run),
                measured.output_throughput_tokens_per_s,
            )
        )
    if measured.completed is not None:
        rows.append(Row("completed requests", "", float(run.completed), float(measured.completed)))
    return rows


def _cell(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1e3:,.2f} ms"
    if unit == "":
        return f"{value:,.0f}"
    return f"{value:,.2f} {unit}"


def format_comparison(run_dir: str, run: SimulatedRequests, measured: MeasuredRun) -> str:
    rows = comparison(run, measured)
    version = f" {measured.tool_version}" if measured.tool_version else ""
    lines = [
        f"simulated: {run_dir} ({run.completed:,} completed requests)",
        f"measured:  {measured.source} [{measured.tool}{version}: {measured.label}]",
    ]
    if measured.completed is not None and measured.completed != run.completed:
        lines.append(
            f"note: the run completed {run.completed:,} requests, the benchmark "
            f"{measured.completed:,}: simulate the benchmark's own load to compare like with like"
        )
    width = max(len(row.metric) for row in rows) if rows else 10
    lines.append(f"{'metric':<{width}}  {'simulated':>14}  {'measured':>14}  {'error':>8}")
    for row in rows:
        error = row.relative_error
        lines.append(
            f"{row.metric:<{width}}  {_cell(row.simulated, row.unit):>14}  "
            f"{_cell(row.measured, row.unit):>14}  "
            f"{'-' if error is None else f'{error:+.1%}':>8}"
        )
    lines.append(f"definitions ({measured.tool}'s):")
    for role in ROLES:
        if (stat := measured.latency.get(role)) is not None:
            lines.append(f"  {ROLE_NAMES[role]} ({stat.name}): {stat.definition.value}")
    lines.append(
        "  throughput: completed requests (output tokens) / (last completion - first request sent)"
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="fleetcast compare",
        description="A simulated run beside a measured benchmark, in the harness's definitions.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a finished run's folder")
    parser.add_argument(
        "file",
        metavar="FILE",
        help="a vLLM bench serve JSON, SGLang bench_serving JSONL, GuideLLM report (JSON/YAML) "
        "or AIPerf profile_export_aiperf.json",
    )
    parser.add_argument("--index", type=int, help="which run of a file that holds several")
    args = parser.parse_args(argv)
    try:
        measured = pick(read_benchmark(args.file), args.index, args.file)
        run = read_run(args.run_dir)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_comparison(args.run_dir, run, measured))
    return 0
