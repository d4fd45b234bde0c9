"""A request and its progress through a replica.

There is no prefill phase nor decode phase in the bookkeeping (vLLM v1's central idea): a request
has ``num_tokens`` known tokens (its prompt plus every output token generated so far) and
``num_computed_tokens`` of them have their KV in the cache. A step assigns a request some tokens
to compute; when the computed tokens catch up with the known tokens, the model samples one new
output token. Prefill is "many tokens to catch up", decode is "one token to catch up", and a
request preempted by recompute simply drops back to zero computed tokens.

What it leaves out: prefix sharing between requests, speculative decoding, and the content of
the tokens (only counts matter).
"""

from __future__ import annotations

from dataclasses import dataclass

WAITING = "waiting"
RUNNING = "running"
COMPLETED = "completed"
REJECTED = "rejected"
UNFINISHED = "unfinished"


@dataclass(slots=True, eq=False)
class Request:
    """One inference request. Identity is the object (``eq=False``) so requests hash fast."""

    request_id: int
    arrival_time_s: float
    prompt_tokens: int
    output_tokens: int
    replica_id: int = -1
    status: str = WAITING
    num_generated: int = 0
    """Output tokens sampled so far (the first one comes from the step that ends the prefill)."""
    num_computed_tokens: int = 0
    """Tokens whose KV is in the replica's cache."""
    num_blocks: int = 0
    """KV blocks this request holds; only the KV cache changes it."""
    first_scheduled_time_s: float | None = None
    """When the request first got tokens in a step (the end of its queueing delay)."""
    first_token_time_s: float | None = None
    completion_time_s: float | None = None
    num_preemptions: int = 0

    @property
    def num_tokens(self) -> int:
        """Tokens known so far: the prompt and every output token generated."""
        return self.prompt_tokens + self.num_generated

    @property
    def num_uncomputed_tokens(self) -> int:
        """Tokens still to push through the model before the next output token is sampled."""
        return self.prompt_tokens + self.num_generated - self.num_computed_tokens

    @property
    def remaining_output_tokens(self) -> int:
        return self.output_tokens - self.num_generated

    @property
    def is_decoding(self) -> bool:
        """True when one computed token away from the next output token, after the first."""
        return self.num_generated > 0 and self.num_computed_tokens == self.num_tokens - 1
