"""TranscodeSpec: everything that decides what a Transcoder does, as one frozen value.

A spec is the schema, the plan's columns and every option (:class:`~wirearrow.options.Options`,
which it extends). It is what the YAML loader builds (``PlanConfig.spec()``), what the parser
cache fingerprints (``plan_key``), what the engines ship to their workers (it pickles as the
schema's descriptor bytes and the column list) and what a :class:`~wirearrow.Transcoder` is
made from (``Transcoder(spec)``; ``tc.spec``; ``spec.replace(on_error="skip")``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wirearrow.errors import PlanError
from wirearrow.options import PLAN_OPTIONS, Options, options_doc, unknown_options
from wirearrow.plan.compiler import UNKNOWN_FIELDS, UNKNOWN_WKT, Column, check_expression_depth
from wirearrow.plan.types import (
    ONEOF_CASE,
    WELL_KNOWN,
    case_columns,
    extensions_of,
    field_name,
    fields_of,
    is_map,
)
from wirearrow.schema import Schema

__all__ = ["TranscodeSpec", "as_columns"]

# Bump when the compiler's table layout changes in a way that makes saved sizes misleading.
LAYOUT_VERSION = 2


def as_columns(columns: Sequence[str | Column] | None) -> tuple[Column, ...] | None:
    """A column list as the spec stores it: path strings made :class:`Column`."""
    if columns is None:
        return None
    if isinstance(columns, str | bytes):
        raise TypeError("columns must be a sequence of paths or wa.Column, not one string")
    return tuple(Column(c) if isinstance(c, str) else c for c in columns)


def _has_mapped_values(descriptor: Any, extensions: bool) -> bool:
    """Whether a message has a field read as a well-known type's value (not a struct)."""
    for fd in fields_of(descriptor, extensions):
        value = fd.message_type.fields_by_number[2] if is_map(fd) else fd
        if value.message_type is not None and WELL_KNOWN.get(
            value.message_type.full_name, "any"
        ) != "any":
            return True
    return False


def _with_case_columns(descriptor: Any, fields: tuple[Column, ...]) -> tuple[Column, ...]:
    """The record's columns with a `<oneof>_case` column (the path naming the oneof) after
    each oneof's last member, as oneof_case puts them in every struct."""
    cases = case_columns(descriptor)
    clash = [name for name in cases if name in descriptor.fields_by_name]
    if clash:
        problem = f"{descriptor.full_name} has a field named {clash[0]!r}"
        raise PlanError([f"{problem}: oneof_case cannot add the case of its oneof"])
    after = {o.fields[-1].name: o for o in cases.values()}
    out: list[Column] = []
    for column in fields:
        out.append(column)
        oneof = after.get(column.path or "")
        if oneof is not None:
            out.append(Column(oneof.name, name=ONEOF_CASE.format(oneof.name)))
    return tuple(out)


@dataclass(frozen=True)
class TranscodeSpec(Options):
    """The schema, the columns (None: the whole message), the other versions of the
    schema's message whose records it reads too, and every option.

    Columns given as path strings are stored as :class:`~wirearrow.Column`.
    """

    schema: Schema
    columns: tuple[Column, ...] | None = None
    # Other versions of the schema's message whose records share the output: its schema is
    # their superset (wirearrow.versions, docs/tables.md).
    versions: tuple[Schema, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.schema, Schema):
            raise TypeError(
                f"schema must be a wirearrow.Schema, not {type(self.schema).__name__}"
            )
        if isinstance(self.versions, Schema) or not isinstance(self.versions, Sequence):
            raise TypeError("versions must be a sequence of wirearrow.Schema")
        object.__setattr__(self, "versions", tuple(self.versions))
        for version in self.versions:
            if not isinstance(version, Schema):
                raise TypeError(f"versions holds a {type(version).__name__}, not a wirearrow.Schema")
        # Path strings are accepted too (and stored as Column).
        object.__setattr__(self, "columns", as_columns(self.columns))
        if self.columns is not None:
            check_expression_depth(self.columns)  # before anything walks them recursively
        super().__post_init__()

    def replace(self, **changes: Any) -> TranscodeSpec:
        """This spec with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    @property
    def mode(self) -> str:
        """"flat" (a column list) or "nested" (whole messages)."""
        return "nested" if self.columns is None else "flat"

    def plan_columns(self) -> tuple[Column, ...]:
        """The columns compiled: the given ones or one per top-level field, then
        ``_unknown_wkt`` (whole messages with fields of well-known types) and ``_unknown``
        when unknown fields are kept."""
        descriptor = self.schema.descriptor
        keep = (Column(UNKNOWN_FIELDS),) if self.keep_unknown else ()
        if keep and UNKNOWN_FIELDS in descriptor.fields_by_name:
            problem = f"{descriptor.full_name} has a field named {UNKNOWN_FIELDS}"
            raise PlanError([f"{problem}: keep_unknown cannot add its own column"])
        if self.columns is not None:
            return (*self.columns, *keep)
        if not descriptor.fields and not keep:
            raise PlanError([f"message {descriptor.full_name} has no fields: nothing to read"])
        fields = tuple(Column(f.name) for f in descriptor.fields)
        if self.oneof_case:
            fields = _with_case_columns(descriptor, fields)
        if self.extensions:
            fields += tuple(Column(field_name(f)) for f in extensions_of(descriptor))
        if self.keep_unknown and self.well_known_types and _has_mapped_values(
            descriptor, self.extensions
        ):
            if UNKNOWN_WKT in descriptor.fields_by_name:
                problem = f"{descriptor.full_name} has a field named {UNKNOWN_WKT}"
                raise PlanError([f"{problem}: keep_unknown cannot add its own column"])
            fields += (Column(UNKNOWN_WKT),)
        return (*fields, *keep)

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
                [(name, getattr(self, name)) for name in PLAN_OPTIONS],
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
        unknown = unknown_options(options)
        if unknown:
            raise TypeError(f"unknown transcoder options: {', '.join(unknown)}")
        return cls(schema, as_columns(columns), **options)


TranscodeSpec.__doc__ = f"{TranscodeSpec.__doc__}\n    {options_doc()}\n"
