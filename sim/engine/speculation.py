"""Speculative decoding inside one engine: how many drafts a step keeps, and what a step costs.

A drafter proposes K tokens for each decoding request. The target's next step verifies them: it
runs K + 1 query tokens per request (the last sampled token and the K drafts), keeps the
longest prefix of drafts it agrees with, and samples one token of its own after them (Leviathan
et al. 2023, "Fast Inference from Transformers via Speculative Decoding"; Chen et al. 2023). A
decode step therefore advances a request by 1 to K + 1 tokens, and its KV by as many: the KV of
rejected drafts is overwritten later.

Acceptance model (``DraftAcceptance``). Draft i (1..K) is kept with probability ``p_i`` given
drafts 1..i-1 were: one fraction for every position (i.i.d., Leviathan et al.'s model) or one
per position. With A the drafts kept, ``P(A >= i) = p_1 ... p_i`` and::

    E[tokens per step] = 1 + sum_i p_1 ... p_i   (= (1 - a^(K+1)) / (1 - a) for one rate a)

Each engine draws from its own seeded generator, one uniform per decoding request in the plan's
order, turned into drafts kept by the distribution's inverse (``P(A <= i)``, searched), in blocks
of ``DRAW_BLOCK`` (one numpy call per block, not per step), so runs repeat exactly. A request
never advances past its output length (its last step may keep fewer tokens than it drew).

Step price (``SpeculativeStepTime``, a wrapper around the run's step-time model):

- verification: the K drafts of each of the D decoding sequences are query tokens the step
  computes besides its decodes, so the model prices the shape with ``P + D*K`` prefill tokens and
  ``Ap + sum K*(context + K)`` prefill attention (each sequence's drafts attend its context,
  the decoded token included, and each other causally): every step-time model prices that;
- the drafter, after the verification as vLLM's proposer runs: a first pass over the step's own
  tokens (its prompt chunks and decodes), then K - 1 passes over the D decoding sequences, each
  attending one more token. Each pass is priced by a drafter model (a draft model's own step
  time on the same GPUs) scaled by a factor (1/num_layers for one-layer heads), less the
  model's host share of a step (``StepTimeModel.host_overhead_s``: scheduling, sampling,
  output handling), which the target's step pays once; or, with a
  fixed ``draft_cost`` c, K draft tokens cost ``K c`` times the target's pure-decode step of
  the same batch. An n-gram drafter costs nothing.

Left out: tree speculation (several candidate chains per step), drafts trimmed when the token
budget runs short (a decode here gets all K drafts verified or waits), the drafter catching up
on the tokens accepted in the last step beyond its first pass, the LM head's K extra rows per
sequence in the roofline's per-logit overhead, and the draft model's own batching limits. A
frontend (``frontend.token_s``) streams a request's tokens of one step as one message, as vLLM's
output processor sends them, so it charges ``token_s`` once per request per step, not per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from mypy_extensions import mypyc_attr

from sim.engine.request import COMPLETED, Request
from sim.engine.step_shape import StepShape
from sim.engine.step_time.base import StepTimeModel

DRAW_BLOCK = 4096
"""Acceptance draws made at once: a step draws a few dozen, and numpy's per-call cost would
otherwise be most of a speculating step's bookkeeping."""


def expected_tokens_per_step(probabilities: Sequence[float]) -> float:
    """Tokens a decode step yields on average per request: 1 + sum of P(A >= i), where
    ``probabilities[i-1]`` is draft i's chance given the drafts before it were kept."""
    expected, reach = 1.0, 1.0
    for p in probabilities:
        reach *= p
        expected += reach
    return expected


def tokens_per_step_pmf(probabilities: Sequence[float]) -> list[float]:
    """``P(a step yields n tokens)`` for n = 1 .. K + 1 (the acceptance model's distribution)."""
    pmf, reach = [], 1.0
    for p in probabilities:
        pmf.append(reach * (1.0 - p))
        reach *= p
    pmf.append(reach)
    return pmf


