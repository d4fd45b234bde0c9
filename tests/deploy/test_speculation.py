"""Speculative decoding (``spec_decode.*``: ``sim.deploy.speculation``, ``sim.engine.speculation``):
acceptance 0 is plain decoding with wider steps, acceptance 1 advances K + 1 tokens a step, the
mean matches the acceptance model, every scheduler keeps its KV within the pool, runs repeat
exactly, the drafter's memory and time are what the module docstring says, and with the group
off nothing changes."""

from __future__ import annotations

import copy
import functools
import math

import numpy as np
import pytest
import yaml

from sim.config.compose import load_option
from sim.config.legacy import canonical_run_config
from sim.engine.kv_cache import KVCache
from sim.engine.request import COMPLETED, Request
from sim.engine.scheduler.sglang import SGLangScheduler
from sim.engine.scheduler.vllm import VLLMScheduler
from sim.engine.speculation import (
    DraftAcceptance,
    SpeculativeStepTime,
    expected_tokens_per_step,
    tokens_per_step_pmf,
)
from sim.engine.step_shape import StepShape
from sim.engine.step_time.base import ScaledStepTime
from sim.engine.step_time.linear import LinearStepTime
from sim.engine.step_time.roofline import RooflineStepTime
from sim.output.run_files import write_run
from sim.output.summary_table import format_summary
from sim.run import simulate
from tests.scenarios import RANDOM, SCHEDULERS, TINY_KV
from tests.support import assert_good_run, columns, compose, deployment

FILES = ("requests.parquet", "steps.parquet", "summary.json")
SPEC = ["spec_decode.num_draft_tokens=3", "spec_decode.acceptance_rate=0.7"]
CONSTANT = ["step_time=constant", "step_time.seconds=0.01"]
LINEAR = dict(c0=0.006, c_prefill_token=6e-5, c_decode_seq=1e-5, c_prefill_attn=1e-10)
LINEAR_DECODE_ATTN = 3e-8  # configs/step_time/linear.yaml's, with the others above


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


@functools.cache
def _composed(*overrides: str) -> dict:
    return compose(*overrides)


def _cfg(*overrides: str, **spec_decode: object) -> dict:
    """The config of ``overrides`` with ``spec_decode`` keys set. Composing takes a quarter of a
    second: it is done once per set of overrides, the scheduler's and step time's applied to a
    copy afterwards (an option's file, or a key's YAML value), as Hydra would."""
    manual = [o for o in overrides if o.split("=")[0].split(".")[0] in ("scheduler", "step_time")]
    cfg = copy.deepcopy(_composed(*(o for o in overrides if o not in manual)))
    for override in manual:
        key, value = override.split("=", 1)
        group, _, name = key.partition(".")
        if name:
            cfg[group][name] = yaml.safe_load(value)
        else:
            cfg[group] = load_option(group, value, group)
    cfg["spec_decode"].update(spec_decode)
    return cfg


K3 = dict(num_draft_tokens=3, acceptance_rate=0.7)  # SPEC's settings, for _cfg


def _trace(folder, rows: list[tuple[float, int, int]]) -> tuple[str, ...]:
    """A trace of ``(arrival_time_s, prompt_tokens, output_tokens)`` rows, as overrides."""
    path = folder / "trace.csv"
    lines = ["arrival_time_s,prompt_tokens,output_tokens"] + [f"{a},{p},{o}" for a, p, o in rows]
    path.write_text("\n".join(lines) + "\n")
    return ("workload=trace", f"workload.path={path}", "fleet.replicas=1", "sim.progress=false")


OUTPUTS = [1, 2, 3, 4, 5, 6, 9, 17, 40]  # output lengths, one request at a time


@pytest.fixture(scope="module")
def one_at_a_time(tmp_path_factory) -> tuple[str, ...]:
    return _trace(
        tmp_path_factory.mktemp("alone"), [(10.0 * i, 32, n) for i, n in enumerate(OUTPUTS)]
    )


@pytest.fixture(scope="module")
def one_request(tmp_path_factory) -> tuple[str, ...]:
    """A prefill step, then (at acceptance 0) three decode steps."""
    return _trace(tmp_path_factory.mktemp("one"), [(0.0, 32, 4)])


# -- the acceptance model ----------------------------------------------------------------------


