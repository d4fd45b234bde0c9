"""The summary table ``fleetcast run`` prints (``sim.output.summary_table``): the header names the
deployment and its policies, every figure is the summary's own (3 significant digits, thousands
separators from 1000 on, "-" for a figure the run has none of), a run with nothing completed
still prints, and the optional parts (SLO share, files, a second model) appear only when due."""

import copy

import pytest

from sim.engine.step_time.bench_profile import BenchProfile, deployment_key
from sim.output.summary_table import format_summary
from sim.run import simulate
from tests.support import compose, deployment

TINY = [
    "workload=poisson",
    "workload.num_requests=12",
    "workload.qps=10",
    "workload.prompt_tokens=100",
    "workload.output_tokens=20",
    "sim.progress=false",
]
LATENCY_ROWS = [
    ("TTFT", "ttft_s"),
    ("TPOT (vLLM)", "tpot_s"),
    ("ITL (LLMPerf, e2e/out)", "itl_s"),
    ("E2E", "e2e_s"),
    ("queueing delay", "queueing_delay_s"),
]
STATS = ["mean", "p50", "p90", "p95", "p99"]
# a 28-character label column, then 9-character columns, right-aligned
COLUMN_HEADER = "latency (s)" + " " * 17 + "     mean      p50      p90      p95      p99"


@pytest.fixture(scope="module")
def run():
    return simulate(
        compose(
            "fleet.replicas=3",
            "fleet.tp=2",
            "hardware=h200",
            "precision.weights=fp8",
            "precision.kv=fp8",
            "scheduler=sarathi",
            "router=round_robin",
            "step_time=linear",
            "hardware.usd_per_gpu_hour=2.5",
            *TINY,
        )
    )


def latency(mean, p50, p90, p95, p99) -> dict:
    return {"mean": mean, "p50": p50, "p90": p90, "p95": p95, "p99": p99}


def hand_summary() -> dict:
    """A summary.json object with figures chosen to exercise the formatting."""
    return {
        "ttft_s": latency(0.012345, 0.5, 12.0, 123.456, 1234.4),
        "tpot_s": latency(None, None, None, None, None),
        "itl_s": latency(0.0, 1.0, 0.000123456, 99.99, 98765.4),
        "e2e_s": latency(1.5, 2.25, 3.14159, 10.0, 100.0),
        "queueing_delay_s": latency(0.0, 0.0, 0.01, 0.02, 0.04),
        "throughput": {
            "requests_per_s": 4.0,
            "output_tokens_per_s": 1234.4,
            "total_tokens_per_s": 56789.0,
        },
        "goodput_requests_per_s": 3.0,
        "slo": {"ttft_s": 2.0, "tpot_s": 0.1, "e2e_s": None},
        "num_requests": 12345,
        "completed": 12000,
        "rejected": 300,
        "unfinished": 45,
        "num_preemptions": 1234,
        "duration_s": 612.345,
        "num_steps": 99,
        "num_replicas": 2,
        "num_gpus": 8,
        "kv_capacity_tokens": 1234567,
        "kv_utilization": {"mean": 0.25, "max": 0.5},
        "gpu_busy_fraction": 0.5,
        "cost": {"usd_per_hour": 1234.5, "usd_per_million_output_tokens": 0.123456},
    }


def hand_config(**placement) -> dict:
    cfg = {
        "model": {"name": "org/Model-7B"},
        "hardware": {"name": "GPU-X"},
        "fleet": {"replicas": 2, "tp": 4},
        "precision": {"weights": "fp8", "kv": "bf16"},
        "scheduler": {"_target_": "pkg.sched.MySched"},
        "router": {"_target_": "pkg.route.MyRouter"},
        "step_time": {"_target_": "pkg.time.MyStepTime"},
    }
    if placement:
        cfg["placement"] = placement
    return cfg


