"""Where the rows of a run's tables go while it runs: memory, or a Parquet file written a row
group at a time.

A long run cannot hold its rows until the end (a million requests make tens of millions of step
rows), so tables are written as they grow: a ``TableSink`` takes pieces in row order, and gathers
them into row groups of ``ROW_GROUP_ROWS`` rows (Arrow's default for ``write_table``, so a file
written a piece at a time is byte-identical to one written whole). ``MemorySink`` keeps the
pieces, for runs read in the same process; ``ParquetSink`` writes them to a file. Either gives a
column back once closed, which is how the summary reads the requests (one column at a time).

``Spill`` is for rows that arrive out of the order they are written in: pieces of several
replicas' step tables, interleaved in time, written replica by replica at the end. Pieces stay
in memory up to a budget and then go to an Arrow IPC file, which is read back a piece at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sim.arrow_numpy import column_to_numpy

ROW_GROUP_ROWS = 1024 * 1024


class TableSink:
    """Pieces of one table in row order; ``close()`` once, then ``column(name)``."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.num_rows = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def write(self, piece: pa.Table) -> None:
        """Append ``piece`` (a table of this sink's schema)."""
        assert piece.schema.equals(self.schema), f"{piece.schema} is not {self.schema}"
        if piece.num_rows == 0:
            return
        self.num_rows += piece.num_rows
        self._pending.append(piece)
        self._pending_rows += piece.num_rows
        while self._pending_rows >= ROW_GROUP_ROWS:
            rows = pa.concat_tables(self._pending)
            # one chunk per column: the writer's pages follow chunk boundaries, and a file must
            # not depend on how its rows arrived
            self._row_group(rows.slice(0, ROW_GROUP_ROWS).combine_chunks())
            rest = rows.slice(ROW_GROUP_ROWS)
            self._pending, self._pending_rows = [rest], rest.num_rows

    def close(self) -> None:
        """Write what is pending as the last row group (or an empty table's one)."""
        if self._pending_rows or self.num_rows == 0:
            pending = self._pending or [self.schema.empty_table()]
            self._row_group(pa.concat_tables(pending).combine_chunks())
        self._pending, self._pending_rows = [], 0
        self._finish()

    def column(self, name: str) -> np.ndarray:
        """One whole column as numpy (see ``sim.arrow_numpy.column_to_numpy``)."""
        raise NotImplementedError

    def _row_group(self, rows: pa.Table) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        pass


class MemorySink(TableSink):
    """Keeps the table: ``table`` once closed."""

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__(schema)
        self._groups: list[pa.Table] = []
        self.table: pa.Table | None = None

    def _row_group(self, rows: pa.Table) -> None:
        self._groups.append(rows)

    def _finish(self) -> None:
        self.table = pa.concat_tables(self._groups).combine_chunks()
        self._groups = []

    def column(self, name: str) -> np.ndarray:
        assert self.table is not None, "column() before close()"
        return column_to_numpy(self.table.column(name))


class ParquetSink(TableSink):
    """Writes the table to ``path`` as it grows. The file is opened with its first row
    group."""

    def __init__(self, schema: pa.Schema, path: Path) -> None:
        super().__init__(schema)
        self.path = path
        self._writer: Any = None  # a pyarrow.parquet.ParquetWriter, once a row group is due
        self._closed = False

    def _row_group(self, rows: pa.Table) -> None:
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, self.schema)
        self._writer.write_table(rows, row_group_size=ROW_GROUP_ROWS)

    def _finish(self) -> None:
        assert self._writer is not None  # close() always writes a row group
        self._writer.close()
        self._writer = None
        self._closed = True

    def abandon(self) -> None:
        """Close the file without finishing the table (a failed run; the caller deletes it)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def column(self, name: str) -> np.ndarray:
        assert self._closed, "column() before close()"
        return column_to_numpy(pq.ParquetFile(self.path).read(columns=[name]).column(name))


class Spill:
    """Pieces filed under keys (replica ids), read back key by key in the order filed.

    Pieces stay in memory until they hold ``budget_bytes``; then all of them go to the Arrow
    IPC file ``path`` (no file when ``path`` is None: everything stays in memory).
    """

    def __init__(self, schema: pa.Schema, path: Path | None, budget_bytes: int) -> None:
        self.schema = schema
        self.path = path
        self.budget_bytes = budget_bytes
        self._memory: dict[int, list[pa.Table]] = {}
        self._memory_bytes = 0
        self._on_disk: dict[int, list[int]] = {}  # key -> batch numbers in the file
        self._num_batches = 0
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._sink: pa.NativeFile | None = None

    def add(self, key: int, piece: pa.Table) -> None:
        if piece.num_rows == 0:
            return
        self._memory.setdefault(key, []).append(piece)
        self._memory_bytes += piece.nbytes
        if self.path is not None and self._memory_bytes >= self.budget_bytes:
            self._to_disk()

    def _to_disk(self) -> None:
        assert self.path is not None
        if self._writer is None:
            self._sink = pa.OSFile(str(self.path), "wb")
            self._writer = pa.ipc.new_file(self._sink, self.schema)
        for key, pieces in self._memory.items():
            numbers = self._on_disk.setdefault(key, [])
            for piece in pieces:
                for batch in piece.to_batches():
                    self._writer.write_batch(batch)
                    numbers.append(self._num_batches)
                    self._num_batches += 1
        self._memory, self._memory_bytes = {}, 0

    def pieces(self, key: int) -> Iterator[pa.Table]:
        """``key``'s pieces in the order they were added (call ``close_writing`` first)."""
        numbers = self._on_disk.get(key, [])
        if numbers:
            assert self.path is not None and self._writer is None
            with pa.OSFile(str(self.path), "rb") as source:
                reader = pa.ipc.open_file(source)
                for number in numbers:
                    yield pa.Table.from_batches([reader.get_batch(number)])
        yield from self._memory.get(key, [])

    def close_writing(self) -> None:
        if self._writer is not None:
            self._writer.close()
            assert self._sink is not None
            self._sink.close()
            self._writer = self._sink = None

    @property
    def spilled(self) -> bool:
        return self._num_batches > 0