def test_the_expectation_is_leviathan_et_al_s_closed_form():
    for a in (0.0, 0.3, 0.7, 0.95):
        for k in (1, 3, 8):
            closed = (1 - a ** (k + 1)) / (1 - a)
            assert expected_tokens_per_step((a,) * k) == pytest.approx(closed, rel=1e-12)
    assert expected_tokens_per_step((1.0,) * 4) == 5.0
    assert expected_tokens_per_step((0.9, 0.5)) == pytest.approx(1 + 0.9 + 0.45)
    pmf = tokens_per_step_pmf((0.9, 0.5))
    assert pmf == pytest.approx([0.1, 0.45, 0.45]) and sum(pmf) == pytest.approx(1.0)


@pytest.mark.parametrize("probabilities", [(0.7,) * 4, (0.9, 0.6, 0.3)], ids=["rate", "list"])
def test_the_mean_tokens_per_step_match_the_model_within_sampling_error(probabilities):
    n = 200_000
    drawn = 1 + np.asarray(DraftAcceptance(probabilities, _rng(7)).drafts_kept(n))
    pmf = np.asarray(tokens_per_step_pmf(probabilities))
    values = np.arange(1, len(pmf) + 1)
    mean = float(pmf @ values)
    sigma = math.sqrt(float(pmf @ (values - mean) ** 2) / n)
    assert mean == pytest.approx(expected_tokens_per_step(probabilities))
    assert abs(drawn.mean() - mean) < 4 * sigma
    # and the whole distribution: each count's frequency within 4 sigma of its probability
    counts = np.bincount(drawn, minlength=len(pmf) + 1)[1:] / n
    assert np.all(np.abs(counts - pmf) < 4 * np.sqrt(pmf * (1 - pmf) / n) + 1e-12)


def test_a_runs_mean_tokens_per_step_match_the_model_within_sampling_error():
    summary = simulate(_cfg(*RANDOM, "workload.num_requests=300", **K3)).summary
    spec = summary["spec_decode"]
    probabilities = (0.7,) * 3
    pmf = np.asarray(tokens_per_step_pmf(probabilities))
    values = np.arange(1, 5)
    var = float(pmf @ (values - pmf @ values) ** 2)
    n = spec["decode_sequence_steps"]
    assert n > 5000
    assert spec["expected_tokens_per_decode_step"] == pytest.approx((1 - 0.7**4) / 0.3)
    assert abs(spec["drawn_tokens_per_decode_step"] - pmf @ values) < 4 * math.sqrt(var / n)
    # the tokens produced stop at each request's output: never more than drawn
    assert spec["tokens_per_decode_step"] <= spec["drawn_tokens_per_decode_step"]
    assert spec["drafter_time_share"] > 0  # mtp heads by default


# -- acceptance 0 and 1 --------------------------------------------------------------------------


def _requests() -> list[Request]:
    lengths = [(40, 9), (7, 30), (120, 4), (33, 17), (64, 1), (5, 12)]
    return [Request(i, 0.0, p, o) for i, (p, o) in enumerate(lengths)]


def _widened(plan, k: int) -> StepShape:
    """The verification's shape, by hand from the plan's requests: each decode's K drafts as
    query tokens attending its context (computed tokens + the decoded one) and each other."""
    drafts_attn = sum(k * (r.num_computed_tokens + 1 + k) for r in plan.decodes)
    shape = plan.shape()
    return StepShape(
        shape.num_prefill_tokens + k * len(plan.decodes),
        shape.num_decode_seqs,
        shape.prefill_attn + drafts_attn,
        shape.decode_context,
    )


@pytest.mark.parametrize("policy", [VLLMScheduler, SGLangScheduler], ids=["vllm", "sglang"])
def test_acceptance_zero_is_plain_decoding_with_wider_steps_priced_by_the_linear_model(policy):
    k = 3
    linear = LinearStepTime(**LINEAR, c_decode_attn=LINEAR_DECODE_ATTN)
    runs = []
    for speculating in (False, True):
        scheduler = policy(KVCache(400, 16))
        timed = linear
        if speculating:
            scheduler.speculate(DraftAcceptance((0.0,) * k, _rng()))
            timed = SpeculativeStepTime(linear, k)  # no drafter: the verification alone
        for request in _requests():
            scheduler.add(request)
        steps = []
        while scheduler.has_work:
            plan = scheduler.schedule()
            wider = _widened(plan, k)
            duration = timed.step_time_s(plan.shape())
            tokens = [(r.request_id, n) for r, n in plan.prefills]
            decodes = [r.request_id for r in plan.decodes]
            scheduler.on_step_end(plan)
            steps.append((tokens, decodes, plan.num_decode_tokens, duration))
            if speculating:
                assert duration == linear.step_time_s(wider)
                assert plan.num_decode_tokens == len(decodes)
        runs.append(steps)
    plain, wide = runs
    assert [s[:3] for s in plain] == [s[:3] for s in wide]  # the same token timeline
    assert len(plain) == len(wide) == 30  # prompts of the first step, 29 decode steps
    decoding = [(p, w) for p, w in zip(plain, wide, strict=True) if p[1]]
    assert all(w[3] > p[3] for p, w in decoding)  # every step with decodes is wider


