"""Requests the fleet can never serve, found before the run rather than after it.

An engine refuses a request outright when it is longer than the model's context, never fits in
a replica's KV cache, or (without chunked prefill) needs a prefill beyond the step's token
budget (``sim.engine.scheduler.base.REFUSALS``). Which requests those are depends only on their
lengths and the model each asks for, so it is known before the first event:

- a trace row the fleet refuses is bad input: a ``ConfigError`` naming the file, the row and
  the columns, and why (replaying it would answer a question the trace did not ask);
- a generated workload whose every request is refused is bad input too, naming the length
  field: such a run would "succeed" while serving nothing;
- otherwise, the few requests a length distribution's tail sends past a limit run and are
  rejected with their reason, as a server answers them with an error.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.engine.scheduler.base import Scheduler
from sim.errors import ConfigError
from sim.workload.source import Workload


def refusals(
    workload: Workload, model_ids: np.ndarray, schedulers: Sequence[Scheduler]
) -> np.ndarray:
    """Each request's refusal reason on the model it asks for ("" when it can run)."""
    reasons = np.full(workload.num_requests, "", dtype=object)
    prompt, output = workload.prompt_tokens, workload.output_tokens
    for model_id, scheduler in enumerate(schedulers):
        mine = np.flatnonzero(model_ids == model_id)
        # requests of equal lengths share an answer; traces repeat lengths a lot
        keys, inverse = np.unique((prompt[mine] << 32) | output[mine], return_inverse=True)
        answers = np.array(
            [scheduler.refusal(int(k >> 32), int(k & 0xFFFFFFFF)) or "" for k in keys],
            dtype=object,
        )
        reasons[mine] = answers[inverse]
    return reasons


def check_servable(
    workload: Workload,
    model_ids: np.ndarray,
    schedulers: Sequence[Scheduler],
    length_field: tuple[str, object] = ("workload.prompt_tokens", None),
) -> None:
    """Refuse, as a ConfigError, a workload that is bad input (see the module docstring);
    ``length_field`` is the field and value a generated workload's error names."""
    reasons = refusals(workload, model_ids, schedulers)
    refused = reasons != ""
    if not refused.any():
        return
    first = int(np.flatnonzero(refused)[0])
    why = schedulers[int(model_ids[first])].refusal_text(str(reasons[first]))
    prompt, output = int(workload.prompt_tokens[first]), int(workload.output_tokens[first])
    count = int(refused.sum())
    if workload.trace_file is not None:
        assert workload.trace_rows is not None
        more = f" ({count:,} rows like it)" if count > 1 else ""
        raise ConfigError(
            "workload.path",
            workload.trace_file,
            f"row {int(workload.trace_rows[first]) + 1}, columns prompt_tokens + output_tokens:"
            f" {prompt:,} + {output:,} is refused: {why}{more}",
        )
    if refused.all():
        raise ConfigError(
            length_field[0],
            length_field[1],
            f"every request is refused ({prompt:,} prompt + {output:,} output tokens"
            f" for the first): {why}",
        )
