"""Test-only reference for flat mode: the rows a plan should give, from *parsed* messages.

The protobuf runtime (``MessageClass.FromString``) applies every wire rule (last value wins,
message merging, packed/unpacked, oneof, unknown fields), so this oracle never looks at
bytes: it turns each parsed message into a small presence-aware tree and evaluates the
paths on it. It is written to be read, not to be fast.

1. ``_tree``: a message becomes ``_Msg(descriptor, {field: value})``. A field with explicit
   presence that is not set is ``None``; one with implicit presence reads as its default;
   repeated fields are lists; maps are ``_Map`` with entries sorted by key: flat mode keeps
   wire order (a repeated key keeps the position of its last occurrence), and the tests
   write map entries in key order, any repeated key's earlier entry before all others.
   A filter followed by an index (``list[?(pred)][N]``) is one ``_Match`` step: the N-th
   element the filter keeps, a single value.
2. ``_FanOut``: every fan-out step (``[*]``, a slice, a filter over a list, ``m[*]``) is a
   node, identified by the steps up to and including it (positions ignored). A node's parent
   is the nearest fan-out before it in the same path; children are ordered by first
   appearance in the column list.
3. ``_expand``: rows under an instance = the cross product over child nodes (first child is
   the outer loop) of the rows of each selected element, in element order; a child with no
   elements gives one row in which it and everything under it is null.
4. A cell evaluates what is left of its column's path from the element its deepest fan-out
   picked in that row, and renders it the way ``pa.RecordBatch.to_pylist()`` does.

Filters use SQL's three-valued logic (docs/paths.md). ``expected_arrow_type`` gives a
column's type; ``assert_rows_equal`` compares rows cell by cell, guided by the Arrow types.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from wirearrow.paths import (
    And,
    Compare,
    FieldStep,
    FilterStep,
    IndexStep,
    KeyStep,
    Literal,
    Not,
    Or,
    RelPath,
    SliceStep,
    Truthy,
    WildcardStep,
    parse_path,
)
from wirearrow.plan.types import extensions_of, field_name, fields_of, is_repeated, real_oneofs

__all__ = ["arrow_shape", "assert_rows_equal", "expected_arrow_type", "expected_rows", "same_value"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_WRAPPERS = {
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
}
_FD = FieldDescriptor


# --------------------------------------------------------------------------------------------
# 1. Parsed message -> presence-aware tree


@dataclasses.dataclass
class _Msg:
    descriptor: Descriptor
    fields: dict[str, Any]


@dataclasses.dataclass
class _Map:
    entries: list[tuple[Any, Any]]


def _is_map(fd: FieldDescriptor) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def _is_message(fd: FieldDescriptor) -> bool:
    return fd.type in (_FD.TYPE_MESSAGE, _FD.TYPE_GROUP)


def _by_name(descriptor: Descriptor, name: str) -> FieldDescriptor:
    """A field by its path step: its name, or "[pkg.ext]" for an extension."""
    if name.startswith("["):
        return next(f for f in extensions_of(descriptor) if field_name(f) == name)
    return descriptor.fields_by_name[name]


def _tree(message: Any) -> _Msg:
    fields = {fd.name: _field(message, fd) for fd in message.DESCRIPTOR.fields}
    # extensions, by their path step "[pkg.ext]"
    for fd in extensions_of(message.DESCRIPTOR):
        fields[field_name(fd)] = _field(message, fd)
    # A path naming a oneof reads which member is set (None: none is).
    for oneof in real_oneofs(message.DESCRIPTOR):
        fields[oneof.name] = _which(message, oneof)
    return _Msg(message.DESCRIPTOR, fields)


def _which(message: Any, oneof: Any) -> str | None:
    member = message.WhichOneof(oneof.name)
    if member is None:
        return None
    value = getattr(message, member)
    fd = message.DESCRIPTOR.fields_by_name[member]
    # A string moved to the unknown fields (not UTF-8, unvalidated) is not set for wirearrow.
    return None if fd.type == _FD.TYPE_STRING and isinstance(value, bytes) else member


def _field(message: Any, fd: FieldDescriptor) -> Any:
    value = message.Extensions[fd] if fd.is_extension else getattr(message, fd.name)
    if _is_map(fd):
        value_fd = fd.message_type.fields_by_name["value"]
        # An entry whose string value is not UTF-8 (the runtime gives bytes) becomes an
        # unknown field of the parent, whole (docs/types.md).
        entries = [(key, value[key]) for key in sorted(value)]
        return _Map([(k, _element(v, value_fd)) for k, v in entries if not _moved(v, value_fd)])
    if is_repeated(fd):
        items = list(value)
        if fd.type == _FD.TYPE_STRING:
            # A string the schema does not validate holding bytes that are not UTF-8 (the
            # runtime gives them as bytes) is moved to the unknown fields, and the later
            # elements of the list follow it there (docs/types.md).
            cut = [i for i, item in enumerate(items) if isinstance(item, bytes)]
            items = items[: cut[0]] if cut else items
        return [_element(item, fd) for item in items]
    if fd.has_presence and not (
        message.HasExtension(fd) if fd.is_extension else message.HasField(fd.name)
    ):
        return None
    if isinstance(value, bytes) and fd.type == _FD.TYPE_STRING:
        return None if fd.has_presence else ""  # moved to the unknown fields: unset
    return _element(value, fd)


def _moved(value: Any, fd: FieldDescriptor) -> bool:
    return isinstance(value, bytes) and fd.type == _FD.TYPE_STRING


def _element(value: Any, fd: FieldDescriptor) -> Any:
    return _tree(value) if _is_message(fd) else value  # enums are already ints


# --------------------------------------------------------------------------------------------
# Steps and predicates on the tree


@dataclasses.dataclass(frozen=True)
class _Match:
    """``[?(filter)][index]``: the index-th element the filter keeps (negative: from the end)."""

    filter: FilterStep
    index: IndexStep


def _merge_matches(steps: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for step in steps:
        if isinstance(step, IndexStep) and out and isinstance(out[-1], FilterStep):
            out[-1] = _Match(out[-1], step)
        else:
            out.append(step)
    return out


def _select(value: Any, step: Any) -> Any:
    """A step that picks at most one value (field, index, key, filter on a singular message)."""
    if value is None:
        return None
    if isinstance(step, _Match):
        kept = [item for item in value if _holds(step.filter.predicate, item) is True]
        k = step.index.index
        return kept[k] if -len(kept) <= k < len(kept) else None
    if isinstance(step, FieldStep):
        return value.fields[step.name]
    if isinstance(step, (IndexStep, KeyStep)):
        key = step.index if isinstance(step, IndexStep) else step.key
        if isinstance(value, _Map):
            return next((v for k, v in value.entries if k == key and type(k) is type(key)), None)
        return value[key] if -len(value) <= key < len(value) else None
    if isinstance(step, FilterStep):
        return value if _holds(step.predicate, value) is True else None
    raise AssertionError(f"not a single-value step: {step!r}")


def _fan_out(value: Any, step: Any) -> list[Any]:
    """A fan-out step: the selected elements, in order (none under an absent value)."""
    if value is None:
        return []
    if isinstance(step, WildcardStep):
        return [v for _, v in value.entries] if isinstance(value, _Map) else list(value)
    if isinstance(step, SliceStep):
        return value[slice(step.start, step.stop, step.step)]
    if isinstance(step, FilterStep):
        return [item for item in value if _holds(step.predicate, item) is True]
    raise AssertionError(f"not a fan-out step: {step!r}")


def _holds(predicate: Any, element: _Msg) -> bool | None:
    """SQL three-valued logic with ``None`` for unknown (a filter keeps only ``True``).

    A null operand makes a comparison or truth test unknown; ``!unknown`` is unknown;
    ``unknown && false`` is false and ``unknown || true`` is true.
    """
    if isinstance(predicate, Compare):
        left, right = _operand(predicate.left, element), _operand(predicate.right, element)
        if left is None or right is None:
            return None
        return {
            "==": left == right,
            "!=": left != right,
            "<": left < right,
            "<=": left <= right,
            ">": left > right,
            ">=": left >= right,
        }[predicate.op]
    if isinstance(predicate, Truthy):
        value = _operand(predicate.operand, element)
        return None if value is None else bool(value)  # numbers != 0, non-empty str/bytes
    if isinstance(predicate, Not):
        value = _holds(predicate.operand, element)
        return None if value is None else not value
    left, right = _holds(predicate.left, element), _holds(predicate.right, element)
    if isinstance(predicate, And):
        if left is False or right is False:
            return False
        return None if left is None or right is None else True
    if isinstance(predicate, Or):
        if left is True or right is True:
            return True
        return None if left is None or right is None else False
    raise AssertionError(f"not a predicate: {predicate!r}")


def _operand(atom: RelPath | Literal, element: _Msg) -> Any:
    if isinstance(atom, Literal):
        return atom.value
    value: Any = element
    for name in atom.fields:
        value = value.fields[name] if isinstance(value, _Msg) else None
    return value


# --------------------------------------------------------------------------------------------
# Leaves rendered as to_pylist() renders them


def _render(value: Any, extensions: bool = False) -> Any:
    """`extensions`: a struct holds the message's extensions too (extensions=True)."""
    if isinstance(value, list):
        return [_render(item, extensions) for item in value]
    if isinstance(value, _Map):
        return [(key, _render(item, extensions)) for key, item in value.entries]
    if not isinstance(value, _Msg):
        return value
    name, fields = value.descriptor.full_name, value.fields
    if name == "google.protobuf.Timestamp":
        return _EPOCH + datetime.timedelta(
            microseconds=fields["seconds"] * 1_000_000 + fields["nanos"] // 1000
        )
    if name == "google.protobuf.Duration":  # nanos has the sign of seconds: truncate to zero
        micros = abs(fields["nanos"]) // 1000 * (1 if fields["nanos"] >= 0 else -1)
        return datetime.timedelta(microseconds=fields["seconds"] * 1_000_000 + micros)
    if name in _WRAPPERS:
        return fields["value"]
    if name == "google.protobuf.FieldMask":
        return list(fields["paths"])
    # (Any is a plain struct here; a oneof's name is not a field of the struct)
    every = fields_of(value.descriptor, extensions)
    return {field_name(fd): _render(fields[field_name(fd)], extensions) for fd in every}


