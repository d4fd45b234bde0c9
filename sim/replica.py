"""One model replica as a SimPy process: plan a step, take its time, apply it, repeat.

    plan = scheduler.schedule(now)
    yield env.timeout(step_time(plan))
    scheduler.on_step_end(plan, now)

Only this module moves simulated time for a replica. A request that arrives during a step waits
for the step to end (an engine cannot change a batch in flight). An idle replica sleeps until a
request arrives. With a frontend (``sim.frontend``), requests reach the engine and tokens reach
clients through the host's queue.

Decode stretches. When the scheduler promises that the next ``k`` steps are identical pure
decodes (``decode_stretch_limit``), the replica prices all ``k`` at once and waits for the last
one's end in a single event. An arrival interrupts the wait: the replica finishes the step in
progress, applies the steps done so far, and plans again, exactly as stepping one by one would.
The step rows, token counts, KV use and timestamps are identical either way (a test proves it);
only the number of SimPy events changes.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import accumulate
from typing import Callable

import numpy as np
import simpy

from sim.frontend import Frontend
from sim.metrics import StepRecorder
from sim.request import REJECTED, Request
from sim.scheduler.base import Scheduler
from sim.scheduler.plan import StepPlan
from sim.simclock import ARRIVAL_PRIORITY, step_end_priority, timeout_at
from sim.step_time.base import StepTimeModel


class Replica:
    """A replica: its scheduler (which owns the KV cache), its step-time model, its process."""

    def __init__(self, env: simpy.Environment, replica_id: int, scheduler: Scheduler,
                 step_time: StepTimeModel, on_request_done: Callable[[Request, int], None],
                 fast_forward_decode: bool = True, horizon_s: float | None = None,
                 model_id: int = 0, frontend_token_s: float = 0.0):
        """``on_request_done(request, caller_priority)`` hears of each request that ends, when
        its client does; ``caller_priority`` is the priority of the event that tells it."""
        self.env = env
        self.replica_id = replica_id
        self.model_id = model_id
        self.priority = step_end_priority(replica_id)
        self.horizon_s = horizon_s
        self.scheduler = scheduler
        self.step_time = step_time
        self.steps = StepRecorder()
        self.on_request_done = on_request_done
        self.fast_forward_decode = fast_forward_decode
        self.frontend = Frontend(frontend_token_s) if frontend_token_s > 0 else None
        # requests routed here whose clients have not heard the end: waiting in the frontend,
        # at the scheduler, or with tokens still to stream
        self.num_outstanding = 0
        self.committed_tokens = 0
        self._wakeup: simpy.Event | None = None
        self._interruptible = False
        self.process = env.process(self._run())

    def add(self, request: Request, caller_priority: int) -> None:
        """Take a routed request: it reaches the engine now, or when the frontend's queue
        clears.

        ``caller_priority`` is the priority of the event being processed (an arrival, or some
        replica's step end): it says whether this replica's own step ending right now has
        already been processed, which a decode stretch needs to know when interrupted.
        """
        request.replica_id = self.replica_id
        self.num_outstanding += 1
        self.committed_tokens += request.prompt_tokens + request.output_tokens
        frontend = self.frontend
        if frontend is not None:
            end_times = frontend.stretch_end_times
            if end_times is not None:
                # the steps of a decode stretch that have ended by now have queued their tokens
                frontend.catch_up(self._steps_ended(end_times, caller_priority))
            if frontend.busy_until > self.env.now:
                timeout_at(self.env, frontend.busy_until).callbacks.append(
                    lambda _event: self._enter(request, ARRIVAL_PRIORITY))
                return
        self._enter(request, caller_priority)

    def _steps_ended(self, end_times, caller_priority: int) -> int:
        """How many of a stretch's steps have ended by now, as seen from an event of
        ``caller_priority``: a step ending exactly now has ended when this replica's step ends
        rank before that event."""
        if caller_priority > self.priority:
            return bisect_right(end_times, self.env.now)
        return bisect_left(end_times, self.env.now)

    def _enter(self, request: Request, caller_priority: int) -> None:
        """Queue a request at the engine now, or reject it if it can never run here."""
        if not self._accept(request, self.scheduler, caller_priority):
            return
        if self._wakeup is not None:
            wakeup, self._wakeup = self._wakeup, None
            wakeup.succeed()
        elif self._interruptible:
            self._interruptible = False
            self.process.interrupt(caller_priority)

    def _accept(self, request: Request, scheduler: Scheduler, caller_priority: int) -> bool:
        """Queue ``request`` at ``scheduler``, or reject it (False) if it can never run."""
        if scheduler.rejection_reason(request) is not None:
            request.status = REJECTED
            self._forget(request)
            self.on_request_done(request, caller_priority)
            return False
        scheduler.add(request)
        return True

    def _forget(self, request: Request) -> None:
        self.num_outstanding -= 1
        self.committed_tokens -= request.prompt_tokens + request.output_tokens

    @property
    def recorders(self) -> list[tuple[int, StepRecorder]]:
        """The step rows of each model this replica serves, by model id."""
        return [(self.model_id, self.steps)]

    def _done(self, finished: list[Request]) -> None:
        """Requests that completed in the step that just ended; their clients hear of it when
        the last token is streamed (at once without a frontend)."""
        env = self.env
        for request in finished:
            if request.completion_time_s > env.now:
                timeout_at(env, request.completion_time_s).callbacks.append(
                    lambda _event, r=request: self._client_heard(r, ARRIVAL_PRIORITY))
            else:
                self._client_heard(request, self.priority)

    def _client_heard(self, request: Request, caller_priority: int) -> None:
        # outstanding until then, as a load balancer counts an open response stream
        self._forget(request)
        self.on_request_done(request, caller_priority)

    def _end_step(self, scheduler: Scheduler, plan: StepPlan) -> list[Request]:
        """Apply the step that just ended; the frontend (if any) streams the tokens it made,
        in the step's order. Returns the requests that completed."""
        now = self.env.now
        if self.frontend is None:
            return scheduler.on_step_end(plan, now)
        sampled_before = [request.num_generated for request, _ in plan.prefills]
        finished = scheduler.on_step_end(plan, now)
        producers = [request for (request, _), before in zip(plan.prefills, sampled_before)
                     if request.num_generated > before]
        producers += plan.decodes
        self.frontend.stream_step(now, producers)
        return finished

    def _run(self):
        env = self.env
        scheduler = self.scheduler
        step_time_s = self.step_time.step_time_s
        kv = scheduler.kv
        steps = self.steps
        rid = self.replica_id
        while True:
            if not scheduler.has_work:
                self._wakeup = env.event()
                yield self._wakeup
                continue
            start = env.now
            plan = scheduler.schedule(start)
            assert not plan.is_empty, (
                f"replica {rid}: scheduler planned nothing with {scheduler.num_outstanding} "
                "requests outstanding")
            for request, _ in plan.prefills:
                if request.first_scheduled_time_s is None:
                    request.first_scheduled_time_s = start
            num_steps = 1
            if self.fast_forward_decode and plan.is_pure_decode:
                num_steps = scheduler.decode_stretch_limit(plan)
            if num_steps == 1:
                duration = step_time_s(plan.num_prefill_tokens, plan.num_decode_seqs,
                                       plan.prefill_attn, plan.decode_context)
                blocks_used = kv.num_used_blocks
                yield timeout_at(env, start + duration, self.priority)
                steps.add(start, duration, plan.num_prefill_tokens, len(plan.decodes),
                          plan.num_seqs, blocks_used)
                if self.frontend is None:  # the hot path, without a call
                    finished = scheduler.on_step_end(plan, env.now)
                else:
                    finished = self._end_step(scheduler, plan)
            else:
                finished = yield from self._decode_stretch(plan, num_steps)
            if finished:
                self._done(finished)

    def _decode_stretch(self, plan, num_steps: int):
        env = self.env
        start = env.now
        durations = self.step_time.decode_stretch_s(plan.num_decode_seqs, plan.decode_context,
                                                    len(plan.decodes), num_steps)
        # Step end times: the same additions, in the same order, as stepping one by one
        # (numpy's cumulative sum adds sequentially, left to right).
        if isinstance(durations, np.ndarray):
            end_times = np.cumsum(np.concatenate(([start], durations)))[1:]
        else:
            end_times = list(accumulate(durations, initial=start))[1:]
        if self.horizon_s is not None:
            # Steps ending at or after the horizon never end (as when stepping one by one).
            num_steps = max(1, min(num_steps, bisect_left(end_times, self.horizon_s)))
        self._interruptible = True
        if self.frontend is not None:
            self.frontend.begin_stretch(end_times, plan.decodes)
        try:
            yield timeout_at(env, float(end_times[num_steps - 1]), self.priority)
        except simpy.Interrupt as interrupt:
            # Something arrived: finish the step in progress, then plan again. If a step ends
            # exactly now, stepping one by one would have ended it before the arrival when
            # the arrival's event ranks after this replica's step ends.
            num_steps = min(num_steps, self._steps_ended(end_times, interrupt.cause) + 1)
            yield timeout_at(env, float(end_times[num_steps - 1]), self.priority)
        self._interruptible = False
        finished, blocks_used = self.scheduler.advance_decodes(plan, num_steps,
                                                               float(end_times[num_steps - 1]))
        if self.frontend is not None:
            self.frontend.end_stretch(num_steps)
        self.steps.add_decode_stretch(start, durations[:num_steps], end_times[:num_steps],
                                      len(plan.decodes), blocks_used)
        return finished
