"""A replica's serving process on the host: one serial queue for output tokens and new requests.

The GPU's steps are not all that stands between a client and its tokens. The serving process
(an API server on the host) detokenises and streams every output token, and takes in every new
request, on one event loop. Work waits there in the order it came. While tokens come faster
than one per ``token_s``, a backlog builds up: tokens reach their clients late, and new requests
reach the engine late. At high concurrency this host work, not the GPU, can set the pace (the
reason TRT-LLM's server has ``num_postprocess_workers`` and vLLM detokenises in a separate
process).

    a token made by a step ending at t is streamed at   max(busy, t) + k · token_s
                                                        (k = 1, 2, ... its place in the step)
    a request arriving at t reaches the engine at       max(busy, t)

``busy`` is when the queue's last piece of work ends. Taking in a request costs no host time
here: a request only waits behind the tokens already queued. A request's ``first_token_time_s`` and
``completion_time_s`` are when its client receives those tokens (the frontend stamps them; a
time at or after the horizon is left unstamped, since the client never saw it), and a
closed-loop client sends its next request then. ``frontend.token_s = 0`` (the default) is a host
that costs nothing: no queue is modelled, clients see tokens when the step ends and requests
reach the engine when they arrive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sim.engine.request import COMPLETED, Request


class Frontend:
    """The host queue of one replica (times in seconds)."""

    __slots__ = ("_stretch", "_stretch_streamed", "busy_until", "horizon_s", "token_s")

    def __init__(self, token_s: float, horizon_s: float | None = None) -> None:
        self.token_s = token_s
        self.horizon_s = math.inf if horizon_s is None else horizon_s
        self.busy_until = 0.0
        self._stretch: tuple[Any, list[Request]] | None = None
        self._stretch_streamed = 0

    def _queue(self, end_s: float, num_tokens: int) -> float:
        """Queue one step's ``num_tokens`` tokens; return when the queue starts on them."""
        start = max(self.busy_until, end_s)
        self.busy_until = start + num_tokens * self.token_s
        return start

    def stream_step(self, end_s: float, producers: Sequence[Request]) -> None:
        """Stream the tokens of a step that ended at ``end_s``, one per request in
        ``producers`` (in the step's order), and date each request's first and last tokens."""
        start = self._queue(end_s, len(producers))
        token_s, horizon_s = self.token_s, self.horizon_s
        for k, request in enumerate(producers, 1):
            seen_s = start + k * token_s
            if seen_s >= horizon_s:
                break  # this token and the ones queued behind it reach clients too late
            if request.num_generated == 1:
                request.first_token_time_s = seen_s
            if request.status == COMPLETED:
                request.completion_time_s = seen_s

    # -- decode stretches: many identical pure-decode steps priced as one event ------------

    def begin_stretch(self, end_times_s: Any, decodes: list[Request]) -> None:
        """A decode stretch starts: its steps end at ``end_times_s``, each making one token per
        request in ``decodes``. Their tokens are queued as the steps end (``catch_up``), with
        the same arithmetic as ``stream_step``, so the times are those of stepping one by one."""
        self._stretch = (end_times_s, decodes)
        self._stretch_streamed = 0

    def catch_up(self, num_steps_ended: int) -> None:
        """Queue the tokens of the stretch's steps that have ended by now (``busy_until`` is then
        what stepping one by one would have)."""
        assert self._stretch is not None  # only called during a stretch
        end_times_s, decodes = self._stretch
        for end_s in end_times_s[self._stretch_streamed : num_steps_ended]:
            self._queue(float(end_s), len(decodes))
        self._stretch_streamed = max(self._stretch_streamed, num_steps_ended)

    def end_stretch(self, num_steps: int) -> None:
        """The stretch ended after ``num_steps`` steps: stream the rest, dating the last step's
        tokens as ``stream_step`` does."""
        assert self._stretch is not None  # only called during a stretch
        end_times_s, decodes = self._stretch
        self.catch_up(num_steps - 1)
        self.stream_step(float(end_times_s[num_steps - 1]), decodes)
        self._stretch = None

    @property
    def stretch_end_times(self) -> Any:
        """The end times of the decode stretch in progress; None between stretches."""
        return None if self._stretch is None else self._stretch[0]
