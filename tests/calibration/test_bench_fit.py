"""``fleetcast calibrate --bench``'s fit (sim.calibration.bench_fit): terms that made synthetic
benchmarks are found again (their figures, not the defaults'), the held-out split, which
statistic each run is fitted on, and what ``prepare`` refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sim.calibration.bench_fit import (
    BOUND_MEANINGS,
    SCALED,
    at_bounds,
    calibrate_bench,
    fit,
    parameters,
    simulate_runs,
    terms_at,
)
from sim.calibration.bench_runs import BenchRun, prepare, simulated_figures, targets
from sim.config.compose import compose_config
from sim.engine.step_time.bench_profile import TERMS, BenchProfile
from sim.errors import ConfigError
from sim.harness.formats import read_benchmark
from sim.harness.replay import harness_load
from sim.harness.results import Definition, MeasuredRun, Statistic
from sim.harness.simulated import from_table, mean, output_tokens_per_s, per_request
from sim.run import simulate
from tests.harness.samples import AIPERF, GUIDELLM_JSON, SGLANG, VLLM_8B, VLLM_70B

DEPLOY = ["model=llama31_8b", "hardware=h100_sxm"]
# the terms the synthetic "measured" benchmarks were served with (the others at the defaults)
KNOWN = {"request_overhead_s": 0.03, "step_overhead_s": 0.004}
# what prepare composes for a vLLM file, before its overrides
PREPARED = ["step_time=roofline", "fleet.replicas=1", "sim.progress=false", "scheduler=vllm"]
# every term but TP scaling, which one TP degree cannot pin
TERMS_FITTED = tuple(name for name in TERMS if name != "allreduce_bandwidth_efficiency")


def write_vllm(
    path: Path,
    rate: float | str,
    ins: list[int],
    outs: list[int],
    ttft_s: float,
    tpot_s: float,
    duration_s: float = 10.0,
    output_throughput: float | None = None,
    max_concurrency: int | None = None,
) -> Path:
    """A ``vllm bench serve --save-result --save-detailed`` file with these figures (the
    per-request times all at the means: only the means are fitted)."""
    n = len(ins)
    doc = {
        "backend": "vllm",
        "model_id": "meta-llama/Llama-3.1-8B",
        "num_prompts": n,
        "request_rate": rate,
        "burstiness": 1.0,
        "max_concurrency": max_concurrency,
        "duration": duration_s,
        "completed": n,
        "total_input_tokens": int(sum(ins)),
        "total_output_tokens": int(sum(outs)),
        "request_throughput": n / duration_s,
        "output_throughput": output_throughput or sum(outs) / duration_s,
        "mean_ttft_ms": ttft_s * 1e3,
        "median_ttft_ms": ttft_s * 1e3,
        "mean_tpot_ms": tpot_s * 1e3,
        "median_tpot_ms": tpot_s * 1e3,
        "input_lens": [int(x) for x in ins],
        "output_lens": [int(x) for x in outs],
        "ttfts": [ttft_s] * n,
        "itls": [[tpot_s] * (int(o) - 1) for o in outs],
        "errors": [""] * n,
    }
    path.write_text(json.dumps(doc))
    return path


def synthetic_benchmark(
    path: Path,
    rate: float | str,
    n: int,
    seed: int,
    known: dict[str, float] = KNOWN,
    max_concurrency: int | None = None,
) -> tuple[float, float]:
    """Write ``path``: ``n`` requests of random lengths at ``rate`` (under ``max_concurrency``),
    their mean TTFT and TPOT (vLLM's definitions) those of the replayed benchmark simulated
    with the ``known`` terms. Returns (mean TTFT, mean TPOT)."""
    rng = np.random.default_rng(seed)
    ins, outs = rng.integers(50, 800, n).tolist(), rng.integers(20, 300, n).tolist()
    cap = {"max_concurrency": max_concurrency}
    write_vllm(path, rate, ins, outs, 0.01, 0.01, **cap)  # the lengths and load, to replay
    load = harness_load(read_benchmark(str(path))[0])
    cfg = compose_config([*PREPARED, *DEPLOY, *(f"step_time.{k}={v!r}" for k, v in known.items())])
    cfg["workload"] = load.workload(path.parent, f"{path.stem}_lengths")
    result = simulate(cfg)
    sim = from_table(result.requests, result.summary)
    ttft = mean(*per_request(sim, Definition.TTFT))
    tpot = mean(*per_request(sim, Definition.GAP_AFTER_FIRST))
    assert ttft is not None and tpot is not None
    write_vllm(path, rate, ins, outs, ttft, tpot, sim.duration_s, output_tokens_per_s(sim), **cap)
    return ttft, tpot


def test_the_fit_finds_terms_that_reproduce_a_benchmark_the_defaults_miss(tmp_path):
    files = []
    for number, rate in enumerate((3.0, 12.0, 7.0)):
        path = tmp_path / f"bench{number}.json"
        synthetic_benchmark(path, rate, 120, seed=number)
        files.append((str(path), []))
    result, runs = calibrate_bench(files, DEPLOY, max_evals=60, jobs=1, progress=False)
    assert [r.held_out for r in runs] == [False, False, True]  # every third
    assert 1 <= result.evaluations <= 60
    error = result.profile.error
    for part in ("fit", "held_out"):
        for metric in ("ttft", "tpot"):
            before = error[part]["default"][metric]["mape"]
            after = error[part]["calibrated"][metric]["mape"]
            assert after < 0.05 and after < before / 4, (part, metric, before, after)
        # the defaults know nothing of the 30 ms per request nor the 4 ms steps
        assert error[part]["default"]["ttft"]["mape"] > 0.4
        assert error[part]["default"]["tpot"]["mape"] > 0.15
    assert error["fit"]["calibrated"]["ttft"]["runs"] == 2
    assert error["held_out"]["calibrated"]["ttft"]["runs"] == 1
    terms = result.profile.terms
    assert terms["request_overhead_s"] == pytest.approx(KNOWN["request_overhead_s"], rel=0.3)
    assert terms["step_overhead_s"] > 0.002  # moved from the default towards the 4 ms
    assert result.profile.fitted_for == [
        {
            "model": "meta-llama/Llama-3.1-8B",
            "hardware": "H100-SXM",
            "weights_precision": "bf16",
            "kv_precision": "bf16",
        }
    ]
    assert result.profile.provenance["tp_scaling_fitted"] is False
    assert "allreduce_bandwidth_efficiency" not in terms  # one TP degree: not fitted
    records = result.profile.runs
    assert [r["held_out"] for r in records] == [False, False, True]
    assert records[0]["statistics"] == {"ttft": "mean ttft", "tpot": "mean tpot"}
    assert records[2]["load"]["request_rate"] == 7.0 and records[2]["load"]["num_warmups"] == 1
    assert records[0]["file"] == files[0][0] and len(records[0]["sha256"]) == 64
    # the profile's own step-time error band: the held-out run's measured / calibrated TPOT
    band = result.profile.provenance["model_error"]
    own = records[2]["measured"]["tpot"] / records[2]["calibrated"]["tpot"]
    assert band["n"] == 1 and band["rows"] == "the profile's held-out runs"
    assert band["p10"] == band["p50"] == band["p90"] == pytest.approx(own, rel=1e-3)
    # ... the same run as the held-out TPOT error (|calibrated / measured - 1|)
    held_tpot = error["held_out"]["calibrated"]["tpot"]["mape"]
    assert held_tpot == pytest.approx(abs(1 / band["p50"] - 1), abs=1e-3)
    assert band["class"] == {
        "step_time_model": "bench_profile",
        "engine": "vllm",
        "gpu_family": "H100",
        "tp": "1",
        "precision": "bf16",
    }

    # the profile, saved and given to a run, gives the fitted figures
    path = result.profile.save(tmp_path / "profile.json")
    (tmp_path / "again").mkdir()
    again = prepare(files, DEPLOY, tmp_path / "again")
    cfg = {**again[2].cfg, "step_time": {**again[2].cfg["step_time"], "profile": str(path)}}
    run = simulate(cfg)
    figures = simulated_figures(from_table(run.requests, run.summary), again[2])
    assert figures == result.fitted_figures[2]


def test_one_run_holds_nothing_out_and_its_profile_loads(tmp_path):
    files = [(str(tmp_path / "b.json"), [])]
    synthetic_benchmark(tmp_path / "b.json", 5.0, 30, seed=4)
    result, runs = calibrate_bench(files, DEPLOY, max_evals=4, jobs=1, progress=False)
    assert [r.held_out for r in runs] == [False]  # one run: none held out
    assert "held_out" not in result.profile.error
    assert result.evaluations == 4
    path = result.profile.save(tmp_path / "p.json")
    loaded = BenchProfile.load(path)
    assert loaded.terms == result.profile.terms
    assert set(loaded.terms) == set(loaded.fitted)


def test_parallel_simulations_give_the_serial_fit(tmp_path):
    files = []
    for number, rate in enumerate((4.0, 9.0)):
        ins = [(31 * i) % 500 + 10 for i in range(20)]
        outs = [(17 * i) % 40 + 2 for i in range(20)]
        path = write_vllm(tmp_path / f"{number}.json", rate, ins, outs, 0.04, 0.011)
        files.append((str(path), []))
    kwargs = dict(holdout_every=0, max_evals=3, progress=False)
    serial, _ = calibrate_bench(files, DEPLOY, jobs=1, **kwargs)
    parallel, _ = calibrate_bench(files, DEPLOY, jobs=2, **kwargs)
    assert parallel.profile.terms == serial.profile.terms
    assert parallel.default_figures == serial.default_figures
    assert parallel.fitted_figures == serial.fitted_figures
    assert parallel.evaluations == serial.evaluations == 3


def _ids(runs: list[BenchRun]) -> list[int]:
    return [i for i, run in enumerate(runs) if run.held_out]


def test_one_run_holds_nothing_out(tmp_path):
    assert _ids(prepare([(str(VLLM_8B), [])], DEPLOY, tmp_path)) == []


def test_two_runs_hold_out_the_second(tmp_path):
    runs = prepare([(str(VLLM_8B), []), (str(VLLM_70B), [])], DEPLOY, tmp_path)
    assert _ids(runs) == [1]
    assert _ids(prepare([(str(VLLM_8B), []), (str(VLLM_70B), [])], DEPLOY, tmp_path, 2)) == [1]


@pytest.mark.parametrize("every, held", [(3, [2, 5]), (9, [6]), (0, [])])
def test_sglang_runs_are_held_out_every_nth_in_order(tmp_path, every, held):
    runs = prepare([(str(SGLANG), [])], ["model=llama31_70b", "hardware=h200"], tmp_path, every)
    assert len(runs) == 7
    assert [run.index for run in runs] == list(range(7))
    assert _ids(runs) == held


def test_holding_out_every_run_is_refused(tmp_path):
    files = [(str(VLLM_8B), []), (str(VLLM_70B), [])]
    with pytest.raises(ConfigError, match="^calibrate.holdout_every=1: holds out every run"):
        prepare(files, DEPLOY, tmp_path, holdout_every=1)


def test_a_negative_holdout_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="^calibrate.holdout_every=-1: must be >= 0"):
        prepare([(str(VLLM_8B), [])], DEPLOY, tmp_path, holdout_every=-1)


def test_files_are_composed_with_the_shared_then_their_own_overrides(tmp_path):
    # the SGLang file's first line alone: one run
    one_sglang = tmp_path / "sglang.jsonl"
    one_sglang.write_text(SGLANG.read_text().splitlines()[0] + "\n")
    runs = prepare(
        [(str(VLLM_8B), ["fleet.tp=2"]), (str(GUIDELLM_JSON), []), (str(one_sglang), [])],
        DEPLOY,
        tmp_path,
    )
    assert [run.tp for run in runs[:2]] == [2, 1]
    vllm, guide, sglang = runs[0], runs[1], runs[2]
    assert vllm.overrides == ["scheduler=vllm", *DEPLOY, "fleet.tp=2"]
    assert guide.overrides == DEPLOY  # GuideLLM records no server: the config's scheduler
    assert sglang.overrides == ["scheduler=sglang", *DEPLOY]
    assert "sglang" in sglang.cfg["scheduler"]["_target_"].lower()
    assert vllm.cfg["workload"]["num_warmups"] == 1
    assert vllm.cfg["workload"]["prompt_tokens"] == 206  # the file's mean lengths
    assert guide.cfg["workload"]["max_concurrency"] == 1
    assert vllm.cfg["fleet"]["replicas"] == 1 and vllm.cfg["sim"]["progress"] is False
    # a scheduler the user chose is kept
    chosen = prepare([(str(one_sglang), ["scheduler=vllm"])], DEPLOY, tmp_path)
    assert chosen[0].overrides == [*DEPLOY, "scheduler=vllm"]
    # per-request lengths go to the folder, one file per run
    detailed = prepare([(str(VLLM_70B), [])], DEPLOY, tmp_path)
    assert detailed[0].cfg["workload"]["prompt_tokens"]["path"] == str(
        tmp_path / "file0" / "run0.csv"
    )
    assert (tmp_path / "file0" / "run0.csv").read_text().count("\n") == 1 + 201  # header, rows


def test_prepare_refuses_another_step_time_and_a_profile(tmp_path):
    with pytest.raises(ConfigError) as err:
        prepare([(str(VLLM_8B), [])], [*DEPLOY, "step_time=calibrated"], tmp_path)
    assert err.value.field == "step_time"
    assert "calibrate --bench fits the roofline's terms: leave step_time at roofline" in str(
        err.value
    )
    with pytest.raises(ConfigError) as err:
        prepare([(str(VLLM_8B), ["step_time.profile=p.json"])], DEPLOY, tmp_path)
    assert err.value.field == "step_time.profile" and err.value.value == "p.json"
    assert "give no profile" in str(err.value)


def test_prepare_refuses_a_file_that_is_not_a_benchmark(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(ConfigError) as err:
        prepare([(str(path), [])], DEPLOY, tmp_path)
    assert err.value.field == "bench_file" and "not a known benchmark result" in str(err.value)
    with pytest.raises(ConfigError, match="^model="):
        prepare([(str(VLLM_8B), [])], ["model=no_such_model"], tmp_path)


def test_targets_prefer_the_mean_then_the_median_then_fall_back_to_itl():
    (vllm,) = read_benchmark(VLLM_8B)
    found = targets(vllm)
    assert {m: (s.name, kind) for m, (s, kind, _) in found.items()} == {
        "ttft": ("ttft", "mean"),
        "tpot": ("tpot", "mean"),
    }
    assert found["ttft"][2] == vllm.latency["ttft"].mean_s
    sglang = read_benchmark(SGLANG)[0]  # medians only, and ITL, no TPOT
    found = targets(sglang)
    assert {m: (s.name, kind) for m, (s, kind, _) in found.items()} == {
        "ttft": ("ttft", "median"),
        "tpot": ("itl", "median"),
    }
    assert found["tpot"][2] == sglang.latency["itl"].percentiles_s[50.0]
    assert found["tpot"][0].definition is Definition.POOLED_GAPS
    (aiperf,) = read_benchmark(AIPERF)  # AIPerf's ITL is vLLM's TPOT
    assert targets(aiperf)["tpot"][0].name == "inter_token_latency"
    assert targets(aiperf)["tpot"][1] == "mean"


def _measured(**latency: Statistic) -> MeasuredRun:
    return MeasuredRun(source="f", tool="aiperf", label="run", latency=latency)


def test_targets_skip_a_statistic_with_neither_mean_nor_median():
    tail_only = Statistic("ttft", Definition.TTFT, percentiles_s={99.0: 0.5})
    gaps = Statistic("inter_chunk_latency", Definition.POOLED_GAPS, mean_s=0.02)
    found = targets(_measured(ttft=tail_only, chunk_gap=gaps))
    assert list(found) == ["tpot"]
    assert found["tpot"] == (gaps, "mean", 0.02)
    tpot = Statistic("tpot", Definition.GAP_AFTER_FIRST, percentiles_s={50.0: 0.011})
    itl = Statistic("itl", Definition.POOLED_GAPS, mean_s=0.012)
    # TPOT's median before ITL's mean: the role comes first
    assert targets(_measured(tpot=tpot, itl=itl))["tpot"] == (tpot, "median", 0.011)
    assert targets(_measured()) == {}


def test_terms_at_the_start_are_the_defaults_and_every_searched_point_loads(tmp_path):
    base = compose_config(["step_time=roofline"])["step_time"]
    base = {k: float(v) for k, v in base.items() if isinstance(v, (int, float))}
    for fit_tp in (False, True):
        params = parameters(base, fit_tp)
        names = [p.name for p in params]
        assert names[:5] == [
            "compute_scale",
            "bandwidth_scale",
            "step_overhead_s",
            "token_overhead_s",
            "request_overhead_s",
        ]
        assert ("allreduce_scale" in names) is fit_tp
        # the search starts at x = 0: every term at its default
        terms = terms_at(np.zeros(len(params)), params, base)
        assert set(terms) == set(TERMS_FITTED) | (
            {"allreduce_bandwidth_efficiency"} if fit_tp else set()
        )
        for key, value in terms.items():
            assert value == pytest.approx(base[key], rel=1e-12), key
        # the upper bounds: every efficiency reaches 1 (no more), the overheads their caps
        high = terms_at([p.high for p in params], params, base)
        for key in (k for k in TERMS_FITTED if k.endswith("efficiency")):
            assert high[key] == pytest.approx(1.0, rel=1e-12) and high[key] <= 1.0, key
        assert high["step_overhead_s"] == pytest.approx(0.1)
        assert high["token_overhead_s"] == pytest.approx(200e-6)
        assert high["request_overhead_s"] == pytest.approx(2.0)
        # any point the search may visit is a profile that loads (its terms in range)
        rng = np.random.default_rng(0)
        corners = [[p.low for p in params], [p.high for p in params]]
        draws = [[rng.uniform(p.low, p.high) for p in params] for _ in range(20)]
        for x in corners + draws:
            terms = terms_at(x, params, base)
            path = BenchProfile(
                terms,
                [
                    {
                        "model": "m",
                        "hardware": "g",
                        "weights_precision": "bf16",
                        "kv_precision": "bf16",
                    }
                ],
            ).save(tmp_path / "p.json")
            assert BenchProfile.load(path).terms == terms


@pytest.mark.parametrize(
    "override, field",
    [
        ("workload.num_requests=5", "workload.num_requests"),
        ("step_time.step_overhead_s=0.003", "step_time.step_overhead_s"),
    ],
)
def test_prepare_refuses_what_the_file_or_the_fit_decides(tmp_path, override, field):
    with pytest.raises(ConfigError, match=f"^{field}="):
        prepare([(str(VLLM_8B), [override])], DEPLOY, tmp_path)


def test_an_error_in_a_worker_process_is_the_one_line_error_naming_the_run(tmp_path):
    # 4 KV blocks hold no request of this file: the simulation refuses it in the worker
    runs = prepare([(str(VLLM_8B), ["kv.num_blocks=4"])], DEPLOY, tmp_path, holdout_every=0)
    runs = runs + prepare([(str(VLLM_8B), ["kv.num_blocks=4"])], DEPLOY, tmp_path / "b", 0)
    with pytest.raises(ConfigError) as err:
        simulate_runs(runs, {}, jobs=2)
    assert "--bench" in err.value.reason and str(VLLM_8B) in err.value.reason


def test_the_profile_is_for_the_deployments_of_the_fitted_runs_only(tmp_path):
    # two runs: the second (70B on A100s) is held out, so the profile is for the 8B only
    synthetic_benchmark(tmp_path / "a.json", rate=4.0, n=30, seed=0)
    files = [
        (str(tmp_path / "a.json"), DEPLOY),
        (str(VLLM_70B), ["model=llama31_70b", "hardware=a100_40g", "fleet.tp=8"]),
    ]
    runs = prepare(files, [], tmp_path / "lengths")
    assert [r.held_out for r in runs] == [False, True]
    profile = fit(runs, max_evals=1).profile
    assert profile.fitted_for == [
        {
            "model": "meta-llama/Llama-3.1-8B",
            "hardware": "H100-SXM",
            "weights_precision": "bf16",
            "kv_precision": "bf16",
        }
    ]


def test_a_closed_loop_benchmark_s_request_overhead_is_found_not_stalled_at_the_start(tmp_path):
    # vllm bench serve at --max-concurrency 8 (all due at once): every request after the first
    # wave is released by a step's end. Served with 20 ms per request, nothing else changed.
    # The search starts at no overhead; with the overhead discontinuous at 0 it stalled there.
    known = {"request_overhead_s": 0.02}
    files = []
    for number, cap in enumerate((4, 8)):
        path = tmp_path / f"loop{number}.json"
        synthetic_benchmark(path, "inf", 48, seed=number, known=known, max_concurrency=cap)
        files.append((str(path), []))
    result, runs = calibrate_bench(
        files, DEPLOY, holdout_every=0, max_evals=40, jobs=1, progress=False
    )
    assert [r.load.max_concurrency for r in runs] == [4, 8]
    terms = result.profile.terms
    assert terms["request_overhead_s"] == pytest.approx(0.02, rel=0.25)
    error = result.profile.error["fit"]
    assert error["default"]["ttft"]["mape"] > 0.3  # the defaults miss the 20 ms
    assert error["calibrated"]["ttft"]["mape"] < 0.05
    assert result.profile.provenance["at_bounds"] == []  # nothing pinned: the form fits


def _base() -> dict[str, float]:
    base = compose_config(["step_time=roofline"])["step_time"]
    return {k: float(v) for k, v in base.items() if isinstance(v, (int, float))}


def test_terms_at_a_bound_are_named_with_the_bound_and_what_it_suggests():
    base = _base()
    params = parameters(base, fit_tp=True)
    index = {p.name: i for i, p in enumerate(params)}
    x = np.zeros(len(params))  # the defaults: nothing at a bound (0 added overhead included)
    assert at_bounds(x, params, base) == []
    compute = params[index["compute_scale"]]
    x[index["compute_scale"]] = compute.high
    x[index["bandwidth_scale"]] = params[index["bandwidth_scale"]].low
    request = params[index["request_overhead_s"]]
    x[index["request_overhead_s"]] = request.low  # (-sqrt)**2: the largest overhead
    x[index["step_overhead_s"]] = params[index["step_overhead_s"]].high * 0.5  # inside
    found = at_bounds(x, params, base)
    assert [(f["term"], f["bound"]) for f in found] == [
        ("compute_scale", "upper"),
        ("bandwidth_scale", "lower"),
        ("request_overhead_s", "upper"),
    ]
    assert found[0]["searched_value"] == pytest.approx(np.exp(compute.high))
    assert found[0]["terms"] == {  # the ceiling brings every compute efficiency to 1
        "compute_efficiency": 1.0,
        "quantized_compute_efficiency": 1.0,
        "attention_compute_efficiency": 1.0,
    }
    assert found[0]["meaning"] == BOUND_MEANINGS["compute_scale"]["upper"]
    assert found[1]["terms"]["bandwidth_efficiency"] == pytest.approx(
        0.2 * base["bandwidth_efficiency"]
    )
    assert found[2]["searched_value"] == pytest.approx(2000.0)  # ms added
    assert found[2]["terms"] == {"request_overhead_s": pytest.approx(2.0)}
    # a scale short of its ceiling whose largest efficiency is capped at 1 is at that bound
    # (the scale may go on, that efficiency cannot); just short of 1 is not
    largest = max(SCALED["compute_scale"], key=lambda key: base[key])
    x = np.zeros(len(params))
    x[index["compute_scale"]] = np.log(1.0 / base[largest]) + 1e-9  # (past rounding)
    assert (
        compute.low < x[index["compute_scale"]] < compute.high - 0.01 * (compute.high - compute.low)
    )
    found = at_bounds(x, params, base)
    assert [(f["term"], f["bound"], list(f["terms"])) for f in found] == [
        ("compute_scale", "upper", [largest])
    ]
    x[index["compute_scale"]] -= 1e-6
    assert at_bounds(x, params, base) == []
    # the lower end: within 1% of the range counts, 2% does not
    step = params[index["step_overhead_s"]]
    x = np.zeros(len(params))
    x[index["step_overhead_s"]] = step.low + 0.009 * (step.high - step.low)
    assert [(f["term"], f["bound"]) for f in at_bounds(x, params, base)] == [
        ("step_overhead_s", "lower")
    ]
    x[index["step_overhead_s"]] = step.low + 0.02 * (step.high - step.low)
    assert at_bounds(x, params, base) == []
