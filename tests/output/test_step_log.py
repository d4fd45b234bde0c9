"""Step rows leaving the replicas as the run goes (``sim.output.step_log``): whole, bucketed or
not at all, the summary the same in every case, and a run streamed through the spill file and
row groups identical to one held in memory."""

import json

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sim.output import request_log, tables
from sim.output.metrics import StepRecorder
from sim.output.step_log import StepLog
from sim.output.tables import MemorySink
from sim.run import simulate
from tests.contract import run_problems
from tests.scenarios import RANDOM, TINY_KV
from tests.support import columns, compose

BUSY = [*RANDOM, *TINY_KV, "fleet.replicas=3", "workload.num_requests=300", "workload.qps=40"]
COLOCATED = [*RANDOM, "placement=colocated", "placement.second_model=llama2_7b", "fleet.replicas=2"]


@pytest.fixture
def tiny_pieces(monkeypatch):
    """Every mechanism a million-request run uses, at the size of a test: replicas hand over
    their rows every 7 of them, row groups of 50 rows, request batches of 3, and a spill
    budget that sends every piece to the spill file."""
    monkeypatch.setattr("sim.fleet.cluster.FLUSH_ROWS", 7)
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 50)
    monkeypatch.setattr(request_log, "BATCH_ROWS", 3)
    monkeypatch.setattr("sim.output.step_log.SPILL_BYTES", 1)


@pytest.mark.parametrize("overrides", [BUSY, COLOCATED], ids=["three_replicas", "colocated"])
def test_a_streamed_run_equals_one_held_in_memory(overrides, tmp_path, monkeypatch):
    held = simulate(compose(*overrides))
    monkeypatch.setattr("sim.fleet.cluster.FLUSH_ROWS", 7)
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 50)
    monkeypatch.setattr(request_log, "BATCH_ROWS", 3)
    monkeypatch.setattr("sim.output.step_log.SPILL_BYTES", 1)
    out = tmp_path / "run"
    streamed = simulate(compose(*overrides), out)
    assert streamed.requests is None and streamed.steps is None  # they went to the files
    assert pq.read_table(out / "requests.parquet").equals(held.requests)
    assert pq.read_table(out / "steps.parquet").equals(held.steps)
    # the pieces were small: many row groups, and the spill file is gone
    assert pq.ParquetFile(out / "steps.parquet").num_row_groups == -(-held.steps.num_rows // 50)
    assert sorted(p.name for p in out.iterdir()) == [
        "config.yaml",
        "requests.parquet",
        "steps.parquet",
        "summary.json",
    ]
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(held.summary))
    assert run_problems(out) == []


def test_the_summary_is_the_same_whatever_steps_are_kept(tmp_path, tiny_pieces):
    full = simulate(compose(*BUSY), tmp_path / "full")
    for mode in ("bucketed", "none"):
        other = simulate(compose(*BUSY, f"output.steps={mode}"), tmp_path / mode)
        assert other.summary == full.summary, mode
        assert run_problems(tmp_path / mode) == [], mode
    assert pq.read_table(tmp_path / "none" / "steps.parquet").num_rows == 0


@pytest.mark.parametrize("bucket_s", [0.5, 2.0, 1000.0])
def test_buckets_sum_the_steps_that_start_in_them(bucket_s, monkeypatch):
    monkeypatch.setattr("sim.fleet.cluster.FLUSH_ROWS", 5)  # buckets cross the hand-overs
    full = columns(simulate(compose(*COLOCATED)).steps)
    bucketed = simulate(
        compose(*COLOCATED, "output.steps=bucketed", f"output.step_bucket_s={bucket_s}")
    ).steps
    got = columns(bucketed)
    # by replica, then time, then model
    keys = list(zip(got["replica_id"], got["start_time_s"], got["model_id"], strict=True))
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    bucket = np.floor(full["start_time_s"] / bucket_s)
    for row, (replica, start, model) in enumerate(keys):
        mine = (
            (full["replica_id"] == replica)
            & (full["model_id"] == model)
            & (bucket == start / bucket_s)
        )
        assert got["num_steps"][row] == mine.sum() >= 1
        assert got["duration_s"][row] == pytest.approx(full["duration_s"][mine].sum())
        for name in ("num_prefill_tokens", "num_decode_tokens"):
            assert got[name][row] == full[name][mine].sum()
        for name in ("num_seqs", "kv_blocks_used"):
            assert got[name][row] == full[name][mine].max()
    assert got["num_steps"].sum() == len(full["start_time_s"])
    assert pc.sum(bucketed.column("num_decode_tokens")).as_py() == full["num_decode_tokens"].sum()


def test_totals_add_up_over_flushes():
    # three flushes of one replica, two of another; the totals are those of all rows at once
    log = StepLog("full", kv_num_blocks=[10])
    rows = []
    for replica, starts in ((0, [0.0, 1.0]), (1, [0.0]), (0, [2.0, 3.0, 4.0]), (1, [1.5]), (0, [])):
        recorder = StepRecorder()
        for start in starts:
            duration, blocks = 0.5 + start / 10, int(start) + 1
            recorder.add(start, duration, 4, 2, 3, blocks)
            rows.append((replica, start, duration, blocks))
        log.flush(replica, [(0, recorder)])
        assert len(recorder) == 0  # taken
    sink = MemorySink(log.schema)
    totals = log.finish(2, sink)
    durations = np.array([r[2] for r in rows])
    shares = np.array([r[3] for r in rows]) / 10
    assert totals.num_steps == len(rows) == sink.table.num_rows
    assert totals.busy_s == pytest.approx(durations.sum(), rel=1e-15)
    assert totals.kv_busy_s == pytest.approx((shares * durations).sum(), rel=1e-15)
    assert totals.kv_peak == shares.max()
    assert totals.end_s == max(r[1] + r[2] for r in rows)
    # replica 0's rows first, each replica's in time order
    assert sink.table.column("replica_id").to_pylist() == [0] * 5 + [1] * 2
    assert sink.table.column("start_time_s").to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 1.5]
