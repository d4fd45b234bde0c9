"""Routers: which replica a new request goes to.

A router sees each replica's ``num_outstanding`` (requests queued or running) and
``committed_tokens`` (prompt + output tokens of those requests: the KV footprint the replica has
taken on). Both change only when a request arrives or ends, so a router's choice never depends
on how far a replica is inside a step. Ties go to the lowest replica id.

Left out: routing on prefix-cache affinity and on measured latency.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from sim.engine.request import Request


class RoutedReplica(Protocol):
    num_outstanding: int
    committed_tokens: int


class Router(Protocol):
    """What the cluster asks of a router: the index, in ``replicas``, of the one to use."""

    def choose(self, request: Request, replicas: Sequence[RoutedReplica]) -> int: ...


class RoundRobinRouter:
    """Replicas in turn, whatever their load."""

    def __init__(self, **_: Any) -> None:
        # One turn counter per model: the candidates are the replicas serving the request's
        # model (sim.catalog.placement), and each model's replicas take their own turns.
        self._next: dict[int, int] = {}

    def choose(self, request: Request, replicas: Sequence[RoutedReplica]) -> int:
        index = self._next.get(request.model_id, 0) % len(replicas)
        self._next[request.model_id] = index + 1
        return index


class RandomRouter:
    """A uniformly random replica (stream ``router``)."""

    def __init__(self, rng: np.random.Generator, **_: Any) -> None:
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

    def __init__(self, **_: Any) -> None:
        pass

    def choose(self, request: Request, replicas: Sequence[RoutedReplica]) -> int:
        return _least_loaded(replicas, "num_outstanding")


class LeastTokensRouter:
    """The replica with the fewest tokens committed (prompt + output of requests in flight)."""

    def __init__(self, **_: Any) -> None:
        pass

    def choose(self, request: Request, replicas: Sequence[RoutedReplica]) -> int:
        return _least_loaded(replicas, "committed_tokens")
