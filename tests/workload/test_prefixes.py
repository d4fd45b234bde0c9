"""Prefix caching end to end: a trace's hash_ids replayed into the prefix cache
(sim.workload.prefixes), what the run reports, and the runs that do not ask for it unchanged."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.config.compose import compose_config
from sim.errors import ConfigError
from sim.output.results import REQUESTS_SCHEMA
from sim.resources import resolve_path
from sim.run import simulate
from sim.workload.prefixes import prefix_groups

MOONCAKE = "shipped:traces/mooncake_fast25_conversation.parquet"


def reuse_from_hash_ids(
    hash_ids: list[list[int]], prompts: list[int], hash_block: int, block: int
) -> list[int]:
    """Each request's cached blocks when every earlier request's full prompt blocks are
    cached and nothing is evicted: its leading engine blocks whose content (the trace ids up to
    the trace block holding the block's last token, and the block's end in it) an earlier
    prompt had as a full block, at most (prompt - 1) // block of them."""
    seen: set[tuple] = set()
    hits = []
    for ids, prompt in zip(hash_ids, prompts, strict=True):
        full = min(prompt, len(ids) * hash_block) // block
        blocks = []
        for j in range(full):
            end = (j + 1) * block
            k = (end - 1) // hash_block
            blocks.append((tuple(ids[: k + 1]), end - k * hash_block))
        limit = min(full, (prompt - 1) // block)
        hit = 0
        while hit < limit and blocks[hit] in seen:
            hit += 1
        hits.append(hit)
        seen.update(blocks)
    return hits


def test_with_room_for_everything_the_hits_are_the_reuse_the_hash_ids_give():
    n = 250
    result = simulate(
        compose_config(
            [
                "workload=mooncake_conv",
                f"workload.num_requests={n}",
                "fleet.replicas=1",
                "scheduler.max_num_seqs=1",  # one at a time: each sees every earlier prompt
                "kv.num_blocks=3000000",  # never evicts
                "kv.prefix_caching=true",
                "step_time=constant",
                "step_time.seconds=0.001",
                "sim.progress=false",
            ]
        )
    )
    table = pq.read_table(
        resolve_path(MOONCAKE, "workload.path"), columns=["prompt_tokens", "hash_ids"]
    )
    ids = table.column("hash_ids").to_pylist()[:n]
    prompts = table.column("prompt_tokens").to_pylist()[:n]
    expected = reuse_from_hash_ids(ids, prompts, 512, 16)
    got = (np.asarray(result.requests.column("cached_prompt_tokens")) // 16).tolist()
    assert got == expected
    cache = result.summary["prefix_cache"]
    assert cache["hit_blocks"] == sum(expected) > 0 and cache["evicted_blocks"] == 0
    assert cache["hit_rate_tokens"] == pytest.approx(16 * sum(expected) / sum(prompts))


def test_the_prefix_cache_cuts_prefill_work_on_the_shared_prefixes():
    base = [
        "workload=mooncake_conv",
        "workload.num_requests=200",
        "fleet.replicas=2",
        "kv.num_blocks=200000",  # room for every request: nobody is preempted
        "sim.progress=false",
    ]
    off = simulate(compose_config(base))
    on = simulate(compose_config([*base, "kv.prefix_caching=true"]))
    cached = int(np.asarray(on.requests.column("cached_prompt_tokens")).sum())
    assert cached > 0
    prefill_off = int(np.asarray(off.steps.column("num_prefill_tokens")).sum())
    prefill_on = int(np.asarray(on.steps.column("num_prefill_tokens")).sum())
    # the steps count only the tokens computed: exactly the cached ones fewer (no preemption)
    assert off.summary["num_preemptions"] == on.summary["num_preemptions"] == 0
    assert prefill_off - prefill_on == cached
    assert on.summary["ttft_s"]["mean"] < off.summary["ttft_s"]["mean"]
    # the same count at the top level, where checkers look for the tokens no step computed
    assert on.summary["prefix_cache_hit_tokens"] == on.summary["prefix_cache"]["hit_tokens"]
    assert on.summary["prefix_cache_hit_tokens"] == cached  # (one admission each)
    assert "prefix_cache_hit_tokens" not in off.summary


def test_without_it_the_tables_and_summary_are_as_before():
    result = simulate(compose_config(["workload=mooncake_conv", "workload.num_requests=30"]))
    assert result.requests.schema.equals(REQUESTS_SCHEMA)
    assert "prefix_cache" not in result.summary


def test_prefix_groups_map_trace_blocks_onto_engine_blocks():
    ids = [np.array([7, 8, 9]), np.array([7, 8, 5]), np.array([7]), np.array([], np.int64)]
    groups = prefix_groups(ids, np.array([1200, 1100, 100, 40]), 512, 16)
    a, b, c, d = (groups.of(i) for i in range(4))
    assert [n for _, n in a] == [32, 32, 11]  # 1200 tokens: 75 full blocks of 16
    assert a[:2] == b[:2] and a[2][0] != b[2][0]  # the same first two trace blocks, then not
    assert [n for _, n in b] == [32, 32, 4]
    assert c == [(a[0][0], 6)] and d == []  # a prefix of a's first group; no ids, no groups
    # an engine block that straddles two trace blocks belongs to the second
    straddle = prefix_groups([np.array([1, 2])], np.array([1000]), 500, 16).of(0)
    assert [n for _, n in straddle] == [31, 31]  # ends 16..496 in the first, 512..992 next


def test_a_trace_with_hash_ids_but_no_block_size_is_one_line(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table(
            {
                "arrival_time_s": [0.0, 1.0],
                "prompt_tokens": pa.array([100, 100], pa.int32()),
                "output_tokens": pa.array([10, 10], pa.int32()),
                "hash_ids": [[1], [1]],
            }
        ),
        path,
    )
    over = ["workload=trace", f"workload.path={path}", "kv.prefix_caching=true"]
    with pytest.raises(ConfigError, match=r"^workload\.hash_block_tokens=None: .* no hash_block"):
        simulate(compose_config(over))
    result = simulate(compose_config([*over, "workload.hash_block_tokens=64"]))
    assert result.requests.column("cached_prompt_tokens").to_pylist() == [0, 64]


@pytest.mark.parametrize("ids, row", [([[1], [2, None]], 2), ([[1, 2], [-1]], 2), ([[-5], [1]], 1)])
def test_bad_hash_ids_are_one_line_naming_the_row(tmp_path, ids, row):
    path = tmp_path / "t.parquet"
    table = pa.table(
        {
            "arrival_time_s": [0.0, 1.0],
            "prompt_tokens": pa.array([100, 100], pa.int32()),
            "output_tokens": pa.array([10, 10], pa.int32()),
            "hash_ids": pa.array(ids, pa.list_(pa.int64())),
        }
    )
    pq.write_table(table, path)
    over = ["workload=trace", f"workload.path={path}", "kv.prefix_caching=true"]
    with pytest.raises(ConfigError, match=rf"row {row}, column hash_ids: an empty or negative"):
        simulate(compose_config([*over, "workload.hash_block_tokens=64"]))


def test_the_prefix_cache_on_a_workload_that_shares_nothing_is_refused():
    with pytest.raises(ConfigError, match=r"^kv\.prefix_caching=True: this workload says nothing"):
        simulate(compose_config(["workload=poisson", "kv.prefix_caching=true"]))


# --- the host tier (kv.cpu_offload_gib), end to end -------------------------------------------

HOST_RUN = [
    "workload=sessions",
    "workload.num_sessions=150",
    "workload.session_rate=5",
    "model=llama31_8b",
    "hardware=h100_sxm",
    "fleet.replicas=1",
    "kv.prefix_caching=true",
    "kv.num_blocks=3000",  # small: conversations are evicted between their turns
    "step_time=constant",
    "step_time.seconds=0.01",
    "sim.progress=false",
]


def test_a_host_tier_finds_evicted_turns_and_each_step_pays_its_copies():
    without = simulate(compose_config(HOST_RUN))
    result = simulate(compose_config([*HOST_RUN, "kv.cpu_offload_gib=4"]))
    cache, before = result.summary["prefix_cache"], without.summary["prefix_cache"]
    assert before["evicted_blocks"] > 0 and "host_hit_tokens" not in before
    assert (
        cache["host_hit_tokens"] > 0
        and cache["host_loaded_blocks"] * 16 == (cache["host_hit_tokens"])
    )
    assert cache["hit_tokens"] > before["hit_tokens"]  # evicted turns found in host memory
    assert cache["host_stored_blocks"] == cache["evicted_blocks"]  # 4 GiB keeps every one
    # Llama-3.1-8B's KV is 128 KiB a token; an H100's PCIe Gen5 link copies 64 GB/s
    seconds_per_token = 131072 / 64e9
    durations = np.asarray(result.steps.column("duration_s"))
    extra = durations - 0.01
    assert extra.min() > -1e-12
    assert extra.sum() == pytest.approx(cache["host_hit_tokens"] * seconds_per_token, rel=1e-9)
    table = result.requests.to_pandas()
    assert (table.status == "completed").all()
    assert (table.host_cached_prompt_tokens <= table.cached_prompt_tokens).all()
    assert table.host_cached_prompt_tokens.sum() > 0
    assert "host_cached_prompt_tokens" not in without.requests.schema.names


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["kv.prefix_caching=false", "kv.cpu_offload_gib=4"], "kv.cpu_offload_gib"),
        (["kv.cpu_offload_gib=1e-9"], "kv.cpu_offload_gib"),
        (["kv.cpu_offload_gib=-1"], "kv.cpu_offload_gib"),
        (["kv.cpu_offload_gib=4", "hardware.host_link_gbps=null"], "hardware.host_link_gbps"),
        (["kv.cpu_offload_gib=4", "hardware.host_link_gbps=0"], "hardware.host_link_gbps"),
    ],
)
def test_a_host_tier_it_cannot_have_is_refused_naming_the_field(overrides, field):
    with pytest.raises(ConfigError) as caught:
        simulate(compose_config([*HOST_RUN, "workload.num_sessions=3", *overrides]))
    assert caught.value.field == field


