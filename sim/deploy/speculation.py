"""Speculative decoding for a run (``spec_decode.*``): the drafter's memory and time, each
engine's acceptance draws, and the summary's ``spec_decode`` block.

The engine side (what a step keeps, how a step is priced) is ``sim.engine.speculation``; this
module builds it from the config for one engine configuration (``sim.deploy.engines``), so a
run, each engine of an autoscaler and each pool of a disaggregated fleet get it alike. With
``num_draft_tokens: 0`` (the default) nothing here is built and a run is as before.

What each ``method`` costs (``draft_cost`` c, when set, replaces the time with K draft tokens at
c times the target's pure-decode step of the same batch; the memory stays the method's):

- ``draft_model``: a smaller model of the same vocabulary (``spec_decode.draft_model``) on the
  target's GPUs, precisions and TP. Time: its own step-time model (the run's, built for it) for a
  first pass over the step's tokens and K - 1 decode passes of the decoding batch, each without
  the engine's per-step host share (vLLM runs the proposer inside the target's step). Memory: its
  weights, and its KV beside the target's for every token (each request holds both caches), come
  out of the target's KV memory, so the KV capacity shrinks.
- ``mtp``: multi-token-prediction heads (DeepSeek-V3 technical report, section 2.2: one
  transformer block per predicted token, sharing the embedding and the output head; EAGLE's
  draft head is one decoder layer too). A pass costs the target's step of the same shape, less
  its host share, divided by its ``num_layers``; one layer's weights and KV per GPU leave the
  KV memory.
- ``ngram``: prompt lookup on the host (vLLM's ``[ngram]``): no GPU time, no GPU memory.

A ``kv.num_blocks`` override is the target's pool as given: the drafter's memory is then the
user's to leave out. Two models on a fleet (``placement=colocated|dedicated``) with one drafter
setting are refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from sim import rng
from sim.catalog.deployment import Deployment, build_deployment
from sim.catalog.model import ModelSpec
from sim.catalog.placement import Placement
from sim.config.build import build
from sim.config.compose import load_option
from sim.config.schema import ModelConfig, RunConfig
from sim.config.speculation import SpecDecodeConfig
from sim.engine.scheduler.base import Scheduler
from sim.engine.speculation import (
    DraftAcceptance,
    SpeculativeStepTime,
    expected_tokens_per_step,
)
from sim.engine.step_time.base import ScaledStepTime, StepTimeModel
from sim.errors import ConfigError, require

TWO_MODELS = ("colocated", "dedicated")


def acceptance_probabilities(spec: SpecDecodeConfig) -> tuple[float, ...]:
    """Each draft position's chance to be kept given the ones before it were: the list as
    given (one per draft token, or a one-line error), or the one rate K times."""
    k, rate = spec.num_draft_tokens, spec.acceptance_rate
    if isinstance(rate, list):
        require(
            len(rate) == k,
            "spec_decode.acceptance_rate",
            rate,
            f"has {len(rate)} positions: give one fraction per draft token"
            f" (spec_decode.num_draft_tokens={k}), or one fraction for all",
        )
        return tuple(float(p) for p in rate)
    return (float(rate),) * k


def speculation(cfg: dict[str, Any], run: RunConfig, placement: Placement) -> Speculation | None:
    """Speculative decoding for the engines of ``placement`` (None when it is off)."""
    if not run.spec_decode.enabled:
        return None
    return Speculation(cfg, run, placement)


class Speculation:
    """What one engine configuration needs to speculate: ``placement`` with the drafter's
    memory taken out, each model's priced steps (``step_time``), each scheduler's draws
    (``attach``)."""

    def __init__(self, cfg: dict[str, Any], run: RunConfig, placement: Placement) -> None:
        spec = self.config = run.spec_decode
        self.probabilities = acceptance_probabilities(spec)
        self.seed = run.seed
        require(
            placement.mode not in TWO_MODELS,
            "spec_decode.num_draft_tokens",
            spec.num_draft_tokens,
            f"is not modelled with placement={placement.mode} (two models, one drafter"
            " setting): use placement=single or disaggregated, or set it to 0",
        )
        self._draft_step_times: list[StepTimeModel] = []
        # each model's drafter KV per token per GPU, held (and, disaggregated, sent) beside the
        # target's
        self.drafter_kv_bytes_per_token_per_gpu: list[float] = []
        targets = []
        for target in placement.deployments:
            weights, kv = 0.0, 0.0  # the drafter's bytes per GPU, and per token per GPU
            if spec.method == "draft_model":
                draft = _draft_deployment(run, target)
                weights = draft.memory.weight_bytes_per_gpu
                kv = draft.memory.kv_bytes_per_token_per_gpu
                try:
                    model = build(cfg["step_time"], "step_time", deployment=draft)
                except ConfigError as err:  # (a profile fitted for the target, say)
                    raise ConfigError(
                        "spec_decode.draft_model",
                        spec.draft_model,
                        f"its step time cannot be built for the draft model: {err}",
                    ) from None
                if run.sim.step_time_scale != 1.0:
                    model = ScaledStepTime(model, run.sim.step_time_scale)
                self._draft_step_times.append(model)
            elif spec.method == "mtp":  # one decoder layer of the target, on each GPU
                layers_per_gpu = math.ceil(target.model.num_layers / target.pp)
                weights = target.memory.weight_bytes_per_gpu / layers_per_gpu
                kv = target.memory.kv_bytes_per_token_per_gpu / layers_per_gpu
            self.drafter_kv_bytes_per_token_per_gpu.append(kv)
            targets.append(_with_drafter(target, weights, kv, run))
        self.placement = replace(placement, deployments=tuple(targets))
        self._num_engines = 0

    def step_time(self, model_id: int, inner: StepTimeModel) -> StepTimeModel:
        """Model ``model_id``'s step time with the verification width and the drafter."""
        spec = self.config
        drafter: StepTimeModel | None = None
        scale = 1.0
        if spec.method == "draft_model":
            drafter = self._draft_step_times[model_id]
        elif spec.method == "mtp":  # a pass: the target's step over its number of layers
            drafter, scale = inner, 1.0 / self.placement.deployments[model_id].model.num_layers
        return SpeculativeStepTime(
            inner, spec.num_draft_tokens, drafter, scale, draft_cost=spec.draft_cost
        )

    def attach(self, scheduler: Scheduler) -> None:
        """Make ``scheduler`` verify the drafts, with its own stream of draws (``spec_decode.N``
        for the N-th scheduler built: the same order every run)."""
        stream = rng.stream(self.seed, f"spec_decode.{self._num_engines}")
        self._num_engines += 1
        scheduler.speculate(DraftAcceptance(self.probabilities, stream))


