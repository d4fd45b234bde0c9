"""A sweep's runs as one queryable dataset: ``fleetcast collect SWEEP_DIR``.

``collect(sweep_dir, out_dir)`` finds every finished run under ``sweep_dir`` (a folder holding
``summary.json`` and ``config.yaml``, at any depth: Hydra's basic launcher puts jobs in
``SWEEP/0``, ``SWEEP/1``, ..., other launchers nest them deeper) and writes::

    out_dir/runs.parquet                        one row per finished run
    out_dir/requests/run_id=<id>/part-0.parquet  each run's requests.parquet, Hive-partitioned

``runs.parquet`` holds ``run_id`` (the run folder relative to the sweep folder), a column per
swept config key, and a column per summary metric. A config key is swept when its value differs
between runs or a job's ``.hydra/overrides.yaml`` names it; keys are dotted paths into the
resolved ``config.yaml`` (``fleet.replicas``, ``scheduler._target_``). A config group chosen by
name (``hardware=h200``) is the column ``choice.hardware``, read from ``.hydra/hydra.yaml``
(``hydra.runtime.choices``) or else from the override. Summary metrics are ``summary.json``
flattened the same way (``ttft_s.p99``, ``cost.usd_per_hour``); lists are left out. A config
column whose name is also a metric's (``slo.ttft_s``) is called ``config.<key>``.

``run_id`` is an integer column when every run id is one (Hydra's numbered job folders), a
string otherwise: that is the type pandas, polars and DuckDB infer for the ``run_id`` partition
of ``requests/``, so the two tables join on ``run_id`` without a cast.

Config column types come from the values: bool, int64, float64 (ints mixed with floats),
string (text, or values of mixed kinds written as JSON); null where a run lacks the key. Summary
metric types are declared (``METRIC_TYPES``; float64 otherwise), so they do not change from
sweep to sweep. Both tables carry ``fleetcast_schema_version`` in their Parquet file metadata.
The output is written into a temporary folder beside ``out_dir`` and renamed into place at the
end, so ``out_dir`` is either the previous complete dataset or the new complete one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

import sim
from sim.output.run_files import REQUESTS_FILE, SUMMARY_COUNTS
from sim.sweeps.runs import CollectError, Run, _run_id, find_runs, read_run

SCHEMA_VERSION = "1"
CREATED_BY = "fleetcast collect"


@dataclass
class CollectResult:
    out_dir: Path
    runs_path: Path
    requests_dir: Path | None  # None with include_requests=False
    run_ids: list[str]
    unfinished: list[str]  # run folders (relative to the sweep) with config.yaml, no summary.json
    swept_keys: list[str]  # the parameter columns of runs.parquet, choice.* first
    num_requests: int  # rows in the requests dataset (0 when not written)
    num_columns: int = 0
    swept_values: dict[str, list] = field(default_factory=dict)


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True)


# The summary's metrics have fixed types under one schema version, so every sweep's
# runs.parquet agrees (a column null in every run of one sweep is not a different type). Counts
# are integers, the labels (cost, stability) strings, the stability flags booleans, every other
# metric float64.
METRIC_TYPES = {
    **{name: pa.int64() for name in SUMMARY_COUNTS},
    "cost.tier": pa.string(),
    "cost.price_source": pa.string(),
    "stability.verdict": pa.string(),
    "stability.reason": pa.string(),
    "stability.paced_by_client": pa.bool_(),
    "stability.served_share_judged": pa.bool_(),
    "stability.backlog_growth": pa.int64(),
}


def arrow_type(values: list, default: pa.DataType) -> pa.DataType:
    """The one Arrow type that holds every value (None is null)."""
    present = [v for v in values if v is not None]
    if not present:
        return default
    if all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.int64()
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.float64()
    return pa.string()


def _as_type(values: list, type_: pa.DataType) -> list:
    if pa.types.is_floating(type_):
        return [None if v is None else float(v) for v in values]
    if pa.types.is_string(type_):
        return [v if v is None or isinstance(v, str) else _canonical(v) for v in values]
    return values


def _swept_columns(runs: list[Run]) -> tuple[list[str], list[str]]:
    """The choice groups and the config keys that differ between runs or are overridden."""
    overridden = {k for run in runs for k in run.override_keys}
    groups = []
    for group in dict.fromkeys(g for run in runs for g in run.choices):
        values = {run.choices.get(group) for run in runs}
        if len(values) > 1 or group in overridden:
            groups.append(group)
    keys = []
    for key in dict.fromkeys(k for run in runs for k in run.config):
        values = {_canonical(run.config.get(key)) for run in runs}
        in_runs = sum(key in run.config for run in runs)
        overridden_here = key in overridden or any(
            key.startswith(f"{o}.") for o in overridden if o not in groups
        )
        if len(values) > 1 or in_runs < len(runs) or overridden_here:
            keys.append(key)
    return groups, keys


def _metadata(extra: dict[str, str] | None = None) -> dict[bytes, bytes]:
    meta = {
        "fleetcast_schema_version": SCHEMA_VERSION,
        "fleetcast_version": sim.__version__,
        "created_by": CREATED_BY,
        **(extra or {}),
    }
    return {k.encode(): v.encode() for k, v in meta.items()}


def runs_table(runs: list[Run]) -> tuple[pa.Table, list[str]]:
    """One row per run; returns the table and its parameter columns."""
    groups, keys = _swept_columns(runs)
    metric_names = list(dict.fromkeys(k for run in runs for k in run.summary))
    ids = [run.run_id for run in runs]
    integer_ids = all(re.fullmatch(r"0|[1-9][0-9]{0,17}", i) for i in ids)
    columns: dict[str, tuple[list, pa.DataType]] = {
        "run_id": ([int(i) for i in ids], pa.int64()) if integer_ids else (ids, pa.string()),
    }
    params = []
    for group in groups:
        name = f"choice.{group}"
        columns[name] = ([run.choices.get(group) for run in runs], pa.string())
        params.append(name)
    metric_set = set(metric_names)
    for key in keys:
        name = f"config.{key}" if key in metric_set or key in columns else key
        values = [run.config.get(key) for run in runs]
        type_ = arrow_type(values, pa.string())
        columns[name] = (_as_type(values, type_), type_)
        params.append(name)
    # Summary metrics that are null in some runs (cost.energy when energy is off) appear
    # through their sub-keys in the others: give them those columns, never a bare one.
    metric_names = [n for n in metric_names if not any(m.startswith(f"{n}.") for m in metric_names)]
    for name in metric_names:
        values = [run.summary.get(name) for run in runs]
        type_ = METRIC_TYPES.get(name, pa.float64())  # declared, whatever this sweep's values
        columns[name] = (_as_type(values, type_), type_)
    schema = pa.schema(
        [(name, type_) for name, (_, type_) in columns.items()],
        metadata=_metadata({"fleetcast_swept_keys": json.dumps(params)}),
    )
    arrays = [pa.array(values, type=type_) for values, type_ in columns.values()]
    return pa.Table.from_arrays(arrays, schema=schema), params


# ---------------------------------------------------------------------------------------------
# the requests dataset


def _read_requests(run: Run, schema_only: bool = False) -> pa.Table | pa.Schema:
    path = run.path / REQUESTS_FILE
    try:
        return pq.read_schema(path) if schema_only else pq.read_table(path)
    except Exception as err:
        raise CollectError(
            f"run {run.run_id}: cannot read requests.parquet: {' '.join(str(err).split())}"
        ) from None


def write_requests(runs: list[Run], requests_dir: Path) -> int:
    """Each run's requests as ``requests_dir/run_id=<id>/part-0.parquet``; returns the rows.

    The files share one schema (the union of the runs' columns: a run from an older Fleetcast
    without a column gets nulls there), so a reader never has to reconcile them.
    """
    schemas = [_read_requests(run, schema_only=True) for run in runs]
    try:
        schema = pa.unify_schemas(
            [s.remove_metadata() for s in schemas], promote_options="permissive"
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise CollectError(
            f"the runs' requests.parquet files have clashing columns: {' '.join(str(err).split())}"
        ) from None
    schema = schema.with_metadata(_metadata())
    total = 0
    for run in runs:
        table = _read_requests(run)
        arrays = [
            table.column(f.name).cast(f.type)
            if f.name in table.column_names
            else pa.nulls(len(table), f.type)
            for f in schema
        ]
        table = pa.Table.from_arrays(arrays, schema=schema)
        part = requests_dir / f"run_id={quote(run.run_id, safe='')}"
        part.mkdir(parents=True)
        pq.write_table(table, part / "part-0.parquet")
        total += len(table)
    return total


# ---------------------------------------------------------------------------------------------
# collect


def _is_collect_output(path: Path) -> bool:
    """An earlier ``collect`` result (safe to replace): runs.parquet with our metadata."""
    try:
        meta = pq.read_schema(path / "runs.parquet").metadata or {}
    except Exception:
        return False
    return meta.get(b"created_by") == CREATED_BY.encode()


def collect(
    sweep_dir: str | Path, out_dir: str | Path | None = None, *, include_requests: bool = True
) -> CollectResult:
    """Collect the finished runs under ``sweep_dir`` into ``out_dir`` (default
    ``sweep_dir/collected``); see the module docstring for the layout."""
    sweep = Path(sweep_dir)
    if not sweep.is_dir():
        raise CollectError(f"sweep folder {str(sweep)!r} does not exist or is not a folder")
    sweep = sweep.resolve()
    out = (Path(out_dir) if out_dir is not None else sweep / "collected").resolve()
    if out == sweep or out in sweep.parents:
        raise CollectError(f"--out {str(out)!r} would replace the sweep folder itself")
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or _is_collect_output(out))):
        raise CollectError(
            f"--out {str(out)!r} exists and is not an earlier collect output; "
            "refusing to replace it"
        )

    finished, unfinished = find_runs(sweep, skip=(out,))
    unfinished_ids = [_run_id(sweep, p) for p in unfinished]
    if not finished:
        extra = f" ({len(unfinished)} unfinished)" if unfinished else ""
        raise CollectError(
            f"no finished runs (folders with config.yaml and summary.json) "
            f"under {str(sweep)!r}{extra}"
        )
    runs = [read_run(sweep, p) for p in finished]
    if include_requests:
        missing = [r.run_id for r in runs if not (r.path / REQUESTS_FILE).is_file()]
        if missing:
            raise CollectError(
                f"run {missing[0]}: summary.json but no requests.parquet "
                "(use --no-requests to collect the summaries only)"
            )
    table, params = runs_table(runs)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial"))
    try:
        pq.write_table(table, tmp / "runs.parquet")
        num_requests = 0
        if include_requests:
            num_requests = write_requests(runs, tmp / "requests")
        _replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    swept_values = {
        p: sorted(
            {v for v in table.column(p).to_pylist() if v is not None},
            key=lambda v: (str(type(v)), v),
        )
        for p in params
    }
    return CollectResult(
        out_dir=out,
        runs_path=out / "runs.parquet",
        requests_dir=out / "requests" if include_requests else None,
        run_ids=[r.run_id for r in runs],
        unfinished=unfinished_ids,
        swept_keys=params,
        num_requests=num_requests,
        num_columns=table.num_columns,
        swept_values=swept_values,
    )


def _replace(new: Path, out: Path) -> None:
    """Move the complete ``new`` folder to ``out``; an older ``out`` goes only after that."""
    if not out.exists():
        os.replace(new, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
    os.replace(out, old / out.name)
    try:
        os.replace(new, out)
    except BaseException:
        os.replace(old / out.name, out)  # put the previous dataset back
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# command line


def _shorten(values: list, limit: int = 6) -> str:
    shown = [str(v) for v in values[:limit]]
    if len(values) > limit:
        shown.append(f"... ({len(values)} values)")
    return ", ".join(shown)


def format_result(result: CollectResult, sweep_dir: str | Path) -> str:
    lines = [f"collected {len(result.run_ids)} run(s) from {sweep_dir}"]
    if result.unfinished:
        lines.append(
            f"skipped {len(result.unfinished)} unfinished run(s) (no summary.json): "
            f"{_shorten(result.unfinished)}"
        )
    if result.swept_keys:
        lines.append("swept:")
        width = max(len(k) for k in result.swept_keys)
        for key in result.swept_keys[:20]:
            lines.append(f"  {key:<{width}}  {_shorten(result.swept_values.get(key, []))}")
        if len(result.swept_keys) > 20:
            lines.append(f"  ... and {len(result.swept_keys) - 20} more")
    else:
        lines.append("swept: nothing (every run has the same config)")
    lines.append(
        f"runs:     {result.runs_path} ({len(result.run_ids)} rows, {result.num_columns} columns)"
    )
    if result.requests_dir is not None:
        lines.append(
            f"requests: {result.requests_dir}/ ({result.num_requests:,} rows, "
            "Hive-partitioned by run_id)"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``fleetcast collect SWEEP_DIR [--out PATH] [--no-requests]``."""
    parser = argparse.ArgumentParser(
        prog="fleetcast collect",
        description="Collect a sweep's finished runs into one Parquet dataset: runs.parquet "
        "(one row per run: swept config keys and summary metrics) and requests/ "
        "(every run's requests, Hive-partitioned by run_id).",
    )
    parser.add_argument("sweep_dir", metavar="SWEEP_DIR", help="the multirun folder")
    parser.add_argument(
        "--out",
        metavar="PATH",
        default=None,
        help="where to write the dataset (default: SWEEP_DIR/collected); an "
        "earlier collect output there is replaced",
    )
    parser.add_argument(
        "--no-requests",
        action="store_true",
        help="write runs.parquet only, not the per-request dataset",
    )
    args = parser.parse_args(argv)
    try:
        result = collect(args.sweep_dir, args.out, include_requests=not args.no_requests)
    except (ValueError, OSError) as err:  # CollectError, ConfigError, a file we cannot write
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    print(format_result(result, args.sweep_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
