"""Events at absolute simulated times.

``env.timeout(t - env.now)`` lands on ``now + (t - now)``, which can differ from ``t`` in the
last bit of a float. Arrivals replayed from a trace and the end of a decode stretch must land
exactly where they belong, so they are scheduled at absolute times instead.
"""

from __future__ import annotations

from heapq import heappush

import simpy
from simpy.events import NORMAL


def timeout_at(env: simpy.Environment, time_s: float) -> simpy.Event:
    """An event that fires at ``time_s`` (>= ``env.now``), ordered like a ``Timeout``."""
    assert time_s >= env.now, f"cannot schedule at {time_s} before now ({env.now})"
    event = simpy.Event(env)
    event._ok = True  # a triggered event, as Timeout makes itself; relies on SimPy 4 internals
    event._value = None
    heappush(env._queue, (time_s, NORMAL, next(env._eid), event))
    return event
