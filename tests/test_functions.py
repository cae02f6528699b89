"""The expression function library: every function of the reference (§3.3) with our decisions
(typed results, SQL nulls, broadcast, division by zero -> null, explicit epoch units)."""

from __future__ import annotations

import datetime as dt
import math
import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import wirearrow as wa
from wirearrow.plan import functions as F
from wirearrow.plan.expressions import FUNCTIONS, Call, Lit, MaybePath

PROTO = """
syntax = "proto3";
package fx;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
enum Color { RED = 0; GREEN = 2; BLUE = 3; }
message Deal { string id = 1; double price = 2; }
message Imp { string id = 1; repeated Deal deals = 2; int32 w = 3; }
message Msg {
  string id = 1;
  Color color = 2;
  float f = 3;
  sint32 si = 4;
  optional int32 opt = 5;
  string s = 6;
  bytes blob = 7;
  google.protobuf.Timestamp ts = 8;
  oneof o { int64 n = 9; }
  repeated Imp imps = 10;
  map<string, int32> m = 11;
  optional double d = 12;
  optional uint64 u = 13;
  optional int64 ms = 14;
  optional string name = 15;
  optional bool flag = 16;
  google.protobuf.Duration dur = 17;
  repeated Color colors = 18;
  repeated string tags = 19;
  optional int64 secs = 20;
  optional int32 i32 = 21;
}
"""

# The message of the reference's observed-examples table (§3.3), with three impressions.
EXAMPLE = dict(
    id="  Hello World  ",
    color=2,
    f=2.5,
    si=-7,
    opt=5,
    s="2024-03-15 10:30:00",
    blob=b"\x01\xab",
    ts={"seconds": 1_700_000_000},
    secs=1_700_000_000,
    imps=[
        {"id": "i1", "deals": [{"id": "a", "price": 1.5}, {"id": "b", "price": 2.25}]},
        {"id": "i2", "deals": [{"id": "a", "price": 0}]},
        {"id": "i3"},
    ],
)


@pytest.fixture
def fx(compile_proto):
    schema, Msg = compile_proto(PROTO, "fx.Msg")
    return schema, Msg


def run(fx, exprs, *paths, messages=None):
    """{name: values} and {name: type} of expression columns (plus plain path columns)."""
    schema, Msg = fx
    if messages is None:
        messages = [EXAMPLE]
    if not isinstance(exprs, dict):
        exprs = {"x": exprs}
    columns = [*paths, *(wa.Column(name=k, expr=e) for k, e in exprs.items())]
    records = [Msg(**m).SerializeToString() for m in messages]
    batch = wa.Transcoder(schema, columns=columns).transcode(records)
    values = {f.name: batch.column(f.name).to_pylist() for f in batch.schema}
    types = {f.name: f.type for f in batch.schema}
    return values, types


def one(fx, expr, message=None):
    """(type, value) of an expression on one message (no fan-out)."""
    values, types = run(fx, expr, messages=[EXAMPLE if message is None else message])
    return types["x"], values["x"][0]


UTC = dt.timezone.utc


