"""The transcoder's options, each declared once: its name, default, rule and meaning.

:class:`Options` is the one table. Everything else derives from its fields: the options of
:class:`~wirearrow.TranscodeSpec` (which extends it with the schema and the columns), the
keywords :class:`~wirearrow.Transcoder` takes (and its signature and docstring), the keys of
a YAML plan and their checks (``wirearrow.config``), what the parser cache fingerprints, the
compiler's view of them, and the table of docs/options.md (a test keeps it equal to
:func:`options_table`).

An option is checked when an ``Options`` (or a spec) is made; every bad one is listed in one
:class:`~wirearrow.PlanError`. The YAML checker asks :func:`option_problem` so that its
messages carry the plan file's line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wirearrow.errors import PlanError

__all__ = [
    "ENUMS",
    "MAX_DEPTH",
    "MAX_NESTING_LIMIT",
    "ON_ERROR",
    "OPTIONS",
    "PLAN_OPTIONS",
    "TIME_UNITS",
    "UNVALIDATED_STRINGS",
    "VALIDATE",
    "Choice",
    "FieldNames",
    "Flag",
    "IntRange",
    "MessageNames",
    "Options",
    "option_problem",
    "options_doc",
    "options_table",
    "unknown_options",
]

# The error policies: what happens to a record that cannot be decoded.
ON_ERROR = ("raise", "skip", "dead_letter")
VALIDATE = ("plan", "full")
ENUMS = ("number", "name")
TIME_UNITS = ("s", "ms", "us", "ns")
UNVALIDATED_STRINGS = ("utf8", "binary", "reject")
# The decoder's nesting stack has 1024 frames (the root is one of them).
MAX_NESTING_LIMIT = 1023
# Recursive levels read whole: a struct type nested much deeper cannot travel through Arrow
# IPC (flatbuffers refuses it: Ray, Parquet's stored schema), and its plan is a tree that
# doubles with each level of a type with two recursive fields.
MAX_DEPTH = 100


# ---- rules ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """One of ``values`` (strings)."""

    values: tuple[str, ...]

    def problem(self, value: object) -> str | None:
        if isinstance(value, str) and value in self.values:
            return None
        return f"must be one of {', '.join(repr(v) for v in self.values)}, not {value!r}"

    def describe(self) -> str:
        return " / ".join(f"`{v}`" for v in self.values)


@dataclass(frozen=True)
class IntRange:
    """An integer in ``low..high``; None too when ``optional``."""

    low: int
    high: int
    optional: bool = False

    def problem(self, value: object) -> str | None:
        if value is None and self.optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, not {value!r}"
        if not self.low <= value <= self.high:
            return f"must be in {self.low}..{self.high}, not {value}"
        return None

    def describe(self) -> str:
        return f"{self.low}..{self.high}" + (" or none" if self.optional else "")


@dataclass(frozen=True)
class Flag:
    """True or False."""

    def problem(self, value: object) -> str | None:
        return None if isinstance(value, bool) else f"must be true or false, not {value!r}"

    def describe(self) -> str:
        return "`true` / `false`"


@dataclass(frozen=True)
class FieldNames:
    """Full names of fields of the schema (``pkg.Message.field``), kept as a sorted tuple
    (any collection of them is accepted); the compiler checks each against the schema."""

    def problem(self, value: object) -> str | None:
        if isinstance(value, tuple) and all(isinstance(v, str) and v for v in value):
            return None
        return f"must be a list of field full names (pkg.Message.field), not {value!r}"

    def describe(self) -> str:
        return "a list of field full names"

    @staticmethod
    def normalise(value: object) -> object:
        if isinstance(value, list | set | frozenset | tuple):
            return tuple(sorted(set(value), key=str))  # one order: one plan
        return value  # (a single str: refused by problem, not split into letters)


class MessageNames(FieldNames):
    """Full names of messages of the schema's pool (``pkg.Message``), as FieldNames keeps
    field names; the compiler checks each against the pool."""

    def problem(self, value: object) -> str | None:
        if isinstance(value, tuple) and all(isinstance(v, str) and v for v in value):
            return None
        return f"must be a list of message full names (pkg.Message), not {value!r}"

    def describe(self) -> str:
        return "a list of message full names"


Rule = Choice | IntRange | Flag | FieldNames


def _option(default: Any, rule: Rule, doc: str, *, plan: bool = True) -> Any:
    """A field of :class:`Options`: ``plan=False`` for an option that does not change the
    compiled tables (it is then not part of the parser cache's plan fingerprint)."""
    return dataclasses.field(default=default, metadata={"rule": rule, "doc": doc, "plan": plan})


# ---- the table -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Options:
    """Every option of a transcoder, checked (a :class:`~wirearrow.PlanError` lists the bad
    ones). Keyword-only; :class:`~wirearrow.TranscodeSpec` adds the schema and columns."""

    on_error: str = _option(
        "raise",
        Choice(ON_ERROR),
        "what a bad record does: `raise` a DecodeError (the first one), `skip` it (counted), "
        "or `dead_letter`: skip it and keep it (raw bytes, index, offset, field path, reason) "
        "for the dead letters",
        plan=False,
    )
    validate: str = _option(
        "plan",
        Choice(VALIDATE),
        "`plan` checks every byte the plan reads; `full` also walks every sub-message the plan "
        "skips, accepting exactly what the protobuf runtime accepts",
    )
    timestamp_unit: str = _option(
        "us",
        Choice(TIME_UNITS),
        "the unit of Timestamp and Duration columns",
    )
    max_nesting: int = _option(
        100,
        IntRange(1, MAX_NESTING_LIMIT),
        "messages and groups nested deeper than this on the wire are a decode error",
    )
    max_depth: int | None = _option(
        None,
        IntRange(1, MAX_DEPTH, optional=True),
        "recursive message types read whole are cut at this depth (deeper levels kept as their "
        "serialized bytes); none: such a plan is an error naming the cycle",
    )
    enums: str = _option(
        "number",
        Choice(ENUMS),
        "`number`: int32; `name`: dictionary<int32, utf8> of the value names (numbers the "
        "schema does not declare keep their decimal text)",
    )
    keep_unknown: bool = _option(
        False,
        Flag(),
        "add a binary `_unknown` column with each record's unknown fields (raw tag and value "
        "bytes, in wire order; null when none) and the same child to every struct, so that "
        "decoding and encoding back loses nothing",
    )
    well_known_types: bool = _option(
        True,
        Flag(),
        "map Timestamp, Duration, the wrappers, Struct/Value, Any, FieldMask, google.type.Date "
        "and TimeOfDay to Arrow types (docs/types.md); false reads them as the plain messages "
        "they are, which loses nothing",
    )
    unvalidated_strings: str = _option(
        "utf8",
        Choice(UNVALIDATED_STRINGS),
        "strings the schema does not require to be UTF-8 (proto2, editions "
        "`utf8_validation = NONE`): `utf8` columns, a value that is not UTF-8 moved to its "
        "message's unknown fields and counted in `strings_not_utf8`; `binary` columns; or "
        "`reject`: such a value makes a bad record (docs/types.md)",
    )
    bytes_as_string: tuple[str, ...] = _option(
        (),
        FieldNames(),
        "`bytes` fields that hold text, by full name (`[pkg.Event.payload]`): `utf8` wherever "
        "the plan reads them (a column, a struct's child, a list's items, a map's value), a "
        "value that is not UTF-8 making a bad record; `encode` writes the text back as the "
        "same bytes (docs/types.md)",
    )
    oneof_case: bool = _option(
        False,
        Flag(),
        "whole messages: a `<oneof>_case` column (dictionary<int32, utf8>: the name of the "
        "member set, null when none is) after each oneof's members, in every struct; `encode` "
        "writes the member it names and no other (docs/types.md). Any plan can read the same "
        "as the path naming the oneof (`feature[\"age\"].kind`)",
    )
    extensions: bool = _option(
        False,
        Flag(),
        "the extensions the schema's descriptor set declares for a message are its fields: "
        "whole messages get a column per extension, named `[pkg.ext]` as protojson names it, "
        "after the message's own fields, and `encode` writes them as the runtime does; false: "
        "they are unknown fields (kept in `_unknown` with keep_unknown). Paths reach an "
        "extension as `msg[pkg.ext]` either way (docs/types.md)",
    )
    any_types: tuple[str, ...] = _option(
        (),
        MessageNames(),
        "message types an `Any` may hold, by full name (`[pkg.Click, pkg.View]`): each Any "
        "struct gets a child `[pkg.Click]` beside `type_url` and `value`, decoded from `value` "
        "where the type URL names that type (`.../pkg.Click`), null elsewhere; paths reach "
        "inside (`payload[pkg.Click].x`); other types stay bytes (docs/types.md)",
    )

    field_ids: bool = _option(
        True,
        Flag(),
        "give every Arrow field (nested ones, list elements, map keys and values included) a "
        "`PARQUET:field_id`, the same for the same protobuf field in every run and schema "
        "version, which Parquet writers store and Iceberg, Spark and Trino follow "
        "(docs/evolution.md); false: no ids",
    )

    def __post_init__(self) -> None:
        for name, f in OPTIONS.items():
            if isinstance(f.metadata["rule"], FieldNames):
                object.__setattr__(self, name, FieldNames.normalise(getattr(self, name)))
        problems = [
            f"{name} {why}"
            for name in OPTIONS
            if (why := option_problem(name, getattr(self, name))) is not None
        ]
        if problems:
            raise PlanError(problems)

    @property
    def options(self) -> dict[str, Any]:
        """Every option by name."""
        return {name: getattr(self, name) for name in OPTIONS}


# name -> its field (default, metadata: rule, doc, plan), in declaration order.
OPTIONS: Mapping[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(Options)}
# The options that change the compiled tables (on_error only changes what happens to bad
# records): what the parser cache fingerprints.
PLAN_OPTIONS = tuple(name for name, f in OPTIONS.items() if f.metadata["plan"])


def option_problem(name: str, value: object) -> str | None:
    """Why ``value`` is not a valid ``name`` option (None: it is)."""
    rule: Rule = OPTIONS[name].metadata["rule"]
    return rule.problem(value)


def unknown_options(names: object) -> list[str]:
    """The names among ``names`` that are not options, sorted."""
    return sorted(set(names) - set(OPTIONS))  # type: ignore[call-overload]


def _yaml_text(value: object) -> str:
    """A default as a YAML plan writes it."""
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def options_doc() -> str:
    """Every option as a docstring section (Transcoder's and TranscodeSpec's)."""
    lines = ["Options (keyword arguments; docs/options.md):", ""]
    for name, f in OPTIONS.items():
        lines.append(f"``{name}`` (default ``{f.default!r}``): {f.metadata['doc']}.")
    return "\n".join(lines)


def options_table() -> str:
    """Every option as the Markdown table of docs/options.md."""
    rows = ["| option | default | values | what it does |", "|---|---|---|---|"]
    for name, f in OPTIONS.items():
        default = _yaml_text(f.default)
        rule: Rule = f.metadata["rule"]
        rows.append(f"| `{name}` | {default} | {rule.describe()} | {f.metadata['doc']} |")
    return "\n".join(rows)

