"""Events at absolute simulated times, in a fixed order when they coincide.

``env.timeout(t - env.now)`` lands on ``now + (t - now)``, which can differ from ``t`` in the
last bit of a float. Arrivals replayed from a trace and the end of a decode stretch must land
exactly where they belong, so they are scheduled at absolute times instead.

Events at the same time run in priority order: arrivals first, then the ends of steps, replica
by replica, then the requests those step ends released (``AFTER_STEP_ENDS_PRIORITY``). SimPy
would otherwise order them by when they were created, and a decode stretch creates its end event
long before stepping one by one would, so the two modes would disagree whenever times coincide
exactly (common with ``step_time=constant``).

``wait_instead`` moves a process's wait to an earlier event: a decode stretch cut short by an
arrival (``sim.fleet.replica``) costs one new event that way, where SimPy's interrupt costs an
event, an exception and a new event.
"""

from __future__ import annotations

from heapq import heappush

import simpy
from simpy.events import NORMAL, EventPriority

ARRIVAL_PRIORITY = NORMAL  # SimPy's own URGENT (interrupts, the horizon) still comes first


# After every other event at the same time, whatever the replica ids: where a request reaches a
# replica that a step's end released at that instant (``sim.fleet.replica``), as any positive
# delay, however small, would have it.
AFTER_STEP_ENDS_PRIORITY = EventPriority(2**62)


def step_end_priority(replica_id: int) -> EventPriority:
    """Priority of a replica's step ends: after arrivals, lower replica ids first."""
    return EventPriority(ARRIVAL_PRIORITY + 1 + replica_id)


def timeout_at(
    env: simpy.Environment, time_s: float, priority: EventPriority = ARRIVAL_PRIORITY
) -> simpy.Event:
    """An event that fires at ``time_s`` (>= ``env.now``), before same-time events of a larger
    ``priority``."""
    assert time_s >= env.now, f"cannot schedule at {time_s} before now ({env.now})"
    event = simpy.Event(env)
    event._ok = True  # a triggered event, as Timeout makes itself; relies on SimPy 4 internals
    event._value = None
    heappush(env._queue, (time_s, priority, next(env._eid), event))
    return event


def wait_instead(
    process: simpy.Process, time_s: float, priority: EventPriority = ARRIVAL_PRIORITY
) -> None:
    """``process``, waiting on some event, waits on a new one at ``time_s`` instead: it resumes
    then, with the value None, and the event it was waiting on fires with nobody listening."""
    waiting_on = process.target
    waiting_on.callbacks.remove(process._resume)
    event = timeout_at(process.env, time_s, priority)
    event.callbacks.append(process._resume)
    process._target = event  # what Process._resume sets when a process yields an event
