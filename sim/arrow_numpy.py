"""Arrow columns to numpy without pandas.

``pyarrow.Array.to_numpy`` imports pandas on first use, a third of a second of every run's
start-up. Numeric columns only need their value buffer and validity bitmap, read here directly.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def column_to_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A numeric column as a numpy array; nulls become NaN (the result is then float).
    Other types come back as an object array."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        return np.asarray(array.to_pylist(), dtype=object)  # callers reject these as not numeric
    n, offset = len(array), array.offset
    values = np.frombuffer(array.buffers()[1], dtype=array.type.to_pandas_dtype())
    values = values[offset : offset + n]
    if array.null_count:
        bits = np.unpackbits(np.frombuffer(array.buffers()[0], np.uint8), bitorder="little")
        values = np.where(bits[offset : offset + n].astype(bool), values, np.nan)
    return values


def numpy_to_arrow(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """A numpy array as an Arrow array of ``type_``; NaN becomes null for float types."""
    values = np.ascontiguousarray(values, dtype=type_.to_pandas_dtype())
    validity = None
    null_count = 0
    if pa.types.is_floating(type_):
        missing = np.isnan(values)
        null_count = int(missing.sum())
        if null_count:
            validity = pa.py_buffer(np.packbits(~missing, bitorder="little"))
    return pa.Array.from_buffers(
        type_, len(values), [validity, pa.py_buffer(values)], null_count=null_count
    )


def strings_to_arrow(values: list[str] | list[str | None]) -> pa.Array:
    """A list of str (None: null) as an Arrow string array (``pa.array`` would import
    pandas)."""
    encoded = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    missing = np.fromiter((v is None for v in values), bool, len(values))
    null_count = int(missing.sum())
    validity = pa.py_buffer(np.packbits(~missing, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        pa.string(),
        len(encoded),
        [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))],
        null_count=null_count,
    )
