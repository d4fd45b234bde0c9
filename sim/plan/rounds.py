"""Many searches side by side, their simulations launched together in rounds.

A plan's searches are sequential (bisection asks for one count after another, a point asks
for one replication after another), but the searches of different candidates, and a
candidate's what-ifs, are independent. Each search runs in its own thread, written as plain
sequential code; when it needs simulations it calls ``ask`` and blocks. Once every search is
blocked (or finished), the simulations they asked for are handed to ``launch`` as one batch (a
round) and the answers handed back. ``launch`` is a Hydra launcher (``fleetcast plan``: local
processes through joblib, a Ray cluster) or a local process pool (the Python API), and sees
batches as large as the searches allow: the parallelism of a sweep without its full grid.

The threads only wait and decide (the simulations run in ``launch``), and the answers do not
depend on how the rounds fall, so a plan is the same whatever the launcher.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=Hashable)
R = TypeVar("R")


class Rounds(Generic[T]):
    """Runs searches in threads and their requests (``T``, hashable) in rounds through
    ``launch(requests) -> results`` (in order). A request asked twice is launched once."""

    def __init__(
        self,
        launch: Callable[[list[T]], Sequence[Any]],
        on_round: Callable[[int, int], None] | None = None,
    ) -> None:
        self._launch = launch
        self._on_round = on_round or (lambda launched, done: None)
        # One lock, and a condition per kind of waiter, so that a change wakes only those it
        # concerns: with one condition for all, every ask() woke every waiting search, and a
        # plan of 1,000 candidates spent 10 s per 18,000 simulations only waking threads.
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # the coordinator: _runnable == 0
        self._answered = threading.Condition(self._lock)  # searches waiting in ask()
        self._runnable = 0  # threads that are not waiting on a round or on their children
        self._asked: dict[T, None] = {}  # this round's requests, in the order asked
        self._answers: dict[T, Any] = {}
        self._waiting = 0  # threads waiting in ask() for the round being prepared or launched
        self._error: BaseException | None = None
        self.launched = 0

    def ask(self, requests: list[T]) -> list[Any]:
        """The results of ``requests`` (from a search thread): those not answered yet join the
        next round and the thread waits for it."""
        with self._lock:
            missing = [r for r in requests if r not in self._answers]
            if missing and self._error is None:
                for r in missing:
                    self._asked.setdefault(r, None)
                self._runnable -= 1
                self._waiting += 1
                self._idle.notify()
                # every request of a thread that waits is in the next round: the coordinator
                # answers all of them at once and counts the thread runnable again
                self._answered.wait_for(
                    lambda: self._error is not None or all(r in self._answers for r in missing)
                )
            if self._error is not None:
                raise _Abandoned
            return [self._answers[r] for r in requests]

    def parallel(self, searches: list[Callable[[], R]]) -> list[R]:
        """Run ``searches`` side by side (from a search thread, or from ``run``): their results
        in order, once all have ended."""
        results: list[Any] = [None] * len(searches)
        left = [len(searches)]
        ended = threading.Condition(self._lock)  # this call's searches: the parent waits

        def one(i: int, search: Callable[[], R]) -> None:
            try:
                results[i] = search()
            except _Abandoned:
                pass
            except BaseException as err:  # raised again by run(), in the caller's thread
                with self._lock:
                    self._fail(err)
            finally:
                with self._lock:
                    self._runnable -= 1
                    left[0] -= 1
                    if left[0] == 0:
                        self._runnable += 1  # the waiting parent goes on
                        ended.notify()
                    self._idle.notify()

        if not searches:
            return []
        with self._lock:
            self._runnable += len(searches) - 1  # the parent waits while they run
        for i, search in enumerate(searches):
            threading.Thread(target=one, args=(i, search), daemon=True).start()
        with self._lock:
            ended.wait_for(lambda: left[0] == 0)
            if self._error is not None:
                raise _Abandoned
        return results

    def run(self, searches: list[Callable[[], R]]) -> list[R]:
        """Run ``searches`` to their ends, launching the rounds they ask for from this thread
        (the caller's): their results in order. An error in a search or a launch is raised
        here, after every search has stopped."""
        outcome: list[Any] = []
        failure: list[BaseException] = []

        def top() -> None:
            try:
                outcome.extend(self.parallel(searches))
            except _Abandoned:
                pass
            except BaseException as err:
                failure.append(err)
            finally:
                with self._lock:
                    self._runnable -= 1
                    self._idle.notify()

        with self._lock:
            self._runnable += 1
        threading.Thread(target=top, daemon=True).start()
        while True:
            with self._lock:
                self._idle.wait_for(lambda: self._runnable == 0)
                batch = list(self._asked)
                self._asked.clear()
            if not batch or self._error is not None:
                break  # every search ended (or stopped: nothing waits once one failed)
            try:
                results = list(self._launch(batch))
                if len(results) != len(batch):
                    raise RuntimeError(f"launched {len(batch)}, got {len(results)} results")
            except BaseException as err:
                with self._lock:
                    self._fail(err)
                continue
            self.launched += len(batch)
            try:
                self._on_round(len(batch), self.launched)
            except BaseException as err:
                with self._lock:
                    self._fail(err)
                continue
            with self._lock:
                self._answers.update(zip(batch, results, strict=True))
                self._wake_waiting()
        if self._error is not None:
            raise self._error
        if failure:
            raise failure[0]
        return outcome

    def _fail(self, err: BaseException) -> None:
        """Keep the first error and wake the waiting searches, to stop (under the lock)."""
        self._error = self._error or err
        self._wake_waiting()

    def _wake_waiting(self) -> None:
        """Count the threads waiting in ask() runnable again and wake them (under the lock)."""
        self._runnable += self._waiting
        self._waiting = 0
        self._answered.notify_all()


class _Abandoned(BaseException):
    """A search stopped because another failed (a BaseException: a search's own ``except
    Exception`` must not swallow it)."""