def line(text: str, prefix: str) -> str:
    """The one line of ``text`` that starts with ``prefix``."""
    found = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    assert len(found) == 1, (prefix, text)
    return found[0]


def cells(row: str) -> list[str]:
    """A latency row's label and its five 9-character cells, stripped."""
    assert len(row) == 28 + 5 * 9, row
    return [row[:28].strip()] + [row[28 + 9 * i : 28 + 9 * (i + 1)].strip() for i in range(5)]


# --- from a simulated run ------------------------------------------------------------------


def test_header_names_deployment_and_policy_classes(run):
    text = format_summary(run.summary, run.config)
    assert text.splitlines()[0] == (
        "Fleetcast: meta-llama/Llama-3.1-8B on 3 replica(s) x 2 H200 (6 GPUs), weights fp8, "
        "KV fp8, scheduler SarathiScheduler, router RoundRobinRouter, step time LinearStepTime"
    )


def test_header_prefers_hydra_choices_and_falls_back_per_policy(run):
    every = format_summary(
        run.summary,
        run.config,
        choices={
            "scheduler": "sarathi",
            "router": "round_robin",
            "step_time": "linear",
            "model": "llama31_8b",
        },
    )
    assert every.splitlines()[0].endswith("scheduler sarathi, router round_robin, step time linear")
    some = format_summary(run.summary, run.config, choices={"router": "round_robin"})
    assert some.splitlines()[0].endswith(
        "scheduler SarathiScheduler, router round_robin, step time LinearStepTime"
    )


def test_request_counts_line_from_a_run(run):
    s = run.summary
    assert (s["num_requests"], s["completed"], s["rejected"], s["unfinished"]) == (12, 12, 0, 0)
    assert line(format_summary(s, run.config), "requests:") == (
        f"requests: 12 (12 completed, 0 rejected, 0 unfinished), 0 preemptions, "
        f"{s['duration_s']:.1f} s simulated"
    )


def test_latency_rows_print_the_summary_to_three_significant_digits(run):
    lines = format_summary(run.summary, run.config).splitlines()
    assert lines[2] == "" and lines[3].startswith("stability:  stable (") and lines[4] == ""
    assert lines[5] == COLUMN_HEADER
    for (label, key), row in zip(LATENCY_ROWS, lines[6:11], strict=True):
        got = cells(row)
        assert got[0] == label
        for stat, cell in zip(STATS, got[1:], strict=True):
            value = run.summary[key][stat]
            assert value is not None and abs(value) < 1000  # a tiny run: seconds, not hours
            assert cell == f"{value:.3g}", (label, stat)
            assert float(cell) == pytest.approx(value, rel=5e-3, abs=1e-12), (label, stat)


def test_cost_line_from_a_run(run):
    # 6 GPUs at $2.50
    assert line(format_summary(run.summary, run.config), "cost:").startswith(
        "cost:       $15.00/hour, $"
    )


def test_colocated_run_names_the_second_model_and_its_share():
    result = simulate(
        compose(
            "fleet.replicas=2",
            "placement=colocated",
            "placement.second_model=llama2_7b",
            "placement.traffic_share=0.25",
            *TINY,
        )
    )
    assert (
        format_summary(result.summary, result.config)
        .splitlines()[0]
        .endswith("step time RooflineStepTime, colocated with llama2_7b (25% of requests)")
    )


