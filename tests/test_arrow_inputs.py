"""transcode() takes any Arrow producer: the C data/stream interfaces, views, tables with
column=, Polars, DuckDB -- with the same rows as a BinaryArray of the same records."""

from __future__ import annotations

import pyarrow as pa
import pytest

import wirearrow as wa


class CArray:
    """A foreign producer that only speaks the Arrow PyCapsule interface."""

    def __init__(self, array: pa.Array) -> None:
        self._array = array

    def __arrow_c_array__(self, requested_schema=None):
        return self._array.__arrow_c_array__(requested_schema)


class CStream:
    def __init__(self, data: pa.ChunkedArray | pa.Table) -> None:
        self._data = data

    def __arrow_c_stream__(self, requested_schema=None):
        return self._data.__arrow_c_stream__(requested_schema)


@pytest.fixture(scope="module")
def case(bid_schema, bid_corpus):
    records = [*bid_corpus[:50], None, b"\x0a\x05\x41"]
    tc = wa.Transcoder(bid_schema, ["id", "imp[*].id"], on_error="dead_letter")
    want = tc.transcode(pa.array(records, pa.binary()))
    return tc, records, want, tc.dead_letters()


def _check(tc, got, case) -> None:
    _, _, want, dead = case
    assert got.equals(want)
    assert tc.dead_letters().equals(dead)


def test_c_interfaces_views_and_large_binary(case) -> None:
    tc, records, _, _ = case
    binary = pa.array(records, pa.binary())
    inputs = [
        CArray(binary),
        CArray(pa.array(records, pa.large_binary())),
        CStream(pa.chunked_array([binary.slice(0, 20), binary.slice(20)])),
        pa.array(records, pa.binary_view()),
        CArray(pa.array(records, pa.binary_view())),
        pa.chunked_array([pa.array(records, pa.large_binary())]),
    ]
    for messages in inputs:
        _check(tc, tc.transcode(messages), case)


def test_tables_with_column(case) -> None:
    tc, records, _, _ = case
    table = pa.table({"n": range(len(records)), "value": pa.array(records, pa.binary())})
    for messages in (table, table.to_batches()[0], CStream(table), struct_capsule(table)):
        _check(tc, tc.transcode(messages, column="value"), case)
    _check(tc, tc.transcode(table.select(["value"])), case)  # one column: no column= needed
    _check(tc, tc.transcode(table), case)  # several: the column named "value", as the engines'
    other = table.rename_columns(["n", "payload"])
    with pytest.raises(TypeError, match=r"needs column= \(one of \['n', 'payload'\]\)"):
        tc.transcode(other)
    with pytest.raises(KeyError, match="no column 'val'"):
        tc.transcode(table, column="val")
    with pytest.raises(TypeError, match="column= names a column of a table"):
        tc.transcode(records, column="value")


def struct_capsule(table: pa.Table) -> CArray:
    """A table exported as one struct array (as some producers do)."""
    return CArray(table.to_batches()[0].to_struct_array())


def test_polars_and_duckdb(case) -> None:
    pl = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    tc, records, _, _ = case
    series = pl.Series("value", records, dtype=pl.Binary)
    _check(tc, tc.transcode(series), case)
    frame = pl.DataFrame({"n": range(len(records)), "value": series})
    _check(tc, tc.transcode(frame, column="value"), case)
    table = pa.table({"n": range(len(records)), "value": pa.array(records, pa.binary())})
    relation = duckdb.from_arrow(table).order("n")
    _check(tc, tc.transcode(relation, column="value"), case)


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary(), pa.string(), pa.large_string()])
def test_sliced_and_empty_arrays(bid_schema, bid_corpus, kind) -> None:
    """A slice starts its records at its offset into the parent's offsets buffer (int32, or
    int64 for the large types)."""
    records = [*bid_corpus[:30], None, b"\x0a\x05\x41", *bid_corpus[30:40]]
    tc = wa.Transcoder(bid_schema, ["id", "imp[*].id"], on_error="dead_letter")
    whole = pa.array(records, pa.binary()).cast(kind, safe=False)  # (b"\x0a\x05\x41": not UTF-8)
    for lo, hi in [(0, len(records)), (7, 36), (29, 33), (12, 12), (len(records), len(records))]:
        want = tc.transcode(records[lo:hi])
        want_dead = tc.dead_letters()
        got = tc.transcode(whole.slice(lo, hi - lo))
        assert got.equals(want), (lo, hi)
        dead = tc.dead_letters()
        assert dead.equals(want_dead), (lo, hi)
        assert len(dead) == sum(r is None or r == b"\x0a\x05\x41" for r in records[lo:hi])
    assert tc.transcode(pa.array([], kind)).num_rows == 0
    assert tc.transcode(pa.nulls(3, kind)).num_rows == 0
    assert len(tc.dead_letters()) == 3
