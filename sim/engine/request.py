"""A request and its progress through a replica.

There is no prefill phase nor decode phase in the bookkeeping (vLLM v1's central idea): a request
has ``num_tokens`` known tokens (its prompt plus every output token generated so far) and
``num_computed_tokens`` of them have their KV in the cache. A step assigns a request some tokens
to compute; when the computed tokens catch up with the known tokens, the model samples one new
output token. Prefill is "many tokens to catch up", decode is "one token to catch up", and a
request preempted by recompute simply drops back to zero computed tokens.

A recomputed request prefills every token but its last generated one, then decodes that one to
sample the next. That is the same work as vLLM's recompute (which prefills them all and samples
from the prefill), split so that every output token after the first comes from a decode step,
which keeps a step's ``num_decode_tokens`` equal to the output tokens it produced after the
first ones.

With speculative decoding (``sim.engine.speculation``) a decode also computes K drafts, and at
the step's end the request keeps 1 + the drafts accepted: its computed and generated tokens grow
together by that many (never past ``output_tokens``), so ``is_decoding`` still holds, and the
step's ``num_decode_tokens`` counts those tokens.

A scheduler advances a request and reports which requests sampled their first token and which
finished; it never writes the times a client sees. The replica (or its frontend, which streams
tokens later) stamps ``first_token_time_s`` and ``completion_time_s``, once each.

What it leaves out: the content of the tokens (only counts matter, and, for a prefix cache,
keys for the prompt's blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

from mypy_extensions import mypyc_attr

WAITING = "waiting"
RUNNING = "running"
COMPLETED = "completed"
REJECTED = "rejected"
UNFINISHED = "unfinished"
TRANSFERRING = "transferring"  # prefilled, its KV on the way to a decode replica (disaggregation)
FAILED = "failed"  # lost with the replica it was on (sim.fleet.faults), ``fail_reason`` says why
ENDED_UNSERVED = (REJECTED, FAILED)  # the ways a request ends without a completion time


# copyable in the compiled build too (see sim.engine.scheduler.base.Scheduler)
@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass(slots=True, eq=False, init=False)
class Request:
    """One inference request. Identity is the object (``eq=False``) so requests hash fast."""

    request_id: int
    arrival_time_s: float
    prompt_tokens: int
    output_tokens: int
    replica_id: int | None
    """The replica the router sent the request to (None until routed)."""
    model_id: int
    """Which of the fleet's models the request asks for (see ``sim.catalog.placement``)."""
    status: str
    num_generated: int
    """Output tokens sampled so far (the first one comes from the step that ends the prefill)."""
    num_computed_tokens: int
    """Tokens whose KV is in the replica's cache."""
    kv_slots: int
    """Tokens the KV blocks this request holds can take (blocks x block size). The KV cache
    owns the blocks and keeps this mirror of their count, so that the hottest check of a
    scheduler ("room for one more token?") is an attribute read, not a call."""
    first_scheduled_time_s: float | None
    """When the request first got tokens in a step (the end of its queueing delay)."""
    first_token_time_s: float | None
    """When the client received the first output token (stamped once, by the replica or its
    frontend; None if it never did before the horizon)."""
    completion_time_s: float | None
    """When the client received the last output token (stamped like ``first_token_time_s``)."""
    num_preemptions: int
    reject_reason: str | None
    """Why the engine refused the request (``sim.engine.scheduler.base.REFUSALS``), if it did."""
    prefix_groups: list[tuple[int, int]] | None
    """The prompt's full KV blocks as (key, count) groups of consecutive blocks, a key naming
    the group's content and everything before it (what a prefix cache knows blocks by,
    ``sim.engine.prefix_cache``; ``sim.workload.prefixes``); None: content unknown."""
    cached_prompt_tokens: int
    """Prompt tokens found in the prefix cache when the request was first admitted."""
    host_cached_prompt_tokens: int
    """Those of them copied back from host memory (``kv.cpu_offload_gib``)."""
    session_id: int | None
    """The conversation the request is a turn of (``sim.workload.sessions``); None: none."""
    turn: int
    """Which turn of its session it is, from 0."""
    last_turn: bool
    """Whether no turn of its session follows it."""
    prefill_replica_id: int | None
    """With a disaggregated fleet (``sim.fleet.disaggregation``), the replica that prefilled the
    request; ``replica_id`` is then its decode replica once one is chosen."""
    transfer_start_s: float | None
    """When its KV began to move to the decode replica (room there, and the link, free)."""
    transfer_end_s: float | None
    """When the KV had arrived (None: not within the run)."""
    retries: int
    """Times the request was sent again after the replica it was on went (``sim.fleet.faults``)."""
    retry_lost_s: float
    """Seconds from its arrival to its last loss: the time thrown away with those replicas."""
    fail_reason: str | None
    """Why it failed (status ``failed``): the cause of the replica's loss."""

    def __init__(
        self,
        request_id: int,
        arrival_time_s: float,
        prompt_tokens: int,
        output_tokens: int,
        replica_id: int | None = None,
        model_id: int = 0,
    ) -> None:
        # Written out rather than generated: a dataclass's __init__ is never compiled (the
        # compiled build, setup.py), and a request is made per arrival. Every other field
        # starts here.
        self.request_id = request_id
        self.arrival_time_s = arrival_time_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.replica_id = replica_id
        self.model_id = model_id
        self.status = WAITING
        self.num_generated = 0
        self.num_computed_tokens = 0
        self.kv_slots = 0
        self.first_scheduled_time_s = None
        self.first_token_time_s = None
        self.completion_time_s = None
        self.num_preemptions = 0
        self.reject_reason = None
        self.prefix_groups = None
        self.cached_prompt_tokens = 0
        self.host_cached_prompt_tokens = 0
        self.session_id = None
        self.turn = 0
        self.last_turn = True
        self.prefill_replica_id = None
        self.transfer_start_s = None
        self.transfer_end_s = None
        self.retries = 0
        self.retry_lost_s = 0.0
        self.fail_reason = None

    @property
    def num_tokens(self) -> int:
        """Tokens known so far: the prompt and every output token generated."""
        return self.prompt_tokens + self.num_generated

    @property
    def num_uncomputed_tokens(self) -> int:
        """Tokens the next step should compute for this request: the rest of the prompt, one
        token for a decode, or (after a preemption) the tokens before the last generated one."""
        missing = self.prompt_tokens + self.num_generated - self.num_computed_tokens
        if self.num_generated and missing > 1:
            return missing - 1  # recompute up to, not including, the last generated token
        return missing

    @property
    def is_decoding(self) -> bool:
        """True when one computed token away from the next output token, after the first."""
        return self.num_generated > 0 and self.num_computed_tokens == self.num_tokens - 1