def _draft_deployment(run: RunConfig, target: Deployment) -> Deployment:
    """The draft model on the target's GPUs, precisions and parallelism; a one-line error for
    a draft model that cannot draft for the target."""
    name = run.spec_decode.draft_model
    require(
        name is not None,
        "spec_decode.draft_model",
        name,
        "method=draft_model needs a model from configs/model/ to draft with (llama31_8b for"
        " llama31_70b), or choose spec_decode.method=mtp or ngram",
    )
    config = ModelConfig.from_config(
        load_option("model", name, "spec_decode.draft_model"), "spec_decode.draft_model"
    )
    draft, own = ModelSpec.from_config(config), target.model
    require(
        draft.vocab_size == own.vocab_size,
        "spec_decode.draft_model",
        name,
        f"its vocabulary ({draft.vocab_size:,} tokens) is not {own.short_name}'s"
        f" ({own.vocab_size:,}): a drafter must propose the target's tokens",
    )
    require(
        draft.num_params <= own.num_params,
        "spec_decode.draft_model",
        name,
        f"{draft.short_name} ({draft.num_params / 1e9:.1f}B parameters) is bigger than the"
        f" target {own.short_name} ({own.num_params / 1e9:.1f}B): drafting would cost more than"
        " it saves",
    )
    try:
        return build_deployment(run.model_copy(update={"model": config}))
    except ConfigError as err:
        raise ConfigError(
            "spec_decode.draft_model",
            name,
            f"cannot run on {own.short_name}'s GPUs ({target.gpu.name}, tp={target.tp}): "
            f"{err.field}={err.value!r}: {err.reason}",
        ) from None


