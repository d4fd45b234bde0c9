"""A replica whose GPU serves several models at once (``placement=colocated``).

Every model keeps its weights resident and has its own KV pool (sized by the placement's memory
plan), its own scheduler and its own step-time model. The GPU runs one engine step at a time:
the models with work take turns, round robin, so a busy model slows the other down. A request
goes to the scheduler of the model it asks for.

Decode stretches are not used here: a stretch would hold the GPU for one model while the other
waits, which is not how the turns go. Left out: running both models' kernels concurrently
(MPS, MIG) and any cost of switching between them.
"""

from __future__ import annotations

from typing import Callable

import simpy

from sim.metrics import StepRecorder
from sim.replica import Replica
from sim.request import Request
from sim.scheduler.base import Scheduler
from sim.simclock import timeout_at
from sim.step_time.base import StepTimeModel


class SharedReplica(Replica):
    def __init__(self, env: simpy.Environment, replica_id: int,
                 engines: list[tuple[int, Scheduler, StepTimeModel]],
                 on_request_done: Callable[[Request, int], None], horizon_s: float | None = None,
                 frontend_token_s: float = 0.0):
        # The base replica is the first model's engine (its scheduler, step time and step
        # rows); the process it starts runs this class's _run once the simulation starts.
        model_id, scheduler, step_time = engines[0]
        super().__init__(env, replica_id, scheduler, step_time, on_request_done,
                         fast_forward_decode=False, horizon_s=horizon_s, model_id=model_id,
                         frontend_token_s=frontend_token_s)
        self._engines = [(model_id, scheduler, step_time, self.steps)]
        self._engines += [(m, sched, st, StepRecorder()) for m, sched, st in engines[1:]]
        self._by_model = {engine[0]: engine for engine in self._engines}

    @property
    def recorders(self) -> list[tuple[int, StepRecorder]]:
        return [(model_id, steps) for model_id, _, _, steps in self._engines]

    def _enter(self, request: Request, caller_priority: int) -> None:
        if not self._accept(request, self._by_model[request.model_id][1], caller_priority):
            return
        if self._wakeup is not None:  # no decode stretches here, so nothing to interrupt
            wakeup, self._wakeup = self._wakeup, None
            wakeup.succeed()

    def _run(self):
        env = self.env
        engines = self._engines
        turn = 0
        while True:
            ready = [i for i in range(len(engines)) if engines[i][1].has_work]
            if not ready:
                self._wakeup = env.event()
                yield self._wakeup
                continue
            # the next model with work, counting from the one after the last to step
            index = min(ready, key=lambda i: (i - turn) % len(engines))
            turn = index + 1
            _, scheduler, step_time, steps = engines[index]
            start = env.now
            plan = scheduler.schedule(start)
            assert not plan.is_empty, f"replica {self.replica_id}: a model planned nothing"
            for request, _ in plan.prefills:
                if request.first_scheduled_time_s is None:
                    request.first_scheduled_time_s = start
            duration = step_time.step_time_s(plan.num_prefill_tokens, plan.num_decode_seqs,
                                             plan.prefill_attn, plan.decode_context)
            blocks_used = scheduler.kv.num_used_blocks
            yield timeout_at(env, start + duration, self.priority)
            steps.add(start, duration, plan.num_prefill_tokens, len(plan.decodes),
                      plan.num_seqs, blocks_used)
            finished = self._end_step(scheduler, plan)
            if finished:
                self._done(finished)