def ts(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


# ---- the reference's observed examples (where our decisions agree) ---------------------------


REFERENCE_EXAMPLES = [
    (wa.fn.has("id"), pa.bool_(), True),
    (wa.fn.has("n"), pa.bool_(), False),
    (wa.fn.len("id"), pa.int64(), 15),
    (wa.fn.len("imps"), pa.int64(), 3),
    (wa.fn.len("blob"), pa.int64(), 2),
    (wa.fn.trim_prefix("id", "  He"), pa.utf8(), "llo World  "),
    # reference: "2;2.5;01ab;true;0": the unset oneof member n is null here (presence), so ''
    (wa.fn.concat("color", "f", "blob", wa.fn.lit(True), "n", sep=";"), pa.utf8(), "2;2.5;01ab;true;"),
    (wa.fn.div("si", 2), pa.int64(), -3),
    (wa.fn.mod("si", 3), pa.int64(), -1),
    (wa.fn.div("si", 0), pa.int64(), None),  # reference: 0
    (wa.fn.strptime("s", "%Y-%m-%d %H:%M:%S"), pa.timestamp("us", "UTC"), ts(2024, 3, 15, 10, 30)),
    (wa.fn.cast_int(wa.fn.strptime("s", "%Y-%m-%d %H:%M:%S")), pa.int64(), 1_710_498_600_000_000),
    (wa.fn.strptime("s", "2006-01-02 15:04:05"), pa.timestamp("us", "UTC"), ts(2024, 3, 15, 10, 30)),
    (wa.fn.try_strptime("id", "%Y"), pa.timestamp("us", "UTC"), ts(1970, 1, 1)),
    (wa.fn.strptime("id", "%Y"), pa.timestamp("us", "UTC"), None),
    (wa.fn.date_part("secs", "year", unit="s"), pa.int64(), 2023),
    (wa.fn.date_part("ts", "YEAR"), pa.int64(), 2023),
    (wa.fn.epoch_to_date("secs", unit="s"), pa.date32(), dt.date(2023, 11, 14)),  # ref: int32 19675
    (wa.fn.epoch_to_date("ts"), pa.date32(), dt.date(2023, 11, 14)),
    (wa.fn.enum_name("color"), pa.utf8(), "GREEN"),
    (wa.fn.mask("id", keep=3, char="#"), pa.utf8(), "  H############"),
    (wa.fn.bucket("si", size=4), pa.int32(), -4),
    (wa.fn.coerce("opt", 1, 0), pa.utf8(), "1"),
    (wa.fn.coalesce("n", "si"), pa.int64(), -7),
    (wa.fn.default("n", 99), pa.int64(), 99),
    (wa.fn.hash(wa.fn.lit("abc"), 1), pa.int64(), -281498599332273074),
    (wa.fn.hash(wa.fn.lit(None)), pa.int64(), -3750763034362895579),
]


@pytest.mark.parametrize(("expr", "type_", "value"), REFERENCE_EXAMPLES)
def test_reference_examples(fx, expr, type_, value) -> None:
    assert one(fx, expr) == (type_, value)


def test_reference_aggregate_examples(fx) -> None:
    values, types = run(
        fx,
        {"sum": wa.fn.sum("imps[*].deals[*].price"), "n": wa.fn.distinct("imps[*].deals[*].id")},
        "imps[*].id",
    )
    assert values["imps[*].id"] == ["i1", "i2", "i3"]  # aggregates add no rows
    assert values["sum"] == [3.75] * 3 and types["sum"] == pa.float64()
    assert values["n"] == [2] * 3 and types["n"] == pa.int64()
    values, _ = run(fx, {"ids": wa.fn.list_concat("imps[*].id", sep=",")}, "imps[*].id")
    assert values["ids"] == ["i1,i2,i3"] * 3


def test_aggregates_over_different_fanouts_are_independent(fx) -> None:
    # each aggregate walks its own fan-outs: siblings do not multiply each other's values
    values, _ = run(
        fx,
        {
            "ids": wa.fn.list_concat("imps[*].id", sep=","),
            "sum": wa.fn.sum("imps[*].deals[*].price"),
            "keys": wa.fn.distinct("m[*]"),
        },
        messages=[{**EXAMPLE, "m": {"a": 1, "b": 2}}],
    )
    assert values == {"ids": ["i1,i2,i3"], "sum": [3.75], "keys": [2]}


def test_scalars_broadcast_across_fanout(fx) -> None:
    # reference: concat(color, imps[*].id) sits in the scalar group and is cross-joined (9
    # rows); here the root value is broadcast onto each impression row.
    values, _ = run(
        fx,
        {"c": wa.fn.concat("color", "imps[*].id", sep="-"), "w": wa.fn.add("si", "imps[*].w")},
        "imps[*].id",
        messages=[EXAMPLE, {"si": 1, "imps": [{"id": "j", "w": 10}]}],
    )
    assert values["imps[*].id"] == ["i1", "i2", "i3", "j"]
    assert values["c"] == ["2-i1", "2-i2", "2-i3", "0-j"]
    assert values["w"] == [-7, -7, -7, 11]


def test_has_with_fanout_in_either_column_order(fx) -> None:
    empty = [{"id": "x"}]
    for order in (0, 1):
        exprs = {"h": wa.fn.has("imps[*].id")}
        schema, Msg = fx
        cols = [wa.Column(name="h", expr=exprs["h"]), "imps[*].id"]
        batch = wa.Transcoder(schema, columns=cols[::-1] if order else cols).transcode(
            [Msg(**m).SerializeToString() for m in empty]
        )
        assert batch.column("h").to_pylist() == [False]
        assert batch.column("imps[*].id").to_pylist() == [None]


# ---- nulls ------------------------------------------------------------------------------------

# On a message where every explicit-presence field is absent (opt, d, u, ms, name, flag, n).
NULLS = [
    (wa.fn.add("opt", 1), None),
    (wa.fn.sub("d", "opt"), None),
    (wa.fn.mul("ms", 2), None),
    (wa.fn.div("ms", 2), None),
    (wa.fn.mod("d", 2), None),
    (wa.fn.abs("opt"), None),
    (wa.fn.ceil("d"), None),
    (wa.fn.floor("d"), None),
    (wa.fn.round("d"), None),
    (wa.fn.min("opt", 1), None),
    (wa.fn.max("d", 1.0), None),
    (wa.fn.bucket("ms", 10), None),
    (wa.fn.eq("opt", 0), None),
    (wa.fn.ne("opt", 0), None),  # SQL null (reference: false); filters and cond read it as false
    (wa.fn.lt("name", "a"), None),
    (wa.fn.cond(wa.fn.ne("opt", 0), "yes", "no"), "no"),
    (wa.fn.and_("flag", True), False),
    (wa.fn.or_("flag", "opt"), False),
    (wa.fn.not_("flag"), True),
    (wa.fn.has("opt"), False),
    (wa.fn.coalesce("opt", "ms"), None),
    (wa.fn.default("opt", 7), 7),
    (wa.fn.default("opt", None), None),
    (wa.fn.coerce("opt", "t", "f"), "f"),
    (wa.fn.coerce("opt", "t"), None),
    (wa.fn.concat("name", "opt", wa.fn.lit("x"), sep="|"), "||x"),
    (wa.fn.upper("name"), ""),
    (wa.fn.lower("name"), ""),
    (wa.fn.trim("name"), ""),
    (wa.fn.trim_prefix("name", "a"), ""),
    (wa.fn.trim_suffix("name", "a"), ""),
    (wa.fn.cast_string("opt"), ""),
    (wa.fn.len("name"), None),  # reference: 0
    (wa.fn.mask("name", keep=1), None),
    (wa.fn.cast_int("name"), None),
    (wa.fn.cast_int("d"), None),
    (wa.fn.cast_float("name"), None),
    (wa.fn.strptime("name", "%Y"), None),
    (wa.fn.try_strptime("name", "%Y"), ts(1970, 1, 1)),
    (wa.fn.extract_year("ms", unit="ms"), None),
    (wa.fn.extract_month("ts"), None),
    (wa.fn.date_part("ts", "day"), None),
    (wa.fn.epoch_to_date("secs", unit="s"), None),
    (wa.fn.age("ts"), None),
    (wa.fn.age("ms", "secs", unit="ms"), None),
    (wa.fn.hash("name", "opt"), -3750763034362895579),
    (wa.fn.enum_name("colors[0]"), None),
    (wa.fn.sum("imps[*].w"), None),
    (wa.fn.distinct("imps[*].id"), 0),
    (wa.fn.list_concat("imps[*].id", sep=","), ""),
]


@pytest.mark.parametrize(("expr", "value"), NULLS)
def test_nulls(fx, expr, value) -> None:
    assert one(fx, expr, {})[1] == value


def test_null_literals_adapt(fx) -> None:
    values, types = run(
        fx, {"a": wa.fn.add(wa.fn.lit(None), 1), "c": wa.fn.coalesce(wa.fn.lit(None), "si"), "l": wa.fn.len(None)}
    )
    assert values == {"a": [None], "c": [-7], "l": [None]}
    assert types["a"] == pa.int64() and types["c"] == pa.int32()


# ---- arithmetic ------------------------------------------------------------------------------


def test_arithmetic_result_types(fx) -> None:
    m = dict(i32=3, f=0.5, ms=2**62, u=2**64 - 1, flag=True, si=-7)
    values, types = run(
        fx,
        {
            "int_float": wa.fn.add("i32", "f"),
            "int_int": wa.fn.add("i32", "si"),
            "wrap": wa.fn.mul("ms", 4),
            "uint": wa.fn.add("u", 0),
            "bool": wa.fn.add("flag", 1),
            "sub": wa.fn.sub("i32", 10),
            "float_lit": wa.fn.mul("si", 0.5),
        },
        messages=[m],
    )
    assert types["int_float"] == pa.float64() and values["int_float"] == [3.5]
    assert types["int_int"] == pa.int64() and values["int_int"] == [-4]
    assert values["wrap"] == [0]  # 2**64 wraps, as the reference's int64
    assert values["uint"] == [-1]  # uint64 above 2**63-1 wraps negative (integer view)
    assert values["bool"] == [2]
    assert values["sub"] == [-7]
    assert types["float_lit"] == pa.float64() and values["float_lit"] == [-3.5]


def test_division_and_modulo(fx) -> None:
    m = dict(si=-7, ms=-(2**63), i32=0, d=-7.5, opt=-1)
    values, types = run(
        fx,
        {
            "trunc": wa.fn.div("si", 2),
            "trunc_neg": wa.fn.div(7, wa.fn.lit(-2)),
            "by_zero": wa.fn.div("si", "i32"),
            "mod_zero": wa.fn.mod("si", "i32"),
            "float_zero": wa.fn.div("d", 0.0),
            "float_mod_zero": wa.fn.mod("d", 0),
            "min_by_minus_one": wa.fn.div("ms", "opt"),
            "mod_minus_one": wa.fn.mod("ms", "opt"),
            "float_div": wa.fn.div("d", 2),
            "fmod": wa.fn.mod("d", 2),
            "mod_sign": wa.fn.mod(7, wa.fn.lit(-3)),
            "mixed": wa.fn.div("si", 2.0),
        },
        messages=[m],
    )
    assert values["trunc"] == [-3] and values["trunc_neg"] == [-3]
    assert values["by_zero"] == [None] and values["mod_zero"] == [None]
    assert values["float_zero"] == [None] and values["float_mod_zero"] == [None]
    assert values["min_by_minus_one"] == [-(2**63)]  # wraps, as Go
    assert values["mod_minus_one"] == [0]
    assert values["float_div"] == [-3.75]
    assert values["fmod"] == [-1.5]  # fmod: the sign of the dividend
    assert values["mod_sign"] == [1]
    assert values["mixed"] == [-3.5] and types["mixed"] == pa.float64()


def test_unary_numbers(fx) -> None:
    m = dict(d=2.5, i32=-(2**31), ms=-(2**63), u=5)
    values, types = run(
        fx,
        {
            "abs32": wa.fn.abs("i32"),
            "abs64": wa.fn.abs("ms"),
            "absu": wa.fn.abs("u"),
            "ceil": wa.fn.ceil("d"),
            "floor": wa.fn.floor(wa.fn.lit(-2.5)),
            "round": wa.fn.round("d"),
            "round35": wa.fn.round(3.5),
            "round_neg": wa.fn.round(-2.5),
            "ceil_int": wa.fn.ceil("i32"),
        },
        messages=[m],
    )
    assert values["abs32"] == [2**31] and types["abs32"] == pa.int64()
    assert values["abs64"] == [-(2**63)]  # stays negative, as the reference
    assert values["absu"] == [5] and types["absu"] == pa.uint64()
    assert values["ceil"] == [3.0] and values["floor"] == [-3.0]
    assert values["round"] == [2.0] and values["round35"] == [4.0]
    assert values["round_neg"] == [-2.0]
    assert values["ceil_int"] == [-(2**31)] and types["ceil_int"] == pa.int32()


def test_min_max(fx) -> None:
    m = dict(d=float("nan"), si=-7, i32=3, name="b")
    values, types = run(
        fx,
        {
            "ints": wa.fn.min("si", "i32"),
            "mixed": wa.fn.max("si", 2.5),
            "nan": wa.fn.max("d", 1.0),
            "strings": wa.fn.min("name", "a"),
            "times": wa.fn.max("ts", wa.fn.strptime(wa.fn.lit("2030"), "%Y")),
        },
        messages=[m],
    )
    assert values["ints"] == [-7] and types["ints"] == pa.int32()
    assert values["mixed"] == [2.5] and types["mixed"] == pa.float64()
    assert math.isnan(values["nan"][0])  # IEEE: NaN propagates
    assert values["strings"] == ["a"]
    assert values["times"] == [None]  # ts is absent: null


def test_bucket(fx) -> None:
    m = dict(si=-7, ms=13, u=2**64 - 3)
    values, types = run(
        fx,
        {
            "neg": wa.fn.bucket("si", 4),
            "pos": wa.fn.bucket("ms", 5),
            "zero": wa.fn.bucket("ms", 0),
            "u": wa.fn.bucket("u", 10),
        },
        messages=[m],
    )
    assert values == {"neg": [-4], "pos": [10], "zero": [13], "u": [2**64 - 6]}
    assert types["neg"] == pa.int32() and types["u"] == pa.uint64()
    with pytest.raises(wa.PlanError, match="param must be an int64"):
        wa.Transcoder(fx[0], columns=[wa.Column(name="huge", expr=wa.fn.bucket("ms", 2**70))])


# ---- comparisons and logic -------------------------------------------------------------------


def test_comparisons(fx) -> None:
    m = dict(si=-7, u=2**64 - 1, name="b", color=2, d=float("nan"), flag=True, blob=b"a")
    values, _ = run(
        fx,
        {
            "int_float": wa.fn.lt("si", -6.5),
            "uint_vs_neg": wa.fn.gt("u", "si"),
            "uint_eq": wa.fn.eq("u", wa.fn.lit(2**64 - 1)),
            "strings": wa.fn.lt("name", "ba"),
            "bytewise": wa.fn.lt(wa.fn.lit("Z"), wa.fn.lit("a")),
            "enum": wa.fn.eq("color", 2),
            "bools": wa.fn.gt("flag", False),
            "bytes": wa.fn.eq("blob", "a"),
            "nan_eq": wa.fn.eq("d", "d"),
            "nan_ne": wa.fn.ne("d", 1.0),
            "times": wa.fn.lt("ts", wa.fn.strptime(wa.fn.lit("2000"), "%Y")),
            "ge": wa.fn.ge("si", -7),
            "le": wa.fn.le("si", -8),
        },
        messages=[m],
    )
    assert values["int_float"] == [True]
    assert values["uint_vs_neg"] == [True] and values["uint_eq"] == [True]
    assert values["strings"] == [True] and values["bytewise"] == [True]
    assert values["enum"] == [True] and values["bools"] == [True] and values["bytes"] == [True]
    assert values["nan_eq"] == [False] and values["nan_ne"] == [True]  # IEEE (reference: eq)
    assert values["times"] == [None]
    assert values["ge"] == [True] and values["le"] == [False]


def test_comparisons_of_times(fx) -> None:
    m = dict(ts={"seconds": 1_700_000_000, "nanos": 5000}, dur={"seconds": 90})
    values, _ = run(
        fx,
        {
            "ts": wa.fn.gt("ts", wa.fn.strptime(wa.fn.lit("2023-11-14 22:13:20"), "%Y-%m-%d %H:%M:%S")),
            "dur": wa.fn.eq("dur", wa.fn.sub("ts", wa.fn.sub("ts", "dur"))),
        },
        messages=[m],
    )
    assert values == {"ts": [True], "dur": [True]}


def test_logic_uses_truthiness(fx) -> None:
    m = dict(name="", si=3, opt=0, imps=[{"id": "x"}])
    values, types = run(
        fx,
        {
            "and": wa.fn.and_("si", "imps"),
            "and_empty": wa.fn.and_("si", "name"),
            "or": wa.fn.or_("name", "opt"),
            "not": wa.fn.not_("opt"),
            "not_msg": wa.fn.not_("ts"),
        },
        messages=[m],
    )
    assert values == {
        "and": [True],
        "and_empty": [False],
        "or": [False],
        "not": [True],
        "not_msg": [True],  # an absent message is null: not truthy
    }
    assert set(types.values()) == {pa.bool_()}


# ---- strings ----------------------------------------------------------------------------------


def test_string_functions(fx) -> None:
    m = dict(name="\u00a0 Straße ünd \t\u3000", id="héllo", s="prefix-body-suffix", f=0.1)
    values, _ = run(
        fx,
        {
            "upper": wa.fn.upper("id"),
            "lower": wa.fn.lower(wa.fn.lit("ÀÉ")),
            "trim": wa.fn.trim("name"),
            "trim_prefix": wa.fn.trim_prefix("s", "prefix-"),
            "trim_prefix_absent": wa.fn.trim_prefix("s", "body"),
            "trim_suffix": wa.fn.trim_suffix("s", "-suffix"),
            "trim_suffix_once": wa.fn.trim_suffix(wa.fn.lit("aa"), "a"),
            "len_bytes": wa.fn.len("id"),  # UTF-8 bytes, not code points
            "mask": wa.fn.mask("id", keep=1),
            "mask_all_kept": wa.fn.mask("id", keep=10),
            "mask_negative": wa.fn.mask("id", keep=-2, char="#x"),
            "upper_number": wa.fn.upper("f"),
            "cast_string": wa.fn.cast_string("f"),  # float32 0.1 -> "0.1"
            "concat_plain": wa.fn.concat("id", wa.fn.lit(1), wa.fn.lit(2.5), wa.fn.lit(None), wa.fn.lit(False)),
        },
        messages=[m],
    )
    assert values["upper"] == ["HÉLLO"]
    assert values["lower"] == ["àé"]
    assert values["trim"] == ["Straße ünd"]
    assert values["trim_prefix"] == ["body-suffix"]
    assert values["trim_prefix_absent"] == ["prefix-body-suffix"]
    assert values["trim_suffix"] == ["prefix-body"]
    assert values["trim_suffix_once"] == ["a"]
    assert values["len_bytes"] == [6]
    assert values["mask"] == ["h****"]
    assert values["mask_all_kept"] == ["héllo"]
    assert values["mask_negative"] == ["#####"]
    assert values["upper_number"] == ["0.1"]
    assert values["cast_string"] == ["0.1"]
    assert values["concat_plain"] == ["héllo12.5false"]


def test_string_forms_match_the_reference() -> None:
    floats = pa.array([1e21, 1e-7, -0.0, 2.5, float("nan"), float("inf"), -float("inf")])
    assert F.string_form(floats, 7).to_pylist() == [
        "1000000000000000000000",
        "0.0000001",
        "-0",
        "2.5",
        "NaN",
        "+Inf",
        "-Inf",
    ]
    assert F.string_form(pa.array([1234567890123456.8, 1.5e16]), 2).to_pylist() == [
        "1234567890123456.8",
        "15000000000000000",
    ]
    assert F.string_form(pa.array([0.1, 3e10], pa.float32()), 2).to_pylist() == [
        "0.1",
        "30000000000",
    ]
    assert F.string_form(pa.array([b"\x01\xab", b"", None]), 3).to_pylist() == ["01ab", "", ""]
    assert F.string_form(pa.array([True, None]), 2).to_pylist() == ["true", ""]


def test_coerce_renders_literals_as_go(fx) -> None:
    values, _ = run(
        fx,
        {
            "int": wa.fn.coerce("si", 1, 0),
            "bool": wa.fn.coerce("si", True, False),
            "big": wa.fn.coerce("si", 1e21, 0.5),
            "million": wa.fn.coerce("si", 1e6, None),
            "small": wa.fn.coerce("opt", 1, 1e-5),
        },
        messages=[dict(si=1)],
    )
    assert values == {
        "int": ["1"],
        "bool": ["true"],
        "big": ["1e+21"],
        "million": ["1e+06"],
        "small": ["1e-05"],
    }


# ---- casts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "as_int", "as_float"),
    [
        ("12", 12, 12.0),
        ("+5", 5, 5.0),
        ("-3", -3, -3.0),
        ("12.9", 12, 12.9),
        ("-12.9", -12, -12.9),
        ("1e3", 1000, 1000.0),
        (".5", 0, 0.5),
        ("9223372036854775807", 2**63 - 1, 9.223372036854776e18),
        ("-9223372036854775808", -(2**63), -9.223372036854776e18),
        ("+0000000000000000000012", 12, 12.0),
        ("9223372036854775808", None, 9.223372036854776e18),  # out of int64 (Go: overflow)
        ("99999999999999999999", None, 1e20),
        ("inf", None, math.inf),
        ("-Infinity", None, -math.inf),
        (" 1", None, None),  # no surrounding spaces, as Go's parser
        ("0x10", None, None),  # hex floats are not supported (Go accepts them)
        ("1_0", None, None),
        ("abc", None, None),
        ("", None, None),
    ],
)
def test_casts_from_text(fx, text, as_int, as_float) -> None:
    values, _ = run(
        fx, {"i": wa.fn.cast_int("name"), "f": wa.fn.cast_float("name")}, messages=[{"name": text}]
    )
    assert values["i"] == [as_int]
    assert values["f"] == [as_float]


