"""Conversations (sim.workload.sessions): how turns grow, what they share, and how the cluster
paces them (each next turn a think time after the last one ended)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config.compose import compose_config
from sim.config.workload_schema import SessionsWorkload
from sim.errors import ConfigError
from sim.output.results import REQUESTS_SCHEMA
from sim.run import simulate
from sim.workload.prefixes import prefix_groups
from sim.workload.sessions import sample_sessions
from sim.workload.source import build_workload

SPEC = {
    "kind": "sessions",
    "session_rate": 2.0,
    "num_sessions": 300,
    "turns": {"dist": "uniform", "low": 1, "high": 6},
    "think_time_s": 5.0,
    "num_apps": 3,
    "system_prompt_tokens": {"dist": "uniform", "low": 100, "high": 900},
    "user_tokens": {"dist": "uniform", "low": 1, "high": 300},
    "output_tokens": {"dist": "uniform", "low": 1, "high": 400},
    "max_context_tokens": 32768,
}


def spec(**changes: object) -> SessionsWorkload:
    return SessionsWorkload.from_config({**SPEC, **changes}, "workload")


def test_each_turn_resends_the_conversation_and_a_new_message():
    drawn = sample_sessions(spec(), seed=3)
    sessions = drawn.sessions
    system_of_app: dict[int, int] = {}
    for s in range(sessions.num_sessions):
        rows = range(sessions.first_row[s], sessions.first_row[s + 1])
        for row in rows:
            ids, tokens = drawn.segment_ids[row], drawn.segment_tokens[row]
            turn = row - sessions.first_row[s]
            assert len(ids) == len(tokens) == 2 * turn + 3
            # system prompt, then message and reply of every turn up to this one's
            assert tokens.sum() == drawn.prompt_tokens[row] + drawn.output_tokens[row]
            assert tokens[-1] == drawn.output_tokens[row]
            app = int(sessions.app[s])
            assert ids[0] == app
            assert system_of_app.setdefault(app, int(tokens[0])) == tokens[0]
            assert np.all(ids[1:] >= SPEC["num_apps"])  # the session's own
            if turn:
                before = row - 1
                np.testing.assert_array_equal(ids[:-2], drawn.segment_ids[before])
                np.testing.assert_array_equal(tokens[:-2], drawn.segment_tokens[before])
                new_message = tokens[-2]
                assert drawn.prompt_tokens[row] == (
                    drawn.prompt_tokens[before] + drawn.output_tokens[before] + new_message
                )
    # no two sessions share an id past the system prompt
    own = np.concatenate(
        [drawn.segment_ids[sessions.first_row[s + 1] - 1][1:] for s in range(sessions.num_sessions)]
    )
    assert np.unique(own).size == own.size


def test_timing_turns_and_think_times_follow_their_distributions():
    drawn = sample_sessions(spec(num_sessions=4000), seed=1)
    sessions = drawn.sessions
    gaps = np.diff(sessions.start_s)
    assert sessions.start_s[0] == 0.0
    assert abs(gaps.mean() - 0.5) < 4 * 0.5 / np.sqrt(gaps.size)  # exponential, mean 1/rate
    assert abs(sessions.turns.mean() - 3.5) < 4 * 1.71 / np.sqrt(4000)  # uniform 1..6
    first = sessions.first_row[:-1]
    assert np.all(sessions.think_time_s[first] == 0.0)
    later = np.delete(sessions.think_time_s, first)
    assert abs(later.mean() - 5.0) < 4 * 5.0 / np.sqrt(later.size)


def test_a_conversation_ends_before_it_would_pass_the_context_cap():
    whole = sample_sessions(spec(), seed=2)
    capped = sample_sessions(spec(max_context_tokens=1100), seed=2)
    sessions = capped.sessions
    turn = np.arange(capped.prompt_tokens.size) - sessions.per_row(sessions.first_row[:-1])
    total = capped.prompt_tokens + capped.output_tokens
    assert np.all(total[turn > 0] <= 1100)
    assert (total[turn == 0] > 1100).any()  # a first turn stays, whatever its length
    assert np.all(sessions.turns <= whole.sessions.turns)
    assert sessions.turns.sum() < whole.sessions.turns.sum()
    # the turns kept are the uncapped ones' first turns, unchanged
    for s in range(sessions.num_sessions):
        a, b = sessions.first_row[s], sessions.first_row[s + 1]
        w = whole.sessions.first_row[s]
        np.testing.assert_array_equal(capped.prompt_tokens[a:b], whole.prompt_tokens[w : w + b - a])
        if b - a < whole.sessions.turns[s]:
            row = w + b - a  # the first turn dropped, and it would have passed the cap
            assert whole.prompt_tokens[row] + whole.output_tokens[row] > 1100


def test_streams_are_independent_and_runs_repeat():
    a = sample_sessions(spec(), seed=5)
    again = sample_sessions(spec(), seed=5)
    replies = sample_sessions(spec(output_tokens=7), seed=5)
    np.testing.assert_array_equal(a.prompt_tokens, again.prompt_tokens)
    np.testing.assert_array_equal(a.sessions.think_time_s, again.sessions.think_time_s)
    # other replies: the same sessions, starts, turns and messages
    np.testing.assert_array_equal(a.sessions.start_s, replies.sessions.start_s)
    np.testing.assert_array_equal(a.sessions.turns, replies.sessions.turns)
    messages = [t[-2] for t in a.segment_tokens]
    np.testing.assert_array_equal(messages, [t[-2] for t in replies.segment_tokens])
    assert not np.array_equal(a.output_tokens, replies.output_tokens)


def test_prefix_groups_of_a_conversation_count_blocks_within_its_segments():
    """Engine block j belongs to the segment holding its last token; a turn's full blocks
    cover its prompt and reply, so the next turn's groups repeat this one's."""
    ids = [np.array([0, 5, 6]), np.array([0, 5, 6, 7, 8])]
    tokens = [np.array([40, 30, 50]), np.array([40, 30, 50, 20, 9])]
    groups = prefix_groups(ids, np.array([120, 149]), tokens, 16)
    first, second = groups.of(0), groups.of(1)
    # 120 tokens: blocks ending at 16, 32 (system), 48, 64 (message, 40..70), 80..112 (reply)
    assert [n for _, n in first] == [2, 2, 3]
    assert second[:3] == first
    # 149 tokens, 144 in full blocks: the next message (120..140) holds the block ending at
    # 128, the reply (140..149) the one ending at 144
    assert [n for _, n in second[3:]] == [1, 1]


def run(*overrides: str):
    return simulate(
        compose_config(
            [
                "model=llama31_8b",
                "hardware=h100_sxm",
                "workload=sessions",
                "sim.progress=false",
                *overrides,
            ]
        )
    )


def test_each_next_turn_leaves_a_think_time_after_the_last_one_ended():
    overrides = [
        "workload.num_sessions=40",
        "workload.session_rate=0.5",
        "fleet.replicas=2",
        "step_time=constant",
        "step_time.seconds=0.01",
        "router=session",
    ]
    result = run(*overrides)
    table = result.requests.to_pandas()
    workload = build_workload(
        compose_config(
            ["workload=sessions", "workload.num_sessions=40", "workload.session_rate=0.5"]
        )["workload"],
        seed=0,
    )
    sessions = workload.sessions
    assert sessions is not None
    # every turn exactly once, ids in issue order
    assert len(table) == workload.num_requests
    assert sorted(table.request_id) == list(range(len(table)))
    assert (table.status == "completed").all()
    row = sessions.first_row[table.session_id.to_numpy()] + table.turn.to_numpy()
    assert sorted(row) == list(range(workload.num_requests))
    np.testing.assert_array_equal(table.prompt_tokens, workload.prompt_tokens[row])
    np.testing.assert_array_equal(table.output_tokens, workload.output_tokens[row])
    by_row = table.set_index(row).sort_index()
    first = sessions.first_row[:-1]
    np.testing.assert_allclose(by_row.arrival_time_s.to_numpy()[first], sessions.start_s)
    later = np.setdiff1d(np.arange(workload.num_requests), first)
    np.testing.assert_allclose(
        by_row.arrival_time_s.to_numpy()[later],
        by_row.completion_time_s.to_numpy()[later - 1] + sessions.think_time_s[later],
    )
    # the session router keeps a conversation on one replica
    assert (table.groupby("session_id").replica_id.nunique() == 1).all()
    assert table.replica_id.nunique() == 2
    assert {"session_id", "turn"} <= set(result.requests.schema.names)


def test_runs_without_sessions_keep_their_columns():
    result = simulate(compose_config(["workload.num_requests=20", "sim.progress=false"]))
    assert result.requests.schema.equals(REQUESTS_SCHEMA)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("workload.session_rate=0", "workload.session_rate"),
        ("workload.turns=0", "workload.turns"),
        ("workload.num_apps=0", "workload.num_apps"),
        ("workload.think_time_s=-1", "workload.think_time_s"),
        ("+workload.bogus=1", "workload.bogus"),
    ],
)
def test_bad_session_settings_name_the_field(override: str, field: str):
    with pytest.raises(ConfigError) as caught:
        run("workload.num_sessions=5", override)
    assert caught.value.field == field


@pytest.mark.parametrize("scheduler", ["vllm", "sglang"])
def test_a_turn_finds_its_conversation_and_a_first_turn_its_system_prompt(scheduler):
    """One replica whose cache never evicts: each later turn finds every full block the turn
    before it computed (its prompt and reply but the reply's last token, whose KV is never
    computed), and a first turn finds its application's system prompt once an earlier request
    of the application was admitted (with vLLM's registration at allocation, even in the same
    step)."""
    size = ["workload.num_sessions=60", "workload.session_rate=4", "workload.num_apps=3"]
    result = run(
        *size,
        "fleet.replicas=1",
        "kv.prefix_caching=true",
        "kv.num_blocks=400000",
        f"scheduler={scheduler}",
    )
    table = result.requests.to_pandas().sort_values("request_id")
    workload = build_workload(compose_config(["workload=sessions", *size])["workload"], seed=0)
    sessions = workload.sessions
    assert sessions is not None and (table.status == "completed").all()
    assert result.summary["prefix_cache"]["evicted_blocks"] == 0
    block = 16
    row = sessions.first_row[table.session_id.to_numpy()] + table.turn.to_numpy()
    system = np.array([workload.hash_segment_tokens[r][0] for r in row])
    app = sessions.app[table.session_id.to_numpy()]
    seen_apps: set[int] = set()
    first_turn_hits = 0
    for i, (turn, r, cached) in enumerate(
        zip(table.turn, row, table.cached_prompt_tokens, strict=True)
    ):
        if turn:
            content = workload.prompt_tokens[r - 1] + workload.output_tokens[r - 1] - 1
            assert cached == content // block * block, (i, r)
        elif app[i] in seen_apps:
            first_turn_hits += cached > 0
            if scheduler == "vllm":
                assert cached == system[i] // block * block, (i, r)
            else:  # SGLang caches a prefill when its step ends: a same-step twin misses
                assert cached in (0, system[i] // block * block)
        else:
            assert cached == 0
        seen_apps.add(int(app[i]))
    assert first_turn_hits >= 40
    # the conversation's hits are most of the later turns' prompts
    later = table[table.turn > 0]
    assert later.cached_prompt_tokens.sum() > 0.8 * later.prompt_tokens.sum()


def test_a_distribution_over_a_presets_distribution_is_refused_with_the_form_that_works():
    from sim.config.compose import check_overrides

    with pytest.raises(ConfigError) as caught:
        check_overrides(["workload=sessions", "workload.output_tokens={dist:lognormal,median:50}"])
    assert caught.value.field == "workload.output_tokens"
    assert "'~workload.output_tokens' '+workload.output_tokens=" in str(caught.value)
    # the form it suggests replaces the preset's distribution
    cfg = compose_config(
        ["workload=sessions", "~workload.turns", "+workload.turns={dist:uniform,low:1,high:3}"]
    )
    assert cfg["workload"]["turns"] == {"dist": "uniform", "low": 1, "high": 3}
    check_overrides(["workload=sessions", "workload.turns=3"])  # a plain length replaces it
