"""Replicas that go: failures, maintenance drains and spot reclaims, as the run goes.

A replica is in one of three states:

- up: the router sends it requests;
- draining (a maintenance drain, or a spot replica under its reclaim notice): the router sends
  it nothing more, and it serves what it holds;
- down: its process has stopped (the step in progress never ends: no step is taken or logged
  while it is down), and it holds nothing. Its requests left with it: each is sent again to a
  replica that is up (``on_failure=retry``) or ends failed with the cause
  (``on_failure=fail``). A request sent again starts over (prefill from scratch, its first
  token again), keeps its arrival time, so its TTFT and E2E include the loss, and counts the
  loss in ``retries`` and ``retry_lost_s`` (arrival to its last loss). With no replica up for
  its model it fails (``sim.fleet.cluster.NO_REPLICA``).

What takes a replica down (``faults``, ``sim.config.faults``):

- a failure: random, each replica up for an exponential time of mean ``gpu_mtbf_h / gpus``
  between failures, then down for a repair time (exponential or fixed, mean ``repair_h``),
  each replica's two draws from its own streams (``faults.uptime.<id>``,
  ``faults.repair.<id>``: turning faults on moves no other stream, and a fleet of more
  replicas sees the same failures on the replicas it shares with a smaller one); or one of
  ``faults.schedule``. A failure of a replica already down is none;
- a maintenance drain: it drains, leaves once empty (or, at its deadline, hands what it still
  holds to the others: sent again, as a retry, whatever ``on_failure`` says), and is back
  ``duration_s`` after it left;
- a spot reclaim: it drains from the notice, and is lost at the notice's end with what it
  still holds (as ``on_failure`` says); a replacement comes ``replace_s`` later, if given.
  One of ``faults.spot``, or random: each spot replica is reclaimed at
  ``spot_reclaims_per_h`` per hour, exponential times apart from its own stream
  (``faults.reclaim.<id>``), each reclaim as a scheduled one (``spot_notice_s``,
  ``spot_replace_s``). The draws run on wall-clock time from the replica's start, so they
  do not depend on anything else in the run; one that finds the replica draining or down is
  none (as a scheduled notice then is), so a replica is reclaimed at that rate while it
  serves.

A replica that comes back has fresh engines (``new_engines``): empty queues and an empty KV
cache, as a repaired or replaced node starts. Every change is written to the ``FaultLog``
(``sim.output.faults``).

Two fleet shapes take faults their own way (``sim.deploy.faulty`` connects them):

- an autoscaled one (``autoscaler``): a replica lost to a failure or a spot reclaim is not
  repaired but leaves the autoscaler's fleet, which replaces it after its provisioning delay
  (``Autoscaler.lost``); a maintenance drain keeps the replica, which comes back. The replicas
  the autoscaler adds fail too: each one's failures start when it is ready, from streams named
  by its id, and end when it is released (``_fleet_changed``). An event that names a replica
  not in the fleet at its time (not yet added, released, lost) is none; maintenance and spot
  notices skip a replica the autoscaler is draining (it leaves anyway);
- a disaggregated one (``transfers``): a replica of either pool leaves with the transfers one
  of whose ends it is (``Disaggregation.lost``) besides its own requests: all are sent again
  from the prefill pool (prefill from scratch) or failed; a decode replica down takes no
  transfer until it is back.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from functools import partial
from typing import Any, Protocol

import numpy as np
import simpy

from sim import rng
from sim.config.faults import FaultsConfig
from sim.engine.request import FAILED, RUNNING, WAITING, Request
from sim.fleet.autoscaler import Autoscaler
from sim.fleet.disaggregation import Disaggregation
from sim.fleet.replica import Engine, Replica
from sim.fleet.simclock import ARRIVAL_PRIORITY, timeout_at
from sim.output.faults import FAILURE, MAINTENANCE, SPOT, FaultEvent, FaultLog
from sim.output.request_log import RequestLog

UP, DRAINING, DOWN = "up", "draining", "down"
GONE = "gone"  # out of an autoscaled fleet (released, or lost): no event takes it again
# each cause's ``fail_reason`` for the requests it fails
FAIL_REASONS = {FAILURE: "replica_failure", SPOT: "spot_reclaim", MAINTENANCE: "maintenance"}
HOUR_S = 3600.0


class FaultyCluster(Protocol):
    """What the faults ask of the cluster (``sim.fleet.cluster.Cluster``)."""

    env: simpy.Environment
    replicas: list[Replica]
    request_log: RequestLog

    def stop_routing(self, replica: Replica) -> None: ...

    def resume_routing(self, replica: Replica) -> None: ...

    def drain(self, replica: Replica, on_released: Callable[[Replica], None]) -> None: ...

    def route(self, request: Request, caller_priority: int) -> None: ...

    def end_request(self, request: Request, caller_priority: int) -> None: ...

    def flush_steps(self, replica: Replica) -> None: ...

    def settle_drains(self) -> None: ...

    def finished(self) -> bool: ...


class FleetFaults:
    def __init__(
        self,
        cluster: FaultyCluster,
        config: FaultsConfig,
        gpus: list[int],
        seed: int,
        new_engines: Callable[[int], list[Engine]],
        log: FaultLog,
        *,
        autoscaler: Autoscaler | None = None,
        transfers: Disaggregation | None = None,
        pools: list[str] | None = None,
        spot: Sequence[int] = (),
    ) -> None:
        """``gpus[i]``: replica ``i``'s GPUs (its failure rate's multiple); ``new_engines(i)``:
        fresh engines for replica ``i`` when it comes back. ``autoscaler``: the fleet's, which
        replaces lost replicas and adds its own; ``transfers``: a disaggregated fleet's, and
        ``pools`` each replica's pool (module docstring). ``spot``: the replicas bought spot,
        reclaimed at random from the start when ``spot_reclaims_per_h`` is set; on an
        autoscaled fleet only ``cost.tier=spot`` buys spot, so the replicas it adds are spot
        too."""
        self.cluster = cluster
        self.seed = seed
        self.env = cluster.env
        self.config = config
        self.new_engines = new_engines
        self.log = log
        self.retry = config.on_failure == "retry"
        self.autoscaler = autoscaler
        self.transfers = transfers
        num = len(gpus)
        self._state = [UP] * num
        # the event the replica's current absence (draining or down) belongs to, if any
        self._outage: list[FaultEvent | None] = [None] * num
        log.start(num, pools)
        env = self.env
        for replica_id, count in enumerate(gpus):
            self._fail_at_random(replica_id, count)
        for entry in config.schedule:
            at = timeout_at(env, entry.at_s)
            at.callbacks.append(partial(self._scheduled_failure, entry.replica, entry.repair_s))
        for drain in config.maintenance:
            at = timeout_at(env, drain.at_s)
            at.callbacks.append(
                partial(self._maintain, drain.replica, drain.duration_s, drain.deadline_s)
            )
        for reclaim in config.spot:
            at = timeout_at(env, reclaim.at_s)
            at.callbacks.append(
                partial(self._notice, reclaim.replica, reclaim.notice_s, reclaim.replace_s)
            )
        if autoscaler is not None:
            autoscaler.watch(self._fleet_changed)
        self._added_are_spot = autoscaler is not None and bool(spot)
        if config.random_reclaims:
            for replica_id in spot:
                self.start_spot_reclaims(replica_id)

    def state(self, replica_id: int) -> str:
        """``up``, ``draining``, ``down`` or ``gone``."""
        return self._state[replica_id]

    def _in_fleet(self, replica_id: int) -> bool:
        """Whether replica ``replica_id`` is in the fleet now (an autoscaler adds and removes)."""
        return replica_id < len(self._state) and self._state[replica_id] != GONE

    def _fleet_changed(self, event: str, replica_id: int | None, replaces: int | None) -> None:
        """The autoscaler changed the fleet (``Autoscaler.watch``): a replica is ready (it
        fails from now on), is released (it fails no more), or a lost one's replacement is
        ready or called off (the lost one is planned no more: ``FaultLog.gone``)."""
        now = self.env.now
        if replaces is not None:
            self.log.closed(replaces, now if event == "ready" else None)
            self.log.gone(replaces, now)
        if event == "ready":
            assert replica_id == len(self._state), "replicas are added in id order"
            assert self.autoscaler is not None
            self._state.append(UP)
            self._outage.append(None)
            self.log.add_replica(now)
            self._fail_at_random(replica_id, self.autoscaler.variant_of(replica_id).gpus)
            if self.config.random_reclaims and self._added_are_spot:
                self.start_spot_reclaims(replica_id)
        elif event == "released":
            assert replica_id is not None
            self._state[replica_id] = GONE
            self.log.gone(replica_id, now)

    def _leaving(self, replica_id: int) -> bool:
        """Whether the autoscaler is draining replica ``replica_id`` (it leaves anyway: no
        maintenance drain or spot notice takes it)."""
        return self.autoscaler is not None and self.autoscaler.is_draining(replica_id)

    def _lost_for_good(self, kind: str) -> bool:
        """Whether a replica that goes for ``kind`` leaves the fleet (an autoscaled fleet's
        failures and reclaims: the autoscaler replaces it) rather than coming back."""
        return self.autoscaler is not None and kind != MAINTENANCE

    # -- what takes replicas down ----------------------------------------------------------

    def _fail_at_random(self, replica_id: int, gpus: int) -> None:
        """Start replica ``replica_id``'s random failures, if faults have a rate."""
        if self.config.random_failures:
            assert self.config.gpu_mtbf_h
            mean_up_s = self.config.gpu_mtbf_h * HOUR_S / gpus
            self.env.process(self._random_failures(replica_id, mean_up_s, self.seed))

    def _random_failures(
        self, replica_id: int, mean_up_s: float, seed: int
    ) -> Generator[simpy.Event, Any, None]:
        """Replica ``replica_id``'s failures and repairs, until the run's last request ended
        (or it left the fleet)."""
        env = self.env
        uptime = rng.stream(seed, f"faults.uptime.{replica_id}")
        repair = rng.stream(seed, f"faults.repair.{replica_id}")
        while not self.cluster.finished():
            yield timeout_at(env, env.now + float(uptime.exponential(mean_up_s)))
            if self.cluster.finished() or not self._in_fleet(replica_id):
                return
            event = self._fail(replica_id, FAILURE)
            if not self._in_fleet(replica_id):
                return  # lost: the autoscaler replaces it
            repair_s = self._repair_s(repair)
            if event is None:  # down already (a drain, a reclaim): no failure to repair
                continue
            yield timeout_at(env, env.now + repair_s)
            self._back(replica_id, event)

    def start_spot_reclaims(self, replica_id: int) -> None:
        """Replica ``replica_id``'s random spot reclaims, from now (the run's start, or when a
        spot replica joins the fleet), until the run's last request ended. Once per replica:
        its draws are its stream's from the first."""
        assert self.config.spot_reclaims_per_h, "faults.spot_reclaims_per_h is set"
        self.env.process(self._random_reclaims(replica_id, self.config.spot_reclaims_per_h))

    def _random_reclaims(
        self, replica_id: int, per_hour: float
    ) -> Generator[simpy.Event, Any, None]:
        env = self.env
        draws = rng.stream(self.seed, f"faults.reclaim.{replica_id}")
        mean_s = HOUR_S / per_hour
        notice_s, replace_s = self.config.spot_notice_s, self.config.spot_replace_s
        while not self.cluster.finished():
            yield timeout_at(env, env.now + float(draws.exponential(mean_s)))
            if self.cluster.finished() or not self._in_fleet(replica_id):
                return  # (a replica the autoscaler lost or released is reclaimed no more)
            self._notice(replica_id, notice_s, replace_s, None)  # (none unless it is up)

    def _repair_s(self, draws: np.random.Generator) -> float:
        mean_s = self.config.repair_h * HOUR_S
        if self.config.repair == "fixed":
            return mean_s
        return float(draws.exponential(mean_s))

    def _scheduled_failure(self, replica_id: int, repair_s: float | None, _e: Any) -> None:
        if not self._in_fleet(replica_id):
            return
        event = self._fail(replica_id, FAILURE)
        if event is not None and repair_s is not None:
            self._back_at(replica_id, event, self.env.now + repair_s)

    def _maintain(
        self, replica_id: int, duration_s: float, deadline_s: float | None, _e: Any
    ) -> None:
        """A maintenance drain begins: it leaves once empty, or at the deadline."""
        if not self._in_fleet(replica_id) or self._leaving(replica_id):
            return  # (not in the fleet, or leaving it: nothing to maintain)
        if self._state[replica_id] != UP:
            return  # (out already: the work is done while it is)
        event = self._drain(replica_id, MAINTENANCE)

        def leave(_e: Any) -> None:
            if self._outage[replica_id] is event and self._state[replica_id] == DRAINING:
                self._take_down(replica_id, event, retry=True)
                self._back_at(replica_id, event, self.env.now + duration_s)

        def emptied(_replica: Replica) -> None:
            # (heard inside the replica's own step end, maybe: it leaves in an event of its
            # own, once that step end is over; it has nothing to start a step with meanwhile)
            timeout_at(self.env, self.env.now).callbacks.append(leave)

        self.cluster.drain(self.cluster.replicas[replica_id], emptied)
        if deadline_s is not None:
            timeout_at(self.env, self.env.now + deadline_s).callbacks.append(leave)

    def _notice(self, replica_id: int, notice_s: float, replace_s: float | None, _e: Any) -> None:
        """A spot reclaim notice: no new requests now, lost at the notice's end."""
        if not self._in_fleet(replica_id) or self._leaving(replica_id):
            return  # (not in the fleet, or leaving it: nothing to reclaim)
        if self._state[replica_id] != UP:
            return
        event = self._drain(replica_id, SPOT)
        self.cluster.drain(self.cluster.replicas[replica_id], lambda _replica: None)

        def reclaim(_e: Any) -> None:
            if self._outage[replica_id] is event and self._state[replica_id] == DRAINING:
                self._take_down(replica_id, event, retry=self.retry)
                if replace_s is not None and self._in_fleet(replica_id):
                    self._back_at(replica_id, event, self.env.now + replace_s)

        timeout_at(self.env, self.env.now + notice_s).callbacks.append(reclaim)

    # -- the changes -----------------------------------------------------------------------

    def _drain(self, replica_id: int, kind: str) -> FaultEvent:
        if self.transfers is not None:  # (a decode replica: its router chooses it no more)
            self.transfers.stop_choosing(self.cluster.replicas[replica_id])
        event = self.log.begin(replica_id, kind, self.env.now)
        self._state[replica_id] = DRAINING
        self._outage[replica_id] = event
        self.log.out_of_routing(replica_id, self.env.now)
        return event

    def _fail(self, replica_id: int, kind: str) -> FaultEvent | None:
        """Replica ``replica_id`` fails now (None: it was down already)."""
        if self._state[replica_id] == DOWN:
            return None
        event = self.log.begin(replica_id, kind, self.env.now)
        if self._state[replica_id] == UP:
            self.log.out_of_routing(replica_id, self.env.now)
        self._outage[replica_id] = event  # (a drain under way ends with it)
        self._take_down(replica_id, event, retry=self.retry)
        return event

    def _take_down(self, replica_id: int, event: FaultEvent, retry: bool) -> None:
        """The replica leaves now with what it holds: each request retried or failed."""
        cluster = self.cluster
        replica = cluster.replicas[replica_id]
        now = self.env.now
        held = [
            r
            for r in cluster.request_log.unwritten
            if r.replica_id == replica_id and (r.status == WAITING or r.status == RUNNING)
        ]
        if self.transfers is not None:  # (before it stops: it still counts them)
            held += self.transfers.lost(replica)
        cluster.stop_routing(replica)
        if self.transfers is not None:  # (a drain waiting only for transfers called off)
            cluster.settle_drains()
        replica.stop()
        cluster.flush_steps(replica)  # (its steps so far: the engines are replaced)
        self.log.down(replica_id, now)
        if self._lost_for_good(event.kind):
            assert self.autoscaler is not None
            self._state[replica_id] = GONE
            self._outage[replica_id] = None
            if not self.autoscaler.lost(replica):  # (replaced: ``_fleet_changed`` hears it)
                self.log.closed(replica_id, None)  # (it was leaving the fleet anyway)
                self.log.gone(replica_id, now)
        else:
            replica.engines = self.new_engines(replica_id)
            self._state[replica_id] = DOWN
        reason = FAIL_REASONS[event.kind]
        for request in held:
            if retry:
                _send_again(request, now)
                event.retried += 1
                cluster.route(request, ARRIVAL_PRIORITY)
            else:
                request.status = FAILED
                request.fail_reason = reason
                event.failed += 1
                cluster.end_request(request, ARRIVAL_PRIORITY)

    def _back_at(self, replica_id: int, event: FaultEvent, time_s: float) -> None:
        timeout_at(self.env, time_s).callbacks.append(lambda _e: self._back(replica_id, event))

    def _back(self, replica_id: int, event: FaultEvent) -> None:
        """The replica is back, if its absence is still ``event``'s."""
        if self._outage[replica_id] is not event:
            return
        replica = self.cluster.replicas[replica_id]
        replica.restart()
        self.cluster.resume_routing(replica)
        if self.transfers is not None:
            self.transfers.back(replica)
        self._state[replica_id] = UP
        self._outage[replica_id] = None
        self.log.up(replica_id, self.env.now)


def _send_again(request: Request, now: float) -> None:
    """``request`` starts over on another replica: nothing computed, no token sent (the
    client's stream restarts), its arrival kept."""
    request.retries += 1
    request.retry_lost_s = now - request.arrival_time_s
    request.status = WAITING
    request.num_generated = 0
    request.num_computed_tokens = 0
    request.kv_slots = 0  # (its blocks went with the replica's KV cache)
    request.first_scheduled_time_s = None
    request.first_token_time_s = None
    request.completion_time_s = None
    # (a disaggregated fleet's: it is prefilled again, and its KV moves again)
    request.prefill_replica_id = None
    request.transfer_start_s = None
    request.transfer_end_s = None
