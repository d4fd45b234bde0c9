"""MLPerf Inference Server results as a validation set: the shipped tables, read and checked.

Two tables ship under ``data/mlperf/`` (their README says where every figure comes from):

- ``server_results.csv``: one row per VALID closed-division Server result of an LLM benchmark
  with TTFT/TPOT bounds on a GPU system, as LoadGen's ``mlperf_log_summary.txt`` reports it
  (``ServerResult``); rebuilt from the results repositories by ``benchmarks/mlperf_table.py``;
- ``benchmarks.csv``: per benchmark, its Server latency bounds and its dataset's sample count
  and token lengths as the MLPerf reference sources state them (``BenchmarkSpec``).

A Server result is the highest Poisson arrival rate (``target_qps``, in queries per second; one
sample per query) at which the system kept p99 TTFT and p99 TPOT within the bounds over at
least ``min_duration`` (600 s in v5.0's mlperf.conf; NVIDIA's runs ask 2,400 s). Latencies stay
in the log's integer nanoseconds, so a row compares exactly with its source; ``*_s`` properties
give seconds.

Rounds after ``LAST_ROUND`` are the held-out judging set: the loader refuses a row from one.
Within the table, ``DEVELOPMENT_ROUNDS`` (v4.1) are what the fidelity work is developed on and
``HELD_OUT_ROUNDS`` (v4.0) what it is scored on at the end; ``load_results(rounds=...)`` reads
either alone.
Every cell is checked where it is read: a bad one is a one-line ``ConfigError`` on the field
``mlperf_table`` naming the file, the row and the column. Which Fleetcast configs a row maps
to is ``sim.harness.mlperf_configs``.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path

from sim.errors import ConfigError
from sim.resources import data_dir

FIELD = "mlperf_table"
RESULTS_FILE = "mlperf/server_results.csv"
BENCHMARKS_FILE = "mlperf/benchmarks.csv"
# the last round the table may hold; v5.1 and later judge the simulator and stay out of it
LAST_ROUND = "v5.0"
# within the table: the fidelity work is developed on v4.1's rows and scored on v4.0's, which
# it does not look at until its model is fixed (the held-out round, apart from the judging set)
DEVELOPMENT_ROUNDS = ("v4.1",)
HELD_OUT_ROUNDS = ("v4.0",)
# a result's benchmark folder -> its benchmark's name (v5.0's folders spell Llama 3.1 "llama3_1")
BENCHMARKS = {
    "llama2-70b-99": "llama2-70b-99",
    "llama2-70b-99.9": "llama2-70b-99.9",
    "llama2-70b-interactive-99": "llama2-70b-interactive-99",
    "llama2-70b-interactive-99.9": "llama2-70b-interactive-99.9",
    "mixtral-8x7b": "mixtral-8x7b",
    "llama3.1-405b": "llama3.1-405b",
    "llama3_1-405b": "llama3.1-405b",
    "llama3.1-8b": "llama3.1-8b",
    "llama3_1-8b": "llama3.1-8b",
}
SCENARIOS = ("Server", "Interactive")
# precisions a row may name: as declared (weight_data_types) or as a quantization command says
PRECISIONS = ("fp16", "bf16", "fp8", "fp4", "nvfp4", "mxfp4", "fp6", "int8", "int4", "unstated")
ROUND = re.compile(r"v(\d+)\.(\d+)")
COMMIT = re.compile(r"[0-9a-f]{40}")


def round_key(name: str) -> tuple[int, int]:
    """``v4.1`` -> (4, 1), for ordering rounds; a name of another form is refused."""
    match = ROUND.fullmatch(name)
    if not match:
        raise ConfigError(FIELD, name, "a round is named vMAJOR.MINOR, e.g. v4.1")
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True, slots=True)
class ServerResult:
    """One VALID Server result, as its LoadGen summary and its submission's files state it."""

    round: str
    submitter: str
    system: str  # the results folder's name
    system_name: str  # systems/<system>.json "system_name"
    status: str  # available | preview | rdi (research, development, internal)
    accelerator: str  # "accelerator_model_name", as the submitter wrote it
    accelerators_per_node: int
    nodes: int
    accelerators_total: int
    framework: str  # systems json "framework": the serving software as the submitter named it
    benchmark: str  # a value of BENCHMARKS
    scenario: str
    weight_data_types: str  # measurements json, verbatim ("" where there is none)
    precision: str  # one of PRECISIONS
    precision_source: str  # where the precision is stated ("" when unstated)
    completed_samples_per_s: float
    completed_tokens_per_s: float
    scheduled_samples_per_s: float
    p99_ttft_ns: int
    p99_tpot_ns: int
    target_qps: float
    ttft_bound_ns: int
    tpot_bound_ns: int
    result: str  # always VALID
    source_path: str  # the summary's path in the results repository
    commit: str  # the results repository's commit the row was read at

    @property
    def p99_ttft_s(self) -> float:
        return self.p99_ttft_ns * 1e-9

    @property
    def p99_tpot_s(self) -> float:
        return self.p99_tpot_ns * 1e-9

    @property
    def ttft_bound_s(self) -> float:
        return self.ttft_bound_ns * 1e-9

    @property
    def tpot_bound_s(self) -> float:
        return self.tpot_bound_ns * 1e-9


