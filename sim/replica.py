"""One model replica as a SimPy process: plan a step, take its time, apply it, repeat.

    plan = scheduler.schedule(now)
    yield env.timeout(step_time(plan))
    scheduler.on_step_end(plan, now)

Only this module moves simulated time for a replica. A request that arrives during a step waits
for the step to end (an engine cannot change a batch in flight). An idle replica sleeps until a
request arrives.

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

from sim.metrics import StepRecorder
from sim.request import REJECTED, Request
from sim.scheduler.base import Scheduler
from sim.simclock import step_end_priority, timeout_at
from sim.step_time.base import StepTimeModel


class Replica:
    """A replica: its scheduler (which owns the KV cache), its step-time model, its process."""

    def __init__(self, env: simpy.Environment, replica_id: int, scheduler: Scheduler,
                 step_time: StepTimeModel, on_request_done: Callable[[Request], None],
                 fast_forward_decode: bool = True, horizon_s: float | None = None,
                 model_id: int = 0):
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
        self.num_outstanding = 0
        self.committed_tokens = 0
        self._wakeup: simpy.Event | None = None
        self._interruptible = False
        self.process = env.process(self._run())

    def add(self, request: Request, caller_priority: int) -> None:
        """Accept a routed request now, or reject it if it can never run here.

        ``caller_priority`` is the priority of the event being processed (an arrival, or some
        replica's step end): it says whether this replica's own step ending right now has
        already been processed, which a decode stretch needs to know when interrupted.
        """
        if not self._accept(request, self.scheduler):
            return
        if self._wakeup is not None:
            wakeup, self._wakeup = self._wakeup, None
            wakeup.succeed()
        elif self._interruptible:
            self._interruptible = False
            self.process.interrupt(caller_priority)

    def _accept(self, request: Request, scheduler: Scheduler) -> bool:
        """Queue ``request`` at ``scheduler``, or reject it (False) if it can never run."""
        request.replica_id = self.replica_id
        if scheduler.rejection_reason(request) is not None:
            request.status = REJECTED
            self.on_request_done(request)
            return False
        scheduler.add(request)
        self.num_outstanding += 1
        self.committed_tokens += request.prompt_tokens + request.output_tokens
        return True

    @property
    def recorders(self) -> list[tuple[int, StepRecorder]]:
        """The step rows of each model this replica serves, by model id."""
        return [(self.model_id, self.steps)]

    def _done(self, finished: list[Request]) -> None:
        for request in finished:
            self.num_outstanding -= 1
            self.committed_tokens -= request.prompt_tokens + request.output_tokens
            self.on_request_done(request)

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
                finished = scheduler.on_step_end(plan, env.now)
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
        try:
            yield timeout_at(env, float(end_times[num_steps - 1]), self.priority)
        except simpy.Interrupt as interrupt:
            # Something arrived: finish the step in progress, then plan again. If a step ends
            # exactly now, stepping one by one would have ended it before the arrival when
            # the arrival's event ranks after this replica's step ends.
            now = env.now
            if interrupt.cause > self.priority:
                num_steps = min(num_steps, bisect_right(end_times, now) + 1)
            else:
                num_steps = min(num_steps, bisect_left(end_times, now) + 1)
            yield timeout_at(env, float(end_times[num_steps - 1]), self.priority)
        self._interruptible = False
        finished, blocks_used = self.scheduler.advance_decodes(plan, num_steps,
                                                               float(end_times[num_steps - 1]))
        self.steps.add_decode_stretch(start, durations[:num_steps], end_times[:num_steps],
                                      len(plan.decodes), blocks_used)
        return finished