def test_run_with_nothing_completed_prints_dashes():
    # the horizon comes before the first step (a 5000-token prefill) ends
    result = simulate(
        compose(
            "fleet.replicas=1",
            "workload=constant",
            "workload.qps=2000",
            "workload.num_requests=5",
            "workload.prompt_tokens=5000",
            "workload.output_tokens=10",
            "kv.num_blocks=400",
            "sim.horizon_s=0.004",
            "hardware.usd_per_gpu_hour=2.5",
            "sim.progress=false",
        )
    )
    assert result.summary["completed"] == 0
    text = format_summary(result.summary, result.config)
    lines = text.splitlines()
    assert lines[1] == (
        "requests: 5 (0 completed, 0 rejected, 5 unfinished), 0 preemptions, 0.0 s simulated"
    )
    # every request cut off by the horizon: nothing to judge, and said so
    assert lines[3] == (
        "stability:  undetermined (no request completed before the run stopped (sim.horizon_s))"
    )
    assert lines[5] == COLUMN_HEADER
    for (label, _), row in zip(LATENCY_ROWS, lines[6:11], strict=True):
        assert cells(row) == [label, "-", "-", "-", "-", "-"]
    assert lines[11:] == [
        "",
        "throughput: - req/s, - output tok/s, - total tok/s",
        "goodput:    - req/s meeting SLO (ttft <= 2 s, tpot <= 0.1 s)",
        "KV cache:   6,400 tokens per replica, mean use -%, peak -%",  # 400 blocks x 16
        "cost:       $2.50/hour, $- per million output tokens",
    ]


# --- from hand-made summaries --------------------------------------------------------------


def test_whole_table_from_a_hand_made_summary():
    assert format_summary(hand_summary(), hand_config()).splitlines() == [
        (
            "Fleetcast: org/Model-7B on 2 replica(s) x 4 GPU-X (8 GPUs), weights fp8, KV bf16, "
            "scheduler MySched, router MyRouter, step time MyStepTime"
        ),
        (
            "requests: 12,345 (12,000 completed, 300 rejected, 45 unfinished), "
            "1,234 preemptions, 612.3 s simulated"
        ),
        "",
        COLUMN_HEADER,
        "TTFT                           0.0123      0.5       12      123    1,234",
        "TPOT (vLLM)                         -        -        -        -        -",
        "ITL (LLMPerf, e2e/out)              0        1 0.000123      100   98,765",
        "E2E                               1.5     2.25     3.14       10      100",
        "queueing delay                      0        0     0.01     0.02     0.04",
        "",
        "throughput: 4 req/s, 1,234 output tok/s, 56,789 total tok/s",
        "goodput:    3 req/s meeting SLO (ttft <= 2 s, tpot <= 0.1 s) (75% of completed)",
        "KV cache:   1,234,567 tokens per replica, mean use 25%, peak 50%",
        "cost:       $1,234.50/hour, $0.123 per million output tokens",
    ]


@pytest.mark.parametrize(
    "value, shown",
    [
        (None, "-"),
        (0.0, "0"),
        (0.5, "0.5"),
        (12.0, "12"),
        (0.012345, "0.0123"),
        (3.14159, "3.14"),
        (999.4, "999"),
        (1000.0, "1,000"),
        (1234.4, "1,234"),
        (1234567.8, "1,234,568"),
    ],
)
def test_latency_cell_formatting(value, shown):
    s = hand_summary()
    s["e2e_s"]["p90"] = value
    assert cells(line(format_summary(s, hand_config()), "E2E"))[3] == shown


def test_values_just_under_a_thousand_print_without_exponent():
    s = hand_summary()
    s["throughput"]["output_tokens_per_s"] = 999.7
    assert line(format_summary(s, hand_config()), "throughput:") == (
        "throughput: 4 req/s, 1,000 output tok/s, 56,789 total tok/s"
    )


@pytest.mark.parametrize(
    "slo, bounds",
    [
        ({"ttft_s": 2.0, "tpot_s": 0.1, "e2e_s": None}, "ttft <= 2 s, tpot <= 0.1 s"),
        ({"ttft_s": None, "tpot_s": None, "e2e_s": 30.0}, "e2e <= 30 s"),
        (
            {"ttft_s": 0.25, "tpot_s": 0.05, "e2e_s": 1.5},
            "ttft <= 0.25 s, tpot <= 0.05 s, e2e <= 1.5 s",
        ),
        ({"ttft_s": None, "tpot_s": None, "e2e_s": None}, "none"),
    ],
)
def test_goodput_line_lists_the_slo_bounds(slo, bounds):
    s = hand_summary()
    s["slo"] = slo
    assert line(format_summary(s, hand_config()), "goodput:") == (
        f"goodput:    3 req/s meeting SLO ({bounds}) (75% of completed)"
    )