# --------------------------------------------------------------------------------------------
# 2. Columns and fan-out nodes


def _key(node: Any) -> Any:
    """A hashable identity for a step or predicate that ignores ``pos``."""
    if dataclasses.is_dataclass(node):
        fields = [f.name for f in dataclasses.fields(node) if f.name != "pos"]
        return (type(node).__name__, *(_key(getattr(node, name)) for name in fields))
    if isinstance(node, tuple):
        return tuple(_key(item) for item in node)
    return (type(node).__name__, node)  # keeps 1 and True apart


def _fan_out_positions(descriptor: Descriptor, steps: Sequence[Any]) -> list[int]:
    """Indices of the steps that fan out, found by walking the descriptors."""
    positions = []
    field: FieldDescriptor | None = None  # the field whose value we are on, if not yet selected
    for i, step in enumerate(steps):
        if isinstance(step, FieldStep):
            if step.name in descriptor.oneofs_by_name:  # a oneof: the last step
                break
            field = _by_name(descriptor, step.name)
            descriptor = field.message_type
            if is_repeated(field):
                continue
        elif field is not None and is_repeated(field):  # a selector on a list or map
            if isinstance(step, (WildcardStep, SliceStep, FilterStep)):
                positions.append(i)
            if _is_map(field):
                descriptor = field.message_type.fields_by_name["value"].message_type
        field = None
    return positions