@mypyc_attr(allow_interpreted_subclasses=True)
class DraftAcceptance:
    """One engine's acceptance draws, and what they gave: ``sequence_steps`` decode steps of a
    sequence, ``drawn_tokens`` the tokens their draws allowed (1 + drafts kept) and
    ``tokens`` the tokens they produced (no more than each request had left)."""

    __slots__ = (
        "num_draft_tokens",
        "probabilities",
        "rng",
        "_cdf",
        "_kept",
        "_next",
        "sequence_steps",
        "drawn_tokens",
        "tokens",
    )

    def __init__(self, probabilities: Sequence[float], rng: np.random.Generator) -> None:
        assert probabilities, "speculative decoding drafts at least one token"
        assert all(0.0 <= p <= 1.0 for p in probabilities), f"not fractions: {probabilities}"
        self.num_draft_tokens = len(probabilities)
        self.probabilities = tuple(float(p) for p in probabilities)
        self.rng = rng
        # P(A <= i) for i = 0 .. K-1: a uniform u keeps as many drafts as these are <= u
        self._cdf = np.cumsum(tokens_per_step_pmf(self.probabilities))[:-1]
        self._kept: list[int] = []
        self._next = 0
        self.sequence_steps = 0
        self.drawn_tokens = 0
        self.tokens = 0

    def drafts_kept(self, num_seqs: int) -> list[int]:
        """How many drafts each of the next ``num_seqs`` sequences keeps, in order."""
        start, end = self._next, self._next + num_seqs
        if end > len(self._kept):  # the rest of this block, then new blocks
            uniforms = self.rng.random(max(DRAW_BLOCK, end - len(self._kept)))
            kept = np.searchsorted(self._cdf, uniforms, side="right").tolist()
            self._kept = self._kept[start:] + kept
            start, end = 0, num_seqs
        self._next = end
        return self._kept[start:end]

    def advance(self, decodes: list[Request], finished: list[Request]) -> int:
        """Apply a verification step to its ``decodes`` (in the plan's order): each advances
        1 + its drafts kept, at most to its output length; the ones that complete join
        ``finished``. Returns the output tokens they produced."""
        produced = 0
        drawn = 0
        for request, kept in zip(decodes, self.drafts_kept(len(decodes)), strict=True):
            drawn += 1 + kept
            num_tokens = min(1 + kept, request.output_tokens - request.num_generated)
            request.num_computed_tokens += num_tokens
            request.num_generated += num_tokens
            produced += num_tokens
            if request.num_generated == request.output_tokens:
                request.status = COMPLETED
                finished.append(request)
        self.sequence_steps += len(decodes)
        self.drawn_tokens += drawn
        self.tokens += produced
        return produced


class SpeculativeStepTime(StepTimeModel):
    """The run's step-time model (``inner``) with each step's verification width and drafter
    priced in (module docstring). ``drafter`` prices one draft pass, times ``drafter_scale``;
    ``draft_cost`` instead fixes a draft token at that fraction of the target's pure-decode
    step; neither: drafting is free. Keeps the seconds it priced (``step_s``) and the drafter's
    share of them (``drafter_s``) for the summary."""

    def __init__(
        self,
        inner: StepTimeModel,
        num_draft_tokens: int,
        drafter: StepTimeModel | None = None,
        drafter_scale: float = 1.0,
        draft_cost: float | None = None,
    ) -> None:
        assert num_draft_tokens >= 1, "speculative decoding drafts at least one token"
        self.inner = inner
        self.num_draft_tokens = num_draft_tokens
        self.drafter = drafter
        self.drafter_scale = drafter_scale
        self.draft_cost = draft_cost
        self.request_overhead_s = inner.request_overhead_s
        self.step_s = 0.0
        self.drafter_s = 0.0

    def verification(self, shape: StepShape) -> StepShape:
        """The shape the target computes: each decoding sequence's K drafts as query tokens."""
        k, d = self.num_draft_tokens, shape.num_decode_seqs
        return StepShape(
            shape.num_prefill_tokens + d * k,
            d,
            shape.prefill_attn + k * shape.decode_context + d * k * k,
            shape.decode_context,
            shape.host_loaded_tokens,
        )

    def drafting_s(self, shape: StepShape) -> float:
        """The drafter's seconds for a step of ``shape`` (before its verification width)."""
        k, d = self.num_draft_tokens, shape.num_decode_seqs
        if self.draft_cost is not None:
            if not d:
                return 0.0
            decode = StepShape(0, d, 0, shape.decode_context)
            return k * self.draft_cost * self.inner.step_time_s(decode)
        drafter = self.drafter
        if drafter is None:
            return 0.0
        seconds = _pass_s(drafter, shape)  # the first pass: the step's own tokens
        if d:
            context = shape.decode_context
            for j in range(1, k):  # then one pass per further draft, a token deeper each
                seconds += _pass_s(drafter, StepShape(0, d, 0, context + j * d))
        return seconds * self.drafter_scale

    def host_overhead_s(self, shape: StepShape) -> float:
        return self.inner.host_overhead_s(self.verification(shape))

    def step_time_s(self, shape: StepShape) -> float:
        drafting = self.drafting_s(shape)
        seconds = self.inner.step_time_s(self.verification(shape)) + drafting
        self.step_s += seconds
        self.drafter_s += drafting
        return seconds

    def decode_stretch_s(self, first: StepShape, context_growth: int, num_steps: int) -> Any:
        raise AssertionError(
            "speculative decoding steps one by one: a stretch would repeat one acceptance draw"
        )


def _pass_s(drafter: StepTimeModel, shape: StepShape) -> float:
    """One drafter pass over ``shape``: its step time less the engine's host share, which the
    step that runs it pays once (vLLM runs the proposer inside the target's engine step)."""
    return max(0.0, drafter.step_time_s(shape) - drafter.host_overhead_s(shape))