@pytest.mark.parametrize(
    "good, requests_per_s, tail",
    [
        (4.0, 4.0, " (100% of completed)"),
        (0.0, 4.0, " (0% of completed)"),
        (1.0, 3.0, " (33% of completed)"),
        (0.0, 0.0, ""),  # nothing completed over a non-zero span: no share, no division by 0
        (None, None, ""),  # no span at all
    ],
)
def test_goodput_share_of_completed(good, requests_per_s, tail):
    s = hand_summary()
    s["goodput_requests_per_s"] = good
    s["throughput"]["requests_per_s"] = requests_per_s
    shown = "-" if good is None else f"{good:.3g}"
    assert line(format_summary(s, hand_config()), "goodput:") == (
        f"goodput:    {shown} req/s meeting SLO (ttft <= 2 s, tpot <= 0.1 s){tail}"
    )


@pytest.mark.parametrize(
    "kv, shown",
    [
        ({"mean": 0.25, "max": 0.5}, "mean use 25%, peak 50%"),
        ({"mean": 0.0, "max": 0.0}, "mean use 0%, peak 0%"),
        ({"mean": 0.0001234, "max": 1.0}, "mean use 0.0123%, peak 100%"),
        ({"mean": None, "max": None}, "mean use -%, peak -%"),
    ],
)
def test_kv_line(kv, shown):
    s = hand_summary()
    s["kv_utilization"] = kv
    assert line(format_summary(s, hand_config()), "KV cache:") == (
        f"KV cache:   1,234,567 tokens per replica, {shown}"
    )


@pytest.mark.parametrize(
    "cost, shown",
    [
        (
            {"usd_per_hour": 1234.5, "usd_per_million_output_tokens": 0.123456},
            "$1,234.50/hour, $0.123 per million output tokens",
        ),
        (
            {"usd_per_hour": 2.99, "usd_per_million_output_tokens": 4321.0},
            "$2.99/hour, $4,321 per million output tokens",
        ),
        (
            {"usd_per_hour": 0.0, "usd_per_million_output_tokens": None},
            "$0.00/hour, $- per million output tokens",
        ),
    ],
)
def test_cost_line(cost, shown):
    s = hand_summary()
    s["cost"] = cost
    assert line(format_summary(s, hand_config()), "cost:") == f"cost:       {shown}"


def test_files_line_only_with_an_output_dir():
    s, cfg = hand_summary(), hand_config()
    with_dir = format_summary(s, cfg, output_dir="outputs/run-1").splitlines()
    assert with_dir[-1] == "files:      outputs/run-1"
    assert with_dir[:-1] == format_summary(s, cfg).splitlines()
    for no_dir in (None, ""):
        assert "files:" not in format_summary(s, cfg, output_dir=no_dir)
    assert format_summary(s, cfg).splitlines()[-1].startswith("cost:")


@pytest.mark.parametrize(
    "placement, suffix",
    [
        (None, ""),
        ({"mode": "single"}, ""),
        (
            {
                "mode": "colocated",
                "second_model": "llama2_7b",
                "traffic_share": 0.3,
                "kv_share": 0.5,
            },
            ", colocated with llama2_7b (30% of requests)",
        ),
        (
            {
                "mode": "dedicated",
                "second_model": "qwen25_32b",
                "traffic_share": 0.2,
                "second_model_replicas": None,
            },
            ", dedicated with qwen25_32b (20% of requests)",
        ),
    ],
)
def test_header_placement_suffix(placement, suffix):
    cfg = hand_config(**placement) if placement else hand_config()
    assert format_summary(hand_summary(), cfg).splitlines()[0] == (
        "Fleetcast: org/Model-7B on 2 replica(s) x 4 GPU-X (8 GPUs), weights fp8, KV bf16, "
        "scheduler MySched, router MyRouter, step time MyStepTime" + suffix
    )


