"""Transcoder.encode(on_error="dead_letter"): a row that cannot be encoded fails alone --
its record is null and its failure names the row and column -- and every other row is
byte-identical to what the plain encode gives it."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from depth import examples
from wirearrow.encoder import ENCODE_FAILURE_SCHEMA

N = 60


@pytest.fixture(scope="module")
def table(bid_schema) -> pa.Table:
    return pa.Table.from_batches([wa.Transcoder(bid_schema).transcode(corpus.generate(N, seed=8))])


def spoil(table: pa.Table, bad: dict[int, str]) -> pa.Table:
    """Rows made unencodable: "list": a null element of a repeated message; "nested": a
    null element of a repeated string inside a sub-message."""
    rows = table.to_pylist()
    for i, kind in bad.items():
        if kind == "list":
            rows[i]["imp"] = [None]
        else:  # a null deep inside a list of a nested message
            rows[i]["site"] = {**(rows[i]["site"] or {}), "cat": ["a", None]}
    return pa.Table.from_pylist(rows, schema=table.schema)


@settings(max_examples=examples(4), deadline=None)
@given(
    st.dictionaries(st.integers(0, N - 1), st.sampled_from(["list", "nested"]), max_size=8),
    st.integers(1, N),
)
def test_bad_rows_fail_alone(bid_schema, table, bad, chunk) -> None:
    tc = wa.Transcoder(bid_schema)
    spoiled = spoil(table, bad)
    chunked = pa.Table.from_batches(spoiled.to_batches(max_chunksize=chunk))
    out = tc.encode(chunked, on_error="dead_letter")
    assert out.failures.schema == ENCODE_FAILURE_SCHEMA
    assert out.failures.column("row").to_pylist() == sorted(bad)
    failed = zip(out.failures["row"].to_pylist(), out.failures["path"].to_pylist(), strict=True)
    for row, path in failed:
        assert path == ("imp[0]" if bad[row] == "list" else "site.cat[1]")
    plain = tc.encode(table)
    assert len(out.records) == N
    for i in range(N):
        if i in bad:
            assert not out.records[i].is_valid
            path = out.failures["path"][sorted(bad).index(i)].as_py()
            with pytest.raises(wa.EncodeError, match=re.escape(f"row 0, column {path}:")):
                tc.encode(spoiled.slice(i, 1))
        else:
            assert out.records[i].as_py() == plain[i].as_py()


def test_clean_batch_is_the_plain_encode(bid_schema, table) -> None:
    tc = wa.Transcoder(bid_schema)
    out = tc.encode(table, on_error="dead_letter")
    assert out.records.equals(tc.encode(table)) and out.failures.num_rows == 0
    empty = tc.encode(table.slice(0, 0), on_error="dead_letter")
    assert len(empty.records) == 0 and empty.failures.num_rows == 0


def test_struct_array_null_rows(bid_schema, table) -> None:
    tc = wa.Transcoder(bid_schema)
    spoiled = spoil(table.slice(0, 6), {4: "list"})
    struct = spoiled.to_struct_array().combine_chunks()
    mask = pa.array([False, True, False, False, False, False])
    nulled = pa.StructArray.from_arrays(struct.flatten(), fields=list(struct.type), mask=mask)
    out = tc.encode(nulled, on_error="dead_letter")
    first = {"row": 1, "path": "", "reason": "a null row is not a message"}
    assert out.failures.to_pylist()[0] == first
    assert out.failures.column("row").to_pylist() == [1, 4]
    plain = tc.encode(table.slice(0, 6))
    assert [r.as_py() for r in out.records] == [
        plain[i].as_py() if i not in (1, 4) else None for i in range(6)
    ]


def test_schema_mismatch_still_raises(bid_schema, table) -> None:
    tc = wa.Transcoder(bid_schema)
    with pytest.raises(wa.EncodeError, match="missing from the batch"):
        tc.encode(table.drop_columns(["imp"]), on_error="dead_letter")
    with pytest.raises(ValueError, match="on_error"):
        tc.encode(table, on_error="skip")


def test_an_encode_as_dead_letters_and_counts(bid_schema, table) -> None:
    """What an engine keeps of an encode: its failures as DEAD_LETTER_SCHEMA rows (a row is
    not a record: offset 0, raw null) and Counts that add up (bytes_in: the records made)."""
    from wirearrow.dead_letters import DEAD_LETTER_SCHEMA

    out = wa.Transcoder(bid_schema).encode(spoil(table, {3: "list", 7: "nested"}), on_error="dead_letter")
    dead = out.dead_letters()
    assert dead.schema == DEAD_LETTER_SCHEMA
    assert [(d["index"], d["offset"], d["path"], d["raw"]) for d in dead.to_pylist()] == [
        (3, 0, "imp[0]", None), (7, 0, "site.cat[1]", None)
    ]
    made = sum(len(r) for r in out.records.to_pylist() if r is not None)
    assert out.counts() == wa.Counts(N, N - 2, 2, N - 2, made, 0)
    assert out.counts(dead_letters=True).dead_letters == 2
    clean = wa.Transcoder(bid_schema).encode(table, on_error="dead_letter")
    assert clean.dead_letters().num_rows == 0 and clean.counts().records_failed == 0
