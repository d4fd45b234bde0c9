"""Conversations: sessions of turns whose prompts grow with what was said before.

``workload=sessions`` (``kind: sessions``). Each session belongs to one of ``num_apps``
applications, each with its own system prompt (its length drawn once per application). Chat
APIs are stateless, so a client resends the whole conversation with each message: turn ``k``'s
prompt is the system prompt, every earlier message and reply, and the new message,

    prompt_k = S + u_0 + o_0 + ... + u_{k-1} + o_{k-1} + u_k,     reply: o_k tokens,

with ``u`` drawn from ``user_tokens`` and ``o`` from ``output_tokens``. The agentic pattern is the
same shape with many turns, short new tokens (tool results) and long contexts
(``configs/workload/agent_sessions.yaml``).

Timing. Sessions start as a Poisson process at ``session_rate``; the first turn is sent at the
start, and turn ``k + 1`` an exponential think time (mean ``think_time_s``) after the client
received turn ``k``'s last token, or its rejection: the cluster paces it (``sim.fleet.cluster``),
so a slow fleet slows the conversation, as a person waits for the reply before typing. A
session takes its drawn number of ``turns``, fewer when the next turn's prompt and reply would
pass ``max_context_tokens`` (chat applications cap the conversation; the first turn is always
kept, and the engine refuses it with its reason if it is too long for the model). A run caps
``max_context_tokens`` at the shortest context length of its fleet's models.

Content, for a prefix cache. A session is one stream of segments, ``[system prompt][u_0][o_0]
[u_1][o_1]...``: the system prompt's segment is the application's (every session of it shares
it), the others the session's own. A turn's content is its prompt and its reply (the next turn's
prompt holds both): the ids and lengths of its segments (``sim.workload.prefixes``), so a turn
finds cached whatever the earlier turn computed and registered, and a first turn finds its
application's system prompt.

Randomness: the named streams ``workload.arrivals`` (session starts), ``workload.sessions``
(turns), ``workload.sessions.app`` (application), ``workload.think_time``,
``workload.system_prompt``, ``workload.prompt_tokens`` (user messages) and
``workload.output_tokens`` (replies).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.config.workload_schema import SessionsWorkload
from sim.rng import stream
from sim.workload.lengths import build_length


@dataclass(frozen=True, eq=False)
class Sessions:
    """When each session starts and how its turns follow each other. Rows (a workload's
    requests) are session after session, turn after turn: session ``s`` is rows
    ``first_row[s]`` to ``first_row[s + 1] - 1``."""

    start_s: np.ndarray  # float64, one per session, non-decreasing
    first_row: np.ndarray  # int64, num_sessions + 1 offsets
    think_time_s: np.ndarray  # float64 per row: the wait before it after the previous turn (0
    # for a first turn)
    app: np.ndarray  # int64 per session: its application (its system prompt)

    def __post_init__(self) -> None:
        assert self.first_row[0] == 0 and np.all(np.diff(self.first_row) >= 1), "turns >= 1"
        assert self.start_s.size == self.app.size == self.first_row.size - 1
        assert self.think_time_s.size == self.first_row[-1]
        assert self.start_s[0] >= 0 and np.all(np.diff(self.start_s) >= 0), "starts in order"

    @property
    def num_sessions(self) -> int:
        return int(self.start_s.size)

    @property
    def turns(self) -> np.ndarray:
        return np.diff(self.first_row)

    def per_row(self, values: np.ndarray) -> np.ndarray:
        """A per-session array repeated over each session's rows."""
        return np.repeat(values, self.turns)


@dataclass(frozen=True, eq=False)
class Conversations:
    """What ``sample_sessions`` draws: each row's lengths and content, and the timing."""

    sessions: Sessions
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    segment_ids: list[np.ndarray]  # per row: its content's segments, system prompt first
    segment_tokens: list[np.ndarray]  # per row: each segment's tokens (summing to prompt + reply)


def sample_sessions(spec: SessionsWorkload, seed: int) -> Conversations:
    """Draw ``spec``'s sessions under ``seed`` (the module docstring)."""
    n = spec.num_sessions
    field = "workload"
    drawn_turns = build_length(spec.turns, f"{field}.turns").sample(
        stream(seed, "workload.sessions"), n
    )
    app = stream(seed, "workload.sessions.app").integers(spec.num_apps, size=n, dtype=np.int64)
    system = build_length(spec.system_prompt_tokens, f"{field}.system_prompt_tokens").sample(
        stream(seed, "workload.system_prompt"), spec.num_apps
    )
    gaps = stream(seed, "workload.arrivals").exponential(1.0 / spec.session_rate, size=n)
    start_s = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    rows = int(drawn_turns.sum())
    user = build_length(spec.user_tokens, f"{field}.user_tokens").sample(
        stream(seed, "workload.prompt_tokens"), rows
    )
    output = build_length(spec.output_tokens, f"{field}.output_tokens").sample(
        stream(seed, "workload.output_tokens"), rows
    )
    think = stream(seed, "workload.think_time").standard_exponential(rows) * spec.think_time_s
    session = np.repeat(np.arange(n), drawn_turns)
    first = np.concatenate(([0], np.cumsum(drawn_turns)))
    turn = np.arange(rows) - first[session]
    # prompt_k = S + (u_0 + o_0) + ... + (u_{k-1} + o_{k-1}) + u_k, summed within each session
    exchanged = np.cumsum(user + output)
    before = exchanged - (user + output) - np.concatenate(([0], exchanged))[first[session]]
    prompt = system[app[session]] + before + user
    # a session ends before its first turn past the context cap (its first turn always stays)
    over = (prompt + output > spec.max_context_tokens) & (turn > 0)
    over_so_far = np.cumsum(over)
    kept = over_so_far - np.concatenate(([0], over_so_far))[first[session]] == 0
    kept_turns = np.bincount(session[kept], minlength=n)
    think[turn == 0] = 0.0
    sessions = Sessions(
        start_s,
        np.concatenate(([0], np.cumsum(kept_turns))).astype(np.int64),
        think[kept],
        app,
    )
    # each session's stream of segments: its application's system prompt (id = the
    # application), then message and reply of each kept turn (ids after every application's)
    segment_ids: list[np.ndarray] = []
    segment_tokens: list[np.ndarray] = []
    next_id = spec.num_apps
    for s in range(n):
        count = int(kept_turns[s])
        lo = int(first[s])
        lengths = np.empty(2 * count + 1, np.int64)
        lengths[0] = system[app[s]]
        lengths[1::2] = user[lo : lo + count]
        lengths[2::2] = output[lo : lo + count]
        ids = np.arange(next_id - 1, next_id + 2 * count, dtype=np.int64)
        ids[0] = app[s]
        next_id += 2 * count
        for k in range(count):
            segment_ids.append(ids[: 2 * k + 3])
            segment_tokens.append(lengths[: 2 * k + 3])
    return Conversations(sessions, prompt[kept], output[kept], segment_ids, segment_tokens)
