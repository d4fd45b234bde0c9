"""Searches in threads, their requests launched in rounds (sim.plan.rounds)."""

from __future__ import annotations

import pytest

from sim.plan.rounds import Rounds


def _launcher(log: list[list[int]]):
    def launch(batch: list[int]) -> list[int]:
        log.append(list(batch))
        return [10 * r for r in batch]

    return launch


def test_independent_searches_share_rounds_and_a_request_is_launched_once():
    rounds_seen: list[list[int]] = []
    rounds: Rounds[int] = Rounds(_launcher(rounds_seen))

    def search(start: int, steps: int) -> list[int]:
        # sequential: each request depends on the answer before it
        got = [start]
        for _ in range(steps):
            (answer,) = rounds.ask([got[-1] + 1])
            got.append(answer)
        return got

    results = rounds.run([lambda: search(0, 3), lambda: search(0, 2), lambda: search(5, 1)])
    assert results == [[0, 10, 110, 1110], [0, 10, 110], [5, 60]]
    # round 1: the three first requests (1 asked twice, launched once); then what is left
    assert [sorted(r) for r in rounds_seen] == [[1, 6], [11], [111]]
    assert rounds.launched == 4


def test_a_search_may_ask_for_several_requests_and_fork_searches_of_its_own():
    rounds_seen: list[list[int]] = []
    rounds: Rounds[int] = Rounds(_launcher(rounds_seen))

    def child(x: int) -> int:
        (a,) = rounds.ask([x])
        (b,) = rounds.ask([a + 1])
        return b

    def parent() -> tuple[list[int], list[int]]:
        first = rounds.ask([1, 2, 3])  # one round
        return first, rounds.parallel([lambda: child(4), lambda: child(5)])

    assert rounds.run([parent]) == [([10, 20, 30], [410, 510])]
    assert [sorted(r) for r in rounds_seen] == [[1, 2, 3], [4, 5], [41, 51]]


def test_answers_equal_a_sequential_run_however_the_rounds_fall():
    import random
    import time

    def answer(r: tuple[int, int]) -> int:
        return (r[0] * 7 + r[1] * 13) % 11

    def search(ask, parallel, seed: int, depth: int) -> list[int]:
        """Sequential asks whose next request depends on the answers; random pauses (under
        rounds) change which searches' requests meet in a round; nested searches at depth."""
        rng = random.Random(seed)
        got, x = [], seed
        for step in range(rng.randint(1, 4)):
            if parallel is not None:
                time.sleep(rng.random() * 0.003)
            (a,) = ask([(x % 5, step)])
            got.append(a)
            x += a
        if depth:
            children = [
                lambda s=seed * 10 + k: search(ask, parallel, s, depth - 1) for k in range(2)
            ]
            kids = parallel(children) if parallel is not None else [c() for c in children]
            got += [v for kid in kids for v in kid]
        return got

    reference = [search(lambda rs: [answer(r) for r in rs], None, s, 2) for s in range(8)]
    sizes = set()
    for _ in range(3):
        rounds: Rounds[tuple[int, int]] = Rounds(
            lambda batch: (sizes.add(len(batch)), [answer(r) for r in batch])[1]
        )
        found = rounds.run(
            [lambda s=s, r=rounds: search(r.ask, r.parallel, s, 2) for s in range(8)]
        )
        assert found == reference
    assert max(sizes) > 1  # requests of several searches did share rounds


def test_an_error_in_a_search_or_a_launch_is_raised_after_every_search_stopped():
    rounds: Rounds[int] = Rounds(_launcher([]))

    def bad() -> int:
        rounds.ask([1])
        raise ValueError("search broke")

    def long() -> int:
        x = 0
        for _ in range(50):
            (x,) = rounds.ask([x + 1])
        return x

    with pytest.raises(ValueError, match="search broke"):
        rounds.run([bad, long])

    def failing(batch: list[int]) -> list[int]:
        raise RuntimeError("launcher down")

    broken: Rounds[int] = Rounds(failing)
    with pytest.raises(RuntimeError, match="launcher down"):
        broken.run([lambda: broken.ask([1])[0], lambda: broken.ask([2])[0]])


def test_no_search_no_round():
    seen: list[list[int]] = []
    assert Rounds(_launcher(seen)).run([]) == []
    assert seen == []


def test_searches_waiting_on_a_round_stop_when_another_fails():
    import threading
    import time

    rounds: Rounds[int] = Rounds(_launcher([]))

    def waits() -> int:
        rounds.ask([1])
        return rounds.ask([2])[0]  # waiting for round 2 when the other fails

    def fails() -> int:
        rounds.ask([3])
        time.sleep(0.1)
        raise ValueError("late failure")

    caught: list[BaseException] = []

    def plan() -> None:
        try:
            rounds.run([waits, fails])
        except ValueError as err:
            caught.append(err)

    runner = threading.Thread(target=plan, daemon=True)
    runner.start()
    runner.join(timeout=10)
    assert not runner.is_alive(), "the rounds hung after a failure"
    assert [str(e) for e in caught] == ["late failure"]
