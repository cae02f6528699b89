"""The decoder's per-call state is kept with its Program and reused (decoder.pyx take_ctx /
reset_ctx): calls from several threads at once, and a call after a failed or dead-lettered
record, see nothing of another call's values."""

from __future__ import annotations

import threading

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
