"""Routers: which replica a new request goes to.

A router sees each replica's ``num_outstanding`` (requests queued or running) and
``committed_tokens`` (prompt + output tokens of those requests: the KV footprint the replica has
taken on). Both change only when a request arrives or ends, so a router's choice never depends
on how far a replica is inside a step. Ties go to the lowest replica id. A cache-aware router
(``prefix_affinity``) also asks each replica how much of the request's prompt its prefix cache
holds (``cached_prompt_tokens``).

Left out: routing on measured latency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from sim.engine.request import Request
from sim.errors import require


class RoutedReplica(Protocol):
    replica_id: int
    num_outstanding: int
    committed_tokens: int

    def cached_prompt_tokens(self, request: Request) -> int: ...


class Router(Protocol):
    """What the cluster asks of a router: the index, in ``replicas``, of the one to use."""

    def choose(self, request: Request, replicas: Sequence[RoutedReplica]) -> int: ...


class RoundRobinRouter:
    """Replicas in turn, whatever their load."""

    def __init__(self) -> None:
        # One turn counter per model: the candidates are the replicas serving the request's
        # model (sim.catalog.placement), and each model's replicas take their own turns.
        self._next: dict[int, int] = {}

    def choose(self, request: Request, replicas: Sequence[RoutedReplica]) -> int:
        index = self._next.get(request.model_id, 0) % len(replicas)
        self._next[request.model_id] = index + 1
        return index


class RandomRouter:
    """A uniformly random replica (stream ``router``)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def choose(self, request: Request, replicas: Sequence[RoutedReplica]) -> int:
        return int(self._rng.integers(len(replicas)))


def _least_loaded(replicas: Sequence[RoutedReplica], load: str) -> int:
    """Index of the replica with the smallest ``load`` attribute (the first, on ties)."""
    best, best_load = 0, getattr(replicas[0], load)
    for i in range(1, len(replicas)):
        value = getattr(replicas[i], load)
        if value < best_load:
            best, best_load = i, value
    return best


class LeastOutstandingRouter:
    """The replica with the fewest requests in flight (queued or running)."""

    def __init__(self) -> None:
        pass

    def choose(self, request: Request, replicas: Sequence[RoutedReplica]) -> int:
        return _least_loaded(replicas, "num_outstanding")


class LeastTokensRouter:
    """The replica with the fewest tokens committed (prompt + output of requests in flight)."""

    def __init__(self) -> None:
        pass

    def choose(self, request: Request, replicas: Sequence[RoutedReplica]) -> int:
        return _least_loaded(replicas, "committed_tokens")


class SessionRouter:
    """Every turn of a conversation (``workload=sessions``) to the replica that took its first
    turn, chosen as ``least_outstanding`` chooses, as a sticky-session load balancer pins a
    client: the conversation's earlier turns are in that replica's prefix cache, if it has one.
    A request of no session is routed as least-outstanding. The pin is forgotten at the
    session's last turn, so memory follows the sessions in progress."""

    def __init__(self) -> None:
        # (model, session) -> replica id: an id, not a position, since an autoscaled fleet's
        # candidates change (a drained replica's sessions move, as a load balancer's would)
        self._pinned: dict[tuple[int, int], int] = {}

    def choose(self, request: Request, replicas: Sequence[RoutedReplica]) -> int:
        session = request.session_id
        if session is None:
            return _least_loaded(replicas, "num_outstanding")
        key = (request.model_id, session)
        pinned = self._pinned.get(key)
        index = None
        if pinned is not None:
            index = next((i for i, r in enumerate(replicas) if r.replica_id == pinned), None)
        if index is None:
            index = _least_loaded(replicas, "num_outstanding")
        if request.last_turn:
            self._pinned.pop(key, None)
        else:
            self._pinned[key] = replicas[index].replica_id
        return index


class PrefixAffinityRouter:
    """The replica with the best weighted score of prefix hit and load, as llm-d's inference
    scheduler scores endpoints (a weighted sum of scorers, the highest score wins; its default
    profile weighs the prefix-cache scorer 3 and the queue scorer 2: Red Hat OpenShift AI 3.4,
    "Configuring scheduler settings for LLM inference services", read 2026-12-02):

    - prefix: the share of the request's prompt tokens the replica's prefix cache holds now
      (0 to 1). The cache is read as it is, as llm-d's precise scorer does from the
      engines' KV events; its approximate scorer guesses from its own routing history;
    - load: the replica's requests in flight, min-max scaled over the candidates (1 for the
      least loaded, 0 for the most; 1 for all when equal).

    Needs ``kv.prefix_caching=true``: without a cache every prefix score is 0, and this is
    least-outstanding routing."""

    needs_prefix_cache = True

    def __init__(self, prefix_weight: float = 3.0, load_weight: float = 2.0) -> None:
        for name, weight in (("prefix_weight", prefix_weight), ("load_weight", load_weight)):
            require(
                isinstance(weight, (int, float))
                and not isinstance(weight, bool)
                and math.isfinite(weight)
                and weight >= 0,
                f"router.{name}",
                weight,
                "must be a number >= 0",
            )
        self.prefix_weight = float(prefix_weight)
        self.load_weight = float(load_weight)

    def choose(self, request: Request, replicas: Sequence[RoutedReplica]) -> int:
        weigh_prefix = bool(request.prefix_groups) and self.prefix_weight > 0
        loads = [r.num_outstanding for r in replicas]
        low, high = min(loads), max(loads)
        best, best_score = 0, -math.inf
        for i, replica in enumerate(replicas):
            score = 0.0
            if weigh_prefix:
                cached = replica.cached_prompt_tokens(request)
                score += self.prefix_weight * cached / request.prompt_tokens
            score += self.load_weight * ((high - loads[i]) / (high - low) if high > low else 1.0)
            if score > best_score:
                best, best_score = i, score
        return best