def test_casts_from_numbers(fx) -> None:
    m = dict(d=-2.9, flag=True, color=3, u=2**64 - 1, ts={"seconds": 2}, f=1e20)
    values, types = run(
        fx,
        {
            "trunc": wa.fn.cast_int("d"),
            "bool": wa.fn.cast_int("flag"),
            "enum": wa.fn.cast_int("color"),
            "uint": wa.fn.cast_int("u"),
            "ts": wa.fn.cast_int("ts"),  # ticks of the column's unit (us)
            "too_big": wa.fn.cast_int(wa.fn.lit(1e30)),
            "nan": wa.fn.cast_int(wa.fn.lit(math.nan)),
            "float": wa.fn.cast_float("color"),
            "float_bool": wa.fn.cast_float("flag"),
            "string": wa.fn.cast_string("u"),
        },
        messages=[m],
    )
    assert values["trunc"] == [-2] and values["bool"] == [1] and values["enum"] == [3]
    assert values["uint"] == [-1] and values["ts"] == [2_000_000]
    assert values["too_big"] == [None] and values["nan"] == [None]
    assert values["float"] == [3.0] and values["float_bool"] == [1.0]
    assert values["string"] == [str(2**64 - 1)]
    assert types["float"] == pa.float64() and types["string"] == pa.utf8()


