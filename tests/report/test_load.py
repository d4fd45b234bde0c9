"""Latency against load per replica: an autoscaled run's load is over its mean billed replicas,
not its peak."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.report.load import load_figure, sweep_curves


def runs() -> pd.DataFrame:
    """Two fixed fleets of 2 replicas at 10 and 20 req/s, and an autoscaled run at 20 req/s
    that peaked at 4 replicas and was billed for 2.5 on average."""
    return pd.DataFrame(
        {
            "run_id": [0, 1, 2],
            "workload.qps": [10.0, 20.0, 20.0],
            "autoscale.policy": ["none", "none", "rate"],
            "num_replicas": [2, 2, 4],
            "autoscale.replicas_mean": [None, None, 2.5],
            "stability.offered_requests_per_s": [10.0, 20.0, 20.0],
            "stability.verdict": ["stable"] * 3,
            "ttft_s.p50": [0.1, 0.2, 0.3],
            "ttft_s.p90": [0.2, 0.3, 0.4],
            "ttft_s.p99": [0.3, 0.4, 0.5],
        }
    )


def test_an_autoscaled_run_is_loaded_per_mean_billed_replica():
    curves = sweep_curves(runs(), ["workload.qps", "autoscale.policy"], chosen=None)
    # fixed fleets over their count; the autoscaled run over 2.5, not its peak of 4
    assert curves.points["load"].tolist() == pytest.approx([5.0, 10.0, 8.0])
    assert curves.scaled == 1
    figure = load_figure(curves)
    assert "1 autoscaled run(s): their load is over their mean replicas billed" in figure.caption


def test_fixed_fleets_are_loaded_per_replica_and_say_nothing_of_scaling():
    fixed = runs().iloc[:2].drop(columns=["autoscale.replicas_mean", "autoscale.policy"])
    curves = sweep_curves(fixed, ["workload.qps"], chosen=None)
    assert curves.points["load"].tolist() == [5.0, 10.0] and curves.scaled == 0
    assert "autoscaled" not in load_figure(curves).caption
