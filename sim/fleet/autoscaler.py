"""A fleet whose replica count changes while the run goes (``autoscale``).

Replicas are asked for, provisioned, serve, drain and are released:

- asked for: billed from this moment (the cloud bills a node from its start), serving nothing
  for ``provision_s`` (a node starting, the weights loaded, CUDA graphs captured);
- ready: the router sends it requests from now on;
- draining: the router sends it nothing more; it finishes what it holds (queued and running
  requests alike: nothing is lost or sent again), and is released when its last client has
  heard the end, when its bill stops. A replica still being provisioned is cancelled instead.

Who decides (``autoscale.policy``):

- ``utilization``, ``concurrency``, ``rate``, ``queue``, ``kv``: every ``interval_s``, Kubernetes'
  Horizontal Pod Autoscaler rule (kubernetes.io, "Horizontal Pod Autoscaling", algorithm
  details, read 2026-12-02): ``desired = ceil(serving x metric / target)``, left alone while
  the metric is within ``tolerance`` of the target; scale-up at once, counting replicas
  already being provisioned; scale-down only to the highest count recommended over the last
  ``scale_down_window_s`` (HPA's stabilisation window), cancelling replicas being provisioned
  first, then draining the serving ones with the fewest requests in flight. The metrics, over
  the serving replicas: the share of the last interval they were busy (any step running: a
  GPU's "utilisation" is near 1 at any load with continuous batching, so this policy scales
  out early), their mean requests in flight over the interval (Knative's concurrency target),
  the requests per second sent to each over the interval (a request-rate scaler, as KEDA's
  Prometheus scaler on a gateway's request counter), the requests waiting at each now (queued
  for admission, preempted ones included: vLLM's ``num_requests_waiting`` gauge; constant
  through a decode stretch, so exact either way),
  their KV blocks in use now (read between steps, so this policy steps one by one: a decode
  stretch would show its start);
- ``schedule``: the fleet ``autoscale.schedule`` gives for each time, each change asked for
  ``provision_s`` ahead so the new replicas are ready on time; a switch of engine configuration
  (``autoscale.engines``) runs both fleets until the new one is ready, then drains the old.

A replica lost to a fault (a failure, a spot reclaim: ``sim.fleet.faults``, through ``lost``)
leaves the fleet and its bill at once (event ``failed``), with what it held; a serving one is
replaced as a scale-up is, asked for now and ready ``provision_s`` on (one the autoscaler was
draining is not: it was leaving). A metric policy reads no metric while no replica serves (all
out at once): it asks for nothing then, the replacements under way aside.

Every change is a row of the ``ScalingLog`` (``sim.output.scaling``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import simpy

from sim.config.autoscale import AutoscaleConfig, ScheduledFleet
from sim.engine.scheduler.base import Scheduler
from sim.fleet.replica import Engine, Replica
from sim.fleet.simclock import timeout_at
from sim.output.scaling import ScalingLog


@dataclass(frozen=True)
class Variant:
    """An engine configuration replicas can be built with."""

    name: str
    make_engines: Callable[[], list[Engine]]
    gpus: int  # per replica
    usd_per_gpu_hour: float
    scheduler: Callable[[], Scheduler] | None = None  # one engine's scheduler, for checks
    description: dict[str, Any] = field(default_factory=dict)  # for the summary

    @property
    def usd_per_hour(self) -> float:
        return self.gpus * self.usd_per_gpu_hour


@dataclass(eq=False)
class _Provisioning:
    variant: Variant
    ready: simpy.Event
    cancelled: bool = False
    replaces: int | None = None  # the lost replica it replaces (``Autoscaler.lost``), if any


@dataclass
class _Fleet:
    """What is billed now, by state."""

    ready: int = 0
    provisioning: int = 0
    draining: int = 0
    gpus: int = 0
    usd_per_hour: float = 0.0
    variant_of: dict[int, Variant] = field(default_factory=dict)  # replica id -> its variant


class FleetOwner(Protocol):
    """What the autoscaler asks of the cluster (``sim.fleet.cluster.Cluster``)."""

    env: simpy.Environment
    replicas: list[Replica]

    @property
    def serving(self) -> list[Replica]: ...

    def add_replica(self, engines: list[Engine]) -> Replica: ...

    def drain(self, replica: Replica, on_released: Callable[[Replica], None]) -> None: ...

    def finished(self) -> bool: ...


class Autoscaler:
    def __init__(
        self,
        cluster: FleetOwner,
        config: AutoscaleConfig,
        variants: dict[str, Variant],
        initial: Variant,
        log: ScalingLog,
    ) -> None:
        """``cluster``'s replicas at time 0 (all serving) are of variant ``initial``."""
        self.cluster = cluster
        self.env = cluster.env
        self.config = config
        self.variants = variants
        self.log = log
        self._fleet = _Fleet()
        self._pending: list[_Provisioning] = []
        self._recommended: deque[tuple[float, int]] = deque()
        self._base = initial  # what a metric policy adds
        self._leaving: set[int] = set()  # the replicas it is draining
        # who hears of each change (``watch``): (event, replica id, the lost one it replaces)
        self._watchers: list[Callable[[str, int | None, int | None], None]] = []
        for replica in cluster.serving:
            self._bill(replica.replica_id, initial, +1)
            self._fleet.ready += 1
        self._record("start")
        if config.policy == "schedule":
            assert config.schedule is not None  # the config's rule
            self.env.process(self._follow(config.schedule))
        else:
            self.env.process(self._watch())

    def watch(self, watcher: Callable[[str, int | None, int | None], None]) -> None:
        """Tell ``watcher(event, replica_id, replaces)`` of each replica that becomes ready,
        is released, or whose replacement is cancelled (``replaces``: the
        lost replica a replacement stands for, else None): the faults follow the fleet
        (``sim.fleet.faults``)."""
        self._watchers.append(watcher)

    def _tell(self, event: str, replica_id: int | None, replaces: int | None = None) -> None:
        for watcher in self._watchers:
            watcher(event, replica_id, replaces)

    def is_draining(self, replica_id: int) -> bool:
        """Whether it is draining replica ``replica_id`` (scaling down)."""
        return replica_id in self._leaving

    def variant_of(self, replica_id: int) -> Variant:
        """The engine configuration replica ``replica_id`` was built with."""
        return self._fleet.variant_of[replica_id]

    def lost(self, replica: Replica) -> bool:
        """``replica`` is lost (a failure, a spot reclaim: the faults took it down, with what
        it held): out of the fleet and its bill now; replaced (True) unless it was being
        drained (False)."""
        fleet = self._fleet
        replica_id = replica.replica_id
        variant = fleet.variant_of[replica_id]
        self._bill(None, variant, -1)
        if replica_id in self._leaving:
            self._leaving.remove(replica_id)
            fleet.draining -= 1
            self._record("failed", replica)
            return False
        fleet.ready -= 1
        self._record("failed", replica)
        self._ask(variant, 1, replaces=replica_id)
        return True

    # -- the fleet's changes ---------------------------------------------------------------

    def _bill(self, replica_id: int | None, variant: Variant, sign: int) -> None:
        fleet = self._fleet
        fleet.gpus += sign * variant.gpus
        fleet.usd_per_hour += sign * variant.usd_per_hour
        if replica_id is not None:
            fleet.variant_of[replica_id] = variant

    def _record(self, event: str, replica: Replica | None = None) -> None:
        fleet = self._fleet
        self.log.record(
            self.env.now,
            event,
            replica_id=None if replica is None else replica.replica_id,
            ready=fleet.ready,
            provisioning=fleet.provisioning,
            draining=fleet.draining,
            gpus=fleet.gpus,
            # a sum of additions and removals: round away the float dust a removal leaves
            usd_per_hour=round(fleet.usd_per_hour, 9) if fleet.gpus else 0.0,
        )

    def _ask(
        self, variant: Variant, count: int, replaces: int | None = None
    ) -> list[_Provisioning]:
        """Ask for ``count`` replicas of ``variant``: billed now, ready ``provision_s`` on."""
        asked = []
        for _ in range(count):
            provisioning = _Provisioning(variant, self.env.event(), replaces=replaces)
            self._pending.append(provisioning)
            self._bill(None, variant, +1)
            self._fleet.provisioning += 1
            self._record("scale_up")
            ready_at = self.env.now + self.config.provision_s
            timeout_at(self.env, ready_at).callbacks.append(partial(self._ready, provisioning))
            asked.append(provisioning)
        return asked

    def _ready(self, provisioning: _Provisioning, _event: simpy.Event | None = None) -> None:
        if provisioning.cancelled:
            return
        self._pending.remove(provisioning)
        replica = self.cluster.add_replica(provisioning.variant.make_engines())
        self._fleet.variant_of[replica.replica_id] = provisioning.variant
        self._fleet.provisioning -= 1
        self._fleet.ready += 1
        self._record("ready", replica)
        self._tell("ready", replica.replica_id, provisioning.replaces)
        provisioning.ready.succeed(replica)

    def _cancel(self, provisioning: _Provisioning) -> None:
        provisioning.cancelled = True
        self._pending.remove(provisioning)
        self._bill(None, provisioning.variant, -1)
        self._fleet.provisioning -= 1
        self._record("cancelled")
        if provisioning.replaces is not None:
            self._tell("cancelled", None, provisioning.replaces)

    def _drain(self, replica: Replica) -> None:
        self._fleet.ready -= 1
        self._fleet.draining += 1
        self._leaving.add(replica.replica_id)
        self._record("drain", replica)
        self.cluster.drain(replica, self._released)

    def _released(self, replica: Replica) -> None:
        self._fleet.draining -= 1
        self._leaving.discard(replica.replica_id)
        self._bill(None, self._fleet.variant_of[replica.replica_id], -1)
        self._record("released", replica)
        self._tell("released", replica.replica_id)

    def _remove(self, count: int, variant: Variant | None = None) -> None:
        """Take ``count`` replicas away: cancel the newest being provisioned first, then drain
        the serving ones with the fewest requests in flight (the highest id on ties)."""
        for provisioning in reversed(list(self._pending)):
            if count and (variant is None or provisioning.variant is variant):
                self._cancel(provisioning)
                count -= 1
        serving = sorted(
            (
                r
                for r in self.cluster.serving
                if variant is None or self._fleet.variant_of[r.replica_id] is variant
            ),
            key=lambda r: (r.num_outstanding, -r.replica_id),
        )
        for replica in serving[:count]:
            self._drain(replica)

    # -- who decides -----------------------------------------------------------------------

    def _watch(self) -> Generator[simpy.Event, Any, None]:
        """The metric policy, every ``interval_s`` until the run's last request has ended."""
        config = self.config
        # (every replica's, not only the serving ones': one out for maintenance, back by the
        # next look, counts its change over the interval, not its whole life)
        seen = self._integrals(self.cluster.replicas)
        while not self.cluster.finished():
            yield timeout_at(self.env, self.env.now + config.interval_s)
            serving = self.cluster.serving
            if serving:  # (none: all out at once to faults, no metric to read)
                metric = self._metric(serving, seen)
                self._decide(len(serving), metric)
            seen = self._integrals(self.cluster.replicas)

    def _integrals(self, serving: list[Replica]) -> dict[int, float]:
        """What the metric is a change of, now: busy seconds or request-seconds."""
        policy = self.config.policy
        if policy == "utilization":
            return {r.replica_id: r.busy_time_s() for r in serving}
        if policy == "rate":
            return {r.replica_id: float(r.num_routed) for r in serving}
        return {r.replica_id: r.load_s() for r in serving}

    def _metric(self, serving: list[Replica], seen: dict[int, float]) -> float:
        """The policy's metric over the serving replicas: their mean share of the last interval
        spent busy, their mean requests in flight over it, the requests sent to each per
        second of it (a replica ready since counts from then), or now: the requests waiting
        at each, their share of KV blocks in use."""
        policy = self.config.policy
        if policy in ("utilization", "concurrency", "rate"):
            now = self._integrals(serving)
            interval = self.config.interval_s
            means = [(now[i] - seen.get(i, 0.0)) / interval for i in now]
            if policy == "utilization":
                means = [min(1.0, m) for m in means]
            return sum(means) / len(serving)
        if policy == "queue":
            return sum(len(e.scheduler.waiting) for r in serving for e in r.engines) / len(serving)
        return sum(
            e.scheduler.kv.num_used_blocks / e.scheduler.kv.num_blocks
            for r in serving
            for e in r.engines
        ) / len(serving)

    def _decide(self, serving: int, metric: float) -> None:
        config = self.config
        ratio = metric / config.metric_target
        desired = serving if abs(ratio - 1.0) <= config.tolerance else math.ceil(serving * ratio)
        desired = max(config.min_replicas, min(config.max_replicas, desired))
        now = self.env.now
        recommended = self._recommended
        recommended.append((now, desired))
        while recommended[0][0] < now - config.scale_down_window_s:
            recommended.popleft()
        planned = serving + len(self._pending)
        if desired > planned:
            self._ask(self._base, desired - planned)
            return
        stable = max(count for _, count in recommended)
        if stable < planned:
            self._remove(planned - stable)

    def _follow(self, schedule: list[ScheduledFleet]) -> Generator[simpy.Event, Any, None]:
        """The schedule: each fleet asked for ``provision_s`` before its time."""
        env = self.env
        current = self.variants[schedule[0].engine]
        count = schedule[0].replicas
        for entry in schedule[1:]:
            variant = self.variants[entry.engine]
            ask_at = max(env.now, entry.at_s - self.config.provision_s)
            if ask_at > env.now:
                yield timeout_at(env, ask_at)
            if variant is current:
                if entry.replicas > count:
                    self._ask(variant, entry.replicas - count)
                if entry.at_s > env.now:
                    yield timeout_at(env, entry.at_s)
                if entry.replicas < count:
                    self._remove(count - entry.replicas, variant)
            else:
                asked = self._ask(variant, entry.replicas)
                yield simpy.AllOf(env, [p.ready for p in asked])
                self._remove(count, current)
            current, count = variant, entry.replicas
