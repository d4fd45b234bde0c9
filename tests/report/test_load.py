"""Latency against load per replica: an autoscaled run's load is over its mean billed replicas,
not its peak."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.report import load
from sim.report.load import load_figure, sweep_curves
from tests.report.conftest import keep_drawings


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


def test_each_candidate_gets_its_own_row_of_panels_with_three_lines(monkeypatch):
    """Five candidates at three loads: drawn together, 15 lines crowded two panels; as small
    multiples each of the ten panels holds its candidate's three percentiles."""
    drawn = keep_drawings(monkeypatch, load)
    names = ["a", "b", "c", "d", "e"]
    rows = [
        {
            "run_id": i,
            "candidate": name,
            "workload.qps": qps,
            "num_replicas": 1,
            "stability.offered_requests_per_s": qps,
            "stability.verdict": "stable",
            **{
                f"{m}.{p}": qps * k / 100
                for m in ("ttft_s", "tpot_s")
                for k, p in enumerate(("p50", "p90", "p99"), 1)
            },
        }
        for i, (name, qps) in enumerate((n, q) for n in names for q in (1.0, 2.0, 4.0))
    ]
    curves = sweep_curves(pd.DataFrame(rows), ["candidate", "workload.qps"], chosen=[4])
    figure = load_figure(curves)
    assert figure is not None and "one row of panels per candidate" in figure.caption
    axes = drawn[0].axes
    assert axes.shape == (5, 2)
    # the chosen run's candidate first, then the others in order
    order = ["candidate=b", "candidate=a", "candidate=c", "candidate=d", "candidate=e"]
    assert [ax.get_title() for ax in axes[:, 0]] == [f"TTFT: {g}" for g in order]
    assert [ax.get_title() for ax in axes[:, 1]] == [f"TPOT: {g}" for g in order]
    for ax in axes.flat:
        drawn_lines = [line for line in ax.get_lines() if len(line.get_xdata()) == 3]
        assert len(drawn_lines) == 3, ax.get_title()
    # the operating point's load written on its line, in its candidate's panels only
    assert [t.get_text() for t in axes[0][0].texts] == ["2"] and not axes[1][0].texts
    labels = [t.get_text() for t in axes[0][1].get_legend().get_texts()]
    # one legend: the percentiles, and the marks the panels carry (no SLO, no knee here)
    assert labels == ["p50", "p90", "p99", "operating point"]
