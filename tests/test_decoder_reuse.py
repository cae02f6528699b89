"""The decoder's per-call state is kept with its Program and reused (decoder.pyx take_ctx /
reset_ctx): calls from several threads at once, and a call after a failed or dead-lettered
record, see nothing of another call's values."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest

import wirearrow as wa


def clean(tc: wa.Transcoder) -> None:
    # The spare is back and every column, group and counter as a new one (None: no spare yet).
    state = tc._plan.program._spare_state()
    assert state is None or state == ([], [])


def fresh(schema: wa.Schema, records: list[bytes], **kw: object) -> wa.DecodeResult:
    return wa.Transcoder(schema, **kw).decode(pa.array(records, pa.binary()))


@pytest.fixture(scope="module")
def batches(bid_corpus: list[bytes]) -> list[list[bytes]]:
    # Batches of different sizes and records: each writes columns the others do not.
    return [bid_corpus[k : k + size] for k, size in ((0, 1), (5, 7), (40, 3), (100, 60), (200, 2))]


def test_two_threads_share_one_transcoder(bid_schema: wa.Schema,
                                          batches: list[list[bytes]]) -> None:
    tc = wa.Transcoder(bid_schema, on_error="dead_letter")
    want = [fresh(bid_schema, b, on_error="dead_letter").rows for b in batches]
    inputs = [pa.array(b, pa.binary()) for b in batches]
    wrong: list[int] = []
    go = threading.Barrier(2)

    def run(offset: int) -> None:
        go.wait()
        for k in range(60):
            j = (k + offset) % len(inputs)
            if not tc.decode(inputs[j]).rows.equals(want[j]):
                wrong.append(j)

    threads = [threading.Thread(target=run, args=(o,)) for o in (0, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    clean(tc)


@pytest.mark.parametrize("on_error", ["dead_letter", "skip"])
def test_a_call_after_a_bad_record_sees_only_its_own(bid_schema: wa.Schema,
                                                     bid_corpus: list[bytes],
                                                     on_error: str) -> None:
    tc = wa.Transcoder(bid_schema, on_error=on_error)
    big = bid_corpus[:50]
    # A good record cut inside a value: rolled back after it wrote some columns.
    bad = [*big[:10], big[10][: len(big[10]) // 2], *big[11:]]
    out = tc.decode(pa.array(bad, pa.binary()))
    assert out.rows.num_rows == 49
    clean(tc)
    small = [bid_corpus[-1]]
    assert tc.decode(pa.array(small, pa.binary())).rows.equals(fresh(bid_schema, small).rows)
    clean(tc)
    empty = tc.decode(pa.array([], pa.binary())).rows
    assert empty.num_rows == 0 and empty.equals(fresh(bid_schema, []).rows)


def test_a_call_after_a_raised_error_sees_only_its_own(bid_schema: wa.Schema,
                                                       bid_corpus: list[bytes]) -> None:
    tc = wa.Transcoder(bid_schema, on_error="raise")
    bad = [*bid_corpus[:20], bid_corpus[20][:-3]]
    with pytest.raises(wa.DecodeError):
        tc.decode(pa.array(bad, pa.binary()))
    clean(tc)
    good = bid_corpus[-3:]
    assert tc.decode(pa.array(good, pa.binary())).rows.equals(fresh(bid_schema, good).rows)
    clean(tc)


UNVALIDATED = """
syntax = "proto2";
package reuse;
message M { repeated string r = 1; optional string s = 2; optional int32 n = 3; }
"""


def test_moved_strings_do_not_carry_over(compile_proto) -> None:
    # A proto2 string that is not UTF-8 goes to the unknown fields and marks its column
    # (move_string, mark_moved): the next call starts from clean columns.
    schema, cls = compile_proto(UNVALIDATED, "reuse.M")
    tc = wa.Transcoder(schema)
    not_utf8 = b"\x0a\x02\xff\xfe" + b"\x0a\x01a" + b"\x12\x01\xff" + b"\x18\x05"
    first = tc.decode(pa.array([not_utf8, cls(r=["x"], s="y").SerializeToString()], pa.binary()))
    assert first.rows.column("r").to_pylist() == [[], ["x"]]  # the list moved whole
    assert first.rows.column("s").to_pylist() == [None, "y"]
    clean(tc)
    records = [cls(r=["b", "c"], s="z", n=1).SerializeToString(), b""]
    assert tc.decode(pa.array(records, pa.binary())).rows.equals(fresh(schema, records).rows)
    clean(tc)


TREE = """
syntax = "proto3";
package reuse;
message T {
  string name = 1;
  int64 v = 2;
  repeated string tags = 3;
  T left = 4;
  T right = 5;
  repeated T kids = 6;
  bytes blob = 7;
}
"""


def _entries_match_groups(result: object, program: object) -> None:
    # Every column of the Result, written or not, has one slot per element of its group;
    # a column of an empty group none (export hands it over, or gives the empty entries).
    groups = [program.column(i).group for i in range(program.n_cols)]
    counts = result.group_counts
    for col, group in enumerate(groups):
        n = counts[group]
        assert result.col_counts[col] == n, col
        assert memoryview(result.col_valid[col]).nbytes == n, col


def test_export_and_reset_follow_the_columns_a_call_touched(compile_proto) -> None:
    # A recursive plan of many columns (max_depth=3), each call writing another few: a
    # written column must come out with its values (export hands over only the columns
    # of a non-empty group and the touched ones), and a column one call wrote must be
    # clear in the next (reset_ctx clears only the touched ones), including one written
    # by a record that was rolled back, its group left empty.
    from wirearrow._core.decoder import POLICY_SKIP, decode

    schema, cls = compile_proto(TREE, "reuse.T")
    tc = wa.Transcoder(schema, max_depth=3, on_error="dead_letter")
    deep = cls(left=cls(left=cls(name="ll", v=7, tags=["a", "b"]), blob=b"\x00\x01"))
    wide = cls(right=cls(kids=[cls(name="k0"), cls(tags=["t"] * 3, v=-1)]), name="root")
    bad = cls(kids=[cls(tags=["gone"] * 5, name="x")]).SerializeToString()[:-2]
    batches = [
        [deep.SerializeToString()],
        [wide.SerializeToString(), deep.SerializeToString()],
        [bad],                                   # kids' columns written, then rolled back
        [cls(kids=[cls(v=3)]).SerializeToString()],  # kids again: nothing of the bad one
        [cls(name="n").SerializeToString(), b""],
        [deep.SerializeToString()],
    ]
    for records in batches:
        got = tc.decode(pa.array(records, pa.binary()))
        want = fresh(schema, records, max_depth=3, on_error="dead_letter")
        assert got.rows.equals(want.rows)
        assert got.counts == want.counts
        # Each record's values themselves (a fresh Transcoder shares the export code):
        # encoded back, the rows are the messages given.
        good = [r for r in records if r != bad]
        back = [cls.FromString(b) for b in tc.encode(got.rows).to_pylist()]
        assert back == [cls.FromString(r) for r in good]
        clean(tc)
    # The decoder's own hand-over, on the same (reused) program.
    program = tc._plan.program
    for records in batches:
        data = b"".join(records)
        ends = [sum(map(len, records[: k + 1])) for k in range(len(records))]
        starts = [0, *ends[:-1]]
        result = decode(program, np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8),
                        np.array(starts, np.int64), np.array(ends, np.int64), POLICY_SKIP)
        _entries_match_groups(result, program)
        clean(tc)