@pytest.mark.parametrize("name", ["vllm", "sglang", "trtllm", "prefill_first"])
def test_acceptance_zero_repeats_plain_decodings_run_with_a_constant_step(name):
    # (sarathi is left out: its chunk budget counts the drafts, so its prompts go slower)
    overrides = [*RANDOM, *SCHEDULERS[name], *CONSTANT]
    plain = simulate(_cfg(*overrides))
    spec = simulate(_cfg(*overrides, num_draft_tokens=3, acceptance_rate=0, method="ngram"))
    assert plain.requests.equals(spec.requests)
    a, b = columns(plain.steps), columns(spec.steps)
    assert a.keys() == b.keys()
    for column in a:
        if column != "kv_blocks_used":  # (it holds the drafts' lookahead slots too)
            assert np.array_equal(a[column], b[column]), column
    assert np.all(b["kv_blocks_used"] >= a["kv_blocks_used"])


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_acceptance_one_advances_k_plus_one_tokens_a_step(name, one_at_a_time):
    k, outputs, trace = 3, OUTPUTS, one_at_a_time
    spec = dict(num_draft_tokens=k, acceptance_rate=1, method="ngram")
    result = simulate(_cfg(*trace, *SCHEDULERS[name], *CONSTANT, **spec))
    req = columns(result.requests)
    decode_steps = [math.ceil((n - 1) / (k + 1)) for n in outputs]
    assert list(req["status"]) == ["completed"] * len(outputs)
    after_first = req["completion_time_s"] - req["first_token_time_s"]
    assert np.allclose(after_first, 0.01 * np.asarray(decode_steps), rtol=0, atol=1e-12)
    made = columns(result.steps)["num_decode_tokens"]
    expected = []
    for n in outputs:  # K + 1 a step, the last step what is left
        expected += [k + 1] * ((n - 1) // (k + 1)) + (
            [(n - 1) % (k + 1)] if (n - 1) % (k + 1) else []
        )
    assert list(made[made > 0]) == expected
    spec = result.summary["spec_decode"]
    assert spec["drawn_tokens_per_decode_step"] == k + 1 == spec["expected_tokens_per_decode_step"]


# -- every scheduler, a pool too small, preemptions -------------------------------------------


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_every_scheduler_keeps_kv_in_its_pool_and_ends_each_request_once(name):
    result = simulate(_cfg(*RANDOM, *TINY_KV, *SCHEDULERS[name], **K3))
    assert_good_run(result, kv_blocks=40)  # the contract: KV blocks in use within the pool
    req = columns(result.requests)
    assert len(req["request_id"]) == 120 == len(set(req["request_id"]))
    assert set(req["status"]) == {"completed"}
    steps = columns(result.steps)
    # every output token after the first came from a decode step, once
    assert steps["num_decode_tokens"].sum() == (req["output_tokens"] - 1).sum()
    assert result.summary["spec_decode"]["decode_sequence_steps"] > 0
    # the pool is small enough to preempt (guaranteed_no_evict never does, nor static batching,
    # which reserves whole requests; SGLang's admission reserves outputs ahead, so it retracts
    # only now and then)
    if not name.startswith(("trtllm", "sglang", "static")) or name == "trtllm_max_util_chunked":
        assert result.summary["num_preemptions"] > 0


