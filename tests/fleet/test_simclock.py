"""Events at absolute times in a fixed order (``sim.fleet.simclock``), and the SimPy internals
that make them: if a SimPy release changes those, these tests fail first and loudly."""

import inspect
from heapq import heappush
from itertools import count

import simpy
from simpy.events import NORMAL, URGENT

from sim.fleet.simclock import ARRIVAL_PRIORITY, step_end_priority, timeout_at, wait_instead


def test_simpy_is_the_release_the_pin_allows():
    major, minor = (int(x) for x in simpy.__version__.split(".")[:2])
    assert (major, minor) == (4, 1), (
        f"SimPy {simpy.__version__}: sim/fleet/simclock.py writes into SimPy 4.1's event queue; "
        "check its internals before widening the pin in pyproject.toml"
    )


def test_the_internals_simclock_writes_are_where_it_expects_them():
    env = simpy.Environment()
    assert isinstance(env._queue, list) and isinstance(env._eid, type(count()))
    # what simclock writes means "triggered, succeeded, value None" to SimPy's own properties
    event = timeout_at(env, 1.0)
    assert event.triggered and event.ok and event.value is None and not event.processed
    # Timeout makes itself triggered the same way simclock does, and queues the same tuple
    source = inspect.getsource(simpy.events.Timeout.__init__)
    assert "self._ok = True" in source and "self._value = value" in source, source
    assert "heappush(self._queue, (self._now + delay, priority, next(self._eid), event))" in (
        inspect.getsource(simpy.core.Environment.schedule)
    )
    assert heappush is simpy.core.heappush
    assert URGENT < NORMAL == ARRIVAL_PRIORITY


def test_events_fire_at_their_absolute_time_in_priority_order():
    env = simpy.Environment()
    log = []
    t = 0.1 + 0.2  # not representable exactly: env.timeout(t - now) could land a bit off

    def at(time_s, priority, name):
        timeout_at(env, time_s, priority).callbacks.append(lambda _e: log.append((env.now, name)))

    at(t, step_end_priority(1), "replica 1 step end")
    at(t, step_end_priority(0), "replica 0 step end")
    at(t, ARRIVAL_PRIORITY, "arrival")
    at(0.05, step_end_priority(3), "earlier")
    env.run()
    assert log == [
        (0.05, "earlier"),
        (t, "arrival"),
        (t, "replica 0 step end"),
        (t, "replica 1 step end"),
    ]


def test_an_event_in_the_past_is_refused():
    env = simpy.Environment()
    env.run(until=1.0)
    try:
        timeout_at(env, 0.5)
    except AssertionError as err:
        assert "before now" in str(err)
    else:
        raise AssertionError("an event before now was scheduled")


def test_a_wait_moved_to_an_earlier_time_resumes_then_and_only_then():
    env = simpy.Environment()
    resumed = []

    def waiter():
        value = yield timeout_at(env, 5.0)
        resumed.append((env.now, value))
        yield timeout_at(env, 7.0)
        resumed.append((env.now, "second"))

    process = env.process(waiter())
    timeout_at(env, 1.0).callbacks.append(lambda _e: wait_instead(process, 2.0))
    env.run()
    # resumed at 2 (not 5): the event at 5 fired with nobody listening; the next wait is normal
    assert resumed == [(2.0, None), (7.0, "second")]
    # the SimPy 4.1 internals wait_instead relies on
    source = inspect.getsource(simpy.events.Process._resume)
    assert "self._target = event" in source and "event.callbacks.append(self._resume)" in source
