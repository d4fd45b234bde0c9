"""The answer paragraph's numbers, from tiny hand-made inputs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.report.answer import (
    attainment_by_run,
    day_answer,
    day_choice,
    plan_answer,
    run_answer,
    sweep_choice,
)
from sim.report.day_plan import parse_day_plan
from sim.report.inputs import DayPlanInput, PlanInput, RunInput
from tests.report.conftest import DAY_PLAN

CONFIG = {
    "model": {"name": "meta-llama/Llama-3.1-8B"},
    "hardware": {"name": "H100-SXM"},
    "precision": {"weights": "fp8", "kv": "fp8"},
    "fleet": {"replicas": 2, "tp": 1, "pp": 1},
    "scheduler": {"_target_": "sim.engine.scheduler.vllm.VLLMScheduler"},
    "slo": {"ttft_s": 0.5, "tpot_s": 0.05, "e2e_s": None},
}
SUMMARY = {
    "ttft_s": {"p50": 0.1, "p90": 0.3, "p99": 1.0},
    "tpot_s": {"p50": 0.01, "p90": 0.02, "p99": 0.04},
    "throughput": {"requests_per_s": 10.0},
    "goodput_requests_per_s": 9.5,
    "duration_s": 10.0,
    "num_requests": 100,
    "num_gpus": 2,
    "cost": {"usd_per_hour": 5.98, "usd_per_million_output_tokens": 1.234},
    "stability": {
        "verdict": "stable",
        "reason": "no growing queue",
        "offered_requests_per_s": 10.0,
    },
}


def test_a_run_says_what_it_shows_against_its_slo():
    text = run_answer(RunInput(Path("r"), CONFIG, SUMMARY, None))
    assert text.startswith(
        "As simulated, 2 x H100-SXM (TP 1, 2 GPUs) running meta-llama/Llama-3.1-8B at weights "
        "fp8, KV fp8, scheduler vllm served 100 requests offered at 10 req/s for "
        "$5.98/hour, $1.23 per million output tokens."
    )
    assert "TTFT p50/p90/p99 0.1/0.3/1 s (p99 2x the 0.5 s bound)" in text
    assert "TPOT p50/p90/p99 0.01/0.02/0.04 s (p99 within the 0.05 s bound)" in text
    assert (
        "95 of 100 requests met every SLO bound: 95.0% (95% Wilson interval 88.8% to 97.8%); "
        "goodput 9.5 req/s of 10 req/s completed."
    ) in text
    assert "The fleet was stable: no growing queue." in text


def test_a_scaled_run_says_how_it_scaled():
    scaled = {
        **SUMMARY,
        "duration_s": 7200.0,
        "goodput_requests_per_s": 95 / 7200,
        "autoscale": {
            "gpu_hours": 3.5,
            "usd_total": 10.47,
            "replicas_mean": 1.75,
            "replicas_min": 1,
            "replicas_max": 3,
            "scale_ups": 4,
            "scale_downs": 2,
        },
    }
    text = run_answer(RunInput(Path("r"), CONFIG, scaled, None))
    assert (
        "The fleet scaled between 1 and 3 replicas (mean 1.75; 4 scale-ups, 2 scale-downs): "
        "3.5 GPU-hours and $10.47 over the 2 h simulated."
    ) in text


def candidate(label, usd, replicas, feasible=True, **extra):
    return {
        "candidate": label,
        "overrides": [label],
        "feasible": feasible,
        "replicas": replicas,
        "usd_per_hour": usd,
        "usd_per_million_output_tokens": None if usd is None else usd / 2,
        **extra,
    }


def test_a_plan_answers_with_the_cheapest_feasible_candidate_and_its_intervals():
    plan = {
        "slo": ["ttft_s.p99 <= 0.5"],
        "confidence": 0.95,
        "max_miss_probability": 0.2,
        "candidates": [
            candidate("hardware=h200", 7.6, 2),
            candidate(
                "hardware=h100_sxm",
                5.98,
                2,
                replications=5,
                miss_probability=0.0,
                slo={
                    "ttft_s.p99 <= 0.5": {
                        "bound": 0.5,
                        "mean": 0.31,
                        "ci_low": 0.28,
                        "ci_high": 0.34,
                    }
                },
                headroom={"stable_up_to_rate_x": 1.6, "not_stable_at_rate_x": 1.7},
            ),
            candidate("hardware=a100_80g", None, None, feasible=False, reason="misses"),
        ],
    }
    text = plan_answer(PlanInput(Path("p"), plan, None, None), None)
    # with plan.slo_headroom: the headroom to the SLO beside the knee's
    plan["candidates"][1]["slo_headroom"] = {"meets_up_to_rate_x": 1.2, "misses_at_rate_x": 1.25}
    assert plan_answer(PlanInput(Path("p"), plan, None, None), None) == text.replace(
        "not at 1.7x.",
        "not at 1.7x. Headroom to the SLO: every SLO met up to 1.2x the rate, missed at 1.25x.",
    )
    assert text == (
        "Buy 2 replica(s) of hardware=h100_sxm (candidate hardware=h100_sxm): $5.98/hour, "
        "$2.99 per million output tokens, the cheapest of the 2 of 3 candidate(s) that meet "
        "every SLO (ttft_s.p99 <= 0.5). How sure: over 5 replications, with 95% intervals, "
        "ttft_s.p99 0.31 [0.28, 0.34] against 0.5. 0% of the replications missed an SLO (the "
        "plan allows 20%). Headroom: stable up to 1.6x the rate, not at 1.7x. Next cheapest: "
        "hardware=h200 at 2 replica(s), $7.60/hour (+27%)."
    )


def test_a_plan_with_faults_says_its_spare_capacity():
    """With faults on, the answer says N (the count without faults) and k (the spare)."""
    best = candidate("hardware=h100_sxm", 5.98, 6, load_replicas=4, spare_replicas=2)
    best["faults"] = {"gpu_mtbf_h": 50000, "repair_h": 4, "repair": "fixed", "on_failure": "retry"}
    plan = {"slo": ["ttft_s.p99 <= 0.5"], "candidates": [best]}
    assert plan_answer(PlanInput(Path("p"), plan, None, None), None).endswith(
        "Spare capacity: N = 4 replica(s) for the load, k = 2 for failures at these rates (a GPU "
        "failing every 50,000 hours, repaired in 4 hours)."
    )


def test_a_plan_with_no_feasible_candidate_says_why():
    plan = {
        "slo": ["ttft_s.p99 <= 0.01"],
        "candidates": [
            candidate("hardware=l4", None, None, feasible=False, reason="misses at 64 replicas")
        ],
    }
    assert plan_answer(PlanInput(Path("p"), plan, None, None), None) == (
        "None of the 1 candidate(s) meets every SLO (ttft_s.p99 <= 0.01): hardware=l4: misses "
        "at 64 replicas."
    )


def test_a_sweep_picks_the_cheapest_run_that_keeps_99_percent():
    runs = pd.DataFrame(
        {
            "run_id": [0, 1, 2],
            "goodput_requests_per_s": [9.9, 10.0, 8.0],
            "duration_s": [10.0, 10.0, 10.0],
            "num_requests": [100, 100, 100],
            "cost.usd_per_hour": [5.98, 11.96, 2.99],
            "cost.usd_per_million_output_tokens": [1.0, 2.0, 0.5],
        }
    )
    attained = attainment_by_run(runs)
    assert attained.tolist() == [0.99, 1.0, 0.8]
    assert sweep_choice(runs, attained) == 0  # run 2 is cheaper but misses
    assert sweep_choice(runs.iloc[2:], attained.iloc[2:]) is None


def test_a_day_plan_buys_the_cheapest_answer_that_keeps_the_attainment():
    """Keeping: 99% of requests within the slo.* bounds over the day and plan.slo in every
    hour. The autoscaled and seasonal answers of the fixture missed plan.slo in some hours, so
    the peak fleet is the answer; once the autoscaled one holds every hour, it is (the
    cheapest)."""
    day = parse_day_plan(DAY_PLAN)
    assert day_choice(day.answers).name == "peak"
    text = day_answer(DayPlanInput(Path("d"), day))
    assert text.startswith("Buy the peak fleet: $143.52/day, 48 GPU-hours.")
    assert (
        "The others: seasonal $116.61/day (99.50% attainment, plan.slo held in 23 of 24 "
        "hours); autoscaled $98.67/day (99.20% attainment, plan.slo held in 22 of 24 hours)."
    ) in text
    held = {
        **DAY_PLAN,
        "answers": {
            **DAY_PLAN["answers"],
            "autoscaled": {**DAY_PLAN["answers"]["autoscaled"], "hours_plan_slo_met": 24},
        },
    }
    day = parse_day_plan(held)
    assert day_choice(day.answers).name == "autoscaled"
    text = day_answer(DayPlanInput(Path("d"), day))
    assert text.startswith(
        "Buy the autoscaled fleet: $98.67/day, 33 GPU-hours, 31% less than sizing for the peak "
        "all day ($143.52/day). How sure: SLO attainment (the share of requests within every "
        "slo.* bound) 99.20% over the day (95% Wilson interval 99.00% to 99.40%). plan.slo "
        "(ttft_s.p99 <= 1) held in 24 of 24 hours (each hour's statistics over its requests)."
    )
    assert "Its worst hour is 0:00 at 95.0% [93.0%, 96.0%]." in text
    assert "The others: peak $143.52/day (99.90% attainment); seasonal $116.61/day" in text
    assert text.endswith("Note: made by hand.")
    # none keeps 99%: the one that held plan.slo in the most hours, said so
    poorer = {
        **DAY_PLAN,
        "answers": {
            k: {**v, "slo_attainment": 0.9 + i / 100}
            for i, (k, v) in enumerate(DAY_PLAN["answers"].items())
        },
    }
    worse = parse_day_plan(poorer)
    assert day_choice(worse.answers).name == "seasonal"
    assert day_answer(DayPlanInput(Path("d"), worse)).startswith(
        "No answer keeps 99% SLO attainment and plan.slo in every hour; the best is the "
        "seasonal fleet: $116.61/day"
    )