# ---- hash ------------------------------------------------------------------------------------


def _fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) % 2**64
    return h - 2**64 if h >= 2**63 else h


def test_hash_matches_the_reference(fx) -> None:
    assert _fnv1a(b"abc1") == -281498599332273074
    m = dict(id="  Hello World  ", si=-7, f=2.5, blob=b"\x01\xab", flag=False, color=2)
    values, types = run(
        fx,
        {
            "h": wa.fn.hash("id", "si", "f", "blob", "flag", "color"),
            "null_skipped": wa.fn.hash("id", "opt", "si"),
            "one": wa.fn.hash("id"),
            "per_row": wa.fn.hash("imps[*].id"),
        },
        messages=[{**m, "imps": [{"id": "a"}, {"id": ""}, {"id": "a"}]}],
    )
    assert types["h"] == pa.int64()
    assert values["h"] == [_fnv1a(b"  Hello World  -72.501abfalse2")] * 3
    assert values["null_skipped"] == [_fnv1a(b"  Hello World  -7")] * 3
    assert values["one"] == [_fnv1a(b"  Hello World  ")] * 3
    assert values["per_row"] == [_fnv1a(b"a"), _fnv1a(b""), _fnv1a(b"a")]


def test_hash_of_many_lengths() -> None:
    texts = ["", "a", "ab" * 40, "x" * 1000, "héllo", "a", None]
    got = F.fnv1a64(pa.array([t or "" for t in texts])).tolist()
    assert got == [_fnv1a((t or "").encode()) for t in texts]