def _with_drafter(
    target: Deployment, weights_per_gpu: float, kv_per_token_per_gpu: float, run: RunConfig
) -> Deployment:
    """``target`` with a drafter's weights and KV (per token, beside the target's) taken out of
    its KV memory: fewer blocks, each holding both caches of its tokens."""
    if (not weights_per_gpu and not kv_per_token_per_gpu) or run.kv.num_blocks is not None:
        return target
    plan = target.memory
    kv_free = plan.kv_free_bytes_per_gpu - weights_per_gpu
    per_block = plan.block_size * (plan.kv_bytes_per_token_per_gpu + kv_per_token_per_gpu)
    num_blocks = max(0, math.floor(kv_free / per_block))
    spec = run.spec_decode
    require(
        num_blocks >= 1,
        "spec_decode.draft_model" if spec.method == "draft_model" else "spec_decode.method",
        spec.draft_model if spec.method == "draft_model" else spec.method,
        f"the drafter's weights ({weights_per_gpu / 2**30:.2f} GiB per GPU) leave no KV block"
        f" of {target.model.short_name}'s {plan.kv_free_bytes_per_gpu / 2**30:.2f} GiB on"
        f" {target.gpu.name}: raise fleet.tp or choose a smaller drafter",
    )
    memory = replace(
        plan,
        kv_free_bytes_per_gpu=kv_free,
        num_blocks=num_blocks,
        kv_capacity_tokens=num_blocks * plan.block_size,
    )
    return replace(target, memory=memory)


def _speculative(model: Any) -> SpeculativeStepTime | None:
    """The speculative wrapper inside an engine's step-time model (wrappers hold ``inner``)."""
    while model is not None and not isinstance(model, SpeculativeStepTime):
        model = getattr(model, "inner", None)
    return model


def spec_decode_summary(spec: SpecDecodeConfig, replicas: Iterable[Any]) -> dict[str, Any]:
    """``{"spec_decode": {...}}`` for the summary when speculation was on (else ``{}``): the
    settings, the expected tokens per decode step from the acceptance model, the tokens the
    draws gave (``drawn_``: before a request's last step cut them to its output) and the tokens
    produced, per sequence per decode step, and the drafter's share of the priced step time,
    over the engines of ``replicas`` (anything with ``engines``, each with ``scheduler`` and
    ``step_time``)."""
    if not spec.enabled:
        return {}
    engines = [engine for replica in replicas for engine in replica.engines]
    draws = [e.scheduler.acceptance for e in engines if e.scheduler.acceptance is not None]
    models = {id(m): m for m in map(_speculative, (e.step_time for e in engines)) if m}
    steps = sum(a.sequence_steps for a in draws)
    step_s = sum(m.step_s for m in models.values())
    return {
        "spec_decode": {
            "num_draft_tokens": spec.num_draft_tokens,
            "method": spec.method,
            "draft_model": spec.draft_model if spec.method == "draft_model" else None,
            "draft_cost": spec.draft_cost,
            "acceptance_rate": spec.acceptance_rate,
            "expected_tokens_per_decode_step": expected_tokens_per_step(
                acceptance_probabilities(spec)
            ),
            "drawn_tokens_per_decode_step": (
                sum(a.drawn_tokens for a in draws) / steps if steps else None
            ),
            "tokens_per_decode_step": sum(a.tokens for a in draws) / steps if steps else None,
            "decode_sequence_steps": steps,
            "drafter_time_share": (
                sum(m.drafter_s for m in models.values()) / step_s if step_s else None
            ),
            # a step-time model of given figures (constant, linear) prices a draft model's
            # pass as the target's step: true when that is what the drafter cost here
            "draft_model_priced_like_target": spec.method == "draft_model"
            and spec.draft_cost is None
            and any(
                m.drafter is not None and not _prices_the_deployment(m.drafter)
                for m in models.values()
            ),
        }
    }


def _prices_the_deployment(model: StepTimeModel) -> bool:
    """Whether ``model`` (under any wrappers, which hold ``inner``) prices its own model."""
    while hasattr(model, "inner"):
        model = model.inner
    return model.prices_the_deployment