def test_formatting_leaves_its_inputs_alone():
    s, cfg = hand_summary(), hand_config()
    before = copy.deepcopy((s, cfg))
    format_summary(s, cfg, output_dir="x", choices={"router": "r"})
    assert (s, cfg) == before


# --- where the step-time model's figures come from -----------------------------------------


def test_a_run_with_a_bench_profile_names_it_and_what_it_was_fitted_on(tmp_path):
    profile = BenchProfile(
        terms={"step_overhead_s": 0.0043, "compute_efficiency": 0.71},
        fitted_for=[deployment_key(deployment())],
        runs=[
            {"file": "/bench/a.json", "index": 0, "held_out": False},
            {"file": "/bench/a.json", "index": 1, "held_out": False},
            {"file": "/bench/b.json", "index": 0, "held_out": True},
        ],
        error={
            "fit": {"calibrated": {"ttft": {"mape": 0.01}, "tpot": {"mape": 0.02}}},
            "held_out": {"calibrated": {"ttft": {"mape": 0.1234}, "tpot": {"mape": 0.045}}},
        },
        provenance={"created": "2026-12-01T09:00:00Z"},
    )
    path = profile.save(tmp_path / "p.json")
    run = simulate(compose(*TINY, f"step_time.profile={path}"))
    text = format_summary(run.summary, run.config, choices={"step_time": "roofline"})
    lines = text.splitlines()
    assert lines[0].endswith("step time roofline")
    assert lines[1] == (
        f"step time:  roofline with the terms fitted in {path} (fleetcast calibrate --bench on "
        "3 benchmark run(s), 1 held out: a.json, b.json; error on the held-out runs TTFT 12.3%, "
        "TPOT 4.5%; created 2026-12-01T09:00:00Z)"
    )
    path.unlink()  # a profile gone since the run: still named, without what it said
    assert format_summary(run.summary, run.config).splitlines()[1] == (
        f"step time:  roofline with the terms fitted in {path}"
    )


def test_a_calibrated_run_names_its_shipped_profile_or_the_given_one(tmp_path):
    cfg = hand_config()
    cfg["model"]["name"], cfg["hardware"]["name"] = "meta-llama/Llama-3.1-8B", "H100-SXM"
    cfg["precision"] = {"weights": "bf16", "kv": "bf16"}
    cfg["step_time"] = {
        "_target_": "sim.engine.step_time.calibrated.CalibratedStepTime",
        "backend": "trtllm",
        "profile": None,
    }
    assert format_summary(hand_summary(), cfg).splitlines()[1] == (
        "step time:  calibrated, the shipped profile "
        "meta_llama_llama_3_1_8b_h100_sxm_wbf16_kvbf16_trtllm.json (kernel tables: "
        "aic_measured_gemm_llama31_8b_shapes.csv, aic_measured_context_attention_llama31_8b.csv, "
        "aic_measured_generation_attention_llama31_8b.csv; created 2026-11-29)"
    )
    cfg["step_time"]["profile"] = str(tmp_path / "mine.json")  # (not there: named only)
    assert format_summary(hand_summary(), cfg).splitlines()[1] == (
        f"step time:  calibrated, the profile {tmp_path / 'mine.json'}"
    )


def test_a_roofline_without_a_profile_has_no_source_line(run):
    cfg = copy.deepcopy(run.config)
    cfg["step_time"] = {"_target_": "sim.engine.step_time.roofline.RooflineStepTime"}
    assert not any(
        ln.startswith("step time:") for ln in format_summary(run.summary, cfg).split("\n")
    )


# --- the prefix cache and a disaggregated fleet ---------------------------------------------