# ---- time ------------------------------------------------------------------------------------


def test_time_functions_on_timestamps(fx) -> None:
    m = dict(ts={"seconds": 1_710_498_645, "nanos": 999_000_000})  # 2024-03-15 10:30:45.999
    parts = ("year", "month", "day", "hour", "minute", "second")
    exprs = {p: getattr(wa.fn, f"extract_{p}")("ts") for p in parts}
    exprs |= {f"dp_{p}": wa.fn.date_part("ts", p) for p in parts}
    exprs["epoch"] = wa.fn.date_part("ts", "epoch")
    exprs["date"] = wa.fn.epoch_to_date("ts")
    values, types = run(fx, exprs, messages=[m])
    expected = dict(zip(parts, (2024, 3, 15, 10, 30, 45), strict=True))
    for p, v in expected.items():
        assert values[p] == [v] and values[f"dp_{p}"] == [v]
        assert types[p] == pa.int64()
    assert values["epoch"] == [1_710_498_645]
    assert values["date"] == [dt.date(2024, 3, 15)]


@pytest.mark.parametrize(
    ("unit", "value"),
    [("s", 1_700_000_000), ("ms", 1_700_000_000_000), ("us", 1_700_000_000 * 10**6)],
)
def test_integer_epochs_take_a_unit(fx, unit, value) -> None:
    values, _ = run(
        fx,
        {
            "y": wa.fn.extract_year("ms", unit=unit),
            "h": wa.fn.extract_hour("ms", unit=unit),
            "dp": wa.fn.date_part("ms", "minute", unit=unit),
            "d": wa.fn.epoch_to_date("ms", unit=unit),
            "epoch": wa.fn.date_part("ms", "epoch", unit=unit),
        },
        messages=[dict(ms=value)],
    )
    assert values == {
        "y": [2023],
        "h": [22],
        "dp": [13],
        "d": [dt.date(2023, 11, 14)],
        "epoch": [1_700_000_000],
    }


def test_dates_are_floored_before_1970(fx) -> None:
    values, _ = run(
        fx,
        {"d": wa.fn.epoch_to_date("secs", unit="s"), "e": wa.fn.date_part("ms", "epoch", unit="ms")},
        messages=[dict(secs=-1, ms=-1)],
    )
    assert values == {"d": [dt.date(1969, 12, 31)], "e": [-1]}  # reference: 1970-01-01


def test_age(fx) -> None:
    m = dict(ts={"seconds": 1_700_000_000}, ms=5000, secs=2000, dur={"seconds": 3})
    values, types = run(
        fx,
        {
            "two": wa.fn.age("ts", wa.fn.sub("ts", "dur")),
            "ints": wa.fn.age("ms", "secs", unit="ms"),
            "now": wa.fn.age("ts"),
            "now_int": wa.fn.age("secs", unit="s"),
        },
        messages=[m],
    )
    assert values["two"] == [dt.timedelta(seconds=3)] and types["two"] == pa.duration("us")
    assert values["ints"] == [dt.timedelta(seconds=3)] and types["ints"] == pa.duration("ms")
    assert values["now"][0] > dt.timedelta(days=365)
    assert values["now_int"][0] > dt.timedelta(days=365 * 50)


def test_time_arithmetic(fx) -> None:
    m = dict(ts={"seconds": 100}, dur={"seconds": 30})
    values, types = run(
        fx,
        {"later": wa.fn.add("ts", "dur"), "earlier": wa.fn.sub("ts", "dur"), "span": wa.fn.sub("ts", "ts")},
        messages=[m],
    )
    assert values["later"] == [dt.datetime.fromtimestamp(130, UTC)]
    assert values["earlier"] == [dt.datetime.fromtimestamp(70, UTC)]
    assert values["span"] == [dt.timedelta(0)] and types["span"] == pa.duration("us")


