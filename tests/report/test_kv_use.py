"""KV use and running requests over time, exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.report.inputs import RunInput, read_run
from sim.report.kv_use import (
    COLUMNS,
    kv_figure,
    kv_timeline,
    pool_blocks,
    switches_engines,
    time_average,
)
from tests.report.conftest import scaling_table


def test_a_time_average_splits_rows_that_straddle_bins():
    # 4 from 0.5 to 1.5 s, 2 from 1.5 to 3.5 s; bins of 1 s from 0 to 4 s
    found = time_average(
        np.array([0.5, 1.5]), np.array([1.5, 3.5]), np.array([4.0, 2.0]), np.arange(5.0)
    )
    assert found.tolist() == pytest.approx([2.0, 3.0, 2.0, 1.0])


def steps(**columns):
    base = {"replica_id": 0, "model_id": 0, "num_seqs": 1, "kv_blocks_used": 10}
    return pd.DataFrame({**{k: v for k, v in base.items()}, **columns})


def test_the_timeline_averages_over_the_fleet_and_keeps_the_fullest_replica():
    # two replicas of 100 blocks; replica 0 busy all of [0, 2) at 50 blocks, 4 sequences;
    # replica 1 busy [0, 1) at 100 blocks, 8 sequences, idle after
    table = pd.DataFrame(
        {
            "replica_id": [0, 0, 1],
            "start_time_s": [0.0, 1.0, 0.0],
            "duration_s": [1.0, 1.0, 1.0],
            "num_seqs": [4, 4, 8],
            "kv_blocks_used": [50, 50, 100],
            "model_id": [0, 0, 0],
        }
    )
    found = kv_timeline(table, {0: 100.0}, replicas=2, bin_s=1.0)
    assert found["time_s"].tolist() == [0.0, 1.0]
    assert found["kv_mean"].tolist() == pytest.approx([0.75, 0.25])
    assert found["kv_peak"].tolist() == [1.0, 0.5]
    assert found["running_mean"].tolist() == pytest.approx([6.0, 2.0])  # per replica
    assert found["running_peak"].tolist() == [8.0, 4.0]


def test_bucketed_steps_keep_only_their_peaks_and_none_is_no_timeline():
    table = pd.DataFrame(
        {
            "replica_id": [0, 0],
            "start_time_s": [0.0, 60.0],
            "duration_s": [30.0, 45.0],
            "num_seqs": [7, 9],
            "kv_blocks_used": [20, 40],
            "model_id": [0, 0],
        }
    )
    found = kv_timeline(table, {0: 80.0}, replicas=1, bucketed=True, bin_s=60.0)
    assert found["kv_peak"].tolist() == [0.25, 0.5]
    assert found["running_peak"].tolist() == [7.0, 9.0]
    assert found["kv_mean"].isna().all() and found["running_mean"].isna().all()
    assert kv_timeline(table.iloc[:0], {0: 80.0}, replicas=1) is None


def test_the_pool_is_the_capacity_over_the_block_size_per_model():
    config = {"kv": {"block_size": 16}}
    assert pool_blocks({"kv_capacity_tokens": 1600}, config) == {0: 100.0}
    both = {"kv_capacity_tokens": 1600, "kv_capacity_tokens_per_model": [1600, 320]}
    assert pool_blocks(both, config) == {0: 100.0, 1: 20.0}
    assert pool_blocks({"kv_capacity_tokens": None}, config) is None


def test_a_scaled_fleet_is_averaged_over_the_replicas_serving_not_its_peak():
    # replica 0 busy all of [0, 4) at half its pool with 4 sequences; replica 1 asked for at
    # 1 s, ready at 2 s, draining from 3 s, released at 4 s, busy [2, 4) full with 8 sequences
    table = pd.DataFrame(
        {
            "replica_id": [0, 0, 1],
            "start_time_s": [0.0, 2.0, 2.0],
            "duration_s": [2.0, 2.0, 2.0],
            "num_seqs": [4, 4, 8],
            "kv_blocks_used": [50, 50, 100],
            "model_id": [0, 0, 0],
        }
    )
    scaling = scaling_table(
        [
            (0.0, 1, 0, 0, 1, 2.99, "start", None),
            (1.0, 1, 1, 0, 2, 5.98, "scale_up", None),
            (2.0, 2, 0, 0, 2, 5.98, "ready", 1),
            (3.0, 1, 0, 1, 2, 5.98, "drain", 1),
            (4.0, 1, 0, 0, 1, 2.99, "released", 1),
        ]
    ).to_pandas()
    found = kv_timeline(table, {0: 100.0}, replicas=scaling, bin_s=1.0)
    assert found["serving"].tolist() == [1.0, 1.0, 2.0, 2.0]
    assert found["kv_mean"].tolist() == pytest.approx([0.5, 0.5, 0.75, 0.75])
    assert found["running_mean"].tolist() == pytest.approx([4.0, 4.0, 6.0, 6.0])
    # without the table, the replicas with a step in the bin stand for those serving
    counted = kv_timeline(table, {0: 100.0}, replicas=None, bin_s=1.0)
    assert counted["kv_mean"].tolist() == pytest.approx([0.5, 0.5, 0.75, 0.75])
    # the peak count (the summary's num_replicas) halves the use while one replica serves
    peak = kv_timeline(table, {0: 100.0}, replicas=2, bin_s=1.0)
    assert peak["kv_mean"].tolist() == pytest.approx([0.25, 0.25, 0.75, 0.75])


def answer_run(day: Path, name: str) -> RunInput:
    return read_run(day / "answers" / name)


def test_a_real_autoscaled_run_is_averaged_over_its_serving_replicas(real_day_folder):
    run = answer_run(real_day_folder, "autoscaled")
    assert run.summary["num_replicas"] == 2 == run.summary["autoscale"]["replicas_max"]
    steps, scaling = run.steps(COLUMNS), run.scaling()
    blocks = pool_blocks(run.summary, run.config)
    found = kv_timeline(steps, blocks, scaling)
    peak = kv_timeline(steps, blocks, 2)
    one = found["serving"] == 1.0
    assert one.sum() > 100  # one replica all night
    assert found["kv_mean"][one].to_numpy() == pytest.approx(2 * peak["kv_mean"][one].to_numpy())
    assert (found["serving"] <= 2.0).all()
    figure = kv_figure(steps, run.summary, run.config, bucketed=False, scaling=scaling)
    assert "replica(s)" not in figure.caption  # no "on 2 replica(s)": 2 is the peak
    assert (
        "The fleet scaled between 1 and 2 replicas: the means are over the replicas serving, "
        "those ready or draining in each bin (scaling.parquet)."
    ) in figure.caption


def test_a_run_that_switches_engines_draws_no_kv_share(real_day_folder):
    """The seasonal answer runs a fast engine by day and a slow one at night (both other than
    the run's own configuration): their pools are not in the files, so no share is drawn."""
    run = answer_run(real_day_folder, "seasonal")
    assert switches_engines(run.config)
    assert not switches_engines(answer_run(real_day_folder, "autoscaled").config)
    figure = kv_figure(
        run.steps(COLUMNS), run.summary, run.config, bucketed=False, scaling=run.scaling()
    )
    assert figure.caption.startswith("Running requests over time")
    assert "No KV-cache share: the run's schedule switches to other engine configurations" in (
        figure.caption
    )
    assert "Capacity:" not in figure.caption