@dataclasses.dataclass
class _FanOut:
    key: Any
    segment: tuple[Any, ...]  # steps from the parent's fan-out (exclusive) to this one (inclusive)
    children: list[_FanOut] = dataclasses.field(default_factory=list)

    def elements(self, instance: Any) -> list[Any]:
        value = instance
        for step in self.segment[:-1]:
            value = _select(value, step)
        return _fan_out(value, self.segment[-1])


@dataclasses.dataclass
class _Column:
    name: str
    owner: _FanOut  # the deepest fan-out of the path (the root node when there is none)
    rest: tuple[Any, ...]  # steps after the owner's fan-out step
    extensions: bool = False  # structs hold the extensions (extensions=True)

    def cell(self, row: dict[Any, Any]) -> Any:
        if self.owner.key not in row:  # the owner had no elements: a left-join null
            return None
        value = row[self.owner.key]
        for step in self.rest:
            value = _select(value, step)
        return _render(value, self.extensions)


def _plan(
    descriptor: Descriptor, columns: Sequence[Any], extensions: bool = False
) -> tuple[_FanOut, list[_Column]]:
    root = _FanOut(key=(), segment=())
    nodes: dict[Any, _FanOut] = {(): root}
    planned = []
    for column in columns:
        text, name = (column, column) if isinstance(column, str) else column
        steps = tuple(_merge_matches(parse_path(text).steps))
        parent, start = root, 0
        for position in _fan_out_positions(descriptor, steps):
            key = _key(steps[: position + 1])
            if key not in nodes:
                nodes[key] = _FanOut(key, tuple(steps[start : position + 1]))
                parent.children.append(nodes[key])  # first appearance decides the order
            parent, start = nodes[key], position + 1
        planned.append(_Column(name, parent, tuple(steps[start:]), extensions))
    return root, planned