STRPTIME = [
    ("%Y-%m-%d %H:%M:%S", "2024-03-15 10:30:00", ts(2024, 3, 15, 10, 30)),
    ("%Y-%m-%d", "2024-02-31", ts(2024, 3, 2)),  # normalised, not validated
    ("%Y-%-m-%-d", "2024-3-5", ts(2024, 3, 5)),
    ("%Y-%m-%d", "2024-3-5", None),  # without '-': exactly 2 digits
    ("%y-%m-%d", "69-01-01", ts(2069, 1, 1)),
    ("%Y-%m-%dT%H:%M:%S.%f", "2024-03-15T10:30:00.5", ts(2024, 3, 15, 10, 30, 0, 500000)),
    ("%Y-%m-%dT%H:%M:%S%z", "2024-03-15T10:30:00+02:00", ts(2024, 3, 15, 8, 30)),
    ("%Y-%m-%dT%H:%M:%S%z", "2024-03-15T10:30:00-0130", ts(2024, 3, 15, 12, 0)),
    ("%Y-%m-%dT%H:%M:%S%z", "2024-03-15T10:30:00Z", ts(2024, 3, 15, 10, 30)),
    ("%Y-%m-%d %H:%M %Z", "2024-07-01 12:00 America/New_York", ts(2024, 7, 1, 16)),
    ("%Y-%m-%d %H:%M %Z", "2024-07-01 12:00 Nowhere", ts(2024, 7, 1, 12)),
    ("%Y %j", "2024 060", ts(2024, 2, 29)),
    ("%a, %d %b %Y", "Fri, 15 mar 2024", ts(2024, 3, 15)),
    ("%d %B %Y", "15 MARCH 2024", ts(2024, 3, 15)),
    ("%d %B %Y", "15 Foo 2024", None),
    ("%Y%%%m", "2024%03", ts(2024, 3, 1)),
    ("%Y%n%m", "2024 \t\n03", ts(2024, 3, 1)),
    ("%Y-%m-%d", "2024-13-01", None),
    ("%H:%M", "24:00", None),
    ("%Y", "2024 ", None),  # unconsumed input
    # Go layouts
    ("2006-01-02T15:04:05Z07:00", "2024-03-15T10:30:00+02:00", ts(2024, 3, 15, 8, 30)),
    ("2006-01-02T15:04:05Z07:00", "2024-03-15T10:30:00.25Z", ts(2024, 3, 15, 10, 30, 0, 250000)),
    ("2006-01-02", "2024-02-31", None),  # Go validates the day
    ("2006-01-02", "2024-02-29", ts(2024, 2, 29)),
    ("Jan 2 2006 3:04PM", "Mar 5 2024 3:04PM", ts(2024, 3, 5, 15, 4)),
    ("Jan 2 2006 3:04PM", "Mar 5 2024 12:04AM", ts(2024, 3, 5, 0, 4)),
    ("02/01/06 15:04:05.000", "15/03/24 10:30:00.250", ts(2024, 3, 15, 10, 30, 0, 250000)),
    ("06-01-02", "99-01-01", ts(1999, 1, 1)),
    ("Mon, 02 Jan 2006 15:04:05 MST", "Fri, 15 Mar 2024 10:30:00 MST", ts(2024, 3, 15, 10, 30)),
]


@pytest.mark.parametrize(("fmt", "text", "expected"), STRPTIME)
def test_strptime_dialect(fmt, text, expected) -> None:
    assert F.parse_times(pa.array([text]), F.compile_layout(fmt)).to_pylist() == [expected]


def test_strptime_defaults_to_year_zero() -> None:
    # the reference: `%I:%M %p` on "12:30 am" -> -62167217400000 ms (0000-01-01T00:30Z)
    texts = pa.array(["12:30 am", "12:30 PM", "01:05 pm", "13:00 am"])
    ticks = F.parse_times(texts, F.compile_layout("%I:%M %p")).cast(pa.int64()).to_pylist()
    day0 = -62167219200 * 10**6
    assert ticks == [
        -62167217400000 * 1000,
        day0 + 45000 * 10**6,
        day0 + 13 * 3600 * 10**6 + 300 * 10**6,
        None,
    ]


def test_strptime_through_the_transcoder(fx) -> None:
    texts = ["2024-03-15", "bad", "", "2024-01-01"]
    values, types = run(
        fx,
        {"p": wa.fn.strptime("name", "%Y-%m-%d"), "t": wa.fn.try_strptime("name", "%Y-%m-%d")},
        messages=[{"name": t} for t in texts] + [{}],
    )
    assert values["p"] == [ts(2024, 3, 15), None, None, ts(2024, 1, 1), None]
    epoch = ts(1970, 1, 1)
    assert values["t"] == [ts(2024, 3, 15), epoch, epoch, ts(2024, 1, 1), epoch]
    assert types["p"] == pa.timestamp("us", tz="UTC")


def test_strptime_of_numbers(fx) -> None:
    assert one(fx, wa.fn.strptime("secs", "%Y%m%d"), {"secs": 20240315})[1] == ts(2024, 3, 15)


# ---- enums and maps --------------------------------------------------------------------------


def test_enum_name(fx) -> None:
    values, types = run(
        fx,
        {"c": wa.fn.enum_name("color"), "cs": wa.fn.enum_name("colors[*]")},
        "colors[*]",
        messages=[dict(color=3, colors=[0, 2, 7])],
    )
    assert values["c"] == ["BLUE"] * 3
    assert values["cs"] == ["RED", "GREEN", None]  # an undeclared number -> null
    assert types["cs"] == pa.utf8()


def test_map_key(fx) -> None:
    values, _ = run(
        fx,
        {"k": wa.fn.map_key("m[*]"), "u": wa.fn.upper(wa.fn.map_key("m[*]"))},
        "m[*]",
        messages=[dict(m={"a": 1, "b": 2})],
    )
    assert sorted(zip(values["k"], values["m[*]"], strict=True)) == [("a", 1), ("b", 2)]
    assert sorted(values["u"]) == ["A", "B"]


def test_whole_maps_and_lists(fx) -> None:
    values, _ = run(
        fx,
        {
            "len_map": wa.fn.len("m"),
            "has_map": wa.fn.has("m"),
            "not_map": wa.fn.not_("m"),
            "len_list": wa.fn.len("tags"),
            "has_list": wa.fn.has("tags"),
        },
        messages=[dict(m={"a": 1, "b": 2}, tags=["x"]), {}],
    )
    assert values == {
        "len_map": [2, 0],
        "has_map": [True, False],
        "not_map": [False, True],
        "len_list": [1, 0],
        "has_list": [True, False],
    }


# ---- aggregates ------------------------------------------------------------------------------


