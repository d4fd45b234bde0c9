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

``busy`` is when the queue's last piece of work ends. A request's ``first_token_time_s`` and
``completion_time_s`` are when its client receives those tokens, and a closed-loop client sends
its next request then. ``frontend.token_s = 0`` (the default) leaves the frontend out: clients
see tokens when the step ends and requests reach the engine when they arrive.
"""

from __future__ import annotations

from sim.request import COMPLETED, Request


class Frontend:
    """The host queue of one replica (times in seconds)."""

    __slots__ = ("busy_until", "token_s")

    def __init__(self, token_s: float):
        self.token_s = token_s
        self.busy_until = 0.0

    def _queue(self, end_s: float, num_tokens: int) -> float:
        """Queue one step's ``num_tokens`` tokens; return when the queue starts on them."""
        start = max(self.busy_until, end_s)
        self.busy_until = start + num_tokens * self.token_s
        return start

    def stream_step(self, end_s: float, producers: list[Request]) -> None:
        """Stream the tokens of a step that ended at ``end_s``, one per request in
        ``producers`` (in the step's order), and date each request's first and last tokens."""
        start = self._queue(end_s, len(producers))
        token_s = self.token_s
        for k, request in enumerate(producers, 1):
            if request.num_generated == 1:
                request.first_token_time_s = start + k * token_s
            if request.status == COMPLETED:
                request.completion_time_s = start + k * token_s

    def stream_decode_stretch(self, end_times_s, num_steps: int,
                              decodes: list[Request]) -> None:
        """``stream_step`` for ``num_steps`` identical pure-decode steps ending at
        ``end_times_s``: the same arithmetic, step by step, so the times are identical."""
        for end_s in end_times_s[:num_steps - 1]:
            self._queue(float(end_s), len(decodes))
        self.stream_step(float(end_times_s[num_steps - 1]), decodes)
