"""The summary's arithmetic: throughput, cost and percentiles from the request table, and goodput
following the SLO bounds."""

import numpy as np
import pytest

from sim.run import simulate
from tests.scenarios import RANDOM
from tests.support import columns, compose


def test_summary_arithmetic():
    result = simulate(
        compose(*RANDOM, "fleet.replicas=2", "fleet.tp=2", "hardware.usd_per_gpu_hour=2.5")
    )
    s = result.summary
    req = columns(result.requests)
    done = req["status"] == "completed"
    assert s["num_gpus"] == 4
    assert s["cost"]["usd_per_hour"] == 4 * 2.5
    tput = s["throughput"]
    assert tput["requests_per_s"] == pytest.approx(done.sum() / s["duration_s"], rel=1e-12)
    out_per_s = req["output_tokens"][done].sum() / s["duration_s"]
    assert tput["output_tokens_per_s"] == pytest.approx(out_per_s, rel=1e-12)
    assert tput["total_tokens_per_s"] == pytest.approx(
        (req["output_tokens"][done].sum() + req["prompt_tokens"][done].sum()) / s["duration_s"],
        rel=1e-12,
    )
    assert s["cost"]["usd_per_million_output_tokens"] == pytest.approx(
        10.0 / 3600 / out_per_s * 1e6, rel=1e-12
    )
    steps = columns(result.steps)
    assert s["duration_s"] == pytest.approx(
        (steps["start_time_s"] + steps["duration_s"]).max() - req["arrival_time_s"].min()
    )
    assert 0 <= s["goodput_requests_per_s"] <= tput["requests_per_s"]
    assert s["ttft_s"]["p50"] == pytest.approx(np.percentile(req["ttft_s"][done], 50))
    assert s["e2e_s"]["mean"] == pytest.approx(req["e2e_s"][done].mean())
    tpot = req["tpot_s"][done & (req["output_tokens"] > 1)]
    assert s["tpot_s"]["p99"] == pytest.approx(np.percentile(tpot, 99))
    assert s["kv_capacity_tokens"] > 0


def test_goodput_follows_the_slo():
    base = [*RANDOM, "fleet.replicas=2"]
    nobody = simulate(compose(*base, "slo.ttft_s=1e-9")).summary
    assert nobody["goodput_requests_per_s"] == 0
    everyone = simulate(
        compose(*base, "slo.ttft_s=null", "slo.tpot_s=null", "slo.e2e_s=null")
    ).summary
    assert everyone["goodput_requests_per_s"] == everyone["throughput"]["requests_per_s"]
    e2e = simulate(compose(*base, "slo.ttft_s=null", "slo.tpot_s=null", "slo.e2e_s=1.0"))
    req = columns(e2e.requests)
    good = int(((req["status"] == "completed") & (req["e2e_s"] <= 1.0)).sum())
    assert 0 < good < 120
    assert e2e.summary["goodput_requests_per_s"] == pytest.approx(good / e2e.summary["duration_s"])