def two_row_trace(path, ids: pa.Array, block_tokens: bytes | None = b"64") -> None:
    """A two-request trace (100-token prompts) with ``ids`` as its hash_ids column and
    ``block_tokens`` as its hash_block_tokens metadata (None: none)."""
    table = pa.table(
        {
            "arrival_time_s": [0.0, 1.0],
            "prompt_tokens": pa.array([100, 100], pa.int32()),
            "output_tokens": pa.array([10, 10], pa.int32()),
            "hash_ids": ids,
        }
    )
    if block_tokens is not None:
        table = table.replace_schema_metadata({b"hash_block_tokens": block_tokens})
    pq.write_table(table, path)


INT_IDS = pa.array([[1], [1, 2]], pa.list_(pa.int64()))


# (id, hash_ids column, file metadata, what the one line says after the file)
BAD_HASH_COLUMNS = [
    ("strings", pa.array([["a"], ["a", "b"]]), b"64", "column hash_ids holds list<element: str"),
    ("not a list", pa.array([1, 2]), b"64", "column hash_ids holds int64, not lists of ids"),
    (
        "nested lists",
        pa.array([[[1]], [[1]]]),
        b"64",
        "column hash_ids holds list<element: list<element: int64>>",
    ),
    (
        "fractional",
        pa.array([[1.0], [2.0, 2.5]]),
        b"64",
        r"row 2, column hash_ids: a fractional id \(2\.5\)",
    ),
    (
        "above int64",
        pa.array([[1], [2**63 + 5]], pa.list_(pa.uint64())),
        b"64",
        r"row 2, column hash_ids: an id above 9,223,372,036,854,775,807",
    ),
    (
        "more ids than blocks",
        pa.array([[1, 2], [1, 2, 3]], pa.list_(pa.int64())),
        b"64",
        r"row 2, column hash_ids: 3 ids for 100 prompt tokens, which make 2 block\(s\)",
    ),
    ("metadata zero", INT_IDS, b"0", r"its hash_block_tokens metadata is '0': it must be a whole"),
    ("metadata negative", INT_IDS, b"-3", "its hash_block_tokens metadata is '-3'"),
    ("metadata text", INT_IDS, b"abc", "its hash_block_tokens metadata is 'abc'"),
    ("metadata huge", INT_IDS, b"99999999999", "its hash_block_tokens metadata is '99999999999'"),
]