# --------------------------------------------------------------------------------------------
# 3. Rows


def _expand(node: _FanOut, instance: Any) -> list[dict[Any, Any]]:
    """The rows under one instance of ``node``: each maps fan-out keys to picked elements."""
    rows: list[dict[Any, Any]] = [{}]
    for child in node.children:
        child_rows = [
            {child.key: element, **below}
            for element in child.elements(instance)
            for below in _expand(child, element)
        ] or [{}]
        rows = [{**outer, **inner} for outer in rows for inner in child_rows]
    return rows


def expected_rows(
    message_class: Any,
    messages: Sequence[bytes],
    columns: Sequence[Any],
    extensions: bool = False,
) -> list[dict[str, Any]]:
    """The rows flat mode must produce for ``messages`` under ``columns``.

    A column is a path text (which is also its name) or a ``(path, name)`` pair. A message
    the runtime cannot parse raises the runtime's ``DecodeError``. ``extensions``: the
    transcoder's option (structs then hold the extensions the schema declares).
    """
    root, planned = _plan(message_class.DESCRIPTOR, columns, extensions)
    out = []
    for raw in messages:
        tree = _tree(message_class.FromString(raw))
        for row in _expand(root, tree):
            row[()] = tree
            out.append({column.name: column.cell(row) for column in planned})
    return out


# --------------------------------------------------------------------------------------------
# Arrow types


def _scalar_type(fd: FieldDescriptor, ext: bool = False) -> pa.DataType:
    if _is_message(fd):
        return _message_type(fd.message_type, ext)
    return {
        _FD.TYPE_INT32: pa.int32(),
        _FD.TYPE_SINT32: pa.int32(),
        _FD.TYPE_SFIXED32: pa.int32(),
        _FD.TYPE_ENUM: pa.int32(),
        _FD.TYPE_INT64: pa.int64(),
        _FD.TYPE_SINT64: pa.int64(),
        _FD.TYPE_SFIXED64: pa.int64(),
        _FD.TYPE_UINT32: pa.uint32(),
        _FD.TYPE_FIXED32: pa.uint32(),
        _FD.TYPE_UINT64: pa.uint64(),
        _FD.TYPE_FIXED64: pa.uint64(),
        _FD.TYPE_FLOAT: pa.float32(),
        _FD.TYPE_DOUBLE: pa.float64(),
        _FD.TYPE_BOOL: pa.bool_(),
        _FD.TYPE_STRING: pa.utf8(),
        _FD.TYPE_BYTES: pa.binary(),
    }[fd.type]


def _message_type(descriptor: Descriptor, ext: bool = False) -> pa.DataType:
    name = descriptor.full_name
    if name == "google.protobuf.Timestamp":
        return pa.timestamp("us", tz="UTC")
    if name == "google.protobuf.Duration":
        return pa.duration("us")
    if name in _WRAPPERS:
        return _scalar_type(descriptor.fields_by_name["value"])
    if name == "google.protobuf.FieldMask":
        return pa.list_(pa.utf8())
    fields = fields_of(descriptor, ext)
    return pa.struct([pa.field(field_name(fd), _field_type(fd, ext)) for fd in fields])


def _field_type(fd: FieldDescriptor, ext: bool = False) -> pa.DataType:
    if _is_map(fd):
        entry = fd.message_type.fields_by_name
        return pa.map_(_scalar_type(entry["key"], ext), _scalar_type(entry["value"], ext))
    if is_repeated(fd):
        return pa.list_(_scalar_type(fd, ext))
    return _scalar_type(fd, ext)