@dataclass(frozen=True, slots=True)
class BenchmarkSpec:
    """A benchmark's Server bounds and dataset, from the MLPerf reference sources.

    A length the sources do not publish is ``None``: the reference repository ships the
    dataset's size and its length limits, and the accuracy target's mean output length, but
    not the input lengths' distribution.
    """

    benchmark: str
    model: str  # the Hugging Face checkpoint the reference runs
    dataset: str
    sample_count: int
    ttft_bound_ms: int  # p99 time to first token
    tpot_bound_ms: int  # p99 time per output token
    input_tokens_max: int | None
    output_tokens_max: int | None
    output_tokens_mean: float | None
    first_round: str
    source: str


COLUMNS = tuple(f.name for f in fields(ServerResult))
BENCHMARK_COLUMNS = tuple(f.name for f in fields(BenchmarkSpec))


def _rows(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    if not path.is_file():
        raise ConfigError(FIELD, str(path), "file not found")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = tuple(reader.fieldnames or ())
        if header != columns:
            missing = [c for c in columns if c not in header]
            extra = [c for c in header if c not in columns]
            raise ConfigError(
                FIELD, str(path), f"columns differ: missing {missing}, unexpected {extra}"
            )
        return list(reader)


class _Cells:
    """One CSV row's cells, each read with its check and a one-line error naming its place."""

    def __init__(self, path: Path, line: int, row: dict[str, str]) -> None:
        self.path, self.line, self.row = path, line, row

    def bad(self, column: str, reason: str) -> ConfigError:
        value = self.row.get(column)
        return ConfigError(FIELD, str(self.path), f"line {self.line}, {column}={value!r}: {reason}")

    def text(self, column: str, allowed: tuple[str, ...] | None = None, empty: bool = False) -> str:
        value = self.row[column]
        if value is None or (not value and not empty):
            raise self.bad(column, "is empty")
        if allowed is not None and value not in allowed:
            raise self.bad(column, f"is not one of {', '.join(allowed)}")
        return value

    def integer(self, column: str, minimum: int = 1) -> int:
        try:
            value = int(self.row[column])
        except (TypeError, ValueError):
            raise self.bad(column, "is not a whole number") from None
        if value < minimum:
            raise self.bad(column, f"is below {minimum}")
        return value

    def optional_integer(self, column: str) -> int | None:
        return None if self.row[column] == "" else self.integer(column)

    def number(self, column: str) -> float:
        try:
            value = float(self.row[column])
        except (TypeError, ValueError):
            raise self.bad(column, "is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise self.bad(column, "must be finite and above 0")
        return value

    def optional_number(self, column: str) -> float | None:
        return None if self.row[column] == "" else self.number(column)

    def round(self, column: str, held_out: bool = False) -> str:
        """A round's name; a round after LAST_ROUND only where ``held_out`` allows it."""
        value = self.text(column)
        try:
            key = round_key(value)
        except ConfigError:
            raise self.bad(column, "a round is named vMAJOR.MINOR") from None
        if key > round_key(LAST_ROUND) and not held_out:
            raise self.bad(column, f"rounds after {LAST_ROUND} are the held-out judging set")
        return value


def _result(cells: _Cells) -> ServerResult:
    per_node = cells.integer("accelerators_per_node")
    nodes = cells.integer("nodes")
    total = cells.integer("accelerators_total")
    if total != per_node * nodes:
        raise cells.bad("accelerators_total", f"is not {per_node} per node x {nodes} nodes")
    commit = cells.text("commit")
    if not COMMIT.fullmatch(commit):
        raise cells.bad("commit", "is not a 40-digit git commit hash")
    row = ServerResult(
        round=cells.round("round"),
        submitter=cells.text("submitter"),
        system=cells.text("system"),
        system_name=cells.text("system_name"),
        status=cells.text("status"),
        accelerator=cells.text("accelerator"),
        accelerators_per_node=per_node,
        nodes=nodes,
        accelerators_total=total,
        framework=cells.text("framework", empty=True),
        benchmark=cells.text("benchmark", tuple(dict.fromkeys(BENCHMARKS.values()))),
        scenario=cells.text("scenario", SCENARIOS),
        weight_data_types=cells.text("weight_data_types", empty=True),
        precision=cells.text("precision", PRECISIONS),
        precision_source=cells.text("precision_source", empty=True),
        completed_samples_per_s=cells.number("completed_samples_per_s"),
        completed_tokens_per_s=cells.number("completed_tokens_per_s"),
        scheduled_samples_per_s=cells.number("scheduled_samples_per_s"),
        p99_ttft_ns=cells.integer("p99_ttft_ns"),
        p99_tpot_ns=cells.integer("p99_tpot_ns"),
        target_qps=cells.number("target_qps"),
        ttft_bound_ns=cells.integer("ttft_bound_ns"),
        tpot_bound_ns=cells.integer("tpot_bound_ns"),
        result=cells.text("result", ("VALID",)),
        source_path=cells.text("source_path"),
        commit=commit,
    )
    if (row.precision == "unstated") != (row.precision_source == ""):
        raise cells.bad("precision_source", "names a source exactly when a precision is stated")
    # a VALID run met its bounds (LoadGen checks an early-stopping estimate at or above p99)
    if row.p99_ttft_ns > row.ttft_bound_ns:
        raise cells.bad("p99_ttft_ns", f"exceeds the TTFT bound {row.ttft_bound_ns} of a VALID run")
    if row.p99_tpot_ns > row.tpot_bound_ns:
        raise cells.bad("p99_tpot_ns", f"exceeds the TPOT bound {row.tpot_bound_ns} of a VALID run")
    return row


def load_results(
    path: Path | None = None, rounds: Iterable[str] | None = None
) -> list[ServerResult]:
    """Every row of the Server results table (the shipped one by default), checked.

    ``rounds`` keeps only the rows of those rounds (e.g. ``HELD_OUT_ROUNDS``); every row is
    checked either way, and a name that is not a round, or a round after ``LAST_ROUND``, is
    refused.
    """
    path = path if path is not None else data_dir() / RESULTS_FILE
    wanted = None if rounds is None else _round_names(rounds)
    rows = _rows(path, COLUMNS)
    # line 1 is the header
    results = [_result(_Cells(path, line, row)) for line, row in enumerate(rows, start=2)]
    return results if wanted is None else [r for r in results if r.round in wanted]


def _round_names(rounds: Iterable[str]) -> frozenset[str]:
    if isinstance(rounds, str):
        rounds = (rounds,)  # one round given bare, not its characters
    names = frozenset(rounds)
    for name in sorted(names):
        try:
            key = round_key(name)
        except ConfigError:
            raise ConfigError("rounds", name, "a round is named vMAJOR.MINOR, e.g. v4.1") from None
        if key > round_key(LAST_ROUND):
            raise ConfigError("rounds", name, f"rounds after {LAST_ROUND} are held out")
    return names


def load_benchmarks(path: Path | None = None) -> dict[str, BenchmarkSpec]:
    """The benchmarks table (the shipped one by default), checked, by benchmark name."""
    path = path if path is not None else data_dir() / BENCHMARKS_FILE
    specs: dict[str, BenchmarkSpec] = {}
    for line, row in enumerate(_rows(path, BENCHMARK_COLUMNS), start=2):
        cells = _Cells(path, line, row)
        spec = BenchmarkSpec(
            benchmark=cells.text("benchmark", tuple(dict.fromkeys(BENCHMARKS.values()))),
            model=cells.text("model"),
            dataset=cells.text("dataset"),
            sample_count=cells.integer("sample_count"),
            ttft_bound_ms=cells.integer("ttft_bound_ms"),
            tpot_bound_ms=cells.integer("tpot_bound_ms"),
            input_tokens_max=cells.optional_integer("input_tokens_max"),
            output_tokens_max=cells.optional_integer("output_tokens_max"),
            output_tokens_mean=cells.optional_number("output_tokens_mean"),
            # a benchmark's definition may be newer than the table's rounds (llama3.1-8b: v5.1)
            first_round=cells.round("first_round", held_out=True),
            source=cells.text("source"),
        )
        if spec.benchmark in specs:
            raise cells.bad("benchmark", "appears twice")
        specs[spec.benchmark] = spec
    return specs