@pytest.mark.parametrize(
    "ids, block_tokens, says",
    [row[1:] for row in BAD_HASH_COLUMNS],
    ids=[r[0] for r in BAD_HASH_COLUMNS],
)
def test_a_bad_hash_ids_column_or_block_size_is_one_line_naming_the_file(
    tmp_path, ids, block_tokens, says
):
    path = tmp_path / "t.parquet"
    two_row_trace(path, ids, block_tokens)
    over = ["workload=trace", f"workload.path={path}", "kv.prefix_caching=true"]
    with pytest.raises(
        ConfigError, match=rf"^workload\.path='{re.escape(str(path))}': {says}"
    ) as err:
        simulate(compose_config(over))
    assert "\n" not in str(err.value)


def test_whole_float_ids_and_as_many_ids_as_blocks_are_replayed(tmp_path):
    path = tmp_path / "t.parquet"
    # 100 tokens in trace blocks of 32 are four (the last partial): four ids is the most
    two_row_trace(path, pa.array([[1.0, 2.0, 5.0, 6.0], [1.0, 2.0, 7.0]]), b"32")
    over = ["workload=trace", f"workload.path={path}", "kv.prefix_caching=true"]
    result = simulate(compose_config([*over, "sim.progress=false"]))
    # the second prompt shares its first two 32-token trace blocks: 64 tokens, 4 engine blocks
    assert result.requests.column("cached_prompt_tokens").to_pylist() == [0, 64]