def test_a_static_batch_verifies_drafts_for_every_member_padding_included(tmp_path):
    """Two requests in one static batch, acceptance 1, K = 3: each decode step advances a live
    member 4 tokens; the one that finishes first stays in the batch as padding (its drafts
    computed, nothing kept) until the other ends. KV is reserved at admission for the whole
    request and the lookahead: prompt + output + K slots."""
    trace = _trace(tmp_path, [(0.0, 32, 5), (0.0, 32, 13)])
    spec = dict(num_draft_tokens=3, acceptance_rate=1, method="ngram")  # (a free drafter)
    result = simulate(_cfg(*trace, *SCHEDULERS["static"], "step_time=linear", **spec))
    steps = columns(result.steps)
    # a prefill step (both first tokens), then 4 + 4 + 4 tokens for the 13-token request;
    # the 5-token one takes its last 4 in the first decode step and is padding after it
    assert list(steps["num_prefill_tokens"]) == [64, 0, 0, 0]
    assert list(steps["num_decode_tokens"]) == [0, 8, 4, 4]
    assert list(steps["num_seqs"]) == [2, 2, 1, 1]  # (the sequences that produce tokens)
    # the padding is verified with the live one: D = 2, each with K = 3 drafts over its
    # context (the live one's 37 then 41 with the token decoded, the padding's 37 tokens)
    c0, cp, cd, cpa = LINEAR.values()
    for row, context in ((2, 37 + 37), (3, 41 + 37)):
        priced = c0 + cp * 2 * 3 + cd * 2 + cpa * (3 * context + 2 * 9)
        priced += LINEAR_DECODE_ATTN * context
        assert steps["duration_s"][row] == pytest.approx(priced, rel=1e-12)
    result = simulate(_cfg(*trace, *SCHEDULERS["static"], "kv.block_size=1", **spec))
    steps = columns(result.steps)
    # blocks of one token: both requests' prompt + output + 3 lookahead slots, held throughout
    assert set(steps["kv_blocks_used"]) == {(32 + 5 + 3) + (32 + 13 + 3)}
    req = columns(result.requests)
    assert list(req["status"]) == ["completed", "completed"]


def test_a_disaggregated_fleet_speculates_on_its_decode_pool():
    result = simulate(_cfg(*RANDOM, "placement=disaggregated", "fleet.replicas=2", *CONSTANT, **K3))
    req = columns(result.requests)
    assert set(req["status"]) == {"completed"}
    steps = columns(result.steps)
    assert steps["num_decode_tokens"].sum() == (req["output_tokens"] - 1).sum()
    assert result.summary["spec_decode"]["decode_sequence_steps"] > 0
    # the decode pool does the decoding, more than a token per sequence a step (2.53 expected
    # at K=3, a=0.7; a request's last step is cut to what it has left)
    decoding = steps["pool"] == "decode"
    assert steps["num_decode_tokens"][~decoding].sum() == 0
    assert steps["num_decode_tokens"][decoding].sum() > 1.5 * steps["num_seqs"][decoding].sum()


# -- the same run twice -----------------------------------------------------------------------


def test_a_speculating_run_repeats_byte_for_byte_and_without_fast_forward(tmp_path):
    overrides = [*RANDOM, *TINY_KV, *SPEC, "fleet.replicas=2", "workload.num_requests=60"]
    a = write_run(simulate(compose(*overrides)), tmp_path / "a")
    b = write_run(simulate(_cfg(*overrides)), tmp_path / "b")
    no_stretches = _cfg(*overrides)
    no_stretches["sim"]["fast_forward_decode"] = False
    c = write_run(simulate(no_stretches), tmp_path / "c")
    for name in (*FILES, "config.yaml"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    for name in FILES:
        assert (a / name).read_bytes() == (c / name).read_bytes(), name
    other_seed = _cfg(*overrides)
    other_seed["seed"] = 1
    d = write_run(simulate(other_seed), tmp_path / "d")
    assert (a / "requests.parquet").read_bytes() != (d / "requests.parquet").read_bytes()


# -- off by default ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        [*RANDOM, *TINY_KV],
        [*RANDOM, *TINY_KV, *SCHEDULERS["sglang"], "frontend.token_s=0.0003"],
        [*RANDOM, *TINY_KV, *SCHEDULERS["trtllm_max_util_chunked"], "step_time=linear"],
        [*RANDOM, *SCHEDULERS["static"], "fleet.replicas=2"],
    ],
    ids=["vllm", "sglang_frontend", "trtllm", "static"],
)
def test_off_by_default_the_files_are_those_of_a_run_without_the_group(overrides, tmp_path):
    cfg = _cfg(*overrides)
    assert cfg["spec_decode"]["num_draft_tokens"] == 0
    without = copy.deepcopy(cfg)
    del without["spec_decode"]
    # K = 0 with the other keys set is off too
    other_keys = _cfg(*overrides, method="draft_model", acceptance_rate=[0.5, 0.5], draft_cost=0.2)
    runs = [write_run(simulate(c), tmp_path / str(i)) for i, c in enumerate((cfg, without))]
    runs.append(write_run(simulate(other_keys), tmp_path / "2"))
    for run in runs[1:]:
        for name in FILES:
            assert (runs[0] / name).read_bytes() == (run / name).read_bytes(), name
    assert "spec_decode" not in (runs[0] / "summary.json").read_text()
    # an older run folder (no spec_decode group) is the same run once made current
    old, new = (yaml.safe_load((r / "config.yaml").read_text()) for r in runs[1::-1])
    assert "spec_decode" not in old
    assert canonical_run_config(old) == canonical_run_config(new)