def test_aggregates_over_nested_fanout_do_not_multiply_rows(fx) -> None:
    messages = [
        EXAMPLE,
        {"imps": [{"id": "z", "deals": [{"id": "q", "price": 4.0}, {"id": "q", "price": 4.0}]}]},
        {},
    ]
    values, types = run(
        fx,
        {
            "sum": wa.fn.sum("imps[*].deals[*].price"),
            "n": wa.fn.distinct("imps[*].deals[*].price"),
            "ids": wa.fn.list_concat("imps[*].deals[*].id", sep="/"),
        },
        "id",
        "imps[*].id",
        messages=messages,
    )
    assert values["imps[*].id"] == ["i1", "i2", "i3", "z", None]
    assert values["sum"] == [3.75] * 3 + [8.0, None]
    assert values["n"] == [3] * 3 + [1, 0]
    assert values["ids"] == ["a/b/a"] * 3 + ["q/q", ""]
    assert types["n"] == pa.int64() and types["ids"] == pa.utf8()


def test_distinct_counts_string_forms(fx) -> None:
    m = {"imps": [{"deals": [{"price": 0.0}, {"price": -0.0}, {"price": 1.0}]}]}
    assert one(fx, wa.fn.distinct("imps[*].deals[*].price"), m)[1] == 3  # "0", "-0", "1"


# ---- type errors -----------------------------------------------------------------------------


TYPE_ERRORS = [
    (wa.fn.add("id", 1), "not a number"),
    (wa.fn.mul("imps", 2), "not a number"),
    (wa.fn.lt("id", "si"), "cannot compare"),
    (wa.fn.eq("ts", 5), "cannot compare"),
    (wa.fn.eq("imps", "imps"), "cannot compare"),
    (wa.fn.upper("imps"), "no string form"),
    (wa.fn.hash("ts", "imps[0]"), "no string form"),
    (wa.fn.len("si"), "len takes"),
    (wa.fn.bucket("f", 4), "not an integer"),
    (wa.fn.abs("name"), "not a number"),
    (wa.fn.min("id", "si"), "cannot order"),
    (wa.fn.cond(wa.fn.has("id"), 1, "x"), "cannot combine"),
    (wa.fn.default("si", "text"), "cannot combine"),
    (wa.fn.extract_year("ms"), "param"),
    (wa.fn.epoch_to_date("secs"), "seconds"),
    (wa.fn.extract_year("ms", unit=None), "unit"),
    (wa.fn.extract_day("name"), "needs a timestamp"),
    (wa.fn.date_part("ts", "epochs"), "unknown part"),
    (wa.fn.age("ts", "ms"), "param"),
    (wa.fn.strptime("s", "%Y %e"), "%e"),
    (wa.fn.enum_name("si"), "enum"),
    (wa.fn.sum("id"), "numbers"),
    (wa.fn.cast_float("ts"), "cast_float"),
    (wa.fn.cast_int("imps"), "cast_int"),
    (wa.fn.sub("ts", 1), "cannot combine"),
    (wa.fn.add("ts", "ts"), "cannot combine"),
]


@pytest.mark.parametrize(("expr", "message"), TYPE_ERRORS)
def test_type_errors_are_plan_errors_naming_the_column(fx, expr, message) -> None:
    schema, _ = fx
    with pytest.raises(wa.PlanError) as err:
        wa.Transcoder(schema, columns=["id", wa.Column(name="bad_col", expr=expr)])
    assert "bad_col" in str(err.value)
    assert message in str(err.value)


def test_every_bad_column_is_reported(fx) -> None:
    schema, _ = fx
    with pytest.raises(wa.PlanError) as err:
        wa.Transcoder(
            schema,
            columns=[
                wa.Column(name="one", expr=wa.fn.add("id", 1)),
                wa.Column(name="two", expr=wa.fn.upper("imps")),
                wa.Column(name="ok", expr=wa.fn.add("si", 1)),
            ],
        )
    assert [p.split(":")[0] for p in err.value.problems] == ["column 'one'", "column 'two'"]


def test_unit_must_be_known() -> None:
    with pytest.raises(ValueError, match="unit"):
        wa.fn.extract_year("ms", unit="minutes")


# ---- builders and the registry ---------------------------------------------------------------


def test_builders_build_the_reference_calls() -> None:
    p = MaybePath
    assert wa.fn.concat("a", "b", sep="-") == Call("concat", (p("a"), p("b")), sep="-")
    assert wa.fn.mask("id", keep=3, char="#") == Call("mask", (p("id"),), sep="#", param=3)
    assert wa.fn.bucket("si", size=4) == Call("bucket", (p("si"),), param=4)
    assert wa.fn.default("n", 99) == Call("default", (p("n"),), literal=99)
    assert wa.fn.coerce("o", 1, 0) == Call("coerce", (p("o"),), literal=1, literal2=0)
    assert wa.fn.strptime("s", "%Y") == Call("strptime", (p("s"),), sep="%Y")
    assert wa.fn.try_strptime("s", "%Y") == Call("try_strptime", (p("s"),), sep="%Y")
    assert wa.fn.date_part("t", "year") == Call("date_part", (p("t"),), sep="year")
    assert wa.fn.date_part("t", "day", unit="ms") == Call(
        "date_part", (p("t"),), sep="day", param=1000
    )
    assert wa.fn.extract_hour("t", unit="s") == Call("extract_hour", (p("t"),), param=1)
    assert wa.fn.trim_prefix("s", "x") == Call("trim_prefix", (p("s"),), sep="x")
    assert wa.fn.trim_suffix("s", "x") == Call("trim_suffix", (p("s"),), sep="x")
    assert wa.fn.list_concat("a[*]", sep=",") == Call("list_concat", (p("a[*]"),), sep=",")
    assert wa.fn.hash("a", 1) == Call("hash", (p("a"), Lit(1)))
    assert wa.fn.age("a", "b") == Call("age", (p("a"), p("b")))
    assert wa.fn.and_("a", "b").func == "and" and wa.fn.or_("a", "b").func == "or"
    assert wa.fn.not_("a").func == "not" and wa.fn.len("a").func == "len"
    assert wa.fn.abs("a").func == "abs" and wa.fn.round("a").func == "round"
    assert wa.fn.min("a", "b").func == "min" and wa.fn.max("a", "b").func == "max"


