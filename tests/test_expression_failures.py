"""A record whose expression value cannot be computed fails alone, under the error policy,
with its column and the reason; never the batch (issue 33). Each case below once raised out
of ``transcode`` (``stats.records_in`` stayed 0) or gave a silently wrong value."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

import wirearrow as wa
from wirearrow.plan import expressions as E

PROTO = """
syntax = "proto3";
package ef;
import "google/protobuf/timestamp.proto";
message Item { string id = 1; bytes blob = 2; }
message Event {
  string id = 1;
  google.protobuf.Timestamp ts = 2;
  optional int64 n = 3;
  bytes payload = 4;
  repeated Item items = 5;
  repeated bytes blobs = 6;
  optional int64 d = 7;
}
"""
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


@pytest.fixture
def ev(compile_proto):
    return compile_proto(PROTO, "ef.Event")


def transcode(ev, expr, messages, on_error="dead_letter", **options):
    schema, Event = ev
    tc = wa.Transcoder(schema, columns=[wa.Column(name="x", expr=expr)], on_error=on_error, **options)
    batch = tc.transcode([Event(**m).SerializeToString() for m in messages])
    return tc, batch


def dead(tc) -> list[tuple[int, str, str]]:
    return [(r["index"], r["path"], r["reason"]) for r in tc.dead_letters().drop_columns(["raw"]).to_pylist()]


def test_a_time_overflow_fails_its_record_not_the_batch(ev) -> None:
    """The issue's reproduction: add(timestamp, to_duration(cast_int(id), unit=s)) raised
    pyarrow.ArrowInvalid out of transcode for the whole batch."""
    expr = wa.fn.add("ts", wa.fn.to_duration(wa.fn.cast_int("id"), unit="s"))
    messages = [
        {"id": "5", "ts": {"seconds": 10}},
        {"id": str(INT64_MAX), "ts": {"seconds": 10}},
        {"id": "-3", "ts": {"seconds": 10}},
        {"id": str(INT64_MIN), "ts": {"seconds": 10}},
    ]
    tc, batch = transcode(ev, expr, messages)
    utc = dt.timezone.utc
    assert batch.column("x").to_pylist() == [
        dt.datetime(1970, 1, 1, 0, 0, 15, tzinfo=utc),
        dt.datetime(1970, 1, 1, 0, 0, 7, tzinfo=utc),
    ]
    s = tc.stats
    assert (s.records_in, s.records_ok, s.records_failed, s.rows_out) == (4, 2, 2, 2)
    reason = "column 'x': add: to_duration(...) does not fit timestamp[us, tz=UTC]"
    assert dead(tc) == [(1, "x", reason), (3, "x", reason)]
    # skip: counted, no dead letters; raise: the first failing record, as a DecodeError
    tc, batch = transcode(ev, expr, messages, on_error="skip")
    assert (batch.num_rows, tc.stats.records_failed) == (2, 2)
    with pytest.raises(wa.DecodeError) as info:
        transcode(ev, expr, messages, on_error="raise")
    assert (info.value.index, info.value.path, info.value.reason) == (1, "x", reason)


@pytest.mark.parametrize("value", [INT64_MAX, INT64_MIN])
def test_age_at_the_ends_of_int64(ev, value: int) -> None:
    tc, batch = transcode(ev, wa.fn.age(wa.fn.cast_int("id"), unit="s"), [{"id": str(value)}, {"id": "0"}])
    assert batch.num_rows == 1 and batch.column("x")[0].as_py() > dt.timedelta(days=365 * 50)
    assert dead(tc) == [(0, "x", "column 'x': age: a time does not fit timestamp[us]")]


def test_calendar_parts_are_exact_at_the_ends_of_int64(ev) -> None:
    """extract_year of INT64_MAX / INT64_MIN seconds gave 14423 / -10484 (Arrow's calendar
    wraps past year 32767); epoch_to_date(INT64_MAX, s) raised OverflowError for the batch."""
    messages = [{"n": INT64_MAX}, {"n": INT64_MIN}, {"n": -1}, {}]
    exprs = {
        "year": wa.fn.extract_year("n", unit="s"),
        "month": wa.fn.extract_month("n", unit="s"),
        "day": wa.fn.date_part("n", "day", unit="s"),
        "second": wa.fn.extract_second("n", unit="s"),
        "epoch": wa.fn.date_part("n", "epoch", unit="ms"),
        "ns_year": wa.fn.extract_year("n", unit="ns"),
    }
    schema, Event = ev
    tc = wa.Transcoder(schema, columns=[wa.Column(name=k, expr=e) for k, e in exprs.items()])
    got = tc.transcode([Event(**m).SerializeToString() for m in messages]).to_pydict()
    # (proleptic Gregorian; INT64_MAX s is 292277026596-12-04T15:30:07Z)
    assert got["year"] == [292277026596, -292277022657, 1969, None]
    assert got["month"] == [12, 1, 12, None]
    assert got["day"] == [4, 27, 31, None]
    assert got["second"] == [7, 52, 59, None]
    assert got["epoch"] == [INT64_MAX // 1000, INT64_MIN // 1000, -1, None]
    assert got["ns_year"] == [2262, 1677, 1969, None]
    tc, batch = transcode(ev, wa.fn.epoch_to_date("n", unit="s"), messages)
    assert batch.column("x").to_pylist() == [dt.date(1969, 12, 31), None]
    outside = "column 'x': epoch_to_date: n is outside date32 (years -5877641..5881580)"
    assert dead(tc) == [(0, "x", outside), (1, "x", outside)]


def test_times_render_and_compare_exactly_beyond_arrows_calendar(ev) -> None:
    """Arrow rendered INT64_MAX seconds as '14423-03-17 2562033891409935:30:07Z'; a
    comparison cast both sides to the finer unit, which wrapped."""
    late = wa.fn.to_timestamp("n", unit="s")
    exprs = {
        "text": wa.fn.cast_string(late),
        "after": wa.fn.gt(late, wa.fn.to_timestamp("d", unit="ns")),
        "max": wa.fn.max(late, wa.fn.to_timestamp("d", unit="s")),
    }
    schema, Event = ev
    tc = wa.Transcoder(schema, columns=[wa.Column(name=k, expr=e) for k, e in exprs.items()],
                       on_error="dead_letter")  # fmt: skip
    messages = [{"n": INT64_MAX, "d": 0}, {"n": INT64_MIN, "d": 0}, {"n": 1, "d": 0}]
    batch = tc.transcode([Event(**m).SerializeToString() for m in messages])
    assert batch.column("text").to_pylist() == [
        "292277026596-12-04 15:30:07Z", "-292277022657-01-27 08:29:52Z", "1970-01-01 00:00:01Z"
    ]  # fmt: skip
    assert batch.column("after").to_pylist() == [True, False, True]
    # (times beyond Python's datetime: compared as their ticks)
    assert batch.column("max").view(pa.int64()).to_pylist() == [INT64_MAX, 0, 1]


def test_mod_of_null_by_minus_one_is_null(ev) -> None:
    _tc, batch = transcode(ev, wa.fn.mod("n", -1), [{"n": 7}, {}, {"n": INT64_MIN}])
    assert batch.column("x").to_pylist() == [0, None, 0]
    _tc, batch = transcode(ev, wa.fn.div("n", -1), [{"n": 7}, {}, {"n": INT64_MIN}])
    assert batch.column("x").to_pylist() == [-7, None, INT64_MIN]  # documented: wraps, as Go


def test_bytes_cast_to_string_are_text(ev) -> None:
    """cast_string of bytes gave hex ('6974656d2d30'); it decodes UTF-8 now, a value that
    is not UTF-8 failing its record. hex() gives the hex form."""
    messages = [{"payload": b"item-0"}, {"payload": b"\xff\xfe"}, {}, {"payload": "é".encode()}]
    tc, batch = transcode(ev, wa.fn.cast_string("payload"), messages)
    assert batch.column("x").to_pylist() == ["item-0", "", "é"]
    assert dead(tc) == [(1, "x", "column 'x': cast_string: payload is not valid UTF-8")]
    tc, batch = transcode(ev, wa.fn.hex("payload"), messages)
    assert batch.column("x").to_pylist() == ["6974656d2d30", "fffe", "", "c3a9"]
    # (an unset proto3 bytes field is b"": its hex is "")
    tc, batch = transcode(ev, wa.fn.hex(wa.fn.lit("é")), messages[:1])
    assert batch.column("x").to_pylist() == ["c3a9"]


def test_a_failure_in_a_fan_out_or_an_aggregate_fails_the_whole_record(ev) -> None:
    messages = [
        {"id": "a", "items": [{"id": "1", "blob": b"ok"}, {"id": "2", "blob": b"\xc3"}]},
        {"id": "b", "items": [{"id": "3", "blob": b"fine"}]},
        {"id": "c", "blobs": [b"x", b"\xe2\x82"], "items": [{"blob": b"y"}]},
    ]
    schema, Event = ev
    tc = wa.Transcoder(
        schema,
        columns=["id", wa.Column(name="blob", expr=wa.fn.cast_string("items[*].blob"))],
        on_error="dead_letter",
    )
    batch = tc.transcode([Event(**m).SerializeToString() for m in messages])
    assert batch.to_pydict() == {"id": ["b", "c"], "blob": ["fine", "y"]}
    assert [row[0] for row in dead(tc)] == [0]
    tc = wa.Transcoder(
        schema,
        columns=["id", wa.Column(name="all", expr=wa.fn.list_concat(wa.fn.cast_string("blobs[*]"), sep="+"))],
        on_error="dead_letter",
    )
    batch = tc.transcode([Event(**m).SerializeToString() for m in messages])
    assert batch.to_pydict() == {"id": ["a", "b"], "all": ["", ""]}
    assert dead(tc) == [(2, "all", "column 'all': cast_string: blobs[*] is not valid UTF-8")]
    s = tc.stats
    assert s.records_in == s.records_ok + s.records_failed == 3


def test_a_branch_not_taken_fails_nothing(ev) -> None:
    """cond, coalesce, and, or: a value they do not use cannot fail the record."""
    guarded = wa.fn.cond(wa.fn.lt("n", 10**15), wa.fn.epoch_to_date("n", unit="s"), wa.fn.lit(None))
    exprs = {
        "cond": guarded,
        "coalesce": wa.fn.coalesce(wa.fn.epoch_to_date("d", unit="s"), wa.fn.epoch_to_date("n", unit="s")),
        "and": wa.fn.and_(wa.fn.lt("n", 0), wa.fn.has(wa.fn.epoch_to_date("n", unit="s"))),
        "or": wa.fn.or_(wa.fn.gt("n", 0), wa.fn.has(wa.fn.epoch_to_date("n", unit="s"))),
    }
    schema, Event = ev
    tc = wa.Transcoder(schema, columns=[wa.Column(name=k, expr=e) for k, e in exprs.items()],
                       on_error="dead_letter")  # fmt: skip
    batch = tc.transcode([Event(n=INT64_MAX, d=1).SerializeToString(), Event(n=86400).SerializeToString()])
    assert tc.stats.records_failed == 0
    assert batch.column("cond").to_pylist() == [None, dt.date(1970, 1, 2)]
    assert batch.column("coalesce").to_pylist() == [dt.date(1970, 1, 1), dt.date(1970, 1, 2)]
    assert batch.column("and").to_pylist() == [False, False]
    assert batch.column("or").to_pylist() == [True, True]
    # ... but where the failing value is used, the record fails
    tc, batch = transcode(ev, exprs["coalesce"], [{"n": INT64_MAX}])
    assert batch.num_rows == 0 and tc.stats.records_failed == 1


def test_any_error_of_an_evaluator_is_pinned_on_its_records(ev, monkeypatch) -> None:
    """An evaluator that raises (an Arrow compute error no check foresaw) fails the records
    whose rows raise, found by evaluating halves of the batch again; the others keep their
    values."""
    import pyarrow.compute as pc

    def boom(args, call, n):
        values = args[0]
        if pc.any(pc.equal(values, 13)).as_py():
            raise pa.ArrowInvalid("thirteen is unlucky")
        return pc.add(values, 1)

    fn = E.Function("boom", 1, 1, lambda types, call: pa.int64(), boom)
    monkeypatch.setitem(E.FUNCTIONS, "boom", fn)
    messages = [{"n": i} for i in range(40)] + [{"n": 13}]
    expr = E.Call("boom", (E.PathRef("n"),))
    tc, batch = transcode(ev, expr, messages)
    assert batch.column("x").to_pylist() == [i + 1 for i in range(40) if i != 13]
    assert dead(tc) == [(13, "x", "column 'x': boom: thirteen is unlucky"),
                        (40, "x", "column 'x': boom: thirteen is unlucky")]  # fmt: skip
    # one that raises on every row fails every record, and the batch still returns
    tc, batch = transcode(ev, E.Call("boom", (E.Lit(13),)), messages[:5])
    assert batch.num_rows == 0 and tc.stats.records_failed == 5


def test_an_aggregate_error_is_pinned_on_its_records(ev, monkeypatch) -> None:
    """Narrowing down an aggregate's error splits the records (each with all its values)."""
    import pyarrow.compute as pc

    from wirearrow.plan.functions import per_record

    def boom(args, call, n):
        if pc.any(pc.equal(args[0].values, 13)).as_py():
            raise pa.ArrowInvalid("13 inside")
        return per_record(args[0], "sum")

    fn = E.Function("boomsum", 1, 1, lambda types, call: pa.int64(), boom, aggregate=True)
    monkeypatch.setitem(E.FUNCTIONS, "boomsum", fn)
    schema, Event = ev
    tc = wa.Transcoder(
        schema,
        columns=["id", wa.Column(name="s", expr=E.Call("boomsum", (wa.fn.cast_int("items[*].id"),)))],
        on_error="dead_letter",
    )
    messages = [{"id": str(i), "items": [{"id": str(i)}, {"id": str(i + 1)}]} for i in range(30)]
    batch = tc.transcode([Event(**m).SerializeToString() for m in [*messages, {"id": "x"}]])
    kept = [i for i in range(30) if i not in (12, 13)]
    assert batch.to_pydict() == {"id": [str(i) for i in kept] + ["x"], "s": [2 * i + 1 for i in kept] + [None]}
    assert dead(tc) == [(12, "s", "column 's': boomsum: 13 inside"), (13, "s", "column 's': boomsum: 13 inside")]