def expected_arrow_type(descriptor: Descriptor, path: str, extensions: bool = False) -> pa.DataType:
    """The Arrow type of the column ``path`` (decided by its last field and what follows);
    ``extensions``: the transcoder's option (structs hold the extensions)."""
    field = None
    selected = False  # whether a selector followed the last field step
    for step in parse_path(path).steps:
        if isinstance(step, FieldStep):
            if step.name in descriptor.oneofs_by_name:
                return pa.dictionary(pa.int32(), pa.utf8())  # the member set
            field = _by_name(descriptor, step.name)
            descriptor, selected = field.message_type, False
        elif is_repeated(field) and not selected:
            selected = True
            if _is_map(field):
                field = field.message_type.fields_by_name["value"]
                descriptor = field.message_type
    assert field is not None, "root-only paths are not flat columns"
    return _scalar_type(field, extensions) if selected else _field_type(field, extensions)


# --------------------------------------------------------------------------------------------
# Comparing wirearrow's rows with the oracle's


def same_value(arrow_type: pa.DataType, got: Any, want: Any) -> bool:
    """Cell equality guided by the column's Arrow type (NaN == NaN; float32 rounded)."""
    if got is None or want is None:
        return got is None and want is None
    if pa.types.is_floating(arrow_type):
        if math.isnan(got) or math.isnan(want):
            return math.isnan(got) and math.isnan(want)
        if pa.types.is_float32(arrow_type):
            return bool(np.float32(got) == np.float32(want))
        return got == want
    if pa.types.is_map(arrow_type):
        return len(got) == len(want) and all(
            g[0] == w[0] and same_value(arrow_type.item_type, g[1], w[1])
            for g, w in zip(got, want, strict=True)
        )
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return len(got) == len(want) and all(
            same_value(arrow_type.value_type, g, w) for g, w in zip(got, want, strict=True)
        )
    if pa.types.is_struct(arrow_type):
        names = [arrow_type.field(i).name for i in range(arrow_type.num_fields)]
        return set(got) == set(want) == set(names) and all(
            same_value(arrow_type.field(name).type, got[name], want[name]) for name in names
        )
    return type(got) is type(want) and got == want


def arrow_shape(arrow_type: pa.DataType) -> str:
    """The type without child-field names and nullability (``list<item:>`` vs ``element``)."""
    if pa.types.is_map(arrow_type):
        return f"map<{arrow_shape(arrow_type.key_type)}, {arrow_shape(arrow_type.item_type)}>"
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return f"list<{arrow_shape(arrow_type.value_type)}>"
    if pa.types.is_struct(arrow_type):
        fields = (arrow_type.field(i) for i in range(arrow_type.num_fields))
        return "struct<" + ", ".join(f"{f.name}: {arrow_shape(f.type)}" for f in fields) + ">"
    return str(arrow_type)


def assert_rows_equal(
    arrow_schema: pa.Schema, got: list[dict[str, Any]], want: list[dict[str, Any]], label: str
) -> None:
    assert len(got) == len(want), f"{label}: {len(got)} rows, oracle says {len(want)}"
    for i, (got_row, want_row) in enumerate(zip(got, want, strict=True)):
        assert list(got_row) == list(want_row), f"{label}: row {i} columns"
        for field in arrow_schema:
            g, w = got_row[field.name], want_row[field.name]
            assert same_value(field.type, g, w), (
                f"{label}: row {i}, column {field.name!r} ({field.type}):\n"
                f"  wirearrow: {g!r}\n  oracle:    {w!r}"
            )


# Unknown fields. The runtime keeps each message's unknown fields verbatim: clearing every
# known field of a copy and serializing it yields exactly those bytes.


def runtime_unknown(message: Any) -> bytes | None:
    copy = type(message)()
    copy.CopyFrom(message)
    for fd, _ in copy.ListFields():
        copy.ClearField(fd.name)
    return copy.SerializeToString() or None


def check_unknown(row: dict, message: Any) -> None:
    """Every struct of `row` holds the unknown fields of its runtime message."""
    assert row["_unknown"] == runtime_unknown(message), message.DESCRIPTOR.full_name
    for fd in message.DESCRIPTOR.fields:
        if fd.message_type is None:
            continue
        value = row[fd.name]
        held = getattr(message, fd.name)
        if fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_number[2]
            if value_fd.message_type is None:
                continue
            for key, sub in value:
                if isinstance(sub, dict):
                    check_unknown(sub, held[key])
        elif is_repeated(fd):
            for sub, item in zip(value, held, strict=True):
                if isinstance(sub, dict):
                    check_unknown(sub, item)
        elif not message.HasField(fd.name):
            assert value is None, fd.full_name
        elif isinstance(value, dict):  # well-known types map to other Arrow types
            check_unknown(value, held)
