"""End to end: ``sim.run.simulate`` on composed configs with tiny workloads.

Invariants every run keeps, decode stretches equal to stepping, M/D/1 queueing theory,
determinism, the horizon, rejections, the closed loop and the summary arithmetic.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir

import sim.config
from sim.run import simulate, write_run
from sim.workload.source import build_workload

CHECK_RUN = sim.config.REPO_ROOT.parent / "shared" / "tools" / "check_run.py"

# Random lengths, ~6 s of Poisson arrivals at 20 req/s on one replica.
RANDOM = ["fleet.replicas=1", "workload=poisson", "workload.num_requests=120", "workload.qps=20",
          "workload.prompt_tokens={dist:uniform,low:1,high:300}",
          "workload.output_tokens={dist:uniform,low:1,high:200}", "sim.progress=false"]
TINY_KV = ["kv.num_blocks=40", "kv.block_size=16"]  # 640 tokens: forces preemptions
SCHEDULERS = {
    "vllm": ["scheduler=vllm"],
    "vllm_whole": ["scheduler=vllm", "scheduler.enable_chunked_prefill=false"],
    "vllm_small_budget": ["scheduler=vllm", "scheduler.max_num_batched_tokens=48"],
    "vllm_one_prefill": ["scheduler=vllm", "scheduler.max_prefills_per_step=1"],
    "sarathi": ["scheduler=sarathi", "scheduler.chunk_size=64"],
    "prefill_first": ["scheduler=prefill_first"],
    "static": ["scheduler=static", "scheduler.max_num_seqs=8"],
}


def compose(*overrides: str):
    with initialize_config_dir(config_dir=str(sim.config.CONFIG_DIR), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


def columns(table):
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


def check_invariants(result, num_blocks: int, num_issued: int) -> dict:
    req, steps = columns(result.requests), columns(result.steps)
    n = len(req["request_id"])
    assert n == num_issued
    assert sorted(req["request_id"].tolist()) == list(range(n))  # each request ends once
    assert set(req["status"]) <= {"completed", "rejected", "unfinished"}
    done = req["status"] == "completed"
    arrival, first, end = (req[k][done] for k in ("arrival_time_s", "first_token_time_s",
                                                  "completion_time_s"))
    assert np.all(arrival <= first) and np.all(first <= end)
    assert np.all(req["first_token_time_s"][done] - arrival == req["ttft_s"][done])
    assert steps["kv_blocks_used"].max() <= num_blocks
    assert steps["kv_blocks_used"].min() >= 0
    assert np.all(steps["duration_s"] > 0)
    for rid in np.unique(steps["replica_id"]):
        mine = steps["replica_id"] == rid
        start, dur = steps["start_time_s"][mine], steps["duration_s"][mine]
        assert np.all(start[1:] >= start[:-1] + dur[:-1] - 1e-9), f"replica {rid}: steps overlap"
    # Every output token after the first comes from a decode step (a recomputed request
    # prefills all but its last token, then decodes it).
    needed_decodes = (req["output_tokens"][done] - 1).sum()
    assert steps["num_decode_tokens"].sum() >= needed_decodes
    assert steps["num_prefill_tokens"].sum() >= req["prompt_tokens"][done].sum()
    assert np.all(steps["num_seqs"] >= 1)
    s = result.summary
    assert (s["completed"], s["rejected"], s["unfinished"]) == (
        int(done.sum()), int((req["status"] == "rejected").sum()),
        int((req["status"] == "unfinished").sum()))
    assert s["num_preemptions"] == int(req["num_preemptions"].sum())
    return req


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tiny_kv", [False, True], ids=["kv_plan", "kv_tiny"])
@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
def test_invariants_over_random_workloads(scheduler, tiny_kv, seed):
    overrides = [*RANDOM, *SCHEDULERS[scheduler], f"seed={seed}", "step_time=linear"]
    if tiny_kv:
        overrides += TINY_KV
    result = simulate(compose(*overrides))
    num_blocks = 40 if tiny_kv else result.summary["kv_capacity_tokens"] // 16
    req = check_invariants(result, num_blocks, 120)
    # Every request fits (<= 500 tokens = 32 blocks < 40 - 1 watermark): all complete.
    assert result.summary["completed"] == 120
    if tiny_kv and scheduler != "static":
        assert req["num_preemptions"].sum() >= 1
    if scheduler == "static" or not tiny_kv:
        assert req["num_preemptions"].sum() == 0


@pytest.mark.parametrize("scheduler", [["scheduler=vllm", "scheduler.enable_chunked_prefill=false"],
                                       ["scheduler=prefill_first"]], ids=["vllm_whole",
                                                                          "prefill_first"])
def test_preempted_recompute_larger_than_token_budget(scheduler):
    # Without chunking, a request preempted late recomputes prompt + output - 2 tokens in one
    # step. 40 + 26 - 2 = 64 fits the 64-token budget: admitted, preempted (a 9-block pool),
    # recomputed, completed.
    fits = simulate(compose(
        *scheduler, "fleet.replicas=1", "workload=poisson", "workload.num_requests=20",
        "workload.qps=100", "workload.prompt_tokens=40", "workload.output_tokens=26",
        "kv.num_blocks=9", "kv.block_size=16", "kv.watermark=0", "step_time=linear",
        "scheduler.max_num_batched_tokens=64", "sim.progress=false"))
    assert fits.summary["num_preemptions"] >= 1
    assert fits.summary["completed"] == 20
    # One more output token and that recompute could never be scheduled: rejected up front.
    too_long = simulate(compose(
        *scheduler, "fleet.replicas=1", "workload=poisson", "workload.num_requests=20",
        "workload.qps=100", "workload.prompt_tokens=40", "workload.output_tokens=27",
        "kv.num_blocks=9", "kv.block_size=16", "scheduler.max_num_batched_tokens=64",
        "sim.progress=false"))
    assert too_long.summary["rejected"] == 20


FAST_FORWARD_CASES = {
    **{f"{name}_tiny_kv": [*RANDOM, *opts, *TINY_KV] for name, opts in SCHEDULERS.items()},
    "vllm_roofline": [*RANDOM, "step_time=roofline"],
    "sarathi_roofline_tiny": [*RANDOM, *SCHEDULERS["sarathi"], *TINY_KV, "step_time=roofline"],
    "closed_loop": ["fleet.replicas=1", "workload=closed_loop", "workload.concurrency=6",
                    "workload.num_requests=60", "workload.prompt_tokens=100",
                    "workload.output_tokens={dist:uniform,low:1,high:150}", "sim.progress=false"],
    "closed_loop_think_tiny": ["fleet.replicas=1", "workload=closed_loop",
                               "workload.concurrency=10", "workload.num_requests=60",
                               "workload.think_time_s=0.05", "workload.prompt_tokens=100",
                               "workload.output_tokens=120", *TINY_KV, "sim.progress=false"],
    "poisson_fixed": ["fleet.replicas=1", "workload=poisson", "workload.num_requests=150",
                      "workload.qps=30", "workload.prompt_tokens=64",
                      "workload.output_tokens=64", "sim.progress=false"],
    "three_replicas_least_tokens": [*RANDOM, "fleet.replicas=3", "router=least_tokens",
                                    "workload.qps=50"],
    "two_replicas_rr_prefill_first_tiny": [*RANDOM, "fleet.replicas=2", "router=round_robin",
                                           *SCHEDULERS["prefill_first"], *TINY_KV],
    # A horizon that falls inside decode stretches: steps ending after it never end.
    "horizon_inside_stretches": [*RANDOM, "workload.qps=20", "sim.horizon_s=3"],
    # Exact ties: arrivals and step ends at the same instants (constant step time, evenly
    # spaced arrivals), across replicas, and closed-loop arrivals issued inside a step end.
    "ties_constant_round_robin": [
        "fleet.replicas=2", "step_time=constant", "step_time.seconds=0.25",
        "workload=constant", "workload.qps=2", "workload.num_requests=60",
        "workload.prompt_tokens=16", "workload.output_tokens=9", "router=round_robin",
        "sim.progress=false"],
    "ties_constant_least_outstanding_horizon": [
        "fleet.replicas=2", "step_time=constant", "step_time.seconds=0.25",
        "workload=constant", "workload.qps=2", "workload.num_requests=60",
        "workload.prompt_tokens=16", "workload.output_tokens=9", "router=least_outstanding",
        "sim.horizon_s=12", "sim.progress=false"],
    "ties_closed_loop_three_replicas_tiny": [
        "fleet.replicas=3", "step_time=constant", "step_time.seconds=0.01",
        "workload=closed_loop", "workload.concurrency=7", "workload.num_requests=120",
        "workload.prompt_tokens=100", "workload.output_tokens={dist:uniform,low:1,high:150}",
        "router=least_tokens", *TINY_KV, "sim.progress=false"],
    # A frontend that falls behind: tokens streamed late, requests reaching the engine late,
    # closed-loop clients released when their last token is streamed; with preemption.
    "frontend_closed_loop_tiny": [
        "fleet.replicas=2", "workload=closed_loop", "workload.concurrency=24",
        "workload.num_requests=150", "workload.prompt_tokens={dist:uniform,low:10,high:300}",
        "workload.output_tokens={dist:uniform,low:1,high:150}", "frontend.token_s=0.0004",
        *TINY_KV, "sim.progress=false"],
    "frontend_poisson_horizon": [*RANDOM, "workload.qps=20", "frontend.token_s=0.0002",
                                 "sim.horizon_s=3"],
    # A backlog longer than a step while decode stretches run: arrivals mid-stretch must see
    # the tokens of the stretch's steps that have already ended.
    "frontend_backlog_during_stretches": [
        "fleet.replicas=1", "workload=poisson", "workload.num_requests=200", "workload.qps=30",
        "workload.prompt_tokens=64", "workload.output_tokens=64", "frontend.token_s=0.001",
        "sim.progress=false"],
    "frontend_backlog_two_replicas_tiny": [*RANDOM, "fleet.replicas=2", "workload.qps=40",
                                           "frontend.token_s=0.0007", *TINY_KV],
    "frontend_ties_constant": [
        "fleet.replicas=2", "step_time=constant", "step_time.seconds=0.01",
        "workload=closed_loop", "workload.concurrency=9", "workload.num_requests=90",
        "workload.prompt_tokens=16", "workload.output_tokens=40", "frontend.token_s=0.00125",
        "router=round_robin", "sim.progress=false"],
}


@pytest.mark.parametrize("case", list(FAST_FORWARD_CASES))
def test_decode_stretches_equal_stepping_one_by_one(case):
    overrides = FAST_FORWARD_CASES[case]
    fast = simulate(compose(*overrides, "sim.fast_forward_decode=true"))
    slow = simulate(compose(*overrides, "sim.fast_forward_decode=false"))
    assert slow.summary["completed"] > 0
    assert fast.requests.equals(slow.requests)
    assert fast.steps.equals(slow.steps)
    assert fast.summary == slow.summary


def test_fast_forward_actually_takes_stretches(monkeypatch):
    """Sanity: the fast path is exercised (otherwise the equality test proves nothing)."""
    from sim.scheduler.base import Scheduler

    calls = []
    original = Scheduler.advance_decodes

    def spy(self, plan, num_steps, end_time_s):
        calls.append(num_steps)
        return original(self, plan, num_steps, end_time_s)

    monkeypatch.setattr(Scheduler, "advance_decodes", spy)
    simulate(compose(*FAST_FORWARD_CASES["poisson_fixed"]))
    assert calls and max(calls) > 10


def test_queueing_delay_matches_md1_theory():
    """One replica, one request per step of S seconds: an M/D/1 queue.

    Wq = rho S / (2 (1 - rho)). Over 4 seeds x 20,000 requests at rho = 0.6 the sample mean's
    relative standard error is about 1% (measured across seeds: 2% per seed), so 4% is a
    4-sigma bound.
    """
    S, rho = 0.01, 0.6
    delays = []
    for seed in range(4):
        result = simulate(compose(
            "fleet.replicas=1", "step_time=constant", f"step_time.seconds={S}",
            "scheduler.max_num_seqs=1", "workload=poisson", "workload.num_requests=20000",
            f"workload.qps={rho / S}", "workload.prompt_tokens=16", "workload.output_tokens=1",
            f"seed={seed}", "sim.progress=false"))
        req = columns(result.requests)
        assert np.all(req["status"] == "completed")
        # each request is exactly one step of S seconds: TTFT = queueing delay + S
        np.testing.assert_allclose(req["ttft_s"] - S, req["queueing_delay_s"], atol=1e-9)
        assert np.all(req["queueing_delay_s"] >= 0)
        delays.append(req["queueing_delay_s"])
    wq_theory = rho * S / (2 * (1 - rho))
    assert np.concatenate(delays).mean() == pytest.approx(wq_theory, rel=0.04)


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    overrides = [*RANDOM, *TINY_KV, "fleet.replicas=2"]
    a = write_run(simulate(compose(*overrides, "seed=3")), tmp_path / "a")
    b = write_run(simulate(compose(*overrides, "seed=3")), tmp_path / "b")
    c = write_run(simulate(compose(*overrides, "seed=4")), tmp_path / "c")
    names = ["requests.parquet", "steps.parquet", "summary.json", "config.yaml"]
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    for name in ["requests.parquet", "steps.parquet", "summary.json"]:
        assert (a / name).read_bytes() != (c / name).read_bytes(), name
    assert sorted(p.name for p in a.iterdir()) == sorted(names)  # no temporary files left


def test_horizon_leaves_requests_unfinished():
    overrides = ["fleet.replicas=1", "workload=poisson", "workload.num_requests=200",
                 "workload.qps=20", "workload.prompt_tokens=200", "workload.output_tokens=300",
                 "sim.horizon_s=3", "sim.progress=false"]
    cfg = compose(*overrides)
    result = simulate(cfg)
    arrivals = build_workload(sim.config.to_dict(cfg)["workload"], 0).arrival_time_s
    issued = int((arrivals < 3.0).sum())
    req = check_invariants(result, result.summary["kv_capacity_tokens"] // 16, issued)
    unfinished = req["status"] == "unfinished"
    assert unfinished.sum() >= 1
    assert result.summary["unfinished"] == int(unfinished.sum())
    assert result.summary["completed"] + result.summary["unfinished"] == issued
    assert np.all(np.isnan(req["completion_time_s"][unfinished]))
    # an unfinished request keeps the TTFT it got, if it got one
    started = unfinished & ~np.isnan(req["first_token_time_s"])
    assert started.sum() >= 1
    assert np.allclose(req["ttft_s"][started],
                       req["first_token_time_s"][started] - req["arrival_time_s"][started])
    assert np.all(np.isnan(req["ttft_s"][unfinished & ~started]))
    steps = columns(result.steps)
    assert (steps["start_time_s"] + steps["duration_s"]).max() < 3.0


def test_request_too_big_for_kv_is_rejected():
    result = simulate(compose(
        "fleet.replicas=1", "workload=poisson", "workload.num_requests=5",
        "workload.prompt_tokens=5000", "workload.output_tokens=10", "kv.num_blocks=10",
        "sim.progress=false"))
    req = columns(result.requests)
    assert list(req["status"]) == ["rejected"] * 5
    assert result.summary["rejected"] == 5 and result.summary["completed"] == 0
    assert np.all(np.isnan(req["first_token_time_s"]))
    assert result.steps.num_rows == 0


def test_exactly_the_requests_that_never_fit_are_rejected():
    # 20 blocks of 16, watermark ceil(0.2) = 1 block: a request fits iff ceil(total/16) <= 19.
    result = simulate(compose(
        *RANDOM, "workload.prompt_tokens={dist:uniform,low:1,high:400}", "kv.num_blocks=20"))
    req = check_invariants(result, 20, 120)
    total = req["prompt_tokens"] + req["output_tokens"]
    never = -(-total // 16) > 19
    assert never.any() and (~never).any()
    assert np.array_equal(req["status"] == "rejected", never)
    assert np.all(req["status"][~never] == "completed")


@pytest.mark.parametrize("frontend_token_s", [0.0, 0.0005])
def test_closed_loop_keeps_concurrency_in_flight(frontend_token_s):
    concurrency = 5
    result = simulate(compose(
        "fleet.replicas=2", "workload=closed_loop", f"workload.concurrency={concurrency}",
        "workload.num_requests=60", "workload.prompt_tokens={dist:uniform,low:10,high:200}",
        "workload.output_tokens={dist:uniform,low:1,high:60}", "sim.progress=false",
        f"frontend.token_s={frontend_token_s}"))
    req = columns(result.requests)
    assert len(req["request_id"]) == 60 and np.all(req["status"] == "completed")
    arrival, done = req["arrival_time_s"], req["completion_time_s"]
    assert np.all(arrival[:concurrency] == 0.0)
    # every later request is sent at the instant an earlier one completed (think time 0)
    assert set(arrival[concurrency:]) <= set(done)
    for t in arrival[concurrency:]:
        in_flight = int((arrival <= t).sum() - (done <= t).sum())
        assert in_flight == concurrency, t
    assert np.all(np.diff(arrival) >= 0)  # issued in order


def test_summary_arithmetic():
    result = simulate(compose(*RANDOM, "fleet.replicas=2", "fleet.tp=2",
                              "hardware.usd_per_gpu_hour=2.5"))
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
        rel=1e-12)
    assert s["cost"]["usd_per_million_output_tokens"] == pytest.approx(
        10.0 / 3600 / out_per_s * 1e6, rel=1e-12)
    steps = columns(result.steps)
    assert s["duration_s"] == pytest.approx(
        (steps["start_time_s"] + steps["duration_s"]).max() - req["arrival_time_s"].min())
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
    everyone = simulate(compose(*base, "slo.ttft_s=null", "slo.tpot_s=null",
                                "slo.e2e_s=null")).summary
    assert everyone["goodput_requests_per_s"] == everyone["throughput"]["requests_per_s"]
    e2e = simulate(compose(*base, "slo.ttft_s=null", "slo.tpot_s=null", "slo.e2e_s=1.0"))
    req = columns(e2e.requests)
    good = int(((req["status"] == "completed") & (req["e2e_s"] <= 1.0)).sum())
    assert 0 < good < 120
    assert e2e.summary["goodput_requests_per_s"] == pytest.approx(good / e2e.summary["duration_s"])


def run_check_run(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK_RUN), str(out)], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(not CHECK_RUN.exists(), reason="../shared/tools/check_run.py not present")
@pytest.mark.parametrize("frontend_token_s", [0.0, 0.0003])
def test_check_run_accepts_a_written_run(tmp_path, frontend_token_s):
    result = simulate(compose(*RANDOM, "fleet.replicas=2", "scheduler=sarathi",
                              f"frontend.token_s={frontend_token_s}"))
    assert result.summary["num_preemptions"] == 0
    out = write_run(result, tmp_path / "run")
    proc = run_check_run(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "contract and invariants hold" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == pq.read_table(out / "requests.parquet").num_rows == 120


@pytest.mark.skipif(not CHECK_RUN.exists(), reason="../shared/tools/check_run.py not present")
def test_check_run_accepts_a_run_with_preemptions(tmp_path):
    result = simulate(compose(*RANDOM, *TINY_KV))
    assert result.summary["num_preemptions"] > 0
    proc = run_check_run(write_run(result, tmp_path / "run"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("think_time_s", [0.0, 0.05])
def test_closed_loop_issues_exactly_num_requests_even_when_all_are_rejected(think_time_s):
    # Every request is rejected (prompt + output never fits the 8-block pool): each rejection
    # releases the next request, and the loop must stop at exactly num_requests.
    result = simulate(compose("fleet.replicas=1", "workload=closed_loop",
                              "workload.concurrency=4", "workload.num_requests=10",
                              f"workload.think_time_s={think_time_s}",
                              "workload.prompt_tokens=200", "workload.output_tokens=10",
                              "kv.num_blocks=8", "sim.progress=false"))
    assert result.summary["num_requests"] == 10
    assert result.summary["rejected"] == 10
