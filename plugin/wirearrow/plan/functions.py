"""The function library of computed columns: typing rule, vectorised evaluator and Python
builder description of every function (names, arities and aux keys as the reference's §3.3, so its YAML
plans load unchanged; semantics per decisions.md "Expressions").

Evaluators receive row-aligned arrays (or scalars for literals) and the row count; they use
pyarrow.compute or numpy over whole columns, never a Python loop per row. Where Arrow has no
kernel the work is still columnar: ``hash`` (FNV-1a) walks byte *positions* with numpy over all
distinct strings at once; the strptime dialect is compiled to one RE2 pattern and assembled
with numpy; the only Python loops are over a bounded set of distinct values (digit positions
of exponent-form floats, time-zone names of ``%Z``).

Typing (at plan construction; a mismatch is an :class:`ExprTypeError`, which the compiler turns
into a PlanError naming the column):

* arithmetic (add sub mul div mod): numbers (ints, floats, bools as 0/1); both integer ->
  int64 (wrapping; uint64 above 2**63-1 wraps negative, as the reference), else float64.
  Timestamps/durations: ts +- duration -> timestamp, ts - ts -> duration, dur +- dur -> dur.
  abs: signed ints -> int64, unsigned unchanged, floats -> float64; ceil/floor/round leave
  integers (and their type) unchanged, floats -> float64 (round: half to even). min/max: the
  common type (ints -> the wider int, int with float -> float64; strings and times too).
  bucket keeps its integer type (floats are a plan error).
* comparisons -> bool: numbers with numbers (uint64 against signed compared exactly), strings
  with strings (byte-wise), bytes with bytes or strings, bools with bools, timestamps/dates,
  durations, times with their own kind (units aligned); anything else is a plan error.
* division and modulo by zero -> null (reference: 0); integer division truncates toward zero,
  the remainder has the sign of the dividend, float modulo is fmod.
* nulls: null in -> null out for arithmetic, comparisons (SQL; ``cond``, ``and``/``or``/``not``
  and filters read a null as false, so ``ne(null, x)`` is not true, as in the reference),
  abs/ceil/floor/round/min/max/bucket, casts, len (reference: 0), mask, strptime and the time
  functions. The string functions (concat, upper, lower, trim, trim_prefix, trim_suffix,
  cast_string) render null as '' like the reference; hash skips null children.
* string forms (concat, hash, mask, distinct, list_concat, cast_string, text functions): as
  the reference's §3.1 (floats in shortest digits without exponent, bytes as lowercase hex,
  enums as numbers); timestamps, dates and durations as Arrow renders them (the reference
  renders a Timestamp message as ``<message>``; beyond year 9999, where Arrow's calendar
  wraps, the same form from the exact date); lists, maps and structs have none (a plan
  error where the reference writes ``<list>``/``<map>``/``<message>``). cast_string of
  bytes decodes UTF-8 instead (the reference: hex); ``hex`` gives the hex form.
* a value that cannot be computed fails its record, not the batch (plan/evaluate.py): an
  evaluator raises RowErrors with its result and the failing rows (times beyond their
  type, bytes that are not UTF-8); any other error is pinned on its rows by evaluating
  halves again. Times never wrap: they are computed on int64 ticks, exactly.
* comparisons follow IEEE for NaN (the reference: NaN compares equal to everything).
* upper/lower are Arrow's per-code-point mappings (utf8proc): as Go except where the Unicode
  data differ, notably ``ß`` -> ``ẞ`` (Go leaves it). trim strips Go's ``unicode.IsSpace`` set.
* cast_int/cast_float parse decimal text as Go's ParseInt/ParseFloat (a leading sign, ``.5``,
  ``1e3``, ``Inf``/``Infinity``/``NaN`` in any case); hex floats and ``_`` digit separators
  are not accepted (null); cast_int of a value outside int64 (text or float, NaN, Inf) is null
  (the reference: whatever Go's conversion gives). cast_int of a timestamp/date/duration gives
  its ticks.

Time functions read Arrow timestamps (any unit; naive ones as UTC), dates, or integer epochs
whose unit is given in ``param`` as ticks per second (1 = s, 1000 = ms, 1_000_000 = us,
1_000_000_000 = ns; Python builders: ``unit="ms"``). An integer without a unit is a plan error
(the reference silently assumes ms for extract_*, seconds for date_part/epoch_to_date: its
§13 Q8 inconsistency is not copied). Results:

==================  ==========================  =====================================
function            reference                    wirearrow
==================  ==========================  =====================================
strptime            int64 epoch ms               timestamp[us, UTC]; failure -> null
try_strptime        int64 ms, failure/null -> 0  timestamp[us, UTC], -> 1970-01-01
extract_* (6)       int64 of epoch **ms**        int64 of a timestamp/date/int+unit
date_part           int64 of epoch **s**         same; part also ``epoch`` (floored s)
epoch_to_date       int32 days of epoch **s**    date32, floored (-1 s -> 1969-12-31)
age                 int64 ms (now - a, a - b)    duration (finest unit; now: per batch)
==================  ==========================  =====================================

strptime formats: with a ``%`` the reference's DuckDB-like dialect (§3.5: %Y %y %m %d %H %I
%M %S %f %p %z %Z %j %a %A %b %B %% %n %t, the ``-`` flag; calendar normalisation, year 0
default); an unknown specifier is a plan error (the reference: null on every row). Without a
``%``, a Go reference-time layout: 2006 06 01 1 Jan January 02 2 _2 002 15 03 3 04 4 05 5 PM pm
Mon Monday MST Z07:00 Z0700 Z07 -07:00 -0700 -07 and fractions .000/.999 (a fraction after the
seconds is always accepted), with Go's validation (day within its month) and 2-digit years
69-99 -> 19xx; MST-style zone names are read and ignored (UTC), as time.Parse does. One
difference with both parsers: a 1-2 digit field directly followed by digits (``%-m%d``) may
match by backtracking where the reference's greedy scan fails.
"""

from __future__ import annotations

import codecs
import decimal
import functools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wirearrow.errors import MAX_QUOTED, quoted
from wirearrow.plan.expressions import (
    Call,
    Evaluator,
    ExprTypeError,
    Grouped,
    Keyword,
    Lit,
    MaybePath,
    Needs,
    PathRef,
    RowErrors,
    Typer,
    Value,
    broadcast,
    common_type,
    list_length,
    lit,
    literal_type,
    register,
    truthy,
)

__all__ = ["compile_layout", "fnv1a64", "parse_times", "per_record", "string_form"]


# ---- registration and type helpers ----------------------------------------------------------


def _fn(
    name: str,
    min_args: int,
    max_args: int | None,
    typer: Typer,
    aux: Sequence[str] = (),
    aggregate: bool = False,
    *,
    params: Sequence[str] = (),
    keywords: Sequence[Keyword] = (),
    doc: str = "",
    needs: Needs | None = None,
) -> Callable[[Evaluator], Evaluator]:
    """register(), with the result cast to the type the typer gives for the actual arguments
    (so nested calls always see the types the plan was checked with)."""

    def deco(fn: Evaluator) -> Evaluator:
        def evaluate(args: Sequence[Value], call: Call, n: int) -> Value:
            types = [a.values.type if isinstance(a, Grouped) else a.type for a in args]
            t = typer(types, call)
            try:
                out = fn(args, call, n)
            except RowErrors as errors:
                if errors.value.type != t:
                    errors.value = errors.value.cast(t)
                raise
            return out if out.type == t else out.cast(t)

        register(
            name, min_args, max_args, typer, aux, aggregate,
            params=params, keywords=keywords, doc=doc, needs=needs,
        )(evaluate)  # fmt: skip
        return fn

    return deco


def _refuse(value: Value, n: int, failures: Sequence[tuple[np.ndarray, str]]) -> Value:
    """``value``, unless rows have no value (a bool mask per reason): then RowErrors with
    those rows null, each failing its record (plan/evaluate.py)."""
    failed = [(np.asarray(mask, dtype=bool), reason) for mask, reason in failures]
    failed = [(mask, reason) for mask, reason in failed if mask.any()]
    if not failed:
        return value
    arr = broadcast(value, n)
    bad = np.zeros(len(arr), dtype=bool)
    for mask, _ in failed:
        bad |= mask
    raise RowErrors(pc.if_else(pa.array(bad), pa.scalar(None, arr.type), arr), failed)


