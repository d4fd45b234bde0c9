"""Where table rows go (``sim.output.tables``): a table written a piece at a time is the table
written whole, byte for byte; the spill gives each key's pieces back in order, from memory and
from its file."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sim.output import tables
from sim.output.tables import MemorySink, ParquetSink, Spill

SCHEMA = pa.schema([("k", pa.int32()), ("x", pa.float64()), ("s", pa.string())])


def _piece(start: int, n: int) -> pa.Table:
    k = np.arange(start, start + n, dtype=np.int32)
    return pa.table(
        {"k": k, "x": k * 0.5, "s": pa.array([f"r{i}" for i in k], pa.string())}, schema=SCHEMA
    )


def test_pieces_make_row_groups_and_the_same_bytes_as_one_write(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 10)
    whole = _piece(0, 37)
    pq.write_table(whole, tmp_path / "whole.parquet", row_group_size=10)
    sink = ParquetSink(SCHEMA, tmp_path / "pieces.parquet")
    start = 0
    for n in (3, 0, 11, 1, 9, 13):  # pieces that straddle row groups, and an empty one
        sink.write(_piece(start, n))
        start += n
    sink.close()
    assert (tmp_path / "pieces.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()
    assert pq.ParquetFile(tmp_path / "pieces.parquet").metadata.num_row_groups == 4
    assert sink.num_rows == 37
    assert sink.column("x").tolist() == (np.arange(37) * 0.5).tolist()


def test_a_file_does_not_depend_on_how_its_rows_arrived(tmp_path):
    # Past ~1 MB a column's data pages break where the written chunks break, so a row group
    # built from many pieces must be made one chunk first (found by tests/test_run_properties.py:
    # a streamed steps.parquet differed from the same run written from memory).
    rows, piece_rows = 300_000, 8192
    pq.write_table(_piece(0, rows), tmp_path / "whole.parquet", row_group_size=rows)
    sink = ParquetSink(SCHEMA, tmp_path / "pieces.parquet")
    for start in range(0, rows, piece_rows):
        sink.write(_piece(start, min(piece_rows, rows - start)))
    sink.close()
    assert (tmp_path / "pieces.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()


def test_memory_and_file_sinks_agree_and_an_empty_table_is_written(tmp_path):
    memory, file = MemorySink(SCHEMA), ParquetSink(SCHEMA, tmp_path / "t.parquet")
    for sink in (memory, file):
        sink.write(_piece(0, 5))
        sink.write(_piece(5, 2))
        sink.close()
    assert memory.table.equals(pq.read_table(tmp_path / "t.parquet"))
    assert list(memory.column("s")) == list(file.column("s")) == [f"r{i}" for i in range(7)]
    empty = ParquetSink(SCHEMA, tmp_path / "empty.parquet")
    empty.close()
    assert pq.read_table(tmp_path / "empty.parquet").schema.equals(SCHEMA)
    assert pq.read_table(tmp_path / "empty.parquet").num_rows == 0


def test_spill_gives_each_key_its_pieces_in_order(tmp_path):
    for path, budget in ((None, 1), (tmp_path / "spill", 1), (tmp_path / "spill2", 60)):
        spill = Spill(SCHEMA, path, budget)
        added: dict[int, list[pa.Table]] = {0: [], 1: []}
        start = 0
        for key, n in ((1, 4), (0, 3), (1, 2), (0, 0), (0, 6), (1, 5)):
            piece = _piece(start, n)
            start += n
            spill.add(key, piece)
            if n:
                added[key].append(piece)
        spill.close_writing()
        assert spill.spilled == (path is not None)
        for key in (0, 1):
            got = pa.concat_tables(list(spill.pieces(key)))
            assert got.equals(pa.concat_tables(added[key])), (path, budget, key)
