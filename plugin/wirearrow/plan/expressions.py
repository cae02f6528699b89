"""Computed columns: expression trees over paths, typed at plan construction, evaluated
vectorised with pyarrow.compute on the row-aligned input columns.

The function names and argument shapes are the reference's (bufarrow-behaviour §3.3) so its
YAML plans load unchanged; semantics follow decisions.md ("Expressions"): results are typed
when the plan is built (a type mismatch is a plan error naming the column), scalars broadcast
across fan-out rows, division and modulo by zero give null.

An expression is a tree of :class:`PathRef` (a path column, also hidden), :class:`Lit` and
:class:`Call`. :data:`FUNCTIONS` maps each function name to its :class:`Function`: arity,
the auxiliary keys it takes (``sep``, ``literal``, ``literal2``, ``param``), a typing rule
and a vectorised evaluator.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "FUNCTIONS",
    "MAX_LITERAL_BYTES",
    "Call",
    "Expr",
    "ExprTypeError",
    "Function",
    "Grouped",
    "Keyword",
    "Lit",
    "PathRef",
    "RowErrors",
    "as_expr",
    "lit",
    "literal_problem",
    "path",
]


class ExprTypeError(ValueError):
    """An expression does not type-check; the plan compiler adds the column name."""


class RowErrors(Exception):
    """Raised by an evaluator whose result has rows without a value: ``value`` is the
    result, null at those rows; ``failures`` says which rows and why, ``[(mask, reason)]``
    (a bool per row, or one for all when every argument was a scalar).

    Each such row fails its record under the error policy, never the batch
    (plan/evaluate.py). Raised rather than returned so that evaluators keep one result type.
    """

    def __init__(self, value: pa.Array, failures: list[tuple[np.ndarray, str]]) -> None:
        super().__init__("; ".join(reason for _, reason in failures))
        self.value = value
        self.failures = failures


@dataclass(frozen=True, slots=True)
class Expr:
    pass


@dataclass(frozen=True, slots=True)
class PathRef(Expr):
    """The value of a path at each output row (fan-out rows included)."""

    text: str


@dataclass(frozen=True, slots=True)
class Lit(Expr):
    """A constant: str, int, float, bool or None."""

    value: object


@dataclass(frozen=True, slots=True)
class Call(Expr):
    func: str
    args: tuple[Expr, ...] = ()
    sep: str | None = None
    literal: object = None
    literal2: object = None
    param: int | None = None


def path(text: str) -> PathRef:
    return PathRef(text)


def lit(value: object) -> Lit:
    if not (value is None or isinstance(value, str | int | float | bool)):
        raise TypeError(f"a literal is a str, int, float, bool or None, not {type(value).__name__}")
    return Lit(value)


# A text literal (a value, sep, literal, literal2) is copied into every row it reaches
# (concat, cond, coalesce): bounded when the plan compiles, so that a large one is a plan
# error rather than a batch that outgrows an Arrow array (2 GiB of text) at run time.
MAX_LITERAL_BYTES = 65_536


def literal_problem(expr: Expr) -> str | None:
    """Why an expression's literals are refused (one over MAX_LITERAL_BYTES of UTF-8), or None;
    iterative over the whole tree."""
    stack = [expr]
    while stack:
        e = stack.pop()
        texts: list[tuple[str, object]] = []
        if isinstance(e, Lit):
            texts.append(("literal", e.value))
        elif isinstance(e, MaybePath):
            texts.append(("literal", e.text))  # a path's text too: no path is that long
        elif isinstance(e, Call):
            texts += [(key, getattr(e, key)) for key in ("sep", "literal", "literal2")]
            stack.extend(e.args)
        for key, value in texts:
            if isinstance(value, str) and len(value) > MAX_LITERAL_BYTES // 4:
                size = len(value.encode("utf-8", "surrogatepass"))
                if size > MAX_LITERAL_BYTES:
                    where = f"{e.func}: {key}" if isinstance(e, Call) else key
                    return (
                        f"{where} is {size:,} bytes, over the limit of {MAX_LITERAL_BYTES:,} "
                        "for a literal"
                    )
    return None


def as_expr(value: object) -> Expr:
    """Builder arguments: an Expr as is; a str is a path (see ``is_path_text``); else a literal.

    A bare string is a path when it names a field (resolved by the compiler) or looks like one
    (contains ``.`` or ``[``); any other string is a string literal. ``wa.fn.lit`` / ``wa.fn.path``
    make the choice explicit.
    """
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return MaybePath(value)
    return lit(value)


@dataclass(frozen=True, slots=True)
class MaybePath(Expr):
    """A bare builder string: the compiler decides whether it is a path or a literal."""

    text: str


# ---- typing and evaluation ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grouped:
    """An aggregate's argument: values, and the record (0..n_groups-1) each belongs to.

    ``groups`` is non-decreasing; a record with no values has none here (an empty fan-out
    gives one null value, as a left join does).
    """

    values: pa.Array
    groups: np.ndarray
    n_groups: int


Value: TypeAlias = "pa.Array | pa.Scalar"
Typer = Callable[[Sequence[pa.DataType], Call], pa.DataType]
Evaluator = Callable[[Sequence[Value], Call, int], Value]
# Where each argument's value is used (a bool per row; None: everywhere), from the argument
# values: a failure in the branch cond does not take, or in a value coalesce does not reach,
# fails nothing.
Needs = Callable[[Sequence[Value], int], Sequence["np.ndarray | None"]]


# A Python builder keyword's default: required.
_REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True, slots=True)
class Keyword:
    """A keyword of a function's Python builder, filling one aux field of its :class:`Call`
    (``wa.fn.bucket(v, size=10)`` -> ``Call("bucket", (v,), param=10)``)."""

    name: str  # the builder's keyword
    aux: str  # the Call field it fills: sep, literal, literal2 or param
    default: object = _REQUIRED
    # The value as the Call holds it (a unit name -> ticks per second, ...); None: as given.
    convert: Callable[[object], object] | None = None


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    min_args: int
    max_args: int | None  # None: any number
    typer: Typer
    evaluate: Evaluator
    aux: frozenset[str] = field(default_factory=frozenset)
    # An aggregate reduces all values of its argument within each record (sum, distinct,
    # list_concat): its evaluator gets Grouped arguments and returns one value per record.
    aggregate: bool = False
    # The Python builder (wirearrow.fn): names of the value arguments (default by arity),
    # its keywords (default: each aux key under its own name) and its docstring.
    params: tuple[str, ...] = ()
    keywords: tuple[Keyword, ...] = ()
    doc: str = ""
    # Where each argument is used (cond, coalesce, and, or): a value not used fails nothing.
    needs: Needs | None = None

    def check_arity(self, n: int) -> None:
        if n < self.min_args or (self.max_args is not None and n > self.max_args):
            if self.max_args == self.min_args:
                want = f"exactly {self.min_args}"
            elif self.max_args is None:
                want = f"at least {self.min_args}"
            else:
                want = f"{self.min_args} to {self.max_args}"
            raise ExprTypeError(f"{self.name} takes {want} args, got {n}")

    @property
    def signature(self) -> inspect.Signature:
        """The Python builder's signature: value arguments, then keyword-only aux keys."""
        kind = inspect.Parameter
        names = self.params or _default_params(self.min_args, self.max_args)
        out = []
        for i, name in enumerate(names):
            if name.startswith("*"):
                out.append(kind(name[1:], kind.VAR_POSITIONAL))
            else:
                default = None if i >= self.min_args else kind.empty
                out.append(kind(name, kind.POSITIONAL_OR_KEYWORD, default=default))
        # After fixed value arguments a keyword may also be given by position
        # (``bucket(v, 10)``); after ``*values`` it can only be named (``concat(a, b, sep="")``).
        variadic = any(name.startswith("*") for name in names)
        for k in self.builder_keywords:
            how = kind.KEYWORD_ONLY if variadic else kind.POSITIONAL_OR_KEYWORD
            out.append(kind(k.name, how, default=k.default))
        return inspect.Signature(out, return_annotation="Call")

    @property
    def builder_keywords(self) -> tuple[Keyword, ...]:
        return self.keywords or tuple(Keyword(a, a, None) for a in sorted(self.aux))

    def build(self, *args: object, **kwargs: object) -> Call:
        """The Call of this function: ``args`` as values (an expression, a path or a literal,
        see :func:`as_expr`), keywords into their aux fields."""
        bound = self.signature.bind(*args, **kwargs)
        values: list[object] = []
        aux: dict[str, object] = {}
        by_name = {k.name: k for k in self.builder_keywords}
        for name, value in bound.arguments.items():
            keyword = by_name.get(name)
            if keyword is not None:
                aux[keyword.aux] = keyword.convert(value) if keyword.convert else value
            elif isinstance(value, tuple):  # *values
                values.extend(value)
            else:
                values.append(value)
        # Optional value arguments left out (age's `other`) are not passed.
        while len(values) > self.min_args and values[-1] is None:
            values.pop()
        return Call(self.name, tuple(as_expr(v) for v in values), **aux)  # type: ignore[arg-type]


def _default_params(min_args: int, max_args: int | None) -> tuple[str, ...]:
    if max_args is None:
        return ("*values",)
    if max_args == 1:
        return ("value",)
    if min_args == max_args == 2:
        return ("a", "b")
    return ("value", *(f"arg{i}" for i in range(1, max_args)))


FUNCTIONS: dict[str, Function] = {}


def register(
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
    def deco(fn: Evaluator) -> Evaluator:
        FUNCTIONS[name] = Function(
            name,
            min_args,
            max_args,
            typer,
            fn,
            frozenset(aux),
            aggregate,
            tuple(params),
            tuple(keywords),
            doc,
            needs,
        )
        return fn

    return deco


def literal_type(value: object) -> pa.DataType:
    """The Arrow type of a literal (ints beyond int64 are uint64)."""
    if value is None:
        return pa.null()
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64() if -(2**63) <= value < 2**63 else pa.uint64()
    if isinstance(value, float):
        return pa.float64()
    if isinstance(value, str):
        return pa.utf8()
    raise ExprTypeError(f"unsupported literal {value!r}")


def common_type(types: Sequence[pa.DataType], what: str) -> pa.DataType:
    """The type several values unify to (nulls adapt; ints widen; int+float -> float64)."""
    real = [t for t in types if not pa.types.is_null(t)]
    if not real:
        return pa.null()
    first = real[0]
    if all(t == first for t in real):
        return first
    if all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in real):
        if any(pa.types.is_floating(t) for t in real):
            return pa.float64()
        if any(pa.types.is_unsigned_integer(t) for t in real) and any(
            pa.types.is_signed_integer(t) for t in real
        ):
            return pa.int64()
        return max(real, key=lambda t: t.bit_width)
    if all(pa.types.is_string(t) or pa.types.is_large_string(t) for t in real):
        return pa.utf8()
    names = ", ".join(str(t) for t in real)
    raise ExprTypeError(f"{what}: cannot combine {names}")


def truthy(v: Value, n: int) -> pa.Array:
    """The reference's truthiness: null false; numbers non-zero; strings/bytes/lists non-empty."""
    arr = broadcast(v, n)
    t = arr.type
    if pa.types.is_null(t):
        out = pa.array([False] * n)
    elif pa.types.is_boolean(t):
        out = arr
    elif pa.types.is_integer(t) or pa.types.is_floating(t):
        out = pc.not_equal(arr, pa.scalar(0, t))  # (an int64 0 made Arrow cast uint64 to int64)
    elif pa.types.is_string(t) or pa.types.is_binary(t):
        out = pc.greater(pc.binary_length(arr), 0)
    elif pa.types.is_list(t) or pa.types.is_map(t):
        out = pc.greater(list_length(arr), 0)
    else:  # structs, timestamps: present is true
        out = pc.is_valid(arr)
    return pc.fill_null(out, False)


def broadcast(v: Value, n: int) -> pa.Array:
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, n)
    return v


def list_length(arr: pa.Array) -> pa.Array:
    """Element counts of a list or map array (Arrow's list_value_length has no map kernel)."""
    if not pa.types.is_map(arr.type):
        return pc.list_value_length(arr)
    offsets = arr.offsets.to_numpy(zero_copy_only=False)
    lengths = np.diff(offsets).astype(np.int64)
    return pa.array(lengths, pa.int64(), mask=np.asarray(arr.is_null()) if arr.null_count else None)
