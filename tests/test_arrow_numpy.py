"""Arrow <-> numpy without pandas (``sim.arrow_numpy``): numeric columns round-trip with NaN and
null standing for each other, slices and chunked columns read their own values and validity
bits, integer columns with nulls come back as float, other types as object arrays, string
arrays equal pyarrow's own; and none of it imports pandas, which is the module's reason to be."""

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from sim.arrow_numpy import column_to_numpy, numpy_to_arrow, strings_to_arrow
from tests.support import REPO_ROOT

NUMERIC = [(pa.int32(), np.int32), (pa.int64(), np.int64), (pa.float64(), np.float64)]


def same(got: np.ndarray, expected: np.ndarray) -> None:
    """Equal dtype, shape and values, NaN matching NaN."""
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape
    assert np.array_equal(got, expected, equal_nan=got.dtype.kind == "f"), (got, expected)


# --- numpy -> arrow -> numpy ---------------------------------------------------------------


@pytest.mark.parametrize("type_, dtype", NUMERIC, ids=str)
def test_numeric_round_trip(type_, dtype):
    values = np.array([0, 1, -2, 3, 2**31 - 1, -(2**31), 7], dtype=dtype)
    array = numpy_to_arrow(values, type_)
    assert array.type == type_
    assert array.null_count == 0
    assert array.to_pylist() == values.tolist()
    same(column_to_numpy(array), values)


def test_numpy_to_arrow_casts_to_the_arrow_type():
    array = numpy_to_arrow(np.array([1, 2, 3], dtype=np.int64), pa.float64())
    assert array.type == pa.float64() and array.to_pylist() == [1.0, 2.0, 3.0]
    array = numpy_to_arrow(np.array([1.0, 2.0]), pa.int32())
    assert array.type == pa.int32() and array.to_pylist() == [1, 2]


def test_numpy_to_arrow_takes_non_contiguous_input():
    values = np.arange(10, dtype=np.int64)[::3]
    assert numpy_to_arrow(values, pa.int64()).to_pylist() == [0, 3, 6, 9]


def test_nan_becomes_null_and_comes_back_as_nan():
    values = np.array([1.5, np.nan, -2.0, np.nan, np.inf])
    array = numpy_to_arrow(values, pa.float64())
    assert array.null_count == 2
    assert array.to_pylist() == [1.5, None, -2.0, None, float("inf")]
    array.validate(full=True)
    same(column_to_numpy(array), values)


@pytest.mark.parametrize("n", [1, 5, 7, 8, 9, 15, 16, 17, 63])
def test_validity_bitmap_for_any_length(n):
    # every third value missing, so the last byte of the bitmap is partly padding when n % 8
    values = np.arange(n, dtype=np.float64)
    values[::3] = np.nan
    array = numpy_to_arrow(values, pa.float64())
    array.validate(full=True)
    assert array.null_count == len(range(0, n, 3))
    assert array.to_pylist() == [None if i % 3 == 0 else float(i) for i in range(n)]
    same(column_to_numpy(array), values)


def test_all_nan():
    array = numpy_to_arrow(np.full(11, np.nan), pa.float64())
    assert array.null_count == 11 and array.to_pylist() == [None] * 11
    same(column_to_numpy(array), np.full(11, np.nan))


@pytest.mark.parametrize("type_, dtype", NUMERIC, ids=str)
def test_empty_round_trip(type_, dtype):
    array = numpy_to_arrow(np.array([], dtype=dtype), type_)
    assert array.type == type_ and len(array) == 0 and array.null_count == 0
    same(column_to_numpy(array), np.array([], dtype=dtype))


# --- arrow -> numpy ------------------------------------------------------------------------


@pytest.mark.parametrize("type_, dtype", NUMERIC, ids=str)
def test_column_without_nulls_keeps_its_dtype(type_, dtype):
    same(column_to_numpy(pa.array([4, 0, -9], type_)), np.array([4, 0, -9], dtype=dtype))


def test_null_in_a_float_column_is_nan():
    same(column_to_numpy(pa.array([1.0, None, 3.0])), np.array([1.0, np.nan, 3.0]))


@pytest.mark.parametrize("type_", [pa.int32(), pa.int64()], ids=str)
def test_integer_column_with_nulls_comes_back_as_float(type_):
    got = column_to_numpy(pa.array([10, None, 30, None, 50], type_))
    same(got, np.array([10.0, np.nan, 30.0, np.nan, 50.0]))


@pytest.mark.parametrize("type_, dtype", NUMERIC, ids=str)
def test_empty_arrow_column(type_, dtype):
    same(column_to_numpy(pa.array([], type_)), np.array([], dtype=dtype))
    same(column_to_numpy(pa.chunked_array([], type_)), np.array([], dtype=dtype))


@pytest.mark.parametrize("type_, dtype", NUMERIC, ids=str)
def test_slice_reads_from_its_offset(type_, dtype):
    array = pa.array([0, 1, 2, 3, 4, 5, 6], type_).slice(2, 3)
    assert array.offset == 2
    same(column_to_numpy(array), np.array([2, 3, 4], dtype=dtype))


