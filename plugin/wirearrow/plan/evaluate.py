"""Computed columns evaluated over one batch: vectorised, and record by record where a value
cannot be computed.

An expression is evaluated over whole columns (pyarrow.compute, numpy). A row whose value
cannot be computed (a time outside its type, text that is not UTF-8, any Arrow compute
error) fails its record, never the batch: an evaluator says which rows and why by raising
:class:`~wirearrow.plan.expressions.RowErrors` with its result (null there); any other
error of an evaluator is narrowed down to the rows that cause it by evaluating halves of
the batch again (only when it happens). The assembler turns the failures into bad records,
handled by the error policy like a wire error (``BadRecords``).

A failure in an argument ``cond``, ``coalesce``, ``and`` or ``or`` does not use (the
branch not taken, a value after a truthy one) fails nothing (``Function.needs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from wirearrow.errors import capped
from wirearrow.plan.compiler import BoundExpr
from wirearrow.plan.expressions import Grouped, RowErrors, Value, broadcast

__all__ = ["Records", "evaluate"]

# (rows that failed, why): a bool mask over the rows of one level of an expression
Failures = list[tuple[np.ndarray, str]]


@dataclass(frozen=True)
class Records:
    """How output rows and aggregate input rows map to records."""

    rows: np.ndarray  # output row -> record
    expanded: bool  # False: output rows are the records
    groups: dict[int, np.ndarray]  # fan-out tree -> (its row -> record)
    n: int


def evaluate(
    expr: BoundExpr, inputs: Sequence[pa.Array], n: int, records: Records
) -> tuple[pa.Array, list[tuple[np.ndarray, str]]]:
    """The values of an expression over the row-aligned input columns (null where a row
    failed), and the records that failed: [(records, reason)], each record once (its first
    reason)."""
    value, failures = _value(expr, inputs, n, records)
    arr = value if isinstance(value, pa.Array) else broadcast(value, n)
    if arr.type != expr.type:
        arr = arr.cast(expr.type)
    if not failures:
        return arr, []
    seen = np.zeros(records.n, dtype=bool)
    out = []
    for mask, reason in failures:
        rows = np.flatnonzero(mask)
        which = np.unique(records.rows[rows] if records.expanded else rows)
        which = which[~seen[which]]
        if len(which):
            seen[which] = True
            out.append((which, reason))
    return arr, out


def _value(
    expr: BoundExpr, inputs: Sequence[pa.Array], n: int, records: Records
) -> tuple[Value, Failures]:
    if expr.input >= 0:
        return inputs[expr.input], []
    if expr.function is None:
        return pa.scalar(expr.value, type=expr.type), []
    if expr.function.aggregate:
        # Arguments live on the aggregate rows (the fan-outs of its paths under each
        # record); the result has one value per record, then one per output row.
        groups = records.groups[expr.tree]
        args: list[Value | Grouped] = []
        failures: Failures = []
        for a in expr.args:
            v, failed = _value(a, inputs, len(groups), records)
            args.append(Grouped(broadcast(v, len(groups)), groups, records.n))
            for mask, reason in failed:
                of_records = np.zeros(records.n, dtype=bool)
                of_records[groups[mask]] = True
                failures.append((of_records, reason))
        per_record, own = _call(expr, args, records.n)
        failures += own
        if not records.expanded:
            return per_record, failures
        return (
            per_record.take(pa.array(records.rows)),
            [(mask[records.rows], reason) for mask, reason in failures],
        )
    values = []
    by_arg: list[Failures] = []
    for a in expr.args:
        v, failed = _value(a, inputs, n, records)
        values.append(v)
        by_arg.append(failed)
    failures = []
    needs = expr.function.needs if any(by_arg) else None
    wanted = needs(values, n) if needs is not None else [None] * len(values)
    for failed, where in zip(by_arg, wanted, strict=True):
        for mask, reason in failed:
            mask = mask if where is None else mask & where
            if mask.any():
                failures.append((mask, reason))
    value, own = _call(expr, values, n)
    return value, failures + own


def _call(expr: BoundExpr, args: Sequence[Value | Grouped], n: int) -> tuple[Value, Failures]:
    """One call's value and the rows it failed; an unexpected error is narrowed down to
    its rows by evaluating halves again."""
    function, call = expr.function, expr.call
    assert function is not None and call is not None
    try:
        return function.evaluate(args, call, n), []
    except RowErrors as errors:
        return errors.value, [(_rows(mask, n), reason) for mask, reason in errors.failures]
    except MemoryError:
        raise
    except Exception as err:  # an Arrow compute error, an OverflowError, ...
        return _isolate(expr, args, n, err)


def _rows(mask: np.ndarray, n: int) -> np.ndarray:
    """A failure mask over n rows (an evaluator given only scalars gives one for all)."""
    mask = np.asarray(mask, dtype=bool)
    return np.broadcast_to(mask, (n,)) if len(mask) == 1 and n != 1 else mask


def _reason(call_name: str, err: BaseException) -> str:
    return capped(f"{call_name}: {err}" if str(err) else f"{call_name}: {type(err).__name__}")


def _isolate(
    expr: BoundExpr, args: Sequence[Value | Grouped], n: int, first: Exception
) -> tuple[pa.Array, Failures]:
    """Evaluate the call on halves of its rows (records, for an aggregate) until each
    error is pinned on single rows: those fail, the others keep their values. Costs about
    2 log2(n) evaluations per failing row, and is only ever run when a call raised."""
    function, call = expr.function, expr.call
    assert function is not None and call is not None
    if n <= 1 or not any(isinstance(a, pa.Array | Grouped) for a in args):
        # nothing to split (literals only): every row fails alike
        return pa.nulls(n, expr.type), [(np.ones(n, dtype=bool), _reason(call.func, first))]
    pieces: list[tuple[int, pa.Array]] = []
    reasons: dict[str, np.ndarray] = {}

    def fail(rows: np.ndarray | slice, reason: str) -> None:
        mask = reasons.get(reason)
        if mask is None:
            mask = reasons[reason] = np.zeros(n, dtype=bool)
        mask[rows] = True

    mid = n // 2
    stack = [(mid, n), (0, mid)]
    while stack:
        lo, hi = stack.pop()
        try:
            out = function.evaluate(_slice(args, lo, hi), call, hi - lo)
        except RowErrors as errors:
            out = errors.value
            for mask, reason in errors.failures:
                fail(lo + np.flatnonzero(_rows(mask, hi - lo)), reason)
        except MemoryError:
            raise
        except Exception as err:
            if hi - lo == 1:
                fail(slice(lo, hi), _reason(call.func, err))
                pieces.append((lo, pa.nulls(1, expr.type)))
            else:
                half = (lo + hi) // 2
                stack += [(half, hi), (lo, half)]
            continue
        out = broadcast(out, hi - lo)
        pieces.append((lo, out if out.type == expr.type else out.cast(expr.type)))
    pieces.sort(key=lambda piece: piece[0])
    try:
        value = pa.concat_arrays([arr for _, arr in pieces])
    except pa.ArrowCapacityError as err:
        # No record is at fault: the batch's values outgrow one Arrow array.
        raise pa.ArrowCapacityError(
            f"{call.func}: the values of one batch do not fit one Arrow array ({err}); "
            "transcode smaller batches"
        ) from None
    return value, [(mask, reason) for reason, mask in reasons.items()]


def _slice(args: Sequence[Value | Grouped], lo: int, hi: int) -> list[Value | Grouped]:
    out: list[Value | Grouped] = []
    for a in args:
        if isinstance(a, Grouped):  # rows lo..hi are records: their elements, renumbered
            start, stop = np.searchsorted(a.groups, [lo, hi], side="left")
            out.append(Grouped(a.values.slice(start, stop - start), a.groups[start:stop] - lo, hi - lo))
        elif isinstance(a, pa.Array):
            out.append(a.slice(lo, hi - lo))
        else:
            out.append(a)
    return out