PREFIX_CACHE = {
    "hit_rate_tokens": 0.25,
    "hit_rate_blocks": 0.24,
    "looked_up_tokens": 40_000,
    "hit_tokens": 10_000,
    "looked_up_blocks": 2_500,
    "hit_blocks": 600,
    "registered_blocks": 1_900,
    "evicted_blocks": 1_234,
}


def test_prefix_cache_line_gives_the_hit_rate_after_the_kv_line():
    s = hand_summary()
    assert "prefix cache:" not in format_summary(s, hand_config())  # off: no line
    s["prefix_cache"] = dict(PREFIX_CACHE)
    lines = format_summary(s, hand_config()).splitlines()
    at = lines.index(line("\n".join(lines), "prefix cache:"))
    assert lines[at - 1].startswith("KV cache:") and lines[at + 1].startswith("cost:")
    assert lines[at] == (
        "prefix cache: 25% of prompt tokens found cached (10,000 of 40,000 looked up), "
        "1,234 blocks evicted"
    )
    s["prefix_cache"].update(
        host_hit_tokens=4_000, host_stored_blocks=300, host_loaded_blocks=250, host_evicted_blocks=0
    )
    assert line(format_summary(s, hand_config()), "prefix cache:").endswith(
        "1,234 blocks evicted; host tier: 4,000 of the hit tokens, 300 blocks stored, 250 loaded"
    )


def pool(replicas: int, usd_per_hour: float, busy: float, kv_mean: float, kv_max: float) -> dict:
    return {
        "replicas": replicas,
        "gpu": "GPU-X",
        "gpus_per_replica": 4,
        "weights": "fp8",
        "scheduler": "MySched",  # (the class: the table names the config's name)
        "usd_per_hour": usd_per_hour,
        "gpu_busy_fraction": busy,
        "kv_utilization": {"mean": kv_mean, "max": kv_max},
    }


def test_disaggregated_cost_is_split_by_pool_and_pool_lines_use_percent():
    s = hand_summary()
    # 3,600 input and 400 output tokens a second; $36/hour of prefill, $144/hour of decode
    s["throughput"] = {
        "requests_per_s": 4.0,
        "output_tokens_per_s": 400.0,
        "total_tokens_per_s": 4000.0,
    }
    s["cost"] = {"usd_per_hour": 180.0, "usd_per_million_output_tokens": 125.0}
    s["disaggregation"] = {
        "prefill": pool(1, 36.0, 0.081, 0.0039, 0.0118),
        "decode": pool(4, 144.0, 0.86, 0.0079, 0.5),
        "kv_link": {"name": "nvlink", "gb_per_s": 450.0, "parallel_links": 4, "overlap": True},
        "transfers": 12,
        "transfer_s": {"p50": 0.001, "p99": 0.002},
        "transfer_wait_s": {"p50": 0.0, "p99": 0.0001},
    }
    cfg = hand_config(mode="disaggregated", prefill={"scheduler": "sglang"}, decode={})
    text = format_summary(s, cfg, choices={"scheduler": "vllm"})
    at = text.splitlines().index(line(text, "cost:"))
    # $36/hour = 0.01 $/s over 3,600 input tokens/s; $144/hour = 0.04 $/s over 400 output
    assert text.splitlines()[at : at + 4] == [
        "cost:       $180.00/hour, $2.78 per million input tokens (the prefill pool's "
        "$36.00/hour over them), $100 per million output tokens (the decode pool's $144.00/hour "
        "over them)",
        "            (all of the bill over the output tokens, as a fleet without pools is "
        "quoted: $125 per million)",
        "prefill pool: 1 x 4 GPU-X, weights fp8, scheduler sglang, busy 8.1%, KV use mean 0.39% "
        "peak 1.18%, $36.00/hour",
        "decode pool:  4 x 4 GPU-X, weights fp8, scheduler vllm, busy 86%, KV use mean 0.79% "
        "peak 50%, $144.00/hour",
    ]
