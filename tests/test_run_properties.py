"""Properties of whole runs (``sim.run.simulate``), on random small valid configurations.

Each example draws a deployment (model, GPU, tensor parallelism, weight and KV precision), a
tiny KV pool, a scheduler with its settings, a router, a step-time model, a workload (Poisson,
gamma, constant, daily, closed loop, a slice of a shipped trace), sometimes a second model on
the same GPUs, a frontend, a horizon, speculative decoding, a disaggregated fleet (prefill and
decode pools) and a seed. For each it checks:

- the contract's invariants (``tests.contract``): every request exactly once, completed +
  rejected + unfinished = the requests issued, KV in use never above the pool, a completed
  request's times ordered and its metrics as defined, rejections with a known reason;
- TTFT <= E2E for every completed request;
- the same files again on a rerun, with ``sim.fast_forward_decode=false``, and when the run
  streams into a folder instead of memory.

Configurations that are bad input (the memory plan refuses the deployment or the second
model, the GPU cannot compute at the precision, every request would be refused) are
discarded: their one-line errors are ``tests/test_bad_input.py``'s subject. The calibrated
step time is drawn only where a shipped profile covers the deployment.

The number of examples follows the Hypothesis profile: ``ci`` (the default, 25 runs) or
``deep`` (``make test-deep``, twenty times as many).
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pyarrow.parquet as pq
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.output.run_files import to_json, write_run
from sim.run import simulate
from sim.workload.source import build_workload
from tests.contract import table_problems
from tests.support import columns, compose

SETTINGS = settings(
    max_examples=max(10, settings.default.max_examples // 4),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Errors that say the drawn configuration is bad input (see the module docstring), by field.
BAD_INPUT_FIELDS = (
    "hardware",
    "precision.weights",
    "step_time",
    "step_time.profile",
    "workload.path",
    "workload.prompt_tokens",
    "workload.pattern",
    "placement.second_model",
)


def _lengths(draw: st.DrawFn, name: str, top: int) -> str:
    low = draw(st.integers(1, top))
    if draw(st.booleans()):
        return f"workload.{name}={low}"
    high = draw(st.integers(low, top))
    return f"workload.{name}={{dist:uniform,low:{low},high:{high}}}"


@st.composite
def run_configs(draw: st.DrawFn) -> list[str]:
    """Overrides of one small valid (or bad-input, discarded later) configuration."""
    model = draw(st.sampled_from(["llama2_7b", "llama31_8b", "qwen25_32b", "mixtral_8x7b"]))
    gpu = draw(st.sampled_from(["a100_80g", "h100_sxm", "h200", "b200", "l40s", "mi300x"]))
    weights = draw(st.sampled_from(["bf16", "fp8", "fp4"]))
    kv = draw(st.sampled_from(["bf16", "fp8"]))
    block_size = draw(st.sampled_from([1, 4, 16]))
    # a pool from a few requests' worth down to less than one (some requests refused)
    kv_tokens = draw(st.integers(8, 2048))
    out = [
        f"model={model}",
        f"hardware={gpu}",
        f"fleet.tp={draw(st.sampled_from([1, 2, 4]))}",
        f"fleet.replicas={draw(st.integers(1, 3))}",
        f"precision.weights={weights}",
        f"precision.kv={kv}",
        f"kv.block_size={block_size}",
        f"kv.num_blocks={max(8, kv_tokens // block_size)}",
        f"kv.watermark={draw(st.sampled_from([0.0, 0.01, 0.1]))}",
        f"seed={draw(st.integers(0, 2**32))}",
        "sim.progress=false",
    ]
    scheduler = draw(
        st.sampled_from(["vllm", "sarathi", "prefill_first", "static", "trtllm", "sglang"])
    )
    if scheduler == "sglang":  # SGLang's own option names
        chunk = draw(st.sampled_from(["null", "-1", str(block_size), "64", "8192"]))
        out += [
            f"scheduler={scheduler}",
            f"scheduler.max_running_requests={draw(st.integers(1, 12))}",
            f"scheduler.chunked_prefill_size={chunk}",
            f"scheduler.max_prefill_tokens={draw(st.integers(16, 512))}",
            f"scheduler.enable_mixed_chunk={draw(st.booleans())}",
        ]
    else:
        out += [
            f"scheduler={scheduler}",
            f"scheduler.max_num_seqs={draw(st.integers(1, 12))}",
            f"scheduler.max_num_batched_tokens={draw(st.integers(16, 512))}",
        ]
    if scheduler == "vllm":
        out.append(f"scheduler.enable_chunked_prefill={draw(st.booleans())}")
        prefills = draw(st.sampled_from(["null", "1", "2"]))
        out.append(f"scheduler.max_prefills_per_step={prefills}")
    if scheduler == "sarathi":
        out.append(f"scheduler.chunk_size={draw(st.integers(4, 128))}")
    if scheduler == "trtllm":
        policy = draw(st.sampled_from(["guaranteed_no_evict", "max_utilization"]))
        chunking = draw(st.sampled_from(["first_come_first_served", "equal_progress"]))
        out += [
            f"scheduler.capacity_policy={policy}",
            f"scheduler.enable_chunked_context={draw(st.booleans())}",
            f"scheduler.context_chunking_policy={chunking}",
        ]
    routers = ["round_robin", "random", "least_outstanding", "least_tokens"]
    out.append(f"router={draw(st.sampled_from(routers))}")
    step_time = draw(st.sampled_from(["roofline", "linear", "constant", "calibrated"]))
    shipped_profile = model == "llama31_8b" and gpu in ("h100_sxm", "h200") and weights == kv
    if step_time == "calibrated" and not shipped_profile:
        step_time = "roofline"  # the shipped profiles cover few pairs; the rest are bad input
    out.append(f"step_time={step_time}")
    if step_time == "constant":
        out.append(f"step_time.seconds={draw(st.sampled_from([0.001, 0.01, 0.05]))}")
    if step_time == "roofline":  # the server's per-request and per-token host costs
        out.append(f"step_time.request_overhead_s={draw(st.sampled_from([0.0, 0.02]))}")
        out.append(f"step_time.token_overhead_s={draw(st.sampled_from([0.0, 1e-5]))}")
    workload = draw(
        st.sampled_from(["poisson", "gamma", "constant", "daily", "closed_loop", "bench", "trace"])
    )
    n = draw(st.integers(1, 30))
    if workload == "trace":
        out += ["workload=azure_conv", f"workload.num_requests={n}"]
        out.append(f"workload.rate_scale={draw(st.sampled_from([1.0, 5.0, 50.0]))}")
    else:
        out += [
            f"workload={workload}",
            _lengths(draw, "prompt_tokens", 300),
            _lengths(draw, "output_tokens", 120),
        ]
        if workload == "daily":
            out += [
                "workload.duration_s=24",  # a whole day's profile in 24 simulated seconds
                "workload.time_compression=3600",
                # ~24 or ~72 requests: none at all (a refusal) has odds of e^-24 at most
                f"workload.qps={draw(st.sampled_from([1.0, 3.0]))}",
            ]
        elif workload == "bench":
            rate = draw(st.sampled_from(["null", "2.0", "50.0", "ramp", "per_client"]))
            cap = draw(st.sampled_from(["null", "1", "3"]))
            if rate == "per_client":  # virtual users: each client its own share, no rate
                rate, cap = "null", draw(st.sampled_from(["1", "3"]))
                per_client = draw(st.integers(1, 4))
                n = int(cap) * per_client
                out.append(f"workload.requests_per_client={per_client}")
            if rate == "ramp":
                rate = "null"
                out += [
                    f"workload.ramp_up_strategy={draw(st.sampled_from(['linear', 'exponential']))}",
                    "workload.ramp_up_start_rps=1",
                    "workload.ramp_up_end_rps=40",
                ]
            out += [
                f"workload.num_requests={n}",
                f"workload.request_rate={rate}",
                f"workload.burstiness={draw(st.sampled_from([0.5, 1.0, 4.0]))}",
                f"workload.max_concurrency={cap}",
                f"workload.num_warmups={draw(st.integers(0, 3))}",
            ]
        elif workload == "closed_loop":
            out += [
                f"workload.num_requests={n}",
                f"workload.concurrency={draw(st.integers(1, 6))}",
                f"workload.think_time_s={draw(st.sampled_from([0.0, 0.05]))}",
            ]
        else:
            out += [
                f"workload.num_requests={n}",
                f"workload.qps={draw(st.sampled_from([0.5, 5.0, 50.0]))}",
            ]
        if workload == "gamma":
            out.append(f"workload.cv={draw(st.sampled_from([0.5, 1.0, 3.0]))}")
    if draw(st.integers(0, 5)) == 0:
        out += [
            "placement=colocated",
            "placement.second_model=llama2_7b",
            f"placement.traffic_share={draw(st.sampled_from([0.3, 0.5]))}",
            f"placement.kv_share={draw(st.sampled_from([0.25, 0.5]))}",
        ]
    frontend = draw(st.integers(0, 3)) == 0
    if frontend:
        out.append(f"frontend.token_s={draw(st.sampled_from([1e-4, 1e-3]))}")
    if draw(st.integers(0, 3)) == 0:
        out.append(f"sim.horizon_s={draw(st.sampled_from([0.05, 1.0, 20.0]))}")
    one_model = "placement=colocated" not in out
    if one_model and draw(st.integers(0, 3)) == 0:
        k = draw(st.integers(1, 3))
        rate = draw(st.sampled_from(["0.0", "0.6", "1.0", "per_position"]))
        if rate == "per_position":
            rate = "[" + ",".join(str(draw(st.sampled_from([0.3, 0.8]))) for _ in range(k)) + "]"
        out += [
            f"spec_decode.num_draft_tokens={k}",
            f"spec_decode.acceptance_rate={rate}",
            f"spec_decode.method={draw(st.sampled_from(['mtp', 'ngram']))}",
        ]
    if scheduler != "static" and one_model and not frontend and draw(st.integers(0, 3)) == 0:
        link = draw(st.sampled_from(["infiniband", "ethernet", "{gb_per_s: 1, latency_us: 100}"]))
        out += [
            "placement=disaggregated",
            f"fleet.replicas={draw(st.integers(2, 3))}",
            f"placement.kv_link={link}",
            f"placement.kv_transfer_overlap={draw(st.booleans())}",
        ]
    return out


def _run(cfg: dict):
    try:
        return simulate(cfg)
    except ConfigError as err:
        event(f"bad input: {err.field}")
        assume(err.field not in BAD_INPUT_FIELDS)
        raise


def _files(result, folder) -> dict[str, bytes]:
    write_run(result, folder)
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@SETTINGS
@given(overrides=run_configs())
def test_whole_runs_keep_their_invariants_and_repeat_exactly(overrides, tmp_path_factory):
    cfg = compose(*overrides)
    result = _run(copy.deepcopy(cfg))
    event(f"placement={cfg['placement']['mode']}")  # (--hypothesis-show-statistics)
    event(f"speculating: {cfg['spec_decode']['num_draft_tokens'] > 0}")
    kv_blocks = [cfg["kv"]["num_blocks"]]
    if cfg["placement"]["mode"] == "colocated":  # the pool is split between the two models
        share = cfg["placement"]["kv_share"]
        kv_blocks = [math.floor(kv_blocks[0] * (1 - share)), math.floor(kv_blocks[0] * share)]
    problems = table_problems(
        result.requests, result.steps, result.summary, kv_blocks_per_model=kv_blocks
    )
    assert problems == [], (overrides, problems)
    req = columns(result.requests)
    done = req["status"] == "completed"
    assert np.all(req["ttft_s"][done] <= req["e2e_s"][done] + 1e-12)
    # none lost, none made up: every request of the workload that arrives before the horizon
    workload = build_workload(cfg["workload"], cfg["seed"])
    horizon = cfg["sim"]["horizon_s"]
    issued = workload.num_requests
    # a plain open loop sends each request at its time; a closed loop or a benchmark client
    # (a cap, a warm-up phase) sends when the fleet lets it, so only the whole count is known
    timed = workload.arrival_time_s is not None
    timed = timed and workload.concurrency is None and not workload.warmup_requests
    if horizon is not None and timed:
        issued = int((workload.arrival_time_s < horizon).sum())
    if horizon is None or timed:
        assert result.summary["num_requests"] == issued
    else:
        assert result.summary["num_requests"] <= issued

    folder = tmp_path_factory.mktemp("run")
    first = _files(result, folder / "memory")
    again = _files(_run(copy.deepcopy(cfg)), folder / "again")
    assert again == first, overrides
    slow = copy.deepcopy(cfg)
    slow["sim"]["fast_forward_decode"] = False
    stepped = _files(_run(slow), folder / "stepped")
    assert {k: v for k, v in stepped.items() if k != "config.yaml"} == {
        k: v for k, v in first.items() if k != "config.yaml"
    }, overrides
    streamed = simulate(copy.deepcopy(cfg), folder / "streamed")
    assert streamed.summary == result.summary
    for name in ("requests.parquet", "steps.parquet"):
        assert (folder / "streamed" / name).read_bytes() == first[name], (name, overrides)
    assert (folder / "streamed" / "summary.json").read_text() == to_json(result.summary)
    assert json.loads(first["summary.json"]) == json.loads(to_json(result.summary))
    assert pq.read_table(folder / "streamed" / "requests.parquet").num_rows == len(done)
