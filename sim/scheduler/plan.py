"""What a scheduler hands the replica for one step.

A ``StepPlan`` names the requests that advance and by how many tokens, the requests it had to
preempt, and the step's *shape*: the four numbers every step-time model reads (GUIDE section 3,
the ``linear`` model):

- ``num_prefill_tokens`` (P): tokens computed for requests that are not decoding;
- ``num_decode_seqs`` (D): decoding sequences (one token each);
- ``prefill_attn`` (Ap): sum over prefill chunks of ``chunk × (context_before_chunk + chunk)``;
- ``decode_context`` (Ad): sum over decoding sequences of their context length (prompt plus the
  output tokens generated so far, the first included).

``num_decode_seqs`` and ``decode_context`` can exceed what ``decodes`` holds when a scheduler
computes padding (the ``static`` baseline keeps finished sequences in the batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.request import Request


@dataclass(slots=True)
class StepPlan:
    prefills: list[tuple[Request, int]] = field(default_factory=list)
    decodes: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_seqs: int = 0
    prefill_attn: int = 0
    decode_context: int = 0

    def add_prefill(self, request: Request, num_tokens: int) -> None:
        context_before = request.num_computed_tokens
        self.prefills.append((request, num_tokens))
        self.num_prefill_tokens += num_tokens
        self.prefill_attn += num_tokens * (context_before + num_tokens)

    def add_decode(self, request: Request) -> None:
        self.decodes.append(request)
        self.num_decode_seqs += 1
        self.decode_context += request.num_computed_tokens + 1

    @property
    def num_seqs(self) -> int:
        return len(self.prefills) + len(self.decodes)

    @property
    def is_empty(self) -> bool:
        return not self.prefills and not self.decodes

    @property
    def is_pure_decode(self) -> bool:
        return not self.prefills and not self.preempted and bool(self.decodes)
