"""The shape of one engine step: the only thing a step-time model is allowed to see.

A scheduler decides who advances; the step's cost depends only on how much work that is, never on
which requests they were, on the clock or on global state. Four numbers describe the work
(the ``linear`` model's, docs/reference/config.md):

- ``num_prefill_tokens`` (P): tokens computed for requests that are not decoding (prompt chunks,
  and the recompute of a preempted request);
- ``num_decode_seqs`` (D): decoding sequences, one token each;
- ``prefill_attn`` (Ap): the sum over prefill chunks of ``chunk × (context_before_chunk +
  chunk)``, where the context before a chunk is the request's tokens already computed;
- ``decode_context`` (Ad): the sum over decoding sequences of their context length (prompt plus
  the output tokens generated so far, the first included).

A fifth, ``host_loaded_tokens``, counts cached KV tokens a prefix cache's host tier copies back
to the GPU before the step (``kv.cpu_offload_gib``): a transfer, priced by
``sim.engine.step_time.base.HostLoadStepTime``, not by the models.

Worked example: a prefill of 2 prompts of 8 tokens is P=16, D=0, Ap=2·8·(0+8)=128, Ad=0; a
decode of 3 sequences with 10 tokens computed each is P=0, D=3, Ap=0, Ad=3·11=33.

The same names are the columns of the per-step CSV that ``fleetcast profile`` writes and
``fleetcast calibrate --steps`` reads (``STEP_SHAPE_COLUMNS``), so a measured step and a
simulated one are described alike. New terms (cached prompt tokens, KV bytes transferred) join
as fields with a default of 0: models that do not price them are unaffected, and a per-step CSV
written before them still reads (its missing columns are 0).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields


# Not frozen, though nothing changes a shape once made: a frozen dataclass's __init__ sets each
# field through object.__setattr__, and the one written here is compiled with the loop in the
# compiled build (a dataclass's generated methods never are), for a shape made every step.
# Still hashable by value, as before (a model may memoise per shape).
@dataclass(slots=True, init=False, unsafe_hash=True)
class StepShape:
    """How much work one engine step does (token counts; see the module docstring)."""

    num_prefill_tokens: int
    num_decode_seqs: int
    prefill_attn: int
    decode_context: int
    # cached KV tokens copied from host memory before the step (a prefix cache's second tier,
    # ``kv.cpu_offload_gib``); not computed, so in none of the counts above
    host_loaded_tokens: int = 0

    def __init__(
        self,
        num_prefill_tokens: int,
        num_decode_seqs: int,
        prefill_attn: int,
        decode_context: int,
        host_loaded_tokens: int = 0,
    ) -> None:
        self.num_prefill_tokens = num_prefill_tokens
        self.num_decode_seqs = num_decode_seqs
        self.prefill_attn = prefill_attn
        self.decode_context = decode_context
        self.host_loaded_tokens = host_loaded_tokens

    @property
    def num_tokens(self) -> int:
        """Tokens the step's GEMMs process: every prefill token plus one per decode."""
        return self.num_prefill_tokens + self.num_decode_seqs


STEP_SHAPE_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(StepShape))
"""The per-step CSV's shape columns, in order (the fields of ``StepShape``)."""
REQUIRED_SHAPE_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(StepShape) if f.default is MISSING
)
"""The shape columns every per-step CSV has (the fields without a default)."""