# -- what the drafter costs -------------------------------------------------------------------

TARGET_70B = ["model=llama31_70b", "fleet.tp=4", "sim.progress=false"]
DRAFT_8B = dict(method="draft_model", draft_model="llama31_8b")


def test_a_draft_model_takes_its_weights_and_kv_out_of_the_targets_kv_memory(one_request):
    trace = one_request
    plain = simulate(_cfg(*trace, *TARGET_70B, *CONSTANT)).summary
    spec = simulate(_cfg(*trace, *TARGET_70B, *CONSTANT, **DRAFT_8B, **K3)).summary
    target = deployment("llama31_70b", tp=4).memory
    draft = deployment("llama31_8b", tp=4).memory
    # per GPU: the 8B's weights (16.06 GB / 4) out, and each token holds both models' KV
    assert draft.weight_bytes_per_gpu == 8030261248 * 2 / 4
    assert target.kv_bytes_per_token_per_gpu == 2 * 80 * 8 * 128 * 2 / 4  # 80 layers, 8 heads
    assert draft.kv_bytes_per_token_per_gpu == 2 * 32 * 8 * 128 * 2 / 4
    blocks = math.floor(
        (target.kv_free_bytes_per_gpu - draft.weight_bytes_per_gpu)
        / (16 * (target.kv_bytes_per_token_per_gpu + draft.kv_bytes_per_token_per_gpu))
    )
    assert plain["kv_capacity_tokens"] == target.kv_capacity_tokens
    assert spec["kv_capacity_tokens"] == 16 * blocks
    assert spec["kv_capacity_tokens"] < 0.65 * plain["kv_capacity_tokens"]


def _durations(trace, *overrides: str, **spec: object) -> tuple[np.ndarray, dict]:
    result = simulate(_cfg(*trace, *overrides, num_draft_tokens=2, acceptance_rate=0, **spec))
    return columns(result.steps)["duration_s"], result.summary["spec_decode"]


def test_a_draft_models_k_passes_with_a_constant_step(one_request):
    durations, spec = _durations(one_request, *TARGET_70B, *CONSTANT, **DRAFT_8B)
    # prefill: the target's step and the drafter's pass over the prompt; a decode: the
    # verification and K = 2 draft passes
    assert list(durations) == pytest.approx([0.02, 0.03, 0.03, 0.03], rel=1e-12)
    assert spec["drafter_time_share"] == pytest.approx(0.07 / 0.11)
    # (said in the summary: a constant step prices the 8B's pass as the 70B's step)
    assert spec["draft_model_priced_like_target"] is True
    cfg = _cfg(*one_request, *TARGET_70B, num_draft_tokens=2, **DRAFT_8B)
    roofline = simulate(cfg).summary
    assert roofline["spec_decode"]["draft_model_priced_like_target"] is False
    assert "priced like the target" not in format_summary(roofline, cfg)
    constant = _cfg(*one_request, *TARGET_70B, *CONSTANT, num_draft_tokens=2, **DRAFT_8B)
    assert "% of step time (the draft model priced like the target" in (
        format_summary(simulate(constant).summary, constant)
    )
    fixed = simulate(_cfg(*one_request, *TARGET_70B, *CONSTANT, draft_cost=0.1, **DRAFT_8B, **K3))
    assert fixed.summary["spec_decode"]["draft_model_priced_like_target"] is False


