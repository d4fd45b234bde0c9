"""One replica as a SimPy process: plan a step, take its time, apply it, repeat.

    plan = scheduler.schedule()
    yield step_time.step_time_s(plan.shape())
    scheduler.on_step_end(plan)

Only this module moves simulated time for a replica. A replica runs one or more *engines*, one
per model it serves (``sim.catalog.placement``): a GPU shared by two models takes their steps
in turns, round robin among the engines with work, so a busy model slows the other down. A
request that arrives during a step waits for the step to end (an engine cannot change a batch
in flight). An idle replica sleeps until a request arrives.

The replica is the one writer of the times a client sees: the scheduler reports which requests
sampled their first token and which finished, and the replica stamps ``first_token_time_s`` and
``completion_time_s`` at the step's end, or hands the tokens to its frontend (``sim.fleet.
frontend``), which stamps them when they are streamed. A time at or after the horizon is never
stamped: the client never saw it.

Decode stretches. When the scheduler promises that the next ``k`` steps are identical pure
decodes (``decode_stretch_limit``), the replica prices all ``k`` at once and waits for the last
one's end in a single event. An arrival cuts the stretch short: the replica finishes the step in
progress, applies the steps done so far, and plans again, exactly as stepping one by one would
(the replica's wait moves to that step's end; no SimPy interrupt).
The step rows, token counts, KV use and timestamps are identical either way (a test proves it);
only the number of SimPy events changes. A replica of several engines never uses stretches: a
stretch would hold the GPU for one model while the other waits, which is not how turns go.

Left out: running two models' kernels concurrently (MPS, MIG) and any cost of switching.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate
from typing import Any

import numpy as np
import simpy

from sim.engine.request import REJECTED, TRANSFERRING, Request
from sim.engine.scheduler.base import Scheduler
from sim.engine.scheduler.plan import StepPlan
from sim.engine.step_time.base import StepTimeModel
from sim.fleet.frontend import Frontend
from sim.fleet.simclock import (
    AFTER_STEP_ENDS_PRIORITY,
    ARRIVAL_PRIORITY,
    step_end_priority,
    timeout_at,
    wait_instead,
)
from sim.output.metrics import StepRecorder


def _ended_by_interrupt(process: simpy.Process) -> None:
    """A stopped replica's process ended by the interrupt it was meant to end by: not an
    error of the run (SimPy raises a process's uncaught exception unless it is defused)."""
    process.defused = True


@dataclass(slots=True, eq=False)
class Engine:
    """What serves one model on a replica: its scheduler (which owns its KV cache), its
    step-time model and the rows of its steps."""

    model_id: int
    scheduler: Scheduler
    step_time: StepTimeModel
    steps: StepRecorder = field(default_factory=StepRecorder)


class Replica:
    """A replica: its engines, its optional frontend, its process (started by ``start``)."""

    def __init__(
        self,
        env: simpy.Environment,
        replica_id: int,
        engines: list[Engine],
        on_request_done: Callable[[Request, int], None],
        *,
        fast_forward_decode: bool = True,
        horizon_s: float | None = None,
        frontend_token_s: float = 0.0,
    ) -> None:
        """``on_request_done(request, caller_priority)`` hears of each request that ends, when
        its client does; ``caller_priority`` is the priority of the event that tells it.
        ``frontend_token_s`` > 0 gives the replica a frontend."""
        assert engines, "a replica serves at least one model"
        self.env = env
        self.replica_id = replica_id
        self.engines = engines
        self._by_model = {engine.model_id: engine for engine in engines}
        self.priority = step_end_priority(replica_id)
        self.horizon_s = horizon_s
        self.on_request_done = on_request_done
        self.fast_forward_decode = fast_forward_decode and len(engines) == 1
        self.frontend = Frontend(frontend_token_s, horizon_s) if frontend_token_s > 0 else None
        # requests routed here whose clients have not heard the end: waiting in the frontend,
        # at a scheduler, or with tokens still to stream
        self.num_outstanding = 0
        self.committed_tokens = 0
        self.num_routed = 0  # requests the router has sent here so far
        self._wakeup: simpy.Event | None = None
        # requests released by a step's end at this instant, to reach together after it
        self._released_now: list[Request] = []
        # the decode stretch being waited on: its steps' end times (None when there is none,
        # or it was cut already) and how many of its steps will run
        self._stretch_end_times: Any = None
        self._stretch_steps = 0
        # the stretch in flight, cut or not (None between stretches): its decodes and step
        # end times, for the KV it has grown but not yet applied (``unapplied_kv_blocks``)
        self._stretch_decodes: list[Request] | None = None
        self._stretch_times: Any = None
        # KV blocks taken (or given back) from outside the stretch while it ran: a transfer's
        # room kept or its KV arrived (sim.fleet.disaggregation), which the stretch's own
        # step rows, planned before, must not count
        self._outside_blocks = 0
        self.process: simpy.Process | None = None
        # disaggregation (sim.fleet.disaggregation): a prefill replica hands each prefilled
        # request to ``on_handoff`` (``join_prefill_pool``); a decode replica with transfers
        # waiting for room calls ``on_room`` after each step (``join_decode_pool``)
        self.on_handoff: Callable[[Request, Replica], None] | None = None
        self.on_room: Callable[[Replica], object] | None = None
        self.transfers_waiting = 0
        # busy time (steps back to back while there is work), for an autoscaler's utilisation:
        # the busy periods that ended, and the start of the one under way
        self._busy_before_s = 0.0
        self._busy_since_s: float | None = None
        # requests in flight integrated over time, up to the last change (its time)
        self._load_s = 0.0
        self._load_since_s = env.now
        # times the replica went down (``stop``): what a request's pending arrival here checks
        self.lives = 0

    def start(self) -> None:
        """Start the replica's process (the cluster does, once every replica exists)."""
        assert self.process is None, f"replica {self.replica_id} started twice"
        self.process = self.env.process(self._run())

    def stop(self) -> None:
        """The replica goes down now (``sim.fleet.faults``): its process ends at once (the step
        in progress never ends, so no step is taken or logged while it is down), and it holds
        nothing from now on; its requests are the caller's to retry or fail. Steps one by one
        only (a decode stretch's ended steps would not be applied)."""
        assert not self.fast_forward_decode, "a replica that may go down steps one by one"
        process = self.process
        if process is not None:
            process.interrupt("replica down")
            process.callbacks.append(_ended_by_interrupt)
            self.process = None
        self.lives += 1
        self._wakeup = None
        self._released_now = []
        if self._busy_since_s is not None:
            self._busy_before_s += self.env.now - self._busy_since_s
            self._busy_since_s = None
        self._count_load()
        self.num_outstanding = 0
        self.committed_tokens = 0

    def restart(self) -> None:
        """The replica is back (repaired, or replaced), with the engines it was given while
        down (fresh ones: empty queues, an empty KV cache)."""
        assert self.process is None, f"replica {self.replica_id} restarted while up"
        self._by_model = {engine.model_id: engine for engine in self.engines}
        self.start()

    def _count_load(self) -> None:
        """Add the requests in flight since the last change to their time integral."""
        now = self.env.now
        self._load_s += self.num_outstanding * (now - self._load_since_s)
        self._load_since_s = now

    def load_s(self) -> float:
        """Requests in flight integrated over time so far (request-seconds): over an interval,
        its change divided by the interval is the mean concurrency."""
        return self._load_s + self.num_outstanding * (self.env.now - self._load_since_s)

    def busy_time_s(self) -> float:
        """Seconds this replica has had work so far (up to now)."""
        since = self._busy_since_s
        return self._busy_before_s + (0.0 if since is None else self.env.now - since)

    # -- requests in -----------------------------------------------------------------------

    def cached_prompt_tokens(self, request: Request) -> int:
        """Prompt tokens of the new ``request`` this replica's prefix cache holds now (what a
        cache-aware router weighs; 0 without a prefix cache)."""
        return self._by_model[request.model_id].scheduler.kv.cached_tokens(request)

    def add(self, request: Request, caller_priority: int) -> None:
        """Take a routed request: it reaches its engine now (after the engine's
        ``request_overhead_s``), or when the frontend's queue clears.

        ``caller_priority`` is the priority of the event being processed (an arrival, or some
        replica's step end): it says whether this replica's own step ending right now has
        already been processed, which a decode stretch needs to know when interrupted.
        """
        self.expect(request)
        overhead = self._by_model[request.model_id].step_time.request_overhead_s
        if overhead > 0:  # the server's per-request work before the engine sees it
            timeout_at(self.env, self.env.now + overhead).callbacks.append(
                partial(self._reach_after_overhead, request, self.lives)
            )
            return
        if caller_priority != ARRIVAL_PRIORITY:
            # Released by a step's end (a closed-loop client's next request): it reaches the
            # host after every event of this instant, the step ends and the plans they start
            # included, as it would after any positive overhead however small; joining the
            # step that starts now would make the results jump at an overhead of 0.
            self._reach_after_step_ends(request)
            return
        self._reach(request, caller_priority)

    def _reach_after_overhead(self, request: Request, life: int, _event: simpy.Event) -> None:
        # (not if the replica went down meanwhile: the request left with it)
        if self.lives == life:
            self._reach(request, ARRIVAL_PRIORITY)

    def _reach_after_step_ends(self, request: Request) -> None:
        """``request`` reaches the host once this instant's events have run. The requests
        released at one instant reach together, in one event, so the first of them cannot wake
        the replica into a step the others miss (as a positive overhead's same-time events,
        which run before the wake-up they cause, would have it too)."""
        released = self._released_now
        released.append(request)
        if len(released) == 1:
            timeout_at(self.env, self.env.now, AFTER_STEP_ENDS_PRIORITY).callbacks.append(
                self._reach_released
            )

    def _reach_released(self, _event: simpy.Event) -> None:
        released, self._released_now = self._released_now, []
        for request in released:
            self._reach(request, AFTER_STEP_ENDS_PRIORITY)

    def _reach(self, request: Request, caller_priority: int) -> None:
        """The request reaches the host: it enters its engine now, or when the frontend's queue
        clears."""
        frontend = self.frontend
        if frontend is not None:
            end_times = frontend.stretch_end_times
            if end_times is not None:
                # the steps of a decode stretch that have ended by now have queued their tokens
                frontend.catch_up(self._steps_ended(end_times, caller_priority))
            if frontend.busy_until > self.env.now:
                timeout_at(self.env, frontend.busy_until).callbacks.append(
                    lambda _event: self._enter(request, ARRIVAL_PRIORITY)
                )
                return
        self._enter(request, caller_priority)

    def _steps_ended(self, end_times: Any, caller_priority: int) -> int:
        """How many of a stretch's steps have ended by now, as seen from an event of
        ``caller_priority``: a step ending exactly now has ended when this replica's step ends
        rank before that event."""
        if caller_priority > self.priority:
            return bisect_right(end_times, self.env.now)
        return bisect_left(end_times, self.env.now)

    def _enter(self, request: Request, caller_priority: int) -> None:
        """Queue a request at its model's engine now, or reject it if it can never run here."""
        scheduler = self._by_model[request.model_id].scheduler
        reason = scheduler.rejection_reason(request)
        if reason is not None:
            request.status = REJECTED
            request.reject_reason = reason
            self._forget(request)
            self.on_request_done(request, caller_priority)
            return
        scheduler.add(request)
        self._notice(caller_priority)

    def _notice(self, caller_priority: int) -> None:
        """Work came in: an idle replica plans now; a decode stretch ends with its step in
        progress (then the replica plans again)."""
        if self._wakeup is not None:
            self.wake()
        else:
            self.end_stretch_now(caller_priority)

    def _cut_stretch(self, caller_priority: int) -> None:
        """Something arrived during a decode stretch: end it with the step in progress (then
        the replica plans again). If a step ends exactly now, stepping one by one would have
        ended it before the arrival when the arrival's event ranks after this replica's step
        ends.

        The process keeps waiting, on an earlier event (``wait_instead``, cheaper than SimPy's
        interrupt)."""
        end_times = self._stretch_end_times
        assert end_times is not None and self.process is not None
        self._stretch_end_times = None  # cut once; later arrivals wait for the replan
        num_steps = min(self._stretch_steps, self._steps_ended(end_times, caller_priority) + 1)
        if num_steps == self._stretch_steps:
            return  # the step in progress is the stretch's last
        self._stretch_steps = num_steps
        wait_instead(self.process, float(end_times[num_steps - 1]), self.priority)

    def expect(self, request: Request) -> None:
        """``request`` is routed here and counts here from now (a router weighs it): a new one
        (``add``), or a prefilled one coming to decode whose KV is still to arrive
        (``receive``)."""
        request.replica_id = self.replica_id
        self.num_routed += 1
        self._count_load()
        self.num_outstanding += 1
        self.committed_tokens += request.prompt_tokens + request.output_tokens

    def join_prefill_pool(self, on_handoff: Callable[[Request, Replica], None]) -> None:
        """Hand each request this replica prefilled to ``on_handoff`` (with this replica),
        its KV held here until its transfer ends (``sim.fleet.disaggregation``)."""
        self.on_handoff = on_handoff

    def join_decode_pool(self, on_room: Callable[[Replica], object]) -> None:
        """Take prefilled requests whose KV arrives (``receive``); while transfers wait for
        room here (``transfer_queued``), call ``on_room`` after each step."""
        self.on_room = on_room
        self.engines[0].scheduler.join_decode_pool()

    def transfer_queued(self) -> None:
        """A prefilled request now waits for room here (``on_room`` looks after each step)."""
        self.transfers_waiting += 1

    def transfer_started(self) -> None:
        """A request that waited for room here found it: its transfer is under way."""
        self.transfers_waiting -= 1

    def receive(self, request: Request, caller_priority: int) -> None:
        """The KV of ``request`` has arrived (it holds its blocks here): it joins the running
        batch now, as an arrival does."""
        self.engines[0].scheduler.admit_transferred(request)
        self._notice(caller_priority)

    def unapplied_kv_blocks(self, caller_priority: int) -> int:
        """KV blocks a decode stretch in flight has grown by the step in progress (stepping one
        by one, each step grows its KV when planned) that its KV cache has not counted yet (a
        stretch applies them at its end); 0 outside a stretch."""
        decodes = self._stretch_decodes
        if decodes is None:
            return 0
        steps = min(
            self._stretch_steps, self._steps_ended(self._stretch_times, caller_priority) + 1
        )
        return self.engines[0].scheduler.kv.decode_growth_blocks(decodes, steps)

    def kv_changed_outside(self, blocks: int) -> None:
        """``blocks`` of this replica's KV were taken (negative: released) by something other
        than its steps, now. A decode stretch under way ends with its step in progress, and
        its rows, which were all planned before, leave them out."""
        if self._stretch_decodes is not None:
            self._outside_blocks += blocks

    def end_stretch_now(self, caller_priority: int) -> None:
        """Something must be looked at when the step in progress ends: a decode stretch under
        way ends with it (as an arrival ends it)."""
        if self._stretch_end_times is not None:
            self._cut_stretch(caller_priority)

    def wake(self) -> None:
        """Plan again if idle: a prefill replica whose KV a finished transfer released."""
        if self._wakeup is not None:
            wakeup, self._wakeup = self._wakeup, None
            wakeup.succeed()

    def withdraw(self, request: Request) -> None:
        """``request``, expected here, will not come (the replica it was to come from went
        down, ``sim.fleet.disaggregation``): it counts here no more."""
        self._forget(request)

    def _forget(self, request: Request) -> None:
        self._count_load()
        self.num_outstanding -= 1
        self.committed_tokens -= request.prompt_tokens + request.output_tokens

    # -- requests out ----------------------------------------------------------------------

    def _done(self, finished: list[Request]) -> None:
        """Requests that completed in the step that just ended; their clients hear of it when
        the last token is streamed (at once without a frontend, never past the horizon)."""
        env = self.env
        for request in finished:
            if request.status is TRANSFERRING:  # prefilled: its decode is another replica's
                assert self.on_handoff is not None
                self._forget(request)
                self.on_handoff(request, self)
                continue
            heard_s = request.completion_time_s
            if heard_s is None:
                continue  # streamed after the horizon: the client never hears within the run
            if heard_s > env.now:
                timeout_at(env, heard_s).callbacks.append(partial(self._heard_later, request))
            else:
                self._client_heard(request, self.priority)

    def _heard_later(self, request: Request, _event: simpy.Event) -> None:
        self._client_heard(request, ARRIVAL_PRIORITY)

    def _client_heard(self, request: Request, caller_priority: int) -> None:
        # outstanding until then, as a load balancer counts an open response stream
        self._forget(request)
        self.on_request_done(request, caller_priority)

    # -- the step loop ---------------------------------------------------------------------

    def _next_engine(self, turn: int) -> Engine | None:
        """The engine whose turn it is: the next with work, counting from ``turn``."""
        engines = self.engines
        for offset in range(len(engines)):
            engine = engines[(turn + offset) % len(engines)]
            if engine.scheduler.has_work:
                return engine
        return None

    def _run(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        frontend = self.frontend
        single = self.engines[0] if len(self.engines) == 1 else None
        turn = 0
        while True:
            if single is not None:  # the common case, without a call
                engine = single if single.scheduler.has_work else None
            else:
                engine = self._next_engine(turn)
            if engine is None:
                yield from self._sleep()
                continue
            if single is None:
                turn = self.engines.index(engine) + 1
            scheduler = engine.scheduler
            start = env.now
            plan = scheduler.schedule()
            if scheduler.kv.pending_loaded_tokens:  # its admissions copy KV from host memory
                plan.host_loaded_tokens = scheduler.kv.take_loaded_tokens()
            if plan.is_empty:
                # only a disaggregated pool's replica whose KV is held for transfers plans
                # nothing: it sleeps until one ends (``wake``, ``receive``) or a request arrives
                assert scheduler.in_pool, (
                    f"replica {self.replica_id}: scheduler planned nothing with "
                    f"{scheduler.num_outstanding} requests outstanding"
                )
                yield from self._sleep()
                continue
            for request, _ in plan.prefills:
                if request.first_scheduled_time_s is None:
                    request.first_scheduled_time_s = start
            num_steps = 1
            if self.fast_forward_decode and plan.is_pure_decode:
                num_steps = scheduler.decode_stretch_limit(plan)
            if num_steps == 1:
                duration = engine.step_time.step_time_s(plan.shape())
                blocks_used = scheduler.kv.num_used_blocks
                yield timeout_at(env, start + duration, self.priority)
                first_tokens, finished = scheduler.on_step_end(plan)
                engine.steps.add(  # (after on_step_end: it counts the decodes' tokens)
                    start,
                    duration,
                    plan.num_prefill_tokens,
                    plan.num_decode_tokens,
                    plan.num_seqs,
                    blocks_used,
                )
                # The one place a step's tokens are dated: now, or when the frontend streams
                # them (one per request that sampled, in the step's order).
                if frontend is not None:
                    frontend.stream_step(env.now, first_tokens + plan.decodes)
                elif first_tokens or finished:
                    now = env.now
                    for request in first_tokens:
                        request.first_token_time_s = now
                    for request in finished:
                        if request.status is not TRANSFERRING:
                            request.completion_time_s = now
            else:
                finished = yield from self._decode_stretch(engine, plan, num_steps)
            if finished:
                self._done(finished)
            if self.transfers_waiting:
                assert self.on_room is not None
                self.on_room(self)

    def _sleep(self) -> Generator[simpy.Event, Any, None]:
        """Wait for work (``wake``), the busy period ending now."""
        env = self.env
        if self._busy_since_s is not None:
            self._busy_before_s += env.now - self._busy_since_s
            self._busy_since_s = None
        self._wakeup = env.event()
        yield self._wakeup
        self._busy_since_s = env.now

    def _decode_stretch(
        self, engine: Engine, plan: StepPlan, num_steps: int
    ) -> Generator[simpy.Event, Any, list[Request]]:
        env = self.env
        start = env.now
        durations = engine.step_time.decode_stretch_s(plan.shape(), len(plan.decodes), num_steps)
        # Step end times: the same additions, in the same order, as stepping one by one
        # (numpy's cumulative sum adds sequentially, left to right).
        end_times: np.ndarray | list[float]
        if isinstance(durations, np.ndarray):
            end_times = np.cumsum(np.concatenate(([start], durations)))[1:]
        else:
            end_times = list(accumulate(durations, initial=start))[1:]
        if self.horizon_s is not None:
            # Steps ending at or after the horizon never end (as when stepping one by one).
            num_steps = max(1, min(num_steps, bisect_left(end_times, self.horizon_s)))
        if self.frontend is not None:
            self.frontend.begin_stretch(end_times, plan.decodes)
        self._stretch_end_times, self._stretch_steps = end_times, num_steps
        self._stretch_decodes, self._stretch_times = plan.decodes, end_times
        # an arrival may move this wait to an earlier step's end (_cut_stretch)
        yield timeout_at(env, float(end_times[num_steps - 1]), self.priority)
        self._stretch_end_times = self._stretch_decodes = self._stretch_times = None
        num_steps = self._stretch_steps
        finished, blocks_used = engine.scheduler.advance_decodes(plan, num_steps)
        if self._outside_blocks:
            outside, self._outside_blocks = self._outside_blocks, 0
            if isinstance(blocks_used, np.ndarray):
                blocks_used = blocks_used - outside
            else:
                blocks_used = [used - outside for used in blocks_used]
        if self.frontend is not None:
            self.frontend.end_stretch(num_steps)
        else:
            end_s = float(end_times[num_steps - 1])
            for request in finished:
                request.completion_time_s = end_s
        engine.steps.add_decode_stretch(
            start, durations[:num_steps], end_times[:num_steps], len(plan.decodes), blocks_used
        )
        return finished