def _valid(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _int64s(arr: pa.Array) -> np.ndarray:
    """An integer array's values as int64 (0 where null)."""
    filled = pc.fill_null(arr, 0) if arr.null_count else arr
    return np.asarray(filled.to_numpy(zero_copy_only=False)).astype(np.int64, copy=False)


def _describe(call: Call, i: int) -> str:
    a = call.args[i] if i < len(call.args) else None
    if isinstance(a, PathRef | MaybePath):
        return a.text if len(a.text) <= MAX_QUOTED else f"{a.text[:MAX_QUOTED]}..."
    if isinstance(a, Lit):
        return f"literal {quoted(repr(a.value))}"
    if isinstance(a, Call):
        return f"{a.func}(...)"
    return f"argument {i + 1}"


def _is_null(t: pa.DataType) -> bool:
    return pa.types.is_null(t)


def _is_int(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)


def _is_num(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _is_str(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_bytes(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _has_text(t: pa.DataType) -> bool:
    """Whether values of `t` have a string form (lists, maps and structs do not)."""
    return (
        _is_null(t)
        or _is_num(t)
        or _is_str(t)
        or _is_bytes(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
    )


def _need_text(types: Sequence[pa.DataType], call: Call) -> None:
    for i, t in enumerate(types):
        if not _has_text(t):
            raise ExprTypeError(
                f"{call.func}: {_describe(call, i)} is {t}, which has no string form "
                "(select a field of it, or use len/has)"
            )


def _need_numbers(types: Sequence[pa.DataType], call: Call) -> None:
    for i, t in enumerate(types):
        if not (_is_num(t) or _is_null(t)):
            raise ExprTypeError(f"{call.func}: {_describe(call, i)} is {t}, not a number")


def _arith_type(types: Sequence[pa.DataType]) -> pa.DataType:
    """int64 for integers (and bools), float64 as soon as a float is involved."""
    return pa.float64() if any(pa.types.is_floating(t) for t in types) else pa.int64()


def _to(v: Value, t: pa.DataType) -> Value:
    """Cast with integer wraparound (uint64 -> int64 as the reference's integer view)."""
    return v if v.type == t else pc.cast(v, t, safe=False)


def _bool(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    return pa.bool_()


def _string(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _need_text(types, call)
    return pa.utf8()


def _int64(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    return pa.int64()


def _first_common(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    return common_type(types, call.func)


def _nulls(n: int, t: pa.DataType | None = None) -> pa.Array:
    return pa.nulls(n, type=t or pa.null())


_UNITS = {1: "s", 1_000: "ms", 1_000_000: "us", 1_000_000_000: "ns"}
_PER_SECOND = {u: k for k, u in _UNITS.items()}


def _literal(value: object) -> object:
    """A builder's literal keyword, checked as wirearrow.fn.lit checks it."""
    return lit(value).value


def _unit_param(unit: object) -> int | None:
    """A builder's ``unit="ms"`` as the ticks per second the Call's param holds."""
    if unit is None:
        return None
    if unit not in _PER_SECOND:
        raise ValueError(f"unit must be one of {', '.join(_PER_SECOND)}, not {unit!r}")
    return _PER_SECOND[unit]


# Builder keywords several functions share.
_UNIT = Keyword("unit", "param", None, _unit_param)
_FORMAT = Keyword("format", "sep")
_FINER = ["s", "ms", "us", "ns"]


def _finest(*units: str) -> str:
    return max(units, key=_FINER.index)


# ---- exact time arithmetic ------------------------------------------------------------------
#
# Arrow's casts between time units and its temporal arithmetic wrap silently at the ends of
# int64 (or raise for the whole array), and its calendar kernels are exact only within
# years -32767..32767. Times are computed here on int64 ticks with numpy instead: a value
# that does not fit the result's type fails its record (_refuse), none wraps.

_I64_MAX = 2**63 - 1


def _ticks(v: Value, n: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(int64 ticks, valid, unit) of timestamps, durations or dates: a date32 counts
    seconds (days * 86400, which always fits), a date64 milliseconds."""
    arr = broadcast(v, n)
    t = arr.type
    if pa.types.is_date32(t):
        return _int64s(arr.view(pa.int32())) * 86400, _valid(arr), "s"
    if pa.types.is_date64(t):
        return _int64s(arr.view(pa.int64())), _valid(arr), "ms"
    return _int64s(arr.view(pa.int64())), _valid(arr), t.unit


def _rescale(ticks: np.ndarray, unit: str, to: str) -> tuple[np.ndarray, np.ndarray]:
    """Ticks of `unit` in the same or a finer unit `to`, and which do not fit int64 there
    (0 in the result)."""
    factor = _PER_SECOND[to] // _PER_SECOND[unit]
    if factor == 1:
        return ticks, np.zeros(len(ticks), dtype=bool)
    bad = (ticks > _I64_MAX // factor) | (ticks < -(2**63 // factor))
    return np.where(bad, 0, ticks) * factor, bad


def _add_checked(a: np.ndarray, b: np.ndarray, subtract: bool) -> tuple[np.ndarray, np.ndarray]:
    """a + b (or a - b) on int64, and where it overflowed."""
    with np.errstate(over="ignore"):
        r = a - b if subtract else a + b
    overflow = (((a ^ b) & (a ^ r)) if subtract else ((a ^ r) & (b ^ r))) < 0
    return r, overflow


def _temporal_pair(
    a: Value, b: Value, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Two times in their finest unit: (a ticks, a outside int64 there, b ticks, b outside,
    order (-1, 0, 1: a before, with, after b; exact even where one does not fit), both valid,
    unit)."""
    at, a_ok, au = _ticks(a, n)
    bt, b_ok, bu = _ticks(b, n)
    unit = _finest(au, bu)
    ra, a_bad = _rescale(at, au, unit)
    rb, b_bad = _rescale(bt, bu, unit)
    order = np.where(ra < rb, -1, np.where(ra > rb, 1, 0))
    # Only the coarser one is rescaled: when it does not fit, it is beyond every value of
    # the finer one, on its own side of 0.
    order = np.where(a_bad, np.sign(at), np.where(b_bad, -np.sign(bt), order))
    return ra, a_bad, rb, b_bad, order, a_ok & b_ok, unit


def _fitted(v: Value, t: pa.DataType) -> Value:
    """A time as type t (the same kind, a finer or equal unit); ArrowInvalid where a value
    does not fit (the exact path then says which)."""
    v = _as_utc(v) if pa.types.is_timestamp(t) else v
    return v if v.type == t else pc.cast(v, t, safe=True)


def _in_unit(v: Value, unit: str) -> Value:
    """A timestamp or date as timestamp[unit, UTC], a duration as duration[unit]."""
    if _temporal_kind(v.type) == "timestamp":
        return _fitted(v, pa.timestamp(unit, tz="UTC"))
    return _fitted(v, pa.duration(unit))


def _from_ticks(ticks: np.ndarray, valid: np.ndarray, t: pa.DataType) -> pa.Array:
    mask = None if valid.all() else ~valid
    if pa.types.is_date32(t):
        return pa.array(ticks.astype(np.int32), pa.date32(), mask=mask)
    return pa.array(ticks, t, mask=mask)


def _civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(year, month, day) of days since 1970-01-01, proleptic Gregorian (Howard Hinnant's
    civil_from_days), exact over every int64 second count."""
    z = days + 719468
    era = np.floor_divide(z, 146097)
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    return yoe + era * 400 + (month <= 2), month, day


def _calendar(ticks: np.ndarray, unit: str) -> dict[str, np.ndarray]:
    """The UTC parts of instants given in ticks of `unit` (floored: -1 s is 23:59:59 of
    1969-12-31), and ``epoch``, the whole seconds since 1970."""
    seconds = np.floor_divide(ticks, _PER_SECOND[unit])
    days = np.floor_divide(seconds, 86400)
    of_day = seconds - days * 86400
    year, month, day = _civil(days)
    return {
        "year": year,
        "month": month,
        "day": day,
        "hour": of_day // 3600,
        "minute": of_day // 60 % 60,
        "second": of_day % 60,
        "epoch": seconds,
        "days": days,
        "fraction": ticks - seconds * _PER_SECOND[unit],
    }


# ---- string forms -----------------------------------------------------------------------------


def _buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets relative to data, data bytes) of a non-null string/binary array."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)
    off = off[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
    if len(off) == 0:
        return np.zeros(1, np.int64), np.empty(0, np.uint8)
    return off - off[0], data[off[0] : off[-1]]


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def _hex(arr: pa.Array) -> pa.Array:
    """Bytes as lowercase hex, vectorised over the data buffer."""
    if pa.types.is_fixed_size_binary(arr.type):
        arr = arr.cast(pa.binary())
    off, data = _buffers(arr)
    text = np.empty(2 * len(data), dtype=np.uint8)
    text[0::2] = _HEX[data >> 4]
    text[1::2] = _HEX[data & 15]
    offsets = off * 2
    t = pa.large_utf8() if offsets[-1] > np.iinfo(np.int32).max else pa.utf8()
    offsets = offsets.astype(np.int64 if t == pa.large_utf8() else np.int32)
    out = pa.Array.from_buffers(t, len(arr), [None, pa.py_buffer(offsets), pa.py_buffer(text)])
    if arr.null_count:
        out = pc.if_else(pc.is_valid(arr), out, pa.scalar(None, t))
    return out.cast(pa.utf8())


_EXPONENT = r"^(?P<sign>-?)(?P<i>\d)(?:\.(?P<f>\d+))?e(?P<e>[+-]\d+)$"


def _positional(s: pa.Array) -> pa.Array:
    """Exponent-form float texts ("1.5e+21") rewritten without exponent ("1500...0")."""
    parts = pc.extract_regex(s, _EXPONENT)
    sign, i, f, e = (parts.field(k) for k in ("sign", "i", "f", "e"))
    digits = pc.binary_join_element_wise(i, pc.fill_null(f, ""), "")
    exp = pc.cast(pc.replace_substring(e, "+", ""), pa.int64())
    p = pc.add(exp, 1)  # digits before the point
    length = pc.cast(pc.utf8_length(digits), pa.int64())
    small = pc.binary_join_element_wise(
        sign, "0.", pc.binary_repeat("0", pc.max_element_wise(pc.negate(p), 0)), digits, ""
    )
    big = pc.binary_join_element_wise(
        sign, digits, pc.binary_repeat("0", pc.max_element_wise(pc.subtract(p, length), 0)), ""
    )
    out = pc.if_else(pc.less_equal(p, 0), small, big)
    middle = pc.and_(pc.greater(p, 0), pc.less(p, length))
    if pc.any(middle).as_py():
        # The point falls inside the digits: split at p, a loop over its (<= 17) distinct values
        # on the rows that have it.
        for k in pc.unique(pc.filter(p, middle)).to_pylist():
            where = pc.and_(middle, pc.equal(p, k))
            d = pc.filter(digits, where)
            split = pc.binary_join_element_wise(
                pc.filter(sign, where),
                pc.utf8_slice_codeunits(d, 0, k),
                ".",
                pc.utf8_slice_codeunits(d, k),
                "",
            )
            out = pc.replace_with_mask(out, where, split)
    return out


def _float_text(arr: pa.Array) -> pa.Array:
    """Shortest round-trip digits without exponent (Go's FormatFloat(f, 'f', -1, bits)):
    float32 as float32; NaN, +Inf, -Inf spelled as Go does."""
    s = arr.cast(pa.utf8())
    exp = pc.match_substring(s, "e")
    if pc.any(exp).as_py():
        s = pc.replace_with_mask(s, exp, _positional(pc.filter(s, exp)))
    nan = pc.is_nan(arr)
    if pc.any(nan).as_py():
        s = pc.if_else(nan, "NaN", s)
    inf = pc.is_inf(arr)
    if pc.any(inf).as_py():
        s = pc.if_else(inf, pc.if_else(pc.greater(arr, 0), "+Inf", "-Inf"), s)
    return s


def _text(arr: pa.Array) -> pa.Array:
    """String form of an array, nulls kept."""
    t = arr.type
    if _is_str(t):
        return arr.cast(pa.utf8())
    if _is_bytes(t):
        return _hex(arr)
    if pa.types.is_boolean(t):
        return pc.if_else(arr, "true", "false")
    if _is_null(t):
        return pa.nulls(len(arr), pa.utf8())
    if pa.types.is_floating(t):
        return _float_text(arr)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return _time_text(arr)
    if _has_text(t):
        return arr.cast(pa.utf8())
    raise ExprTypeError(f"{t} has no string form")


# Arrow renders times exactly within years 1..9999 (beyond, its calendar wraps: year 14423
# and hour 2562033891409935 for INT64_MAX seconds, "<value out of range>" for dates); the
# rows beyond are rendered here the same way, from the exact calendar.
_TEXT_SECONDS = (-62135596800, 253402300800)  # 0001-01-01, 10000-01-01
_FRACTION_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def _time_text(arr: pa.Array) -> pa.Array:
    ticks, valid, unit = _ticks(arr, len(arr))
    seconds = np.floor_divide(ticks, _PER_SECOND[unit])
    beyond = valid & ((seconds < _TEXT_SECONDS[0]) | (seconds >= _TEXT_SECONDS[1]))
    if not beyond.any():
        return arr.cast(pa.utf8())
    where = pa.array(beyond)
    inside = pc.if_else(where, pa.scalar(None, arr.type), arr).cast(pa.utf8())
    parts = _calendar(ticks[beyond], unit)

    def digits(values: np.ndarray, width: int) -> pa.Array:
        return pc.utf8_lpad(pa.array(np.abs(values)).cast(pa.utf8()), width=width, padding="0")

    year = pc.binary_join_element_wise(
        pa.array(np.where(parts["year"] < 0, "-", "")), digits(parts["year"], 4), ""
    )
    pieces = [year, "-", digits(parts["month"], 2), "-", digits(parts["day"], 2)]
    if not pa.types.is_date(arr.type):
        pieces += [" ", digits(parts["hour"], 2), ":", digits(parts["minute"], 2), ":",
                   digits(parts["second"], 2)]  # fmt: skip
        if _FRACTION_DIGITS[unit]:
            pieces += [".", digits(parts["fraction"], _FRACTION_DIGITS[unit])]
        if arr.type.tz is not None:
            pieces.append("Z")
    text = pc.binary_join_element_wise(*pieces, "")
    return pc.replace_with_mask(inside, where, text)


def string_form(v: Value, n: int, keep_nulls: bool = False) -> Value:
    """The reference's "string form" (§3.1): strings as is, bools true/false, integers in
    decimal (enums: their number), floats in shortest digits without exponent, bytes as
    lowercase hex, timestamps/dates as Arrow renders them; null as '' unless `keep_nulls`.
    A scalar (literal) stays a scalar."""
    if isinstance(v, pa.Scalar):
        out = _text(pa.array([v.as_py()], type=v.type))
        out = out if keep_nulls else pc.fill_null(out, "")
        return out[0]
    out = _text(v)
    return out if keep_nulls else pc.fill_null(out, "")


# ---- presence and choice ----------------------------------------------------------------------


@_fn("has", 1, 1, _bool, doc="True when the value is present and truthy (non-zero, non-empty); a message: present.")
def _has(args: Sequence[Value], call: Call, n: int) -> Value:
    return truthy(args[0], n)


def _truthy_rows(v: Value, n: int) -> np.ndarray:
    return np.asarray(truthy(v, n).to_numpy(zero_copy_only=False), dtype=bool)


def _coalesce_needs(args: Sequence[Value], n: int) -> list[np.ndarray | None]:
    """Each value is used where no value before it is truthy."""
    out: list[np.ndarray | None] = [None]
    before = np.zeros(n, dtype=bool)
    for a in args[:-1]:
        before |= _truthy_rows(a, n)
        out.append(~before)
    return out


@_fn(
    "coalesce", 2, None, _first_common,
    doc="The first truthy value (0, \"\" and false are skipped); null when none is.",
    needs=_coalesce_needs,
)
def _coalesce(args: Sequence[Value], call: Call, n: int) -> Value:
    t = common_type([a.type for a in args], "coalesce")
    out = _nulls(n, t)
    for a in reversed(args):
        a = _to(broadcast(a, n), t)
        out = pc.if_else(truthy(a, n), a, out)
    return out


def _default_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    return common_type([types[0], literal_type(call.literal)], "default")


@_fn(
    "default", 1, 1, _default_type, aux=("literal",),
    keywords=(Keyword("literal", "literal", None, _literal),),
    doc="The value when truthy, else `literal`.",
)  # fmt: skip
def _default(args: Sequence[Value], call: Call, n: int) -> Value:
    t = _default_type([args[0].type], call)
    value = _to(broadcast(args[0], n), t)
    # (the literal in its own type, then as t: a uint64 above int64 wraps, as documented)
    fallback = _to(pa.scalar(call.literal, literal_type(call.literal)), t)
    return pc.if_else(truthy(value, n), value, fallback)


def _cond_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    return common_type(types[1:], "cond")


def _cond_needs(args: Sequence[Value], n: int) -> list[np.ndarray | None]:
    chosen = _truthy_rows(args[0], n)
    return [None, chosen, ~chosen]


@_fn(
    "cond", 3, 3, _cond_type, params=("predicate", "if_true", "if_false"),
    doc="`if_true` where the predicate is truthy (null is false), else `if_false`.",
    needs=_cond_needs,
)  # fmt: skip
def _cond(args: Sequence[Value], call: Call, n: int) -> Value:
    t = common_type([a.type for a in args[1:]], "cond")
    yes, no = (_to(broadcast(a, n), t) for a in args[1:])
    return pc.if_else(truthy(args[0], n), yes, no)


def _coerce_text(value: object) -> str | None:
    """A coerce literal as Go's %v renders it (1 -> "1", true -> "true", 1e21 -> "1e+21")."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "+Inf" if value > 0 else "-Inf"
        # strconv 'g' with the shortest digits: %e when the exponent is < -4 or >= 6
        sci = np.format_float_scientific(value, unique=True, trim="-", exp_digits=2)
        if -4 <= int(sci.partition("e")[2]) < 6:
            return np.format_float_positional(value, unique=True, trim="-")
        return sci
    raise ExprTypeError(f"coerce: unsupported literal {value!r}")


def _coerce_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _coerce_text(call.literal)
    _coerce_text(call.literal2)
    return pa.utf8()


@_fn(
    "coerce", 1, 1, _coerce_type, aux=("literal", "literal2"),
    keywords=(
        Keyword("if_true", "literal", None, _literal),
        Keyword("if_false", "literal2", None, _literal),
    ),
    doc="A text literal chosen by the value's truthiness (non-text literals rendered as Go's %v).",
)  # fmt: skip
def _coerce(args: Sequence[Value], call: Call, n: int) -> Value:
    yes = pa.scalar(_coerce_text(call.literal), pa.utf8())
    no = pa.scalar(_coerce_text(call.literal2), pa.utf8())
    return pc.if_else(truthy(args[0], n), yes, no)


# ---- comparisons and logic --------------------------------------------------------------------


def _temporal_kind(t: pa.DataType) -> str | None:
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "timestamp"
    if pa.types.is_duration(t):
        return "duration"
    if pa.types.is_time(t):
        return "time"
    return None


def _unit_of(t: pa.DataType) -> str:
    if pa.types.is_date(t):
        return "s" if pa.types.is_date32(t) else "ms"
    unit = getattr(t, "unit", "us")
    return unit if unit in _FINER else "us"


def _comparison_types(a: pa.DataType, b: pa.DataType, call: Call) -> tuple[pa.DataType, ...]:
    """The types both operands are cast to before comparing (or a plan error)."""
    if _is_null(a) or _is_null(b):
        return (a, b)
    if pa.types.is_boolean(a) and pa.types.is_boolean(b):
        return (a, b)
    if _is_num(a) and _is_num(b):
        if pa.types.is_floating(a) or pa.types.is_floating(b):
            return (pa.float64(), pa.float64())
        a_int = pa.int64() if pa.types.is_boolean(a) else a
        b_int = pa.int64() if pa.types.is_boolean(b) else b
        unsigned = [pa.types.is_unsigned_integer(t) for t in (a_int, b_int)]
        if all(unsigned):
            return (pa.uint64(), pa.uint64())
        if any(unsigned) and max(a_int.bit_width, b_int.bit_width) == 64:
            # uint64 against a signed value: compare exactly in a type holding both
            return (pa.decimal128(20, 0), pa.decimal128(20, 0))
        return (pa.int64(), pa.int64())
    if (_is_str(a) or _is_bytes(a)) and (_is_str(b) or _is_bytes(b)):
        if _is_str(a) and _is_str(b):
            return (pa.utf8(), pa.utf8())
        return (pa.binary(), pa.binary())
    ka, kb = _temporal_kind(a), _temporal_kind(b)
    if ka is not None and ka == kb:
        unit = _finest(_unit_of(a), _unit_of(b))
        if ka == "timestamp":
            t = pa.timestamp(unit, tz="UTC")
        elif ka == "duration":
            t = pa.duration(unit)
        else:
            t = pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
        return (t, t)
    raise ExprTypeError(
        f"{call.func}: cannot compare {_describe(call, 0)} ({a}) with {_describe(call, 1)} ({b})"
    )


def _compare_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _comparison_types(types[0], types[1], call)
    return pa.bool_()


def _as_utc(v: Value) -> Value:
    """Timestamps are compared as instants: naive ones are taken as UTC."""
    t = v.type
    if pa.types.is_timestamp(t) and t.tz is None:
        return pc.cast(v, pa.timestamp(t.unit, tz="UTC"))
    if pa.types.is_date(t):
        return pc.cast(pc.cast(v, pa.timestamp(_unit_of(t))), pa.timestamp(_unit_of(t), "UTC"))
    return v


def _comparison(op: Callable[[Value, Value], Value]) -> Evaluator:
    def evaluate(args: Sequence[Value], call: Call, n: int) -> Value:
        a, b = args
        ta, tb = _comparison_types(a.type, b.type, call)
        if _is_null(ta) or _is_null(tb):
            return _nulls(n, pa.bool_())
        if _temporal_kind(ta) in ("timestamp", "duration"):
            try:  # both in the finer unit, unless one does not fit there
                return op(_fitted(a, ta), _fitted(b, tb))
            except pa.ArrowInvalid:
                pass
            # then exactly, in ticks (a cast that does not check wraps)
            *_, order, valid, _ = _temporal_pair(a, b, n)
            return op(pa.array(order, pa.int8(), mask=None if valid.all() else ~valid), 0)
        if pa.types.is_boolean(a.type) and not pa.types.is_boolean(ta):
            a = _to(a, pa.int64())  # a bool against a number: 0/1 (no cast to a decimal)
        if pa.types.is_boolean(b.type) and not pa.types.is_boolean(tb):
            b = _to(b, pa.int64())
        return op(_to(a, ta), _to(b, tb))

    return evaluate


for _name, _op in {
    "eq": pc.equal,
    "ne": pc.not_equal,
    "lt": pc.less,
    "le": pc.less_equal,
    "gt": pc.greater,
    "ge": pc.greater_equal,
}.items():
    _fn(_name, 2, 2, _compare_type)(_comparison(_op))


@_fn(
    "and", 2, 2, _bool, doc="Both truthy (never null).",
    needs=lambda args, n: [None, _truthy_rows(args[0], n)],
)  # fmt: skip
def _and(args: Sequence[Value], call: Call, n: int) -> Value:
    return pc.and_(truthy(args[0], n), truthy(args[1], n))


@_fn(
    "or", 2, 2, _bool, doc="Either truthy (never null).",
    needs=lambda args, n: [None, ~_truthy_rows(args[0], n)],
)  # fmt: skip
def _or(args: Sequence[Value], call: Call, n: int) -> Value:
    return pc.or_(truthy(args[0], n), truthy(args[1], n))


@_fn("not", 1, 1, _bool, doc="Not truthy (null -> true).")
def _not(args: Sequence[Value], call: Call, n: int) -> Value:
    return pc.invert(truthy(args[0], n))


# ---- arithmetic -------------------------------------------------------------------------------


def _temporal_arith(types: Sequence[pa.DataType], call: Call) -> pa.DataType | None:
    """Result type of add/sub on timestamps and durations (None: not temporal)."""
    a, b = types
    ka, kb = _temporal_kind(a), _temporal_kind(b)
    if ka is None and kb is None:
        return None
    unit = _finest(*(_unit_of(t) for t in (a, b) if _temporal_kind(t) is not None))
    if call.func == "add" and {ka, kb} == {"timestamp", "duration"}:
        return pa.timestamp(unit, tz="UTC")
    if call.func == "sub" and ka == "timestamp" and kb == "duration":
        return pa.timestamp(unit, tz="UTC")
    if call.func == "sub" and ka == "timestamp" and kb == "timestamp":
        return pa.duration(unit)
    if call.func in ("add", "sub") and ka == "duration" and kb == "duration":
        return pa.duration(unit)
    raise ExprTypeError(
        f"{call.func}: cannot combine {_describe(call, 0)} ({a}) with {_describe(call, 1)} ({b})"
    )


def _arith_result(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    temporal = _temporal_arith(types, call) if call.func in ("add", "sub") else None
    if temporal is not None:
        return temporal
    _need_numbers(types, call)
    return _arith_type(types)


def _time_arith(args: Sequence[Value], call: Call, n: int, t: pa.DataType) -> Value:
    """ts +- duration, ts - ts, duration +- duration in t's unit: a value or a result
    outside int64 ticks of that unit fails its record."""
    try:  # the usual case, in Arrow: every value and result fits
        a_t, b_t = (_in_unit(v, t.unit) for v in args)
        checked = pc.add_checked if call.func == "add" else pc.subtract_checked
        return checked(a_t, b_t)
    except pa.ArrowInvalid:
        pass
    a, a_bad, b, b_bad, _, valid, _ = _temporal_pair(args[0], args[1], n)
    r, overflow = _add_checked(a, b, subtract=call.func == "sub")
    unfit = (a_bad | b_bad) & valid
    return _refuse(
        _from_ticks(np.where(overflow, 0, r), valid, t),
        n,
        [
            (a_bad & valid, f"{call.func}: {_describe(call, 0)} does not fit {t}"),
            (b_bad & valid, f"{call.func}: {_describe(call, 1)} does not fit {t}"),
            (overflow & valid & ~unfit, f"{call.func}: the result is outside {t}"),
        ],
    )


def _arith(op: Callable[[Value, Value], Value]) -> Evaluator:
    def evaluate(args: Sequence[Value], call: Call, n: int) -> Value:
        t = _arith_result([a.type for a in args], call)
        if any(_is_null(a.type) for a in args):
            return _nulls(n, t)
        if pa.types.is_timestamp(t) or pa.types.is_duration(t):
            return _time_arith(args, call, n, t)
        return op(_to(args[0], t), _to(args[1], t))

    return evaluate


_fn("add", 2, 2, _arith_result)(_arith(pc.add))
_fn("sub", 2, 2, _arith_result)(_arith(pc.subtract))
_fn("mul", 2, 2, _arith_result)(_arith(pc.multiply))


def _divide(args: Sequence[Value], call: Call, n: int) -> tuple[Value, Value, Value, pa.DataType]:
    """(x, d, x / d) with d == 0 nulled; integer division truncates toward zero."""
    t = _arith_result([a.type for a in args], call)
    x, d = _to(args[0], t), _to(args[1], t)
    d = pc.if_else(pc.equal(d, 0), pa.scalar(None, t), d)
    if pa.types.is_floating(t):
        return x, d, pc.divide(x, d), t
    # INT64_MIN / -1 wraps to INT64_MIN (Go), where Arrow's kernel would give 0.
    minus_one = pc.equal(d, -1)
    safe = pc.if_else(minus_one, pa.scalar(1, t), d)
    return x, d, pc.if_else(minus_one, pc.negate(x), pc.divide(x, safe)), t


@_fn("div", 2, 2, _arith_result, doc="a / b: integers truncate toward zero; division by zero -> null.")
def _div(args: Sequence[Value], call: Call, n: int) -> Value:
    if any(_is_null(a.type) for a in args):
        return _nulls(n)
    return _divide(args, call, n)[2]


@_fn("mod", 2, 2, _arith_result, doc="Remainder with the sign of a (C semantics; floats: fmod); modulo by zero -> null.")
def _mod(args: Sequence[Value], call: Call, n: int) -> Value:
    if any(_is_null(a.type) for a in args):
        return _nulls(n)
    x, d, q, t = _divide(args, call, n)
    if pa.types.is_integer(t):
        # remainder with the sign of the dividend (C/Go), not Python's floored %; x % -1
        # is 0 (x * 0 keeps x's nulls: mod(null, -1) is null)
        return pc.if_else(pc.equal(d, -1), pc.multiply(x, 0), pc.subtract(x, pc.multiply(q, d)))
    xa, da = broadcast(x, n), broadcast(d, n)
    xn = xa.to_numpy(zero_copy_only=False)
    dn = pc.fill_null(da, 1.0).to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        r = np.fmod(xn, dn)
    missing = np.asarray(pc.or_(pc.is_null(xa), pc.is_null(da)).to_numpy(zero_copy_only=False))
    return pa.array(r, type=pa.float64(), mask=missing)


def _unary_number(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _need_numbers(types, call)
    t = types[0]
    if pa.types.is_floating(t):
        return pa.float64()
    if _is_null(t) or pa.types.is_boolean(t):
        return pa.int64()
    if call.func == "abs" and pa.types.is_signed_integer(t):
        return pa.int64()  # abs(INT32_MIN) fits; abs(INT64_MIN) wraps, as the reference
    return t  # ceil/floor/round leave integers unchanged


@_fn("abs", 1, 1, _unary_number)
def _abs(args: Sequence[Value], call: Call, n: int) -> Value:
    t = _unary_number([args[0].type], call)
    if _is_null(args[0].type):
        return _nulls(n, t)
    v = _to(args[0], t)
    return v if pa.types.is_unsigned_integer(t) else pc.abs(v)


def _rounding(fn: Callable[[Value], Value]) -> Evaluator:
    def evaluate(args: Sequence[Value], call: Call, n: int) -> Value:
        t = _unary_number([args[0].type], call)
        if _is_null(args[0].type):
            return _nulls(n, t)
        v = _to(args[0], t)
        return fn(v) if pa.types.is_floating(t) else v

    return evaluate


_fn("ceil", 1, 1, _unary_number)(_rounding(pc.ceil))
_fn("floor", 1, 1, _unary_number)(_rounding(pc.floor))
_fn("round", 1, 1, _unary_number, doc="Round half to even (2.5 -> 2, 3.5 -> 4); integers unchanged.")(_rounding(lambda v: pc.round(v, round_mode="half_to_even")))


def _minmax_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    if all(_is_num(t) or _is_null(t) for t in types):
        if any(pa.types.is_boolean(t) for t in types):
            return _arith_type(types)
        return common_type(types, call.func)
    real = [t for t in types if not _is_null(t)]
    kinds = {_temporal_kind(t) for t in real}
    if len(kinds) == 1 and None not in kinds:
        return _comparison_types(real[0], real[-1], call)[0]
    if all(_is_str(t) or _is_null(t) for t in types):
        return pa.utf8()
    raise ExprTypeError(
        f"{call.func}: cannot order {_describe(call, 0)} ({types[0]}) "
        f"with {_describe(call, 1)} ({types[1]})"
    )


def _minmax(fn: Callable[..., Value]) -> Evaluator:
    def evaluate(args: Sequence[Value], call: Call, n: int) -> Value:
        t = _minmax_type([a.type for a in args], call)
        if any(_is_null(a.type) for a in args):
            return _nulls(n, t)
        if _temporal_kind(t) in ("timestamp", "duration"):
            try:  # the usual case: both fit t's unit; Arrow has no temporal kernel: ticks
                a, b = (_in_unit(v, t.unit).view(pa.int64()) for v in (broadcast(x, n) for x in args))
                return fn(a, b, skip_nulls=False).view(t)
            except pa.ArrowInvalid:
                pass
            # in ticks of t's unit: the one chosen fails its record if it does not fit there
            ra, a_bad, rb, b_bad, order, valid, _ = _temporal_pair(args[0], args[1], n)
            first = (order <= 0) if call.func == "min" else (order >= 0)
            ticks = np.where(first, ra, rb)
            unfit = np.where(first, a_bad, b_bad) & valid
            return _refuse(
                _from_ticks(np.where(unfit, 0, ticks), valid, t),
                n,
                [(unfit, f"{call.func}: the {'earlier' if call.func == 'min' else 'later'} "
                  f"value does not fit {t}")],
            )
        a, b = (_to(_as_utc(v), t) for v in args)
        if pa.types.is_temporal(t):  # times of day: Arrow has no kernel, order the ticks
            ticks_type = _storage_int(t)
            return pc.cast(
                fn(pc.cast(a, ticks_type), pc.cast(b, ticks_type), skip_nulls=False), t
            )
        out = fn(a, b, skip_nulls=False)
        if pa.types.is_floating(t):  # IEEE: a NaN operand gives NaN (Arrow skips it)
            out = pc.if_else(pc.or_(pc.is_nan(a), pc.is_nan(b)), float("nan"), out)
        return out

    return evaluate


_fn("min", 2, 2, _minmax_type)(_minmax(pc.min_element_wise))
_fn("max", 2, 2, _minmax_type)(_minmax(pc.max_element_wise))


def _bucket_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    t = types[0]
    if _is_null(t):
        return pa.int64()
    if not _is_int(t):
        raise ExprTypeError(f"bucket: {_describe(call, 0)} is {t}, not an integer")
    if call.param is not None and not isinstance(call.param, int):
        raise ExprTypeError(f"bucket: the size (param) must be an integer, not {call.param!r}")
    return t


@_fn(
    "bucket", 1, 1, _bucket_type, aux=("param",), keywords=(Keyword("size", "param"),),
    doc="The value rounded toward zero to a multiple of `size` (size <= 0: unchanged).",
)  # fmt: skip
def _bucket(args: Sequence[Value], call: Call, n: int) -> Value:
    v = args[0]
    size = call.param or 0
    if _is_null(v.type) or size <= 0:
        return v
    wide = pa.uint64() if pa.types.is_unsigned_integer(v.type) else pa.int64()
    w = _to(v, wide)
    if size >= 2**wide.bit_width:
        return pc.multiply(w, 0)  # every value is within (-size, size)
    # v - (v rem size) with a truncated remainder: toward zero (-7 size 4 -> -4)
    return pc.multiply(pc.divide(w, pa.scalar(size, wide)), pa.scalar(size, wide))


# ---- strings ----------------------------------------------------------------------------------


@_fn(
    "concat", 1, None, _string, aux=("sep",), keywords=(Keyword("sep", "sep", ""),),
    doc="String forms joined by `sep`; a null contributes ''.",
)  # fmt: skip
def _concat(args: Sequence[Value], call: Call, n: int) -> Value:
    parts = [string_form(a, n) for a in args]
    if all(isinstance(p, pa.Scalar) for p in parts):
        parts[0] = broadcast(parts[0], n)
    return pc.binary_join_element_wise(*parts, call.sep or "")


def _text_function(fn: Callable[[Value, Call], Value]) -> Evaluator:
    def evaluate(args: Sequence[Value], call: Call, n: int) -> Value:
        return fn(string_form(args[0], n), call)

    return evaluate


# Go's unicode.IsSpace (the White_Space property); Arrow's utf8_trim_whitespace differs
# slightly (it also strips U+001C..U+001F), so the set is given explicitly.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
_GO_SPACE += "\u2028\u2029\u202f\u205f\u3000"

_fn("upper", 1, 1, _string)(_text_function(lambda s, c: pc.utf8_upper(s)))
_fn("lower", 1, 1, _string)(_text_function(lambda s, c: pc.utf8_lower(s)))
_fn("trim", 1, 1, _string, doc="Unicode whitespace stripped at both ends.")(_text_function(lambda s, c: pc.utf8_trim(s, characters=_GO_SPACE)))


def _trim_prefix(s: Value, call: Call) -> Value:
    affix = call.sep or ""
    if not affix:
        return s
    cut = pc.utf8_slice_codeunits(s, len(affix))
    return pc.if_else(pc.starts_with(s, affix), cut, s)


def _trim_suffix(s: Value, call: Call) -> Value:
    affix = call.sep or ""
    if not affix:
        return s
    cut = pc.utf8_slice_codeunits(s, 0, -len(affix))
    return pc.if_else(pc.ends_with(s, affix), cut, s)


_fn("trim_prefix", 1, 1, _string, aux=("sep",), keywords=(Keyword("prefix", "sep"),))(_text_function(_trim_prefix))
_fn("trim_suffix", 1, 1, _string, aux=("sep",), keywords=(Keyword("suffix", "sep"),))(_text_function(_trim_suffix))


def _len_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    t = types[0]
    if not (
        _is_null(t)
        or _is_str(t)
        or _is_bytes(t)
        or pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_map(t)
    ):
        raise ExprTypeError(
            f"len: {_describe(call, 0)} is {t}; len takes a string, bytes, a list or a map"
        )
    return pa.int64()


@_fn("len", 1, 1, _len_type, doc="UTF-8 byte length of a string, length of bytes, element count of a list or map.")
def _len(args: Sequence[Value], call: Call, n: int) -> Value:
    v = args[0]
    t = v.type
    if _is_null(t):
        return _nulls(n, pa.int64())
    if _is_str(t) or _is_bytes(t):
        return pc.binary_length(v)  # UTF-8 bytes, not code points (as the reference)
    return list_length(v)


def _mask_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _need_text(types, call)
    if call.param is not None and not isinstance(call.param, int):
        raise ExprTypeError(f"mask: keep (param) must be an integer, not {call.param!r}")
    return pa.utf8()


@_fn(
    "mask", 1, 1, _mask_type, aux=("param", "sep"),
    keywords=(Keyword("keep", "param", 0), Keyword("char", "sep", "*")),
    doc="The string form with all but its first `keep` code points replaced by `char`.",
)  # fmt: skip
def _mask(args: Sequence[Value], call: Call, n: int) -> Value:
    s = broadcast(string_form(args[0], n, keep_nulls=True), n)
    keep = max(call.param or 0, 0)
    char = (call.sep or "*")[0]
    hidden = pc.max_element_wise(pc.subtract(pc.utf8_length(s), keep), 0)
    masked = pc.binary_join_element_wise(
        pc.utf8_slice_codeunits(s, 0, keep), pc.binary_repeat(char, hidden), ""
    )
    return masked  # keep >= length: hidden is 0, the value is unchanged


def _cast_int_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    t = types[0]
    if not (_is_num(t) or _is_str(t) or _is_null(t) or pa.types.is_temporal(t)):
        raise ExprTypeError(f"cast_int: cannot make an integer of {_describe(call, 0)} ({t})")
    return pa.int64()


_INT_TEXT = r"^[+-]?[0-9]{1,18}$"
_LONG_INT_TEXT = r"^[+-]?[0-9]{19,}$"
_FLOAT_TEXT = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"
_SPECIAL_TEXT = r"^(?:[+-]?(?i:inf|infinity)|(?i:nan))$"


def _parse_float(s: Value) -> Value:
    """Go's ParseFloat on decimal text (and Inf/Infinity/NaN); anything else -> null."""
    ok = pc.or_(
        pc.match_substring_regex(s, _FLOAT_TEXT), pc.match_substring_regex(s, _SPECIAL_TEXT)
    )
    text = pc.if_else(ok, pc.utf8_lower(s), pa.scalar(None, pa.utf8()))
    return pc.cast(text, pa.float64())


def _float_to_int(f: Value) -> Value:
    """Truncate toward zero; NaN, infinities and values outside int64 -> null."""
    t = pc.trunc(f)
    ok = pc.and_(pc.greater_equal(t, -(2.0**63)), pc.less(t, 2.0**63))
    return pc.cast(pc.if_else(ok, t, pa.scalar(None, pa.float64())), pa.int64())


@_fn("cast_int", 1, 1, _cast_int_type)
def _cast_int(args: Sequence[Value], call: Call, n: int) -> Value:
    v = args[0]
    t = v.type
    if _is_null(t):
        return _nulls(n, pa.int64())
    if pa.types.is_floating(t):
        return _float_to_int(v.cast(pa.float64()))
    if _is_num(t):
        return _to(v, pa.int64())
    if pa.types.is_temporal(t):
        return pc.cast(pc.cast(v, _storage_int(t)), pa.int64())  # ticks of its unit
    s = broadcast(v, n).cast(pa.utf8())
    is_int = pc.match_substring_regex(s, _INT_TEXT)
    ints = pc.cast(
        pc.replace_substring_regex(pc.if_else(is_int, s, pa.scalar(None, pa.utf8())), r"^\+", ""),
        pa.int64(),
    )
    out = pc.if_else(is_int, ints, _float_to_int(_parse_float(s)))
    long_int = pc.match_substring_regex(s, _LONG_INT_TEXT)
    if pc.any(long_int).as_py():
        # 19+ digits: exact where they fit int64 (through decimal; more digits do not fit)
        text = pc.replace_substring_regex(s, r"^\+", "")
        text = pc.replace_substring_regex(text, r"^(-?)0+([0-9])", r"\1\2")
        fits = pc.and_(long_int, pc.match_substring_regex(text, r"^-?[0-9]{1,19}$"))
        dec = pc.cast(pc.if_else(fits, text, pa.scalar(None, pa.utf8())), _DEC19)
        ok = pc.and_(pc.greater_equal(dec, _INT64_MIN), pc.less_equal(dec, _INT64_MAX))
        exact = pc.cast(pc.if_else(ok, dec, pa.scalar(None, _DEC19)), pa.int64())
        out = pc.if_else(long_int, exact, out)
    return out


_DEC19 = pa.decimal128(19, 0)
_INT64_MIN = pa.scalar(decimal.Decimal(-(2**63)), _DEC19)
_INT64_MAX = pa.scalar(decimal.Decimal(2**63 - 1), _DEC19)


def _storage_int(t: pa.DataType) -> pa.DataType:
    return pa.int32() if t.bit_width == 32 else pa.int64()


def _cast_float_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    t = types[0]
    if not (_is_num(t) or _is_str(t) or _is_null(t)):
        raise ExprTypeError(f"cast_float: cannot make a number of {_describe(call, 0)} ({t})")
    return pa.float64()


@_fn("cast_float", 1, 1, _cast_float_type)
def _cast_float(args: Sequence[Value], call: Call, n: int) -> Value:
    v = args[0]
    if _is_str(v.type):
        return _parse_float(broadcast(v, n).cast(pa.utf8()))
    return pc.cast(v, pa.float64(), safe=False)  # the nearest double (2**60 + 1: 2**60)


@_fn(
    "cast_string", 1, 1, _string,
    doc="The string form; bytes decoded as UTF-8 (bytes that are not fail the record).",
)  # fmt: skip
def _cast_string(args: Sequence[Value], call: Call, n: int) -> Value:
    v = args[0]
    if not _is_bytes(v.type):
        return string_form(v, n)
    # bytes are text in UTF-8 (hex() gives their hex form); bytes that are not fail
    arr = broadcast(v, n)
    if pa.types.is_fixed_size_binary(arr.type):
        arr = arr.cast(pa.binary())
    try:
        return pc.fill_null(arr.cast(pa.utf8()), "")
    except pa.ArrowInvalid:
        bad = not_utf8(arr)
    text = pc.if_else(pa.array(bad), pa.scalar(None, arr.type), arr).cast(pa.utf8())
    reason = f"cast_string: {_describe(call, 0)} is not valid UTF-8"
    return _refuse(pc.fill_null(text, ""), n, [(bad, reason)])


def not_utf8(arr: pa.Array) -> np.ndarray:
    """Which values of a binary array are not valid UTF-8 (each on its own: a character
    split between two values makes both invalid); nulls are not.

    The whole data buffer is decoded by Python's C codec, resuming after each error at the
    start of the next value: one decode call per bad value plus one, none per good value.
    """
    off, data = _buffers(arr)
    n = len(arr)
    bad = np.zeros(n, dtype=bool)
    raw = data.tobytes()
    at = 0
    while at < len(raw):
        try:
            codecs.utf_8_decode(raw[at:], "strict", True)
            break
        except UnicodeDecodeError as err:
            row = int(np.searchsorted(off, at + err.start, side="right")) - 1
            bad[row] = True
            at = int(off[row + 1])
    # A character split between two values decodes as a whole: the first value ends inside
    # it (its last lead byte wants more bytes than follow it), the second starts with a
    # continuation byte.
    nonempty = np.flatnonzero(np.diff(off) > 0)
    starts, ends = off[nonempty], off[nonempty + 1]
    bad[nonempty[(data[starts] & 0xC0) == 0x80]] = True
    found = np.zeros(len(nonempty), dtype=bool)
    for k in range(1, 5):  # the last lead byte: at most 4 bytes from the end
        last = ends - k
        inside = (last >= starts) & ~found
        b = data[np.where(inside, last, 0)] if len(data) else np.zeros(len(last), np.uint8)
        lead = inside & ((b & 0xC0) != 0x80)
        wants = np.where(b < 0x80, 1, np.where(b >= 0xF0, 4, np.where(b >= 0xE0, 3, 2)))
        bad[nonempty[lead & (wants > k)]] = True
        found |= lead
    return bad & _valid(arr)


def _hex_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    t = types[0]
    if not (_is_bytes(t) or _is_str(t) or _is_null(t)):
        raise ExprTypeError(f"hex: {_describe(call, 0)} is {t}; hex takes bytes or a string")
    return pa.utf8()


@_fn("hex", 1, 1, _hex_type, doc="Bytes (a string: its UTF-8 bytes) as lowercase hex.")
def _hex_of(args: Sequence[Value], call: Call, n: int) -> Value:
    """Bytes (a string: its UTF-8 bytes) as lowercase hex; null stays null."""
    v = broadcast(args[0], n)
    if _is_null(v.type):
        return _nulls(n, pa.utf8())
    return _hex(v.cast(pa.binary()) if _is_str(v.type) else v)


# ---- hash -------------------------------------------------------------------------------------

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def fnv1a64(arr: pa.Array) -> np.ndarray:
    """FNV-1a 64 of every string of a string/binary array (null as empty), as int64.

    Vectorised across strings: one numpy step per byte position, over the distinct strings
    still that long (sorted longest first, so the active ones are a prefix)."""
    encoded = pc.dictionary_encode(pc.fill_null(arr, "") if arr.null_count else arr)
    unique = encoded.dictionary
    off, data = _buffers(unique)
    starts = off[:-1]
    lengths = np.diff(off)
    order = np.argsort(-lengths, kind="stable")
    starts, lengths = starts[order], lengths[order]
    h = np.full(len(unique), _FNV_OFFSET, dtype=np.uint64)
    longest = int(lengths[0]) if len(lengths) else 0
    active = np.searchsorted(-lengths, -np.arange(longest), side="left")
    for k in range(longest):
        c = active[k]
        h[:c] ^= data[starts[:c] + k].astype(np.uint64)
        h[:c] *= _FNV_PRIME
    hashes = np.empty_like(h)
    hashes[order] = h
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    return hashes.view(np.int64)[indices]


def _hash_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _need_text(types, call)
    return pa.int64()


@_fn("hash", 1, None, _hash_type, doc="FNV-1a 64 (as int64) of the concatenated string forms of the non-null values.")
def _hash(args: Sequence[Value], call: Call, n: int) -> Value:
    # The string forms of the non-null children, concatenated without separator (a null
    # child contributes nothing: its string form is '').
    parts = [broadcast(string_form(a, n), n) for a in args]
    joined = pc.binary_join_element_wise(*parts, "") if len(parts) > 1 else parts[0]
    return pa.array(fnv1a64(joined), pa.int64())


# ---- time -------------------------------------------------------------------------------------


def _time_unit(call: Call, t: pa.DataType) -> str:
    per_second = call.param or 0
    unit = _UNITS.get(per_second)
    if unit is None:
        hint = (
            f"give the epoch unit in param (ticks per second: 1 = s, 1000 = ms, "
            f"1000000 = us, 1000000000 = ns; in Python unit='ms'). The reference assumed "
            f"{'seconds' if call.func in ('date_part', 'epoch_to_date') else 'milliseconds'} "
            f"here"
        )
        if per_second:
            raise ExprTypeError(f"{call.func}: param {per_second} is not a unit: {hint}")
        raise ExprTypeError(f"{call.func}: {_describe(call, 0)} is an integer ({t}): {hint}")
    return unit


def _instant_type(t: pa.DataType, call: Call, i: int = 0) -> pa.DataType:
    """The timestamp type a time function reads argument i as (or a plan error)."""
    if pa.types.is_timestamp(t):
        return pa.timestamp(t.unit, tz="UTC")
    if pa.types.is_date(t):
        return pa.timestamp(_unit_of(t), tz="UTC")
    if _is_int(t):
        return pa.timestamp(_time_unit(call, t), tz="UTC")
    if _is_null(t):
        return pa.timestamp("us", tz="UTC")
    raise ExprTypeError(
        f"{call.func}: {_describe(call, i)} is {t}; it needs a timestamp, a date or an "
        "integer epoch with its unit"
    )


def _instant(v: Value, call: Call) -> Value:
    t = _instant_type(v.type, call)
    if _is_null(v.type):
        return pc.cast(v, t)
    if _is_int(v.type):
        return pc.cast(_epoch_ticks(v), t)
    return pc.cast(_as_utc(v), t)


_ARROW_PARTS = {
    "year": pc.year, "month": pc.month, "day": pc.day,
    "hour": pc.hour, "minute": pc.minute, "second": pc.second,
}  # fmt: skip


def _in_arrow_calendar(ts: pa.Array) -> bool:
    """Whether every instant of a UTC timestamp array is within years 1..9999, where
    Arrow's calendar kernels are exact (one min/max pass)."""
    bounds = pc.min_max(ts.view(pa.int64()))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is None:
        return True
    per = _PER_SECOND[ts.type.unit]
    return _TEXT_SECONDS[0] * per <= low and high < _TEXT_SECONDS[1] * per


_PARTS = ("year", "month", "day", "hour", "minute", "second")


def _instant_ticks(v: Value, call: Call, n: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(int64 ticks, valid, unit) of what a time function reads: a timestamp or date, or
    an integer epoch in the call's unit (a uint64 beyond int64 is no time: null)."""
    t = v.type
    if _is_null(t):
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), "us"
    if _is_int(t):
        ticks = broadcast(_epoch_ticks(v), n)
        return _int64s(ticks), _valid(ticks), _instant_type(t, call).unit
    return _ticks(v, n)


def _extract_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _instant_type(types[0], call)
    return pa.int64()


def _part_of(part: str, args: Sequence[Value], call: Call, n: int) -> Value:
    """One calendar part of each instant, exact at the ends of int64 (Arrow's kernels
    gave year 14423 for INT64_MAX seconds)."""
    ts = broadcast(_instant(args[0], call), n)
    if part in _ARROW_PARTS and _in_arrow_calendar(ts):  # the usual case: Arrow's kernel
        return _ARROW_PARTS[part](ts)
    ticks, valid, unit = _instant_ticks(args[0], call, n)
    return pa.array(_calendar(ticks, unit)[part], pa.int64(), mask=None if valid.all() else ~valid)


def _extract(part: str) -> Evaluator:
    def evaluate(args: Sequence[Value], call: Call, n: int) -> Value:
        return _part_of(part, args, call, n)

    return evaluate


for _part in _PARTS:
    _fn(
        f"extract_{_part}", 1, 1, _extract_type, aux=("param",), keywords=(_UNIT,),
        doc=f"The UTC {_part} of a timestamp/date, or of an integer epoch in `unit`.",
    )(_extract(_part))  # fmt: skip


def _date_part_name(call: Call) -> str:
    part = (call.sep or "").lower()
    if part not in _PARTS and part != "epoch":
        raise ExprTypeError(
            f"date_part: unknown part {quoted(call.sep)} (sep): one of {', '.join(_PARTS)}, epoch"
        )
    return part


def _date_part_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _date_part_name(call)
    _instant_type(types[0], call)
    return pa.int64()


@_fn(
    "date_part", 1, 1, _date_part_type, aux=("sep", "param"),
    keywords=(Keyword("part", "sep"), _UNIT),
    doc="year, month, day, hour, minute, second or epoch (seconds) of a time, UTC.",
)  # fmt: skip
def _date_part(args: Sequence[Value], call: Call, n: int) -> Value:
    return _part_of(_date_part_name(call), args, call, n)  # epoch: whole seconds, floored


def _epoch_to_date_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _instant_type(types[0], call)
    return pa.date32()


_DATE32_DAYS = (-(2**31), 2**31 - 1)


@_fn(
    "epoch_to_date", 1, 1, _epoch_to_date_type, aux=("param",), keywords=(_UNIT,),
    doc="The UTC calendar date (date32) of a timestamp, or of an integer epoch in `unit`.",
)  # fmt: skip
def _epoch_to_date(args: Sequence[Value], call: Call, n: int) -> Value:
    if pa.types.is_date32(args[0].type):
        return args[0]
    # the calendar date (UTC) of the instant: floored, so -1 s is 1969-12-31
    ts = broadcast(_instant(args[0], call), n)
    if _in_arrow_calendar(ts):
        return pc.cast(ts, pa.date32())
    ticks, valid, unit = _instant_ticks(args[0], call, n)
    days = _calendar(ticks, unit)["days"]
    outside = (days < _DATE32_DAYS[0]) | (days > _DATE32_DAYS[1])
    return _refuse(
        _from_ticks(np.where(outside, 0, days), valid, pa.date32()),
        n,
        [(outside & valid, f"epoch_to_date: {_describe(call, 0)} is outside date32 "
          "(years -5877641..5881580)")],
    )


def _age_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    units = [_instant_type(t, call, i).unit for i, t in enumerate(types)]
    if len(types) == 1:
        units.append("us")  # the clock
    return pa.duration(_finest(*units))


@_fn(
    "age", 1, 2, _age_type, aux=("param",), params=("value", "other"), keywords=(_UNIT,),
    doc="now - value, or value - other: a duration. `unit` for integer epochs.",
)  # fmt: skip
def _age(args: Sequence[Value], call: Call, n: int) -> Value:
    t = _age_type([a.type for a in args], call)
    try:  # the usual case, in Arrow: every time and difference fits
        stamps = [_fitted(_instant(a, call), pa.timestamp(t.unit, tz="UTC")) for a in args]
        if len(stamps) == 1:  # the wall clock, once per batch
            now = pa.scalar(time.time_ns() // 1000, pa.timestamp("us", tz="UTC"))
            stamps.insert(0, _fitted(now, pa.timestamp(t.unit, tz="UTC")))
        return pc.subtract_checked(stamps[0], stamps[1])
    except pa.ArrowInvalid:
        pass
    values = [_instant_ticks(a, call, n) for a in args]
    if len(values) == 1:  # the wall clock, once per batch
        now = np.full(n, time.time_ns() // 1000, dtype=np.int64)
        values.insert(0, (now, np.ones(n, dtype=bool), "us"))
    (a, a_ok, au), (b, b_ok, bu) = values
    ra, a_bad = _rescale(a, au, t.unit)
    rb, b_bad = _rescale(b, bu, t.unit)
    valid = a_ok & b_ok
    r, overflow = _add_checked(ra, rb, subtract=True)
    unfit = (a_bad | b_bad) & valid
    return _refuse(
        _from_ticks(np.where(overflow | unfit, 0, r), valid, t),
        n,
        [
            (unfit, f"age: a time does not fit timestamp[{t.unit}]"),
            (overflow & valid & ~unfit, f"age: the difference is outside {t}"),
        ],
    )


def _epoch_ticks(v: Value) -> Value:
    """An integer epoch as int64 ticks; a uint64 beyond int64 fits no Arrow time: null."""
    if pa.types.is_uint64(v.type):
        too_late = pc.greater(v, pa.scalar(2**63 - 1, pa.uint64()))
        v = pc.if_else(too_late, pa.scalar(None, pa.uint64()), v)
    return pc.cast(v, pa.int64())


def _to_timestamp_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    return _instant_type(types[0], call)


@_fn(
    "to_timestamp", 1, 1, _to_timestamp_type, aux=("param",), keywords=(_UNIT,),
    doc="An integer epoch in `unit` (\"s\", \"ms\", \"us\", \"ns\") as timestamp[unit, UTC].",
)  # fmt: skip
def _to_timestamp(args: Sequence[Value], call: Call, n: int) -> Value:
    v = args[0]
    if _is_int(v.type):
        return pc.cast(_epoch_ticks(v), _instant_type(v.type, call))
    return _instant(v, call)


def _to_duration_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    t = types[0]
    if pa.types.is_duration(t):
        return t
    if _is_int(t):
        return pa.duration(_time_unit(call, t))
    if _is_null(t):
        return pa.duration(_UNITS.get(call.param or 0, "us"))
    raise ExprTypeError(
        f"{call.func}: {_describe(call, 0)} is {t}; it needs an integer count of its unit "
        "or a duration (a difference of two timestamps is one already: sub)"
    )


@_fn(
    "to_duration", 1, 1, _to_duration_type, aux=("param",), keywords=(_UNIT,),
    doc="An integer count of `unit` (\"s\", \"ms\", \"us\", \"ns\") as duration[unit].",
)  # fmt: skip
def _to_duration(args: Sequence[Value], call: Call, n: int) -> Value:
    v = args[0]
    t = _to_duration_type([v.type], call)
    if _is_int(v.type):
        return pc.cast(_epoch_ticks(v), t)
    return pc.cast(v, t)


# ---- strptime -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    """A strptime format compiled to one RE2 pattern: group g<i> holds component kinds[i]."""

    pattern: str
    kinds: tuple[str, ...]
    go: bool  # Go layout: day validated against its month, 2-digit year 69..99 -> 19xx


_RE2_SPECIAL = set("\\.+*?()|[]{}^$")
_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTH_KEYS = pa.array(_MONTHS + [m[:3] for m in _MONTHS])
_MONTH_VALUES = pa.array(list(range(1, 13)) * 2, pa.int64())


def _escape(text: str) -> str:
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in text)


class _LayoutBuilder:
    def __init__(self, go: bool) -> None:
        self.go = go
        self.pattern: list[str] = []
        self.kinds: list[str] = []

    def literal(self, text: str) -> None:
        self.pattern.append(_escape(text))

    def raw(self, regex: str) -> None:
        self.pattern.append(regex)

    def group(self, kind: str, regex: str, optional_prefix: str | None = None) -> None:
        g = f"(?P<g{len(self.kinds)}>{regex})"
        self.pattern.append(g if optional_prefix is None else f"(?:{optional_prefix}{g})?")
        self.kinds.append(kind)

    def build(self) -> _Layout:
        return _Layout("^" + "".join(self.pattern) + "$", tuple(self.kinds), self.go)


_PERCENT_NUMBERS = {"m": "m", "d": "d", "H": "H", "I": "I", "M": "M", "S": "S"}


def _compile_percent(fmt: str) -> _Layout:
    b = _LayoutBuilder(go=False)
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c != "%":
            b.literal(c)
            i += 1
            continue
        i += 1
        flag = i < len(fmt) and fmt[i] == "-"
        if flag:
            i += 1
        if i >= len(fmt):
            raise ExprTypeError(f"strptime: format {quoted(fmt)} ends with a lone %")
        spec = fmt[i]
        i += 1
        if spec in _PERCENT_NUMBERS:
            b.group(spec, r"\d{1,2}" if flag else r"\d{2}")
        elif spec == "Y":
            b.group("Y", r"\d{4}")
        elif spec == "y":
            b.group("y", r"\d{2}")
        elif spec == "f":
            b.group("f", r"\d{1,6}")
        elif spec == "p":
            b.group("p", r"[AaPp][Mm]")
        elif spec == "z":
            b.group("z", r"[Zz]|[+-]\d{2}(?::?\d{2})?")
        elif spec == "Z":
            b.group("Z", r"[A-Za-z/_]+")
        elif spec == "j":
            b.group("j", r"\d{3}")
        elif spec == "a":
            b.raw(r"[A-Za-z]{2,}")
        elif spec == "A":
            b.raw(r"[A-Za-z]{3,}")
        elif spec in "bB":
            b.group("b", r"[A-Za-z]{3,}")
        elif spec == "%":
            b.literal("%")
        elif spec in "nt":
            b.raw(r"[ \t\r\n]+")
        else:
            raise ExprTypeError(f"strptime: unsupported specifier %{spec} in format {quoted(fmt)}")
    return b.build()


# Go reference-time layout chunks, longest first at each position (time.Parse's nextStdChunk).
_GO_CHUNKS: list[tuple[str, str, str]] = [
    ("January", "B", "[A-Za-z]{3,}"),
    ("Jan", "b", "[A-Za-z]{3}"),
    ("Monday", "", "[A-Za-z]{6,9}"),
    ("Mon", "", "[A-Za-z]{3}"),
    ("MST", "", "[A-Z]{3,5}"),
    ("2006", "Y", r"\d{4}"),
    ("002", "j", r"\d{3}"),
    ("01", "m", r"\d{2}"),
    ("02", "d", r"\d{2}"),
    ("03", "I", r"\d{2}"),
    ("04", "M", r"\d{2}"),
    ("05", "S", r"\d{2}"),
    ("06", "y", r"\d{2}"),
    ("15", "H", r"\d{1,2}"),
    ("_2", "d", r" ?\d{1,2}"),
    ("1", "m", r"\d{1,2}"),
    ("2", "d", r"\d{1,2}"),
    ("3", "I", r"\d{1,2}"),
    ("4", "M", r"\d{1,2}"),
    ("5", "S", r"\d{1,2}"),
    ("PM", "p", "AM|PM"),
    ("pm", "p", "am|pm"),
    ("Z07:00", "z", r"Z|[+-]\d{2}:\d{2}"),
    ("Z0700", "z", r"Z|[+-]\d{4}"),
    ("Z07", "z", r"Z|[+-]\d{2}"),
    ("-07:00", "z", r"[+-]\d{2}:\d{2}"),
    ("-0700", "z", r"[+-]\d{4}"),
    ("-07", "z", r"[+-]\d{2}"),
]
_GO_FRACTION = re.compile(r"[.,](0+|9+)(?!\d)")


def _compile_go(layout: str) -> _Layout:
    b = _LayoutBuilder(go=True)
    i = 0
    while i < len(layout):
        frac = _GO_FRACTION.match(layout, i)
        if frac is not None and b.kinds and b.kinds[-1] == "S":
            digits = frac.group(1)
            if digits[0] == "0":  # .000: exactly that many digits
                b.raw("[.,]")
                b.group("f", rf"\d{{{len(digits)}}}")
            else:  # .999: optional, any number of digits
                b.group("f", r"\d+", optional_prefix="[.,]")
            i = frac.end()
            continue
        for chunk, kind, regex in _GO_CHUNKS:
            if layout.startswith(chunk, i):
                if chunk == "_2" and layout.startswith("_2006", i):
                    continue  # "_" then a year
                if kind:
                    if chunk == "_2":
                        b.raw(" ?")
                        regex = r"\d{1,2}"
                    b.group(kind, regex)
                else:
                    b.raw(regex)
                i += len(chunk)
                if kind == "S" and not _GO_FRACTION.match(layout, i):
                    # time.Parse accepts a fraction after the seconds the layout omits
                    b.group("f", r"\d+", optional_prefix="[.,]")
                break
        else:
            b.literal(layout[i])
            i += 1
    return b.build()


@functools.lru_cache(maxsize=256)
def compile_layout(fmt: str) -> _Layout:
    """A %-format (DuckDB-like dialect, §3.5) or, without %, a Go reference-time layout."""
    return _compile_percent(fmt) if "%" in fmt else _compile_go(fmt)


def _strptime_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _need_text(types, call)
    compile_layout(call.sep or "")
    return pa.timestamp("us", tz="UTC")


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    # Howard Hinnant's days_from_civil (proleptic Gregorian); d may overflow the month, which
    # normalises (2024-02-31 -> 2024-03-02).
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _leap(y: np.ndarray) -> np.ndarray:
    return ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)


_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def parse_times(strings: pa.Array, layout: _Layout) -> pa.Array:
    """timestamp[us, UTC] of each string per the layout; null where it does not parse."""
    n = len(strings)
    parts = pc.extract_regex(strings, layout.pattern)
    fail = np.asarray(pc.is_null(parts).to_numpy(zero_copy_only=False), dtype=bool)
    fields: dict[str, pa.Array] = {}
    for i, kind in enumerate(layout.kinds):
        fields[kind] = pc.fill_null(parts.field(f"g{i}"), "")  # the last one of a kind wins

    def number(kind: str, default: int) -> np.ndarray:
        if kind not in fields:
            return np.full(n, default, dtype=np.int64)
        text = pc.if_else(pc.equal(fields[kind], ""), str(default), fields[kind])
        return pc.cast(pc.utf8_trim(text, " "), pa.int64()).to_numpy(zero_copy_only=False)

    def check(values: np.ndarray, lo: int, hi: int) -> None:
        nonlocal fail
        fail |= (values < lo) | (values > hi)

    year = number("Y", 0)
    if "y" in fields:
        yy = number("y", 0)
        year = (np.where(yy >= 69, 1900, 2000) if layout.go else 2000) + yy
    month = number("m", 1)
    check(month, 1, 12)
    if "b" in fields or "B" in fields:
        name = pc.utf8_lower(fields.get("b", fields.get("B")))
        if "B" in fields:  # Go's January: full names only
            found = pc.index_in(name, value_set=_MONTH_KEYS[:12])
        elif layout.go:  # Go's Jan: abbreviations only
            found = pc.index_in(name, value_set=_MONTH_KEYS[12:])
            found = pc.add(found, 12)
        else:
            found = pc.index_in(name, value_set=_MONTH_KEYS)
        fail |= np.asarray(pc.is_null(found).to_numpy(zero_copy_only=False), dtype=bool)
        month = _MONTH_VALUES.take(pc.fill_null(found, 0)).to_numpy(zero_copy_only=False)
    day = number("d", 1)
    check(day, 1, 31)
    if layout.go:
        length = _MONTH_DAYS[np.clip(month, 1, 12)] + ((month == 2) & _leap(year))
        fail |= day > length
    days = _days_from_civil(year, month, np.ones(n, dtype=np.int64)) + day - 1
    if "j" in fields and not ({"m", "d", "b", "B"} & fields.keys()):
        yday = number("j", 1)
        check(yday, 1, 366)
        days = _days_from_civil(year, np.ones(n, np.int64), np.ones(n, np.int64)) + yday - 1
    hour = number("H", 0)
    check(hour, 0, 23)
    if "I" in fields:
        hour = number("I", 0)
        check(hour, 0 if layout.go else 1, 12)
    if "p" in fields and ("I" in fields or layout.go):  # %p applies to %I only; Go: any hour
        p = pc.utf8_lower(fields["p"])
        pm = np.asarray(pc.equal(p, "pm").to_numpy(zero_copy_only=False), bool)
        am = np.asarray(pc.equal(p, "am").to_numpy(zero_copy_only=False), bool)
        hour = np.where(pm & (hour < 12), hour + 12, np.where(am & (hour == 12), 0, hour))
    minute = number("M", 0)
    check(minute, 0, 59)
    second = number("S", 0)
    check(second, 0, 59)
    micros = np.zeros(n, dtype=np.int64)
    if "f" in fields:
        digits = pc.utf8_rpad(pc.utf8_slice_codeunits(fields["f"], 0, 6), width=6, padding="0")
        micros = pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False)
    offset = np.zeros(n, dtype=np.int64)
    if "z" in fields:
        z = pc.extract_regex(fields["z"], r"^(?P<s>[+-]?)(?P<h>\d{0,2}):?(?P<m>\d{0,2})")
        s, h, m = (pc.fill_null(z.field(k), "") for k in ("s", "h", "m"))
        sign = np.where(np.asarray(pc.equal(s, "-").to_numpy(zero_copy_only=False), bool), -1, 1)
        hh, mm = (
            pc.cast(pc.if_else(pc.equal(x, ""), "0", x), pa.int64())
            .to_numpy(zero_copy_only=False)
            .astype(np.int64)
            for x in (h, m)
        )
        offset = sign * (hh * 3600 + mm * 60)
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset
    out = seconds * 1_000_000 + micros
    if "Z" in fields and "z" not in fields:
        out = _apply_zones(out, fields["Z"], fail)
    fail |= np.asarray(pc.is_null(strings).to_numpy(zero_copy_only=False), dtype=bool)
    return pa.array(out, type=pa.timestamp("us", tz="UTC"), mask=fail)


def _apply_zones(local: np.ndarray, names: pa.Array, fail: np.ndarray) -> np.ndarray:
    """Local wall times named by %Z as UTC instants (a loop over the distinct zone names;
    a name that is no IANA zone is ignored: UTC)."""
    out = local.copy()
    for name in pc.unique(names).to_pylist():
        if not name:
            continue
        where = np.asarray(pc.equal(names, name).to_numpy(zero_copy_only=False), bool) & ~fail
        if not where.any():
            continue
        naive = pa.array(local[where], pa.timestamp("us"))
        try:
            zoned = pc.assume_timezone(
                naive, timezone=name, ambiguous="earliest", nonexistent="earliest"
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
            continue
        out[where] = pc.cast(zoned, pa.int64()).to_numpy(zero_copy_only=False)
    return out


def _strptime_eval(default: int | None) -> Evaluator:
    def evaluate(args: Sequence[Value], call: Call, n: int) -> Value:
        strings = broadcast(string_form(args[0], n, keep_nulls=True), n)
        out = parse_times(strings, compile_layout(call.sep or ""))
        if default is not None:  # try_strptime: failure or null -> the epoch
            out = pc.fill_null(out, pa.scalar(default, out.type))
        return out

    return evaluate


_fn(
    "strptime", 1, 1, _strptime_type, aux=("sep",), keywords=(_FORMAT,),
    doc="timestamp[us, UTC] parsed with a %-format (or a Go layout); failure -> null.",
)(_strptime_eval(None))
_fn(
    "try_strptime", 1, 1, _strptime_type, aux=("sep",), keywords=(_FORMAT,),
    doc="As strptime, but failure or null -> 1970-01-01T00:00:00Z.",
)(_strptime_eval(0))


# ---- enums and maps (bound with the compiler's help) -----------------------------------------


def _enum_pairs(call: Call) -> tuple[tuple[int, str], ...] | None:
    """The ((number, name), ...) the compiler attaches to an enum_name call as its literal
    once it has checked that the argument is a path to an enum field."""
    pairs = call.literal
    if isinstance(pairs, tuple) and all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], int) and isinstance(p[1], str)
        for p in pairs
    ):
        return pairs
    return None


def _enum_name_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    if _enum_pairs(call) is None:
        raise ExprTypeError(f"enum_name: {_describe(call, 0)} must be a path to an enum field")
    if not (_is_int(types[0]) or _is_null(types[0])):
        raise ExprTypeError(f"enum_name: {_describe(call, 0)} is {types[0]}, not an enum number")
    return pa.utf8()


@_fn("enum_name", 1, 1, _enum_name_type, doc="The declared name of an enum field's value (undeclared number or null -> null).")
def _enum_name(args: Sequence[Value], call: Call, n: int) -> Value:
    v = args[0]
    if _is_null(v.type):
        return _nulls(n, pa.utf8())
    names: dict[int, str] = {}
    for number, name in _enum_pairs(call) or ():
        names.setdefault(number, name)  # aliases: the first declared name of a number
    index = pc.index_in(_to(v, pa.int64()), value_set=pa.array(list(names), pa.int64()))
    return pa.array(list(names.values()), pa.utf8()).take(index)  # undeclared number -> null


def _map_key_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    # The compiler binds map_key(m[*]) to the key column of the entries itself (this
    # function is registered for its name and arity); reaching the typer is a plan error.
    raise ExprTypeError(
        f"map_key: {_describe(call, 0)} must be a path through a map, ending in m[*] or m[key]"
    )


@_fn("map_key", 1, 1, _map_key_type, params=("entry",), doc="The key of the map entry a path reaches with m[*] (or m[key]).")
def _map_key(args: Sequence[Value], call: Call, n: int) -> Value:
    return args[0]


# ---- aggregates ------------------------------------------------------------------------------


def per_record(
    grouped: Grouped, aggregation: str, options: pc.FunctionOptions | None = None
) -> pa.Array:
    """One value per record: Arrow's hash aggregation of the grouped values, nulls where a
    record has none (scattered back with a take, no Python loop)."""
    table = pa.table({"g": grouped.groups, "v": grouped.values})
    spec = ("v", aggregation) if options is None else ("v", aggregation, options)
    agg = table.group_by("g", use_threads=False).aggregate([spec])
    where = np.full(grouped.n_groups, -1, dtype=np.int64)
    where[agg.column("g").to_numpy()] = np.arange(agg.num_rows)
    return agg.column(f"v_{aggregation}").combine_chunks().take(pa.array(where, mask=where < 0))


def _sum_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    t = types[0]
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_integer(t):
        return pa.uint64() if pa.types.is_unsigned_integer(t) else pa.int64()
    raise ExprTypeError(f"sum needs numbers, not {t}")


@_fn("sum", 1, 1, _sum_type, aggregate=True, doc="Sum of all values of a path within each record (nulls skipped; none -> null).")
def _sum(args: Sequence[Value], call: Call, n: int) -> Value:
    return per_record(args[0], "sum")


def _distinct_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _need_text(types, call)
    return pa.int64()


@_fn("distinct", 1, 1, _distinct_type, aggregate=True, doc="Number of distinct non-null values of a path within each record.")
def _distinct(args: Sequence[Value], call: Call, n: int) -> Value:
    grouped: Grouped = args[0]
    values = grouped.values
    if pa.types.is_floating(values.type):  # distinct string forms: -0 and 0 differ
        values = _text(values)
    elif _is_null(values.type):
        values = values.cast(pa.utf8())
    counted = Grouped(values, grouped.groups, grouped.n_groups)
    out = per_record(counted, "count_distinct", pc.CountOptions(mode="only_valid"))
    return pc.fill_null(out, 0)


def _list_concat_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    _need_text(types, call)
    return pa.utf8()


@_fn(
    "list_concat", 1, 1, _list_concat_type, aux=("sep",), aggregate=True,
    keywords=(Keyword("sep", "sep", ""),),
    doc="The non-null values of a path within each record, as text joined by `sep`.",
)  # fmt: skip
def _list_concat(args: Sequence[Value], call: Call, n: int) -> Value:
    grouped: Grouped = args[0]
    text = _text(grouped.values)
    valid = np.asarray(pc.is_valid(text).to_numpy(zero_copy_only=False), dtype=bool)
    groups = np.asarray(grouped.groups)[valid]
    counts = np.bincount(groups, minlength=grouped.n_groups)[: grouped.n_groups]
    offsets = np.zeros(grouped.n_groups + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    lists = pa.ListArray.from_arrays(pa.array(offsets), text.filter(pa.array(valid)))
    return pc.binary_join(lists, call.sep or "")  # in wire order; none -> ''