@pytest.mark.parametrize("start, length", [(2, 3), (5, 4), (8, 9), (11, 0), (3, 14)])
def test_slice_with_nulls_reads_its_own_validity_bits(start, length):
    # nulls at 1, 4, 7, 10, 13, 16: a slice starting off a byte boundary must shift the bitmap
    full = [None if i % 3 == 1 else i for i in range(17)]
    array = pa.array(full, pa.int64()).slice(start, length)
    expected = np.array([np.nan if v is None else float(v) for v in full[start : start + length]])
    got = column_to_numpy(array)
    if array.null_count:
        same(got, expected)
    else:  # a slice that happens to miss every null stays integer
        same(got, expected.astype(np.int64))


def test_float_slice_with_nulls():
    array = pa.array([0.5, None, 2.5, 3.5, None, 5.5, 6.5, 7.5, None, 9.5]).slice(3, 6)
    same(column_to_numpy(array), np.array([3.5, np.nan, 5.5, 6.5, 7.5, np.nan]))


def test_chunked_column_joins_its_chunks():
    column = pa.chunked_array(
        [
            pa.array([1, 2, 3], pa.int64()),
            pa.array([4], pa.int64()),
            pa.array([], pa.int64()),
            pa.array([5, 6], pa.int64()),
        ]
    )
    assert column.num_chunks == 4
    same(column_to_numpy(column), np.array([1, 2, 3, 4, 5, 6], dtype=np.int64))


def test_chunked_column_with_nulls_and_sliced_chunks():
    column = pa.chunked_array(
        [
            pa.array([0, 1, None, 3, 4], pa.int32()).slice(1, 3),
            pa.array([None, 10, 11, 12, 13, 14, 15, 16, 17], pa.int32()),
            pa.array([20, 21, 22], pa.int32()).slice(2),
        ]
    )
    expected = np.array([1, np.nan, 3, np.nan, 10, 11, 12, 13, 14, 15, 16, 17, 22])
    same(column_to_numpy(column), expected)


def test_single_sliced_chunk():
    column = pa.chunked_array(
        [pa.array([None, 1.0, None, 3.0, 4.0, None, 6.0, 7.0, 8.0, None]).slice(3, 7)]
    )
    same(column_to_numpy(column), np.array([3.0, 4.0, np.nan, 6.0, 7.0, 8.0, np.nan]))


def test_table_column_round_trip():
    table = pa.table(
        {
            "x": numpy_to_arrow(np.array([1.0, np.nan, 3.0]), pa.float64()),
            "n": numpy_to_arrow(np.array([7, 8, 9], dtype=np.int32), pa.int32()),
        }
    )
    same(column_to_numpy(table.column("x")), np.array([1.0, np.nan, 3.0]))
    same(column_to_numpy(table.column("n")), np.array([7, 8, 9], dtype=np.int32))


@pytest.mark.parametrize(
    "array, expected",
    [
        (pa.array(["a", None, "c"]), ["a", None, "c"]),
        (pa.chunked_array([pa.array(["x"]), pa.array(["y", "z"])]), ["x", "y", "z"]),
        (pa.array([True, False, None]), [True, False, None]),
        (pa.array([], pa.string()), []),
    ],
)
def test_non_numeric_column_is_an_object_array(array, expected):
    got = column_to_numpy(array)
    assert got.dtype == object
    assert got.tolist() == expected


# --- strings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        ["completed", "rejected", "unfinished"],
        ["", "a", "", "", "bc"],
        [""],
        ["", "", ""],
        [],
        ["naïve", "日本語", "emoji 🚀", "ß", "a\x00b", "tab\tnewline\n"],
    ],
    ids=["ascii", "empty_strings", "one_empty", "all_empty", "no_strings", "non_ascii"],
)
def test_strings_to_arrow_equals_pyarrows_own(values):
    array = strings_to_arrow(values)
    array.validate(full=True)
    assert array.type == pa.string()
    assert array.null_count == 0
    assert array.equals(pa.array(values, pa.string()))
    assert array.to_pylist() == values


def test_strings_offsets_count_bytes_not_characters():
    array = strings_to_arrow(["é", "日本", "x"])
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)
    assert offsets.tolist() == [0, 2, 8, 9]  # é: 2 bytes, 日本: 6 bytes, x: 1 byte


# --- no pandas -----------------------------------------------------------------------------


def test_conversions_do_not_import_pandas():
    # Arrays are built without pa.array, which itself imports pandas.
    code = """
import sys
import numpy as np, pyarrow as pa
from sim.arrow_numpy import column_to_numpy, numpy_to_arrow, strings_to_arrow
x = numpy_to_arrow(np.array([1.0, np.nan, 3.0]), pa.float64())
n = numpy_to_arrow(np.arange(5), pa.int64()).slice(1)
table = pa.table({'x': x, 's': strings_to_arrow(['a', 'é', ''])})
got = column_to_numpy(pa.chunked_array([x, x.slice(1)]))
assert np.array_equal(got, [1.0, np.nan, 3.0, np.nan, 3.0], equal_nan=True), got
assert column_to_numpy(n).tolist() == [1, 2, 3, 4]
column_to_numpy(table.column('x'))
assert column_to_numpy(table.column('s')).tolist() == ['a', 'é', '']
assert 'pandas' not in sys.modules, 'pandas imported'
import pandas  # the check above cannot pass vacuously: pandas is there to be imported
print('ok')
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
