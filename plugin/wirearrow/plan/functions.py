"""The function library of computed columns: typing rule, vectorised evaluator and Python
builder of every function (names and argument shapes as the reference's §3.3).

Evaluators receive row-aligned arrays (or scalars for literals) and the row count; they use
pyarrow.compute, never a Python loop per row (the one exception is noted where it is).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wirearrow.plan.expressions import (
    Call,
    ExprTypeError,
    Grouped,
    Value,
    as_expr,
    broadcast,
    common_type,
    register,
    truthy,
)

__all__ = ["coalesce", "concat", "cond", "has"]


def _bool(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    return pa.bool_()


def _first_common(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    return common_type(types, call.func)


# ---- the functions -------------------------------------------------------------------------


@register("has", 1, 1, _bool)
def _has(args: Sequence[Value], call: Call, n: int) -> Value:
    return truthy(args[0], n)


@register("coalesce", 2, None, _first_common)
def _coalesce(args: Sequence[Value], call: Call, n: int) -> Value:
    t = common_type([a.type for a in args], "coalesce")
    out = pa.nulls(n, type=t)
    for a in reversed(args):
        a = broadcast(a, n).cast(t)
        out = pc.if_else(truthy(a, n), a, out)
    return out


def _cond_type(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    return common_type(types[1:], "cond")


@register("cond", 3, 3, _cond_type)
def _cond(args: Sequence[Value], call: Call, n: int) -> Value:
    t = common_type([a.type for a in args[1:]], "cond")
    yes, no = (broadcast(a, n).cast(t) for a in args[1:])
    return pc.if_else(truthy(args[0], n), yes, no)


def _string(types: Sequence[pa.DataType], call: Call) -> pa.DataType:
    return pa.utf8()


def string_form(v: Value, n: int) -> pa.Array:
    """Text of any value (the reference's "string form"): bytes as hex, null as ''."""
    arr = broadcast(v, n)
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        out = arr
    elif pa.types.is_binary(t):
        out = pa.array([None if b is None else b.hex() for b in arr.to_pylist()], pa.utf8())
    elif pa.types.is_boolean(t):
        out = pc.if_else(arr, "true", "false")
    elif pa.types.is_null(t):
        out = pa.array([""] * n, pa.utf8())
    else:
        out = arr.cast(pa.utf8())
    return pc.fill_null(out, "")


@register("concat", 1, None, _string, aux=("sep",))
def _concat(args: Sequence[Value], call: Call, n: int) -> Value:
    parts = [string_form(a, n) for a in args]
    return pc.binary_join_element_wise(*parts, call.sep or "")


# ---- builders (wa.cond, wa.has, ...) -------------------------------------------------------


def has(value: object) -> Call:
    """True when the value is present and truthy (non-zero, non-empty); a message: present."""
    return Call("has", (as_expr(value),))


def coalesce(*values: object) -> Call:
    """The first truthy value (0, "" and false are skipped); null when none is."""
    return Call("coalesce", tuple(as_expr(v) for v in values))


def cond(predicate: object, if_true: object, if_false: object) -> Call:
    return Call("cond", (as_expr(predicate), as_expr(if_true), as_expr(if_false)))


def concat(*values: object, sep: str = "") -> Call:
    """String forms joined by ``sep``; a null contributes ''."""
    return Call("concat", tuple(as_expr(v) for v in values), sep=sep)


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


@register("sum", 1, 1, _sum_type, aggregate=True)
def _sum(args: Sequence[Value], call: Call, n: int) -> Value:
    return per_record(args[0], "sum")  # type: ignore[arg-type]


def sum_(value: object) -> Call:
    """Sum of all values of a path within each record (nulls skipped; none -> null)."""
    return Call("sum", (as_expr(value),))