def test_a_draft_models_passes_priced_by_hand_with_the_linear_model(one_request):
    durations, _ = _durations(one_request, *TARGET_70B, "step_time=linear", **DRAFT_8B)
    c0, cp, cd, cpa = LINEAR.values()
    cda = LINEAR_DECODE_ATTN
    prefill = c0 + cp * 32 + cpa * 32 * 32
    # the drafter's first pass is the step's own shape; the linear model's c0 is its fitted
    # intercept (weight reads and all), not a host share, so every pass pays it
    expected = [2 * prefill]
    for context in (33, 34, 35):  # the decoded token's context: 32 prompt + generated
        verify = c0 + cp * 2 + cd + cpa * (2 * context + 4) + cda * context
        drafts = sum(c0 + cd + cda * (context + j) for j in range(2))
        expected.append(verify + drafts)
    assert list(durations) == pytest.approx(expected, rel=1e-12)


def test_a_roofline_drafter_pays_no_step_overhead_per_pass():
    # an MTP head on the roofline: the target's step less its 2 ms step overhead (and the
    # per-token host cost), over its 32 layers, per pass
    target = RooflineStepTime(deployment=deployment(), token_overhead_s=1e-5)
    model = SpeculativeStepTime(target, 2, target, 1 / 32)
    shape = StepShape(0, 8, 0, 8 * 500)
    second = StepShape(0, 8, 0, 8 * 500 + 8)
    host = 0.002 + 1e-5 * 8
    assert target.host_overhead_s(shape) == pytest.approx(host)
    expected = (target.step_time_s(shape) - host + target.step_time_s(second) - host) / 32
    assert model.drafting_s(shape) == pytest.approx(expected, rel=1e-12)
    # a wrapper scales its share with its times
    scaled = ScaledStepTime(target, 1.5)
    assert scaled.host_overhead_s(shape) == pytest.approx(1.5 * host)


def test_mtp_heads_cost_a_layer_ngram_nothing_and_draft_cost_what_it_says(one_request):
    layers = 32  # Llama-3.1-8B's
    mtp, spec = _durations(one_request, *CONSTANT, method="mtp")
    assert list(mtp) == pytest.approx([0.01 * (1 + 1 / layers)] + [0.01 * (1 + 2 / layers)] * 3)
    ngram, spec = _durations(one_request, *CONSTANT, method="ngram")
    assert list(ngram) == [0.01] * 4 and spec["drafter_time_share"] == 0
    fixed, spec = _durations(one_request, *CONSTANT, draft_cost=0.25)
    assert list(fixed) == pytest.approx([0.01] + [0.01 * (1 + 2 * 0.25)] * 3)
    # one-layer heads take one layer's weights and KV out of the KV memory; n-grams nothing
    few = (*RANDOM, "workload.num_requests=5", *CONSTANT)
    plain = simulate(_cfg(*few)).summary["kv_capacity_tokens"]
    heads = simulate(_cfg(*few, **K3)).summary
    memory = deployment().memory
    layer_weights = memory.weight_bytes_per_gpu / layers
    per_block = 16 * memory.kv_bytes_per_token_per_gpu * (1 + 1 / layers)
    blocks = math.floor((memory.kv_free_bytes_per_gpu - layer_weights) / per_block)
    assert heads["kv_capacity_tokens"] == 16 * blocks < plain


def test_the_summary_table_shows_one_line_for_it():
    few = (*RANDOM, "workload.num_requests=10", *CONSTANT)
    cfg = _cfg(*few, **K3)
    text = format_summary(simulate(cfg).summary, cfg)
    lines = [line for line in text.splitlines() if line.startswith("speculative:")]
    assert len(lines) == 1 and "3 drafts (mtp, acceptance 0.7)" in lines[0]
    plain = _cfg(*few)
    assert "speculative" not in format_summary(simulate(plain).summary, plain)


def test_a_completing_request_keeps_no_more_than_its_output():
    scheduler = VLLMScheduler(KVCache(100, 16))
    scheduler.speculate(DraftAcceptance((1.0,) * 4, _rng()))
    request = Request(0, 0.0, 10, 3)
    scheduler.add(request)
    made = []
    while scheduler.has_work:
        plan = scheduler.schedule()
        scheduler.on_step_end(plan)
        made.append(plan.num_decode_tokens)
        assert request.num_computed_tokens <= request.num_tokens
    assert made == [0, 2] and request.status == COMPLETED and request.num_generated == 3
