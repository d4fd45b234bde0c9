"""``fleetcast collect``: a sweep's runs as one Parquet dataset that pandas, polars and DuckDB read.

A 2x2x2 sweep is built in-process (``simulate`` + ``write_run`` into ``SWEEP/0`` .. ``SWEEP/7``
with the ``.hydra/overrides.yaml`` Hydra would write); one test collects a real multirun.
"""

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import sim
from sim.output.results import REQUESTS_SCHEMA
from sim.output.run_files import write_run
from sim.run import simulate
from sim.sweeps.collect import CollectError, collect, main
from sim.sweeps.runs import flatten
from tests.support import compose

TINY = [
    "workload=poisson",
    "workload.num_requests=20",
    "workload.qps=20",
    "workload.prompt_tokens=64",
    "workload.output_tokens=8",
    "sim.progress=false",
]
GRID = list(
    itertools.product(
        ["fleet.replicas=1", "fleet.replicas=2"],
        ["precision.weights=bf16", "precision.weights=fp8"],
        ["scheduler.max_num_seqs=8", "scheduler.max_num_seqs=64"],
    )
)
SWEPT = ["fleet.replicas", "precision.weights", "scheduler.max_num_seqs"]


def _write_job(job_dir: Path, overrides: list[str]) -> None:
    write_run(simulate(compose(*overrides)), job_dir)
    (job_dir / ".hydra").mkdir()
    (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A finished 2x2x2 sweep; tests that change it work on a copy (``sweep_copy``)."""
    root = tmp_path_factory.mktemp("sweep")
    for job, grid_point in enumerate(GRID):
        _write_job(root / str(job), [*grid_point, *TINY])
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root


@pytest.fixture
def sweep_copy(sweep, tmp_path) -> Path:
    return Path(shutil.copytree(sweep, tmp_path / "sweep"))


@pytest.fixture(scope="module")
def collected(sweep, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "collected"
    return collect(sweep, out)


def test_runs_table_has_a_row_per_run_the_swept_keys_and_every_metric(sweep, collected):
    runs = pd.read_parquet(collected.runs_path)
    assert len(runs) == 8 and collected.run_ids == [str(i) for i in range(8)]
    assert runs["run_id"].tolist() == list(range(8))  # numbered job folders: an integer id
    for column in [
        *SWEPT,
        "ttft_s.p99",
        "tpot_s.p50",
        "throughput.requests_per_s",
        "cost.usd_per_hour",
        "cost.usd_per_million_output_tokens",
        "completed",
        "kv_utilization.max",
        "num_gpus",
    ]:
        assert column in runs.columns, column
    # overridden though constant: the workload's settings and the group chosen by name
    assert {"workload.qps", "workload.num_requests", "choice.workload"} <= set(runs.columns)
    assert set(runs["choice.workload"]) == {"poisson"}
    # the same in every run and never overridden: not a column
    assert "model.name" not in runs.columns and "hardware.name" not in runs.columns
    assert "output_dir" not in runs.columns
    assert collected.swept_keys[:1] == ["choice.workload"] and set(SWEPT) <= set(
        collected.swept_keys
    )
    assert str(runs["precision.weights"].dtype) in ("object", "str", "string")
    assert runs["fleet.replicas"].dtype == "int64"
    assert runs["ttft_s.p99"].dtype == "float64" and runs["completed"].dtype == "int64"

    for row in runs.to_dict("records"):
        job_dir = sweep / str(row["run_id"])
        overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text())
        for override in overrides[:3]:
            key, value = override.split("=")
            assert str(row[key]) == value
        summary = flatten(json.loads((job_dir / "summary.json").read_text()), keep_lists=False)
        for key, value in summary.items():
            if value is None:
                assert pd.isna(row[key]), key
            else:
                assert row[key] == value, key  # exactly: float64 round-trips


def test_requests_dataset_is_every_run_partitioned_by_run_id(sweep, collected):
    files = sorted(collected.requests_dir.glob("*/*.parquet"))
    assert [f.parent.name for f in files] == [f"run_id={i}" for i in range(8)]
    assert all(f.name == "part-0.parquet" for f in files)
    for f in files:
        # the files hold the requests.parquet columns only; run_id comes from the folder name
        assert pq.ParquetFile(f).schema_arrow.names == REQUESTS_SCHEMA.names
    requests = pd.read_parquet(collected.requests_dir)
    expected = sum(
        json.loads((sweep / str(i) / "summary.json").read_text())["num_requests"] for i in range(8)
    )
    assert len(requests) == expected == collected.num_requests == 8 * 20
    assert "run_id" in requests.columns
    assert sorted(int(i) for i in requests["run_id"].unique()) == list(range(8))
    for run_id in range(8):
        original = pq.read_table(sweep / str(run_id) / "requests.parquet")
        mine = pq.ParquetFile(collected.requests_dir / f"run_id={run_id}" / "part-0.parquet")
        assert mine.read().equals(original.replace_schema_metadata(mine.schema_arrow.metadata))


def test_schema_version_is_in_the_file_metadata_of_every_file(collected):
    paths = [collected.runs_path, *collected.requests_dir.glob("*/*.parquet")]
    assert len(paths) == 9
    for path in paths:
        meta = pq.read_metadata(path).metadata
        assert meta[b"fleetcast_schema_version"] == b"1"
        assert meta[b"fleetcast_version"] == sim.__version__.encode()
        assert meta[b"created_by"] == b"fleetcast collect"
    swept = json.loads(pq.read_metadata(collected.runs_path).metadata[b"fleetcast_swept_keys"])
    assert swept == collected.swept_keys


def test_pandas_polars_and_duckdb_read_it_as_is_and_agree(collected):
    out = collected.out_dir
    runs_pd = pd.read_parquet(out / "runs.parquet")
    req_pd = pd.read_parquet(out / "requests")
    runs_pl = pl.read_parquet(out / "runs.parquet")
    req_pl = pl.scan_parquet(out / "requests/**/*.parquet", hive_partitioning=True).collect()
    con = duckdb.connect()
    runs_db = con.sql(f"select * from read_parquet('{out}/runs.parquet')")  # noqa: F841 (DuckDB reads it by name)
    req_db = f"read_parquet('{out}/requests/*/*.parquet', hive_partitioning=true)"
    assert (
        len(runs_pd)
        == runs_pl.height
        == con.sql("select count(*) from runs_db").fetchall()[0][0]
        == 8
    )
    assert (
        len(req_pd)
        == req_pl.height
        == con.sql(f"select count(*) from {req_db}").fetchall()[0][0]
        == 160
    )

    # output tokens of completed requests per replica count: a join of the two tables on run_id,
    # with no cast in any of the three
    merged = req_pd[req_pd["status"] == "completed"].merge(runs_pd, on="run_id")
    by_pd = merged.groupby("fleet.replicas")["output_tokens"].sum().to_dict()
    by_pl = dict(
        req_pl.filter(pl.col("status") == "completed")
        .join(runs_pl, on="run_id")
        .group_by("fleet.replicas")
        .agg(pl.col("output_tokens").sum())
        .iter_rows()
    )
    by_db = dict(
        con.sql(f"""select r."fleet.replicas", sum(q.output_tokens)
                             from {req_db} q join runs_db r using (run_id)
                             where q.status = 'completed' group by 1""").fetchall()
    )
    assert by_pd == by_pl == by_db
    assert sum(by_pd.values()) == runs_pd["completed"].sum() * 8  # 8 output tokens each

    p99 = runs_pd["ttft_s.p99"].mean()
    assert runs_pl["ttft_s.p99"].mean() == pytest.approx(p99)
    assert con.sql('select avg("ttft_s.p99") from runs_db').fetchall()[0][0] == pytest.approx(p99)


def test_unfinished_runs_are_skipped_and_reported(sweep_copy, capsys):
    killed = sweep_copy / "8"
    killed.mkdir()
    shutil.copy(sweep_copy / "0" / "config.yaml", killed)  # no summary.json: killed midway
    shutil.copy(sweep_copy / "0" / "requests.parquet", killed)
    assert main([str(sweep_copy)]) == 0
    printed = capsys.readouterr().out
    assert "collected 8 run(s)" in printed and "1 unfinished" in printed
    for key in SWEPT:
        assert key in printed
    assert str(sweep_copy / "collected" / "runs.parquet") in printed
    runs = pd.read_parquet(sweep_copy / "collected" / "runs.parquet")
    assert sorted(runs["run_id"]) == list(range(8))
    assert not (sweep_copy / "collected" / "requests" / "run_id=8").exists()

    # collecting again finds the same runs (the output folder is not searched) and replaces it
    result = collect(sweep_copy)
    assert result.unfinished == ["8"] and len(result.run_ids) == 8
    assert sorted(p.name for p in sweep_copy.iterdir() if p.name.startswith(".")) == []


def test_nested_job_folders_get_path_ids_that_round_trip(sweep, tmp_path):
    root = tmp_path / "nested"
    for group, job in [("a", 0), ("a", 1), ("b", 2)]:
        shutil.copytree(sweep / str(job), root / group / str(job))
    result = collect(root, tmp_path / "out")
    assert result.run_ids == ["a/0", "a/1", "b/2"]
    runs = pl.read_parquet(result.runs_path)
    assert runs["run_id"].to_list() == ["a/0", "a/1", "b/2"]
    req = pl.scan_parquet(result.requests_dir / "**/*.parquet", hive_partitioning=True).collect()
    assert sorted(req["run_id"].unique().to_list()) == ["a/0", "a/1", "b/2"]
    assert sorted(pd.read_parquet(result.requests_dir)["run_id"].astype(str).unique()) == [
        "a/0",
        "a/1",
        "b/2",
    ]
    assert (
        duckdb.sql(f"""select count(distinct run_id) from read_parquet(
        '{result.requests_dir}/*/*.parquet', hive_partitioning=true) q
        join read_parquet('{result.runs_path}') r using (run_id)""").fetchall()[0][0]
        == 3
    )


def test_no_requests_writes_the_runs_table_only(sweep, tmp_path):
    result = collect(sweep, tmp_path / "out", include_requests=False)
    assert result.requests_dir is None and result.num_requests == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["runs.parquet"]
    assert main([str(sweep), "--out", str(tmp_path / "out2"), "--no-requests"]) == 0
    assert not (tmp_path / "out2" / "requests").exists()


def test_a_failed_collect_leaves_the_previous_output_and_no_temporaries(sweep_copy, tmp_path):
    out = tmp_path / "out"
    collect(sweep_copy, out)
    before = pq.read_table(out / "runs.parquet")
    (sweep_copy / "5" / "requests.parquet").write_bytes(b"not parquet")
    with pytest.raises(CollectError, match="run 5"):
        collect(sweep_copy, out)
    assert pq.read_table(out / "runs.parquet").equals(before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "sweep"]
    # a folder that is not an earlier collect output is never replaced
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(CollectError, match="refusing"):
        collect(sweep_copy, precious, include_requests=False)
    assert (precious / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("make", ["missing", "empty", "only_unfinished"])
def test_nothing_to_collect_is_a_one_line_error(tmp_path, capsys, make):
    target = tmp_path / "sweep"
    if make != "missing":
        target.mkdir()
    if make == "only_unfinished":
        (target / "0").mkdir()
        (target / "0" / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(
        CollectError, match="does not exist" if make == "missing" else "no finished runs"
    ):
        collect(target)
    assert main([str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(target) in lines[0]
    assert not (tmp_path / "sweep" / "collected").exists()


def test_collects_a_real_multirun(tmp_path):
    sweep_dir = tmp_path / "multirun"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim",
            "-m",
            "hydra.launcher.n_jobs=1",  # in-process: ~2 s
            "scheduler=vllm,sarathi",
            "workload=poisson",
            "workload.num_requests=10",
            "workload.qps=20",
            "workload.prompt_tokens=64",
            "workload.output_tokens=8",
            "fleet.replicas=1",
            "sim.progress=false",
            f"output_dir={sweep_dir}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = collect(sweep_dir)
    assert result.out_dir == sweep_dir.resolve() / "collected" and result.unfinished == []
    runs = pd.read_parquet(result.runs_path).set_index("choice.scheduler")
    assert sorted(runs.index) == ["sarathi", "vllm"]
    # from .hydra/hydra.yaml: the chosen group options, varying or overridden
    assert set(runs["choice.workload"]) == {"poisson"}
    assert runs.loc["vllm", "scheduler._target_"].endswith("VLLMScheduler")
    assert pd.isna(runs.loc["vllm", "scheduler.chunk_size"])  # sarathi's option only
    assert runs["completed"].tolist() == [10, 10]
    assert len(pd.read_parquet(result.requests_dir)) == 20


def test_metric_types_are_declared_whatever_a_sweep_holds(tmp_path):
    # One run with energy costed, one without; neither picks a price tier.
    root = tmp_path / "sweep"
    _write_job(root / "0", ["cost.energy.enabled=true", *TINY])
    _write_job(root / "1", ["cost.energy.enabled=false", *TINY])
    runs = pq.read_table(collect(root, tmp_path / "out").runs_path)
    schema = runs.schema
    assert "cost.energy" not in schema.names  # only its sub-keys, null when energy was off
    assert runs.column("cost.energy.kwh_per_hour").to_pylist()[1] is None
    assert runs.column("cost.energy.kwh_per_hour").to_pylist()[0] > 0
    assert schema.field("cost.tier").type == pa.string()  # null in both runs, still a string
    assert schema.field("completed").type == pa.int64()
    assert schema.field("ttft_s.p99").type == pa.float64()


def test_runs_from_an_older_fleetcast_collect_with_new_ones(sweep, sweep_copy, tmp_path):
    """Half the runs written before sim/ was split into packages (their config.yaml names
    sim.scheduler.*, sim.router.*, sim.step_time.* classes): ``_target_`` is not a swept column,
    and every run reads the current names."""
    for job in ("0", "2", "4", "6"):
        config = sweep_copy / job / "config.yaml"
        text = config.read_text()
        for new, old in (
            ("sim.engine.scheduler.", "sim.scheduler."),
            ("sim.engine.step_time.", "sim.step_time."),
            ("sim.fleet.router.", "sim.router."),
        ):
            text = text.replace(new, old)
        config.write_text(text)
    result = collect(sweep_copy, tmp_path / "collected")
    runs = pd.read_parquet(result.runs_path)
    assert not [c for c in runs.columns if c.endswith("_target_")]
    assert result.swept_keys == collect(sweep, tmp_path / "untouched").swept_keys
    assert len(runs) == 8