REFERENCE_NAMES = [
    "coalesce",
    "default",
    "cond",
    "has",
    "len",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "and",
    "or",
    "not",
    "add",
    "sub",
    "mul",
    "div",
    "mod",
    "abs",
    "ceil",
    "floor",
    "round",
    "min",
    "max",
    "concat",
    "upper",
    "lower",
    "trim",
    "trim_prefix",
    "trim_suffix",
    "cast_int",
    "cast_float",
    "cast_string",
    "strptime",
    "try_strptime",
    "age",
    "extract_year",
    "extract_month",
    "extract_day",
    "extract_hour",
    "extract_minute",
    "extract_second",
    "epoch_to_date",
    "date_part",
    "hash",
    "bucket",
    "mask",
    "coerce",
    "enum_name",
    "sum",
    "distinct",
    "list_concat",
    "map_key",
]


def test_every_reference_function_is_registered() -> None:
    assert set(REFERENCE_NAMES) <= set(FUNCTIONS)
    aux = {name: set(FUNCTIONS[name].aux) for name in REFERENCE_NAMES}
    assert aux["concat"] == {"sep"} and aux["mask"] == {"param", "sep"}
    assert aux["coerce"] == {"literal", "literal2"} and aux["default"] == {"literal"}
    assert aux["bucket"] == {"param"} and aux["date_part"] == {"sep", "param"}
    assert aux["strptime"] == {"sep"} and aux["list_concat"] == {"sep"}
    assert {n for n in REFERENCE_NAMES if FUNCTIONS[n].aggregate} == {
        "sum",
        "distinct",
        "list_concat",
    }


# ---- integers as times: to_timestamp, to_duration ----------------------------------------------


@pytest.mark.parametrize(
    ("unit", "value", "when"),
    [
        ("s", 1_700_000_000, ts(2023, 11, 14, 22, 13, 20)),
        ("ms", 1_700_000_000_123, ts(2023, 11, 14, 22, 13, 20, 123_000)),
        ("us", 1_700_000_000_123_456, ts(2023, 11, 14, 22, 13, 20, 123_456)),
        ("ns", -1_000, ts(1969, 12, 31, 23, 59, 59, 999_999)),
    ],
)
def test_to_timestamp_reads_an_integer_epoch_in_its_unit(fx, unit, value, when) -> None:
    schema, Msg = fx
    columns = [
        wa.Column(name="t", expr=wa.fn.to_timestamp("ms", unit=unit)),
        wa.Column(name="u", expr=wa.fn.to_timestamp("u", unit=unit)),
        wa.Column(name="d", expr=wa.fn.to_duration("ms", unit=unit)),
    ]
    records = [Msg(ms=value, u=abs(value)).SerializeToString(), Msg().SerializeToString()]
    batch = wa.Transcoder(schema, columns=columns).transcode(records)
    assert batch.schema.field("t").type == pa.timestamp(unit, tz="UTC")
    assert batch.schema.field("d").type == pa.duration(unit)
    # the ticks are the integer itself; the instant is the hand-computed one
    assert batch.column("t").cast(pa.int64()).to_pylist() == [value, None]
    assert batch.column("u").cast(pa.int64()).to_pylist() == [abs(value), None]
    assert batch.column("d").cast(pa.int64()).to_pylist() == [value, None]
    if unit != "ns":
        assert batch.column("t").to_pylist() == [when, None]
        assert batch.column("d").to_pylist() == [when - ts(1970, 1, 1), None]
    else:
        got = pc.cast(batch.column("t"), pa.timestamp("us", tz="UTC"), safe=False)
        assert got.to_pylist() == [when, None]


def test_durations_from_differences_of_integer_epochs(fx) -> None:
    m = dict(ms=1_700_000_005_250, secs=1_700_000_000)
    values, types = run(
        fx,
        {
            "span": wa.fn.sub(wa.fn.to_timestamp("ms", unit="ms"), wa.fn.to_timestamp("secs", unit="s")),
            "end": wa.fn.add(wa.fn.to_timestamp("secs", unit="s"), wa.fn.to_duration(90, unit="s")),
            "longer": wa.fn.gt(wa.fn.to_duration("secs", unit="ms"), wa.fn.to_duration(1, unit="s")),
        },
        messages=[m],
    )
    assert values["span"] == [dt.timedelta(seconds=5, milliseconds=250)]
    assert types["span"] == pa.duration("ms")  # the finer unit of the two
    assert values["end"] == [ts(2023, 11, 14, 22, 14, 50)]
    assert values["longer"] == [True]  # 1_700_000_000 ms is longer than 1 s


def test_to_timestamp_of_uint64_beyond_int64_is_null(fx) -> None:
    t, v = one(fx, wa.fn.to_timestamp("u", unit="ns"), dict(u=2**63 + 5))
    assert t == pa.timestamp("ns", tz="UTC") and v is None


def test_to_timestamp_and_to_duration_in_yaml(fx, tmp_path) -> None:
    _, Msg = fx
    (tmp_path / "fx.proto").write_text(PROTO)
    plan = wa.load_plan(
        """
proto: {file: fx.proto, message: fx.Msg}
denormalizer:
  columns:
    - name: start
      expr: {func: to_timestamp, param: 1000, args: [{path: ms}]}
    - name: took
      expr: {func: to_duration, param: 1, args: [{path: secs}]}
""",
        base_dir=tmp_path,
    )
    assert [c.expr for c in plan.columns] == [
        wa.fn.to_timestamp(wa.fn.path("ms"), unit="ms"),
        wa.fn.to_duration(wa.fn.path("secs"), unit="s"),
    ]
    batch = plan.transcoder().transcode([Msg(ms=1500, secs=7).SerializeToString()])
    assert batch.to_pylist() == [
        {"start": ts(1970, 1, 1, 0, 0, 1, 500_000), "took": dt.timedelta(seconds=7)}
    ]


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        (wa.fn.to_timestamp("ms"), "to_timestamp: ms is an integer (int64): give the epoch unit"),
        (wa.fn.to_duration("secs"), "to_duration: secs is an integer (int64): give the epoch unit"),
        (wa.fn.to_timestamp("id", unit="s"), "to_timestamp: id is string; it needs a timestamp"),
        (wa.fn.to_duration("ts", unit="s"), "to_duration: ts is timestamp[us, tz=UTC]; it needs"),
    ],
)
def test_to_timestamp_and_to_duration_type_errors(fx, expr, fragment) -> None:
    schema, _ = fx
    with pytest.raises(wa.PlanError, match=re.escape(fragment)):
        wa.Transcoder(schema, columns=[wa.Column(name="x", expr=expr)])


def test_to_timestamp_unit_must_be_known() -> None:
    with pytest.raises(ValueError, match="unit must be one of s, ms, us, ns"):
        wa.fn.to_timestamp("ms", unit="min")
