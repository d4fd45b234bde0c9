"""Where prompts' shared prefixes come from: a trace's block hashes, mapped onto engine blocks.

Mooncake's traces give each request ``hash_ids``: one id per block of ``H`` prompt tokens
(``H = 512`` for the shipped trace, its ``hash_block_tokens`` metadata), where equal leading ids
mean equal leading tokens (the last block may be partial). A block's content is therefore known
by its id *and every id before it*: two requests share trace block ``k`` only when their ids
agree up to ``k``.

The engine's blocks (``kv.block_size`` = ``B`` tokens, 16 by default) are smaller. Engine block
``j`` covers prompt tokens ``[jB, (j+1)B)``; it belongs to the trace block holding its last
token, ``k = ((j+1)B - 1) // H``, and is known by the chain of trace ids up to ``k`` and by its
place among that trace block's engine blocks. So with ``B`` dividing ``H`` each trace block is
``H / B`` engine blocks in a row, and an engine block that straddles two trace blocks (``B`` not
dividing ``H``) is shared only when both are. A request's prompt is given to the prefix cache
as its engine blocks grouped by trace block (``prefix_groups``: the chain's key and how many of
the group's blocks the prompt fills); only full engine blocks count (a prefix cache keeps full
blocks only), and none past the ids the trace gives.

A conversation (``sim.workload.sessions``) gives its content the same way with trace blocks of
varying length: one id per segment (a system prompt, a message, a reply), each segment as long
as it is, covering the turn's prompt and reply; everything above holds with "trace block" read
as "segment".

A key is a polynomial hash of the chain of ids, mod 2**64 (computed for every request at once
with prefix sums): deterministic, 64-bit, so two different prefixes share a key with negligible
chance on real traces (it is not meant to resist ids chosen to collide).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq

from sim.config.workload_schema import MAX_HASH_BLOCK_TOKENS
from sim.errors import ConfigError, require
from sim.resources import resolve_path
from sim.workload.source import Workload
from sim.workload.traces import is_csv

if TYPE_CHECKING:
    import pyarrow as pa

HASH_COLUMN = "hash_ids"
BLOCK_TOKENS_KEY = b"hash_block_tokens"  # the Parquet metadata key: prompt tokens per id
FIELD = "workload.path"  # errors in the file name the file
# The largest id: ids are hashed as int64 (a uint64 or float id above it would wrap or round).
MAX_ID = 2**63 - 1


# the chain's polynomial hash, mod 2**64: key_k = sum over i <= k of (id_i + 1) * P**(k - i)
_P = 0x100000001B3  # an odd multiplier (FNV-1's 64-bit prime)
_P_INVERSE = pow(_P, -1, 2**64)


@dataclass(frozen=True)
class PrefixGroups:
    """Every request's prefix groups, flat: request ``i``'s are ``groups[offsets[i]:offsets[i +
    1]]``, (key, blocks) pairs (``Request.prefix_groups`` takes them at issue)."""

    groups: list[tuple[int, int]]
    offsets: list[int]

    def of(self, request: int) -> list[tuple[int, int]]:
        return self.groups[self.offsets[request] : self.offsets[request + 1]]


def prefix_groups(
    hash_ids: list[np.ndarray],
    hashed_tokens: np.ndarray,
    segment_tokens: int | list[np.ndarray],
    block_size: int,
) -> PrefixGroups:
    """Each request's full engine blocks (of its first ``hashed_tokens``) grouped by the trace
    block holding their last token: per trace block, a key naming its chain of ids and how many
    engine blocks of it the request fills (groups with none are left out). A trace block is
    ``segment_tokens`` tokens (a trace's ``hash_block_tokens``), or each id's own length (a
    conversation's segments, ``sim.workload.sessions``). Computed for every request at once."""
    lengths = np.fromiter((len(h) for h in hash_ids), np.int64, len(hash_ids))
    starts = np.concatenate(([0], np.cumsum(lengths)))
    total = int(starts[-1])
    if not total:
        return PrefixGroups([], [0] * (len(hash_ids) + 1))
    values = np.concatenate([np.asarray(h, np.int64) for h in hash_ids]).astype(np.uint64)
    position = np.arange(total, dtype=np.int64) - np.repeat(starts[:-1], lengths)
    most = int(lengths.max())  # (a few hundred at most)
    powers = np.array([pow(_P, i, 2**64) for i in range(most)], np.uint64)
    inverse = np.array([pow(_P_INVERSE, i, 2**64) for i in range(most)], np.uint64)
    with np.errstate(over="ignore"):
        # the chain by prefix sums: key_k = P**k * sum over i <= k of (id_i + 1) * P**-i
        summed = np.cumsum((values + np.uint64(1)) * inverse[position])
        before = np.concatenate(([np.uint64(0)], summed))[starts[:-1]]
        keys = (summed - np.repeat(before, lengths)) * powers[position]
    request = np.repeat(np.arange(len(hash_ids)), lengths)
    if isinstance(segment_tokens, int):
        sizes = np.full(total, segment_tokens, np.int64)
    else:
        sizes = np.concatenate([np.asarray(t, np.int64) for t in segment_tokens])
    ends = np.cumsum(sizes)
    first = ends - sizes - np.repeat(np.concatenate(([0], ends))[starts[:-1]], lengths)
    covered = np.zeros(len(hash_ids), np.int64)
    covered[lengths > 0] = (first + sizes)[starts[1:][lengths > 0] - 1]
    full = np.minimum(np.asarray(hashed_tokens, np.int64), covered)
    full -= full % block_size
    last = np.minimum(first + sizes, full[request])
    counts = np.where(last > first, last // block_size - first // block_size, 0)
    kept = counts > 0
    per_request = np.bincount(request[kept], minlength=len(hash_ids))
    return PrefixGroups(
        list(zip(keys[kept].view(np.int64).tolist(), counts[kept].tolist(), strict=True)),
        np.concatenate(([0], np.cumsum(per_request))).tolist(),
    )


def with_hash_ids(workload: Workload, hash_block_tokens: int | None) -> Workload:
    """``workload`` with the ``hash_ids`` of its trace's rows (a workload that replays no trace,
    or a trace without the column, has none: nothing in it is shared).

    The column is checked, not repaired: it must be a list of whole-number ids from 0 to
    ``MAX_ID`` per row (no nulls), with no more ids than the prompt has trace blocks
    (``ceil(prompt_tokens / hash_block_tokens)``, as Mooncake's traces give), and the file's
    ``hash_block_tokens`` metadata, when it is used, holds the values the command line takes.
    Anything else is a ConfigError naming the file and, for a cell, its row: ids that do not
    describe the prompt would silently give the cache a workload the user does not have.
    """
    if workload.trace_file is None:
        return workload
    path = resolve_path(workload.trace_file, FIELD)
    if is_csv(Path(path)):
        return workload  # a CSV has no list column
    parquet = pq.ParquetFile(path)
    if HASH_COLUMN not in parquet.schema_arrow.names:
        return workload
    shown = workload.trace_file
    if hash_block_tokens is None:
        hash_block_tokens = _block_tokens_from(parquet.schema_arrow.metadata or {}, shown)
    column = parquet.read(columns=[HASH_COLUMN]).column(HASH_COLUMN).combine_chunks()
    _require_id_lists(column.type, shown)
    assert workload.trace_rows is not None
    offsets = column.offsets.to_numpy()
    values = _checked_ids(column.values, offsets, shown)
    rows = workload.trace_rows
    null_rows = np.flatnonzero(~column.is_valid().to_numpy(zero_copy_only=False)[rows])
    require(
        null_rows.size == 0,
        FIELD,
        shown,
        f"row {int(rows[null_rows[0]]) + 1 if null_rows.size else 0}, column {HASH_COLUMN}: "
        "empty (give a list, [] when nothing is shared)",
    )
    counts = (offsets[1:] - offsets[:-1])[rows]
    blocks = -(-workload.prompt_tokens // hash_block_tokens)  # the last block may be partial
    over = np.flatnonzero(counts > blocks)
    if over.size:
        at = int(over[0])
        raise ConfigError(
            FIELD,
            shown,
            f"row {int(rows[at]) + 1}, column {HASH_COLUMN}: {int(counts[at])} ids for "
            f"{int(workload.prompt_tokens[at])} prompt tokens, which make "
            f"{int(blocks[at])} block(s) of hash_block_tokens={hash_block_tokens}; one id per "
            f"block{f' ({over.size:,} rows like it)' if over.size > 1 else ''}",
        )
    hash_ids = [values[offsets[r] : offsets[r + 1]] for r in rows]
    return dataclasses.replace(
        workload, hash_ids=hash_ids, hash_block_tokens=int(hash_block_tokens)
    )


def _block_tokens_from(metadata: dict[bytes, bytes], shown: str) -> int:
    """The file's ``hash_block_tokens`` metadata, checked as ``workload.hash_block_tokens``
    is on the command line (a 0 there would silently turn the cache off)."""
    given = metadata.get(BLOCK_TOKENS_KEY)
    if given is None:
        raise ConfigError(
            "workload.hash_block_tokens",
            None,
            f"{shown} has a {HASH_COLUMN} column but no hash_block_tokens "
            "metadata: say how many prompt tokens each hash covers",
        )
    text = given.decode("utf-8", "replace").strip()
    value = int(text) if text.isascii() and text.isdigit() else 0
    require(
        1 <= value <= MAX_HASH_BLOCK_TOKENS,
        FIELD,
        shown,
        f"its hash_block_tokens metadata is {text!r}: it must be a whole number of prompt "
        f"tokens from 1 to {MAX_HASH_BLOCK_TOKENS:,} (or set workload.hash_block_tokens)",
    )
    return value


def _require_id_lists(kind: pa.DataType, shown: str) -> None:
    """A ConfigError unless the column holds lists of numbers (one list of ids per row)."""
    import pyarrow as pa

    lists = isinstance(kind, (pa.ListType, pa.LargeListType))
    require(
        lists and (pa.types.is_integer(kind.value_type) or pa.types.is_floating(kind.value_type)),
        FIELD,
        shown,
        f"column {HASH_COLUMN} holds {kind}, not lists of ids: one list of whole numbers "
        "per row (list<int64>)",
    )


def _checked_ids(flat: object, offsets: np.ndarray, shown: str) -> np.ndarray:
    """Every id of the column as int64, or a ConfigError naming the row of the first that is
    empty, negative, fractional or above ``MAX_ID``."""
    valid = flat.is_valid().to_numpy(zero_copy_only=False)  # type: ignore[attr-defined]
    values = flat.to_numpy(zero_copy_only=False)  # type: ignore[attr-defined]
    checks = [(~valid, "an empty or negative id")]
    if valid.all():
        checks.append((values < 0, "an empty or negative id"))
        if np.issubdtype(values.dtype, np.floating):
            checks.append((values != np.floor(values), "a fractional id"))
            # (MAX_ID as a float rounds up to 2**63, which int64 cannot hold)
            checks.append((values >= float(MAX_ID), f"an id above {MAX_ID:,}"))
        else:
            checks.append((values > MAX_ID, f"an id above {MAX_ID:,}"))
    for bad, what in checks:
        found = np.flatnonzero(bad)
        if found.size:
            row = int(np.searchsorted(offsets, found[0], side="right")) - 1
            raise ConfigError(
                FIELD,
                shown,
                f"row {row + 1}, column {HASH_COLUMN}: {what} "
                f"({values[found[0]].item()!r}); ids are whole numbers from 0 to {MAX_ID:,}",
            )
    return values.astype(np.int64)
