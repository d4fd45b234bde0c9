"""Driving a scheduler by hand, as a replica does, and reading its plans in short form."""

from __future__ import annotations

from sim.engine.request import Request
from sim.engine.scheduler.base import Scheduler
from sim.engine.scheduler.plan import StepPlan


def req(rid: int, prompt: int, output: int, arrival: float = 0.0) -> Request:
    return Request(rid, arrival, prompt, output)


def prefills(plan: StepPlan) -> list[tuple[int, int]]:
    return [(r.request_id, n) for r, n in plan.prefills]


def decodes(plan: StepPlan) -> list[int]:
    return [r.request_id for r in plan.decodes]


def shape(plan: StepPlan) -> tuple[int, int, int, int]:
    """(P, D, Ap, Ad) of the plan's step shape."""
    s = plan.shape()
    return (s.num_prefill_tokens, s.num_decode_seqs, s.prefill_attn, s.decode_context)


def end(sched: Scheduler, plan: StepPlan, now: float) -> list[Request]:
    """Apply ``plan`` and stamp its tokens at ``now``, as a replica without a frontend does;
    return the requests that finished."""
    first_tokens, finished = sched.on_step_end(plan)
    for request in first_tokens:
        request.first_token_time_s = now
    for request in finished:
        request.completion_time_s = now
    return finished


def step(sched: Scheduler, now: float) -> tuple[StepPlan, list[Request]]:
    """One replica step: plan, then apply it at ``now``; return (plan, finished)."""
    plan = sched.schedule()
    return plan, end(sched, plan, now)
