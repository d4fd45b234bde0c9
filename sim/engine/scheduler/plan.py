"""What a scheduler hands the replica for one step.

A ``StepPlan`` names the requests that advance and by how many tokens and the requests it had
to preempt, and counts the step's work as it is built. ``shape()`` freezes those counts into the
``StepShape`` every step-time model reads (``sim.engine.step_shape``: P, D, Ap, Ad).

``num_decode_seqs`` and ``decode_context`` can exceed what ``decodes`` holds when a scheduler
computes padding (the ``static`` baseline keeps finished sequences in the batch).

With speculative decoding the counts stay the scheduler's (one token per decode, the drafts
apart): the engine's step-time wrapper, ``sim.engine.speculation.SpeculativeStepTime``, widens
each decode by its K drafts when it prices the step, so the step rows keep counting prompt tokens
as ``num_prefill_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from sim.engine.request import Request
from sim.engine.step_shape import StepShape


# __init__ written out: a dataclass's generated one is never compiled (the compiled build), and
# a plan is made every step; copyable there too (see sim.engine.scheduler.base.Scheduler)
@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass(slots=True, init=False)
class StepPlan:
    prefills: list[tuple[Request, int]]
    decodes: list[Request]
    preempted: list[Request]
    num_prefill_tokens: int
    num_decode_seqs: int
    prefill_attn: int
    decode_context: int
    host_loaded_tokens: int  # cached tokens the step's admissions copied from host memory
    # output tokens the decodes produced, known at the step's end (``on_step_end``): one per
    # decode, or 1 + the drafts each kept with speculative decoding
    num_decode_tokens: int

    def __init__(self) -> None:
        self.prefills = []
        self.decodes = []
        self.preempted = []
        self.num_prefill_tokens = 0
        self.num_decode_seqs = 0
        self.prefill_attn = 0
        self.decode_context = 0
        self.host_loaded_tokens = 0
        self.num_decode_tokens = 0

    def add_prefill(self, request: Request, num_tokens: int) -> None:
        context_before = request.num_computed_tokens
        self.prefills.append((request, num_tokens))
        self.num_prefill_tokens += num_tokens
        self.prefill_attn += num_tokens * (context_before + num_tokens)

    def add_decode(self, request: Request) -> None:
        self.decodes.append(request)
        self.num_decode_seqs += 1
        self.decode_context += request.num_computed_tokens + 1

    def shape(self) -> StepShape:
        """The step's work, as the step-time models see it."""
        return StepShape(
            self.num_prefill_tokens,
            self.num_decode_seqs,
            self.prefill_attn,
            self.decode_context,
            self.host_loaded_tokens,
        )

    @property
    def num_seqs(self) -> int:
        return len(self.prefills) + len(self.decodes)

    @property
    def is_empty(self) -> bool:
        return not self.prefills and not self.decodes

    @property
    def is_pure_decode(self) -> bool:
        return not self.prefills and not self.preempted and bool(self.decodes)
