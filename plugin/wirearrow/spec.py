"""TranscodeSpec: everything that decides what a Transcoder does, as one frozen value.

A spec is the schema, the plan's columns, the error policy and every decoding option. It
is what the YAML loader builds (``PlanConfig.spec()``), what the parser cache fingerprints
(``plan_key``), what the engines ship to their workers (it pickles as the schema's
descriptor bytes and the column list) and what a :class:`~wirearrow.Transcoder` is made
from (``Transcoder(spec)``; ``tc.spec``; ``spec.replace(on_error="skip")``).

Every option is checked here and nowhere else: :data:`OPTIONS` names each with its
default and its rule; the YAML checker asks :func:`option_problem` so that its messages
carry the plan file's line, and the constructor raises one :class:`~wirearrow.PlanError`
listing every bad option.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wirearrow.errors import PlanError
from wirearrow.plan.compiler import (
    MAX_DEPTH,
    TIME_UNITS,
    UNKNOWN_FIELDS,
    UNVALIDATED_STRINGS,
    Column,
    check_expression_depth,
)
from wirearrow.schema import Schema

__all__ = ["ON_ERROR", "OPTIONS", "TranscodeSpec", "option_problem"]

ON_ERROR = ("raise", "skip", "dead_letter")
VALIDATE = ("plan", "full")
ENUMS = ("number", "name")
# The decoder's nesting stack has 1024 frames (the root is one of them).
MAX_NESTING_LIMIT = 1023
# Bump when the compiler's table layout changes in a way that makes saved sizes misleading.
LAYOUT_VERSION = 2


def _choice(allowed: tuple[str, ...]) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if isinstance(value, str) and value in allowed:
            return None
        return f"must be one of {', '.join(repr(a) for a in allowed)}, not {value!r}"

    return check


def _int_in(low: int, high: int | None, *, optional: bool = False) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, not {value!r}"
        if value < low or (high is not None and value > high):
            bound = f"in {low}..{high}" if high is not None else f"at least {low}"
            return f"must be {bound}, not {value}"
        return None

    return check


def _boolean(value: object) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, not {value!r}"


# name -> (default, check). The order is the keyword order of Transcoder and TranscodeSpec.
OPTIONS: dict[str, tuple[object, Callable[[object], str | None]]] = {
    "on_error": ("raise", _choice(ON_ERROR)),
    "validate": ("plan", _choice(VALIDATE)),
    "timestamp_unit": ("us", _choice(TIME_UNITS)),
    "max_nesting": (100, _int_in(1, MAX_NESTING_LIMIT)),
    "max_depth": (None, _int_in(1, MAX_DEPTH, optional=True)),
    "enums": ("number", _choice(ENUMS)),
    "keep_unknown": (False, _boolean),
    "well_known_types": (True, _boolean),
    "unvalidated_strings": ("utf8", _choice(UNVALIDATED_STRINGS)),
}
# Options that change the compiled tables (on_error only changes what happens to bad records).
_PLAN_OPTIONS = tuple(name for name in OPTIONS if name != "on_error")


def as_columns(columns: Sequence[str | Column] | None) -> tuple[Column, ...] | None:
    """A column list as the spec stores it: path strings made :class:`Column`."""
    if columns is None:
        return None
    if isinstance(columns, str | bytes):
        raise TypeError("columns must be a sequence of paths or wa.Column, not one string")
    return tuple(Column(c) if isinstance(c, str) else c for c in columns)


def option_problem(name: str, value: object) -> str | None:
    """Why ``value`` is not a valid ``name`` option (None: it is)."""
    return OPTIONS[name][1](value)


@dataclass(frozen=True)
class TranscodeSpec:
    """The schema, the columns (None: the whole message), the policy and every option.

    Options are those of :class:`~wirearrow.Transcoder` (its docstring says what each
    does). Columns given as path strings are stored as :class:`~wirearrow.Column`.
    """

    schema: Schema
    columns: tuple[Column, ...] | None = None
    on_error: str = "raise"
    validate: str = "plan"
    timestamp_unit: str = "us"
    max_nesting: int = 100
    max_depth: int | None = None
    enums: str = "number"
    keep_unknown: bool = False
    well_known_types: bool = True
    unvalidated_strings: str = "utf8"

    def __post_init__(self) -> None:
        if not isinstance(self.schema, Schema):
            raise TypeError(
                f"schema must be a wirearrow.Schema, not {type(self.schema).__name__}"
            )
        # Path strings are accepted too (and stored as Column).
        object.__setattr__(self, "columns", as_columns(self.columns))
        if self.columns is not None:
            check_expression_depth(self.columns)  # before anything walks them recursively
        problems = [
            f"{name} {why}"
            for name in OPTIONS
            if (why := option_problem(name, getattr(self, name))) is not None
        ]
        if problems:
            raise PlanError(problems)

    def replace(self, **changes: Any) -> TranscodeSpec:
        """This spec with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    @property
    def options(self) -> dict[str, Any]:
        """Every option by name (the keywords of ``Transcoder`` other than ``cache``)."""
        return {name: getattr(self, name) for name in OPTIONS}

    @property
    def mode(self) -> str:
        """"flat" (a column list) or "nested" (whole messages)."""
        return "nested" if self.columns is None else "flat"

    def plan_columns(self) -> tuple[Column, ...]:
        """The columns compiled: the given ones or one per top-level field, then
        ``_unknown`` when unknown fields are kept."""
        descriptor = self.schema.descriptor
        keep = (Column(UNKNOWN_FIELDS),) if self.keep_unknown else ()
        if keep and UNKNOWN_FIELDS in descriptor.fields_by_name:
            problem = f"{descriptor.full_name} has a field named {UNKNOWN_FIELDS}"
            raise PlanError([f"{problem}: keep_unknown cannot add its own column"])
        if self.columns is not None:
            return (*self.columns, *keep)
        if not descriptor.fields and not keep:
            raise PlanError([f"message {descriptor.full_name} has no fields: nothing to read"])
        return (*(Column(f.name) for f in descriptor.fields), *keep)

    @property
    def plan_key(self) -> tuple[str, str]:
        """(schema fingerprint, plan fingerprint): what a compiled plan is cached under.

        The plan fingerprint covers the columns and every option that changes the compiled
        tables (not ``on_error``): two specs with the same key share one compile.
        """
        plan = repr(
            (
                LAYOUT_VERSION,
                self.columns is None,
                [repr(c) for c in self.plan_columns()],
                [(name, getattr(self, name)) for name in _PLAN_OPTIONS],
            )
        )
        return self.schema.fingerprint, hashlib.sha256(plan.encode("utf-8")).hexdigest()

    @classmethod
    def of(
        cls,
        schema: Schema,
        columns: Sequence[str | Column] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> TranscodeSpec:
        """A spec from a schema, columns and a mapping of options (unknown names raise)."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"unknown transcoder options: {', '.join(unknown)}")
        return cls(schema, as_columns(columns), **options)
