"""Arrow rows -> protobuf bytes: the cold half of ``Transcoder.encode``.

:class:`EncodingPlan` walks a message descriptor and the Arrow schema of a whole-message
batch once, checking that every column has the type nested mode gives that field, and
compiles flat tables for ``wirearrow._core.encoder``: one *spec* per Arrow array the encoder
reads (how it is reached from the batch: a column, a struct's child, a list's values), one
*node* per message shape, one *entry* per field (field number order, so output is in
field-number order), loaded into the core once. Per batch, the core finds every spec's
buffers itself (the batch crosses through the Arrow C data interface in one call), checks
and splits what the wire needs on the fly (UTF-8, closed enums, Timestamp / Duration /
Date / TimeOfDay parts and ranges, map entries in the runtime's deterministic order) and
encodes the whole batch with the GIL released. Python runs per call only for the few arrays
whose conversion needs the runtime or a lookup (enum names, JSON texts of Struct / Value /
ListValue, the serialized levels below a max_depth cut): *given* specs, derived from their
parent array and handed to the core by address.

Output matches ``SerializeToString(deterministic=True)`` of the protobuf runtime (upb):
fields by number, unknown fields (``_unknown``) last, map entries as upb orders them
(see the core's ``before``), both key and value written in every entry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import Message

from wirearrow import accelerator
from wirearrow._core import encoder as core
from wirearrow._core.layout import EncodeColumn, EncodeEntry, EncodeNode, EncodeSpec
from wirearrow.errors import EncodeError
from wirearrow.plan import jsontext
from wirearrow.plan.types import (
    ANY,
    WELL_KNOWN,
    case_columns,
    extensions_of,
    field_name,
    fields_of,
    is_map,
    is_message,
    is_packed,
    is_repeated,
    needs_utf8_check,
)

__all__ = ["UNKNOWN_FIELD", "UNKNOWN_WKT", "EncodingPlan"]

UNKNOWN_FIELD = "_unknown"
# keep_unknown: per field read as a well-known type's value, what that value cannot hold
# (the unknown fields inside it; a Struct / Value / ListValue's bytes)
UNKNOWN_WKT = "_unknown_wkt"

_T = FieldDescriptor

# protobuf scalar type -> (encoder kind, Arrow types accepted, wire type, packable)
_SCALARS: dict[int, tuple[str, tuple[pa.DataType, ...], int]] = {
    _T.TYPE_INT32: ("int32", (pa.int32(),), 0),
    _T.TYPE_ENUM: ("int32", (pa.int32(),), 0),
    _T.TYPE_UINT32: ("uint32", (pa.uint32(),), 0),
    _T.TYPE_INT64: ("int64", (pa.int64(),), 0),
    _T.TYPE_UINT64: ("int64", (pa.uint64(),), 0),
    _T.TYPE_BOOL: ("bool", (pa.bool_(),), 0),
    _T.TYPE_SINT32: ("sint32", (pa.int32(),), 0),
    _T.TYPE_SINT64: ("sint64", (pa.int64(),), 0),
    _T.TYPE_FIXED32: ("fixed32", (pa.uint32(),), 5),
    _T.TYPE_SFIXED32: ("fixed32", (pa.int32(),), 5),
    _T.TYPE_FLOAT: ("fixed32", (pa.float32(),), 5),
    _T.TYPE_FIXED64: ("fixed64", (pa.uint64(),), 1),
    _T.TYPE_SFIXED64: ("fixed64", (pa.int64(),), 1),
    _T.TYPE_DOUBLE: ("fixed64", (pa.float64(),), 1),
    # binary: a string read with unvalidated_strings="binary"
    _T.TYPE_STRING: ("bytes", (pa.utf8(), pa.large_utf8(), pa.binary(), pa.large_binary()), 2),
    # utf8: a bytes field read as text (bytes_as_string): its UTF-8 bytes
    _T.TYPE_BYTES: ("bytes", (pa.binary(), pa.large_binary(), pa.utf8(), pa.large_utf8()), 2),
}
_BINARY = (pa.binary(), pa.large_binary())
# Timestamp / Duration bounds (google/protobuf/timestamp.proto, duration.proto).
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}

# A derivation: the parent array -> (derived array, bad mask or None). A reason: (array,
# logical index) -> text of the error.
Derive = Callable[[pa.Array], tuple[pa.Array, "np.ndarray | None"]]
Reason = Callable[[pa.Array, int], str]


@dataclass(eq=False)
class _Spec:
    """How to reach one Arrow array from the batch, and what to derive from it."""

    parent: int  # -1: a batch column
    access: str  # "column" | "field" | "values" | "given" (derived in Python per call)
    index: int = 0  # column / child index
    label: str = ""  # path piece for errors: a name (column, field) or "key" / "value"
    layout: str = "struct"  # the array's buffers (encoder.LAYOUT)
    wide: bool = False  # 64-bit offsets
    derive: Derive | None = None  # "given": the array from its parent's
    always: bool = False  # "given": derived even when the parent holds only nulls
    reason: Reason | None = None  # the text of E_BAD_VALUE at a slot of this array
    null_reason: str | None = None  # a required field: a null is this error
    # A oneof member under a `<oneof>_case` column: (that column's spec, the member names,
    # this member's index); the member is written where the case names it, and only there.
    case: tuple[int, tuple[str, ...], int] | None = None
    other: int = -1  # a second array the derivation reads, slot for slot
    # A given array that only says which slots of its parent are written (an Any's declared
    # type, where `value` is null): struct children and list values are its parent's.
    only_slots: bool = False
    align: int = -1  # a list / map whose elements this list's or map's must match


@dataclass
class _Tables:
    specs: list[_Spec] = field(default_factory=list)
    entries: list[EncodeEntry] = field(default_factory=list)
    nodes: list[EncodeNode] = field(default_factory=list)
    enum_sets: list[tuple[int, ...]] = field(default_factory=list)  # closed enums' numbers


class EncodingPlan:
    """The encoder tables of one message descriptor and one Arrow schema."""

    def __init__(self, descriptor: Descriptor, schema: pa.Schema) -> None:
        self.descriptor = descriptor
        self.schema = schema
        self._t = _Tables()
        # Batches without `_unknown` (keep_unknown=False) dropped the unknown fields at decode,
        # except inside levels cut at max_depth (kept as bytes): drop those too on the way back.
        self._discard_unknown = UNKNOWN_FIELD not in schema.names
        self._t.nodes.append(EncodeNode(first=0, n_entries=0))  # the root is node 0
        roots = [self._spec(-1, "column", f.type, i, f.name) for i, f in enumerate(schema)]
        self._node_into(0, descriptor, list(schema), roots, "")
        t = self._t
        # `_unknown_wkt` lists and maps, checked against their fields' per batch
        self._aligned = [i for i, spec in enumerate(t.specs) if spec.align >= 0]
        self._core = core.Plan(
            _matrix(EncodeSpec, [_spec_row(spec) for spec in t.specs]),
            _matrix(EncodeEntry, t.entries),
            _matrix(EncodeNode, t.nodes),
            t.enum_sets,
        )
        self._bytes_per_row = 64.0

    # -- compiling ----------------------------------------------------------------------

    def _spec(
        self, parent: int, access: str, t: pa.DataType | None, index: int = 0, label: str = "",
        **kw,
    ) -> int:
        if t is not None:
            kw.setdefault("layout", _layout(t))
            kw.setdefault("wide", _wide(t))
        self._t.specs.append(_Spec(parent, access, index, label, **kw))
        return len(self._t.specs) - 1

    def _node(self, message: Descriptor, fields: list[pa.Field], cols: list[int], where: str):
        node = len(self._t.nodes)
        self._t.nodes.append(EncodeNode(first=0, n_entries=0))
        self._node_into(node, message, fields, cols, where)
        return node

    def _node_into(
        self, node: int, message: Descriptor, fields: list[pa.Field], cols: list[int], where: str
    ) -> None:
        by_name = {f.name: (f, col) for f, col in zip(fields, cols, strict=True)}
        if len(by_name) != len(fields):
            names = [f.name for f in fields]
            twice = next(name for i, name in enumerate(names) if name in names[:i])
            raise _mismatch(where, twice, "appears twice in the batch")
        unknown = by_name.pop(UNKNOWN_FIELD, None)
        if unknown is not None and fields[-1].name != UNKNOWN_FIELD:
            raise _mismatch(where, UNKNOWN_FIELD, "must be the last field of its struct")
        expected = {fd.name for fd in message.fields}
        rests = self._rests(by_name.pop(UNKNOWN_WKT, None), message, where)
        # oneof_case: the case column of a oneof says which member is written
        cases: dict[str, int] = {}
        for name, oneof in case_columns(message).items():
            if name in by_name and name not in expected:
                arrow_field, col = by_name.pop(name)
                t = arrow_field.type
                if not (
                    pa.types.is_string(t)
                    or pa.types.is_large_string(t)
                    or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type))
                ):
                    raise _type_error(_join(where, name), "string or dictionary<int32, string>", t)
                cases[oneof.full_name] = col
        # any_types: an Any's declared types ([pkg.Click]), written where `value` is null
        any_types = {
            name: by_name.pop(name)
            for name in list(by_name)
            if message.full_name == ANY and name.startswith("[") and name.endswith("]")
        }
        # extensions=True: the columns of the extensions (the batch may leave any out)
        extensions = [f for f in extensions_of(message) if field_name(f) in by_name]
        expected |= {field_name(f) for f in extensions}
        extra = [name for name in by_name if name not in expected]
        if extra:
            raise _mismatch(where, extra[0], f"is not a field of {message.full_name}")
        missing = [fd.name for fd in message.fields if fd.name not in by_name]
        if missing:
            raise _mismatch(
                where, missing[0], f"field of {message.full_name} missing from the batch"
            )
        # A oneof of one member (a proto3 `optional`) cannot have two members set.
        oneofs: dict[str, int] = {}
        for oneof in message.oneofs:
            if len(oneof.fields) > 1:
                oneofs[oneof.full_name] = len(oneofs) + 1
        rows = []
        # upb writes the fields by number, then the extensions by number *descending*,
        # then the unknown fields (checked against the runtime in tests/test_extensions.py)
        ordered = sorted(message.fields, key=lambda f: f.number)
        ordered += sorted(extensions, key=lambda f: -f.number)
        for fd in ordered:
            arrow_field, col = by_name[field_name(fd)]
            path = _join(where, field_name(fd))
            member_of = fd.containing_oneof
            if member_of is not None and member_of.full_name in cases:
                members = tuple(f.name for f in member_of.fields)
                case = (cases[member_of.full_name], members, members.index(fd.name))
                # (a given array: the member where the case names it, null elsewhere)
                t = arrow_field.type
                col = self._spec(col, "given", t, case=case, always=True)
            rest = rests.get(field_name(fd))
            row = self._field(fd, arrow_field.type, col, message, path, rest)
            oneof = fd.containing_oneof
            rows.append(
                row._replace(oneof=oneofs.get(oneof.full_name, 0) if oneof is not None else 0)
            )
        rows += [
            self._any_value(message, name, *given, by_name, where)
            for name, given in any_types.items()
        ]
        if unknown is not None:
            arrow_field, col = unknown
            if arrow_field.type not in _BINARY:
                raise _mismatch(where, UNKNOWN_FIELD, f"must be binary, not {arrow_field.type}")
            declared = extensions_of(message)
            if declared and not extensions:
                # Extensions read as unknown fields (no extensions=True): upb writes them
                # before the unknown fields, by number descending, each once (merged,
                # packed as declared), so they are put in that form.
                numbers = frozenset(f.number for f in declared)
                col = self._spec(
                    col,
                    "given",
                    pa.binary(),
                    derive=_canonical_extensions(
                        message_factory.GetMessageClass(message), numbers
                    ),
                    reason=lambda a, k: _extension_problem(message, a[k].as_py()),
                )
            rows.append(_entry(0, "unknown", "singular", "explicit", col))
        first = len(self._t.entries)
        self._t.entries.extend(rows)
        self._t.nodes[node] = EncodeNode(first=first, n_entries=len(rows))

    def _any_value(
        self,
        any_message: Descriptor,
        name: str,
        arrow_field: pa.Field,
        col: int,
        by_name: dict[str, tuple[pa.Field, int]],
        where: str,
    ) -> EncodeEntry:
        """The entry writing an Any's value from its declared type's struct `name`
        ([pkg.Click]) where the raw `value` is null: the raw bytes win where present (a
        decoded row writes back the bytes it came with, as the runtime does)."""
        path = _join(where, name)
        try:
            message = any_message.file.pool.FindMessageTypeByName(name[1:-1])
        except KeyError:
            raise _mismatch(where, name, "is not a message of the schema (any_types)") from None
        t = arrow_field.type
        if not pa.types.is_struct(t):
            raise _type_error(path, f"the struct of {message.full_name}", t)
        given = self._spec(
            col, "given", t, derive=_unless_raw, other=by_name["value"][1], only_slots=True
        )
        fields = [t.field(i) for i in range(t.num_fields)]
        cols = [self._spec(col, "field", f.type, i, f.name) for i, f in enumerate(fields)]
        node = self._node(message, fields, cols, path)
        value = any_message.fields_by_name["value"]
        return _entry(value.number << 3 | 2, "message", "singular", "explicit", given, child=node)

    def _rests(
        self, given: tuple[pa.Field, int] | None, message: Descriptor, where: str
    ) -> dict[str, tuple[int, pa.DataType]]:
        """The children of a struct's `_unknown_wkt` by field name (spec, Arrow type)."""
        if given is None:
            return {}
        arrow_field, col = given
        t = arrow_field.type
        if not pa.types.is_struct(t):
            raise _mismatch(where, UNKNOWN_WKT, f"must be a struct, not {t}")
        names = {field_name(f) for f in fields_of(message, True)}
        out = {}
        for i in range(t.num_fields):
            name = t.field(i).name
            if name not in names:
                raise _mismatch(_join(where, UNKNOWN_WKT), name, f"is not a field of {message.full_name}")
            out[name] = (self._spec(col, "field", t.field(i).type, i, name), t.field(i).type)
        return out

    def _field(
        self,
        fd: FieldDescriptor,
        t: pa.DataType,
        col: int,
        container: Descriptor,
        path: str,
        given: tuple[int, pa.DataType] | None = None,
    ) -> EncodeEntry:
        """The entry of field `fd`; `given`: its `_unknown_wkt` child (spec, type)."""
        rest = None if given is None else self._rest_values(fd, col, *given, path)
        if is_map(fd):
            if not pa.types.is_map(t):
                raise _type_error(path, "a map", t)
            entry_fd = fd.message_type
            key_fd, value_fd = entry_fd.fields_by_number[1], entry_fd.fields_by_number[2]
            entries = self._spec(col, "values", None, layout="struct")
            key_col = self._spec(entries, "field", t.key_type, 0, "key")
            value_col = self._spec(entries, "field", t.item_type, 1, "value")
            rows = [
                self._value(key_fd, t.key_type, key_col, f"{path}[].key", "always"),
                self._value(value_fd, t.item_type, value_col, f"{path}[].value", "always", rest),
            ]
            node = len(self._t.nodes)
            self._t.nodes.append(EncodeNode(first=len(self._t.entries), n_entries=2))
            self._t.entries.extend(rows)
            row = _entry(fd.number << 3 | 2, "message", "repeated", "explicit", col, entries, node)
            return row._replace(aux=core.MAP_KEYS[_key_order(key_fd)])
        if is_repeated(fd):
            if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
                raise _type_error(path, "a list", t)
            values = self._spec(col, "values", t.value_type)
            row = self._value(fd, t.value_type, values, f"{path}[]", "explicit", rest)
            if row.kind in (core.KIND["message"], core.KIND["group"], core.KIND["raw_group"]):
                shape = "repeated"
            elif is_packed(fd):
                shape = "packed"
                row = row._replace(tag=fd.number << 3 | 2)
            else:
                shape = "repeated"
            # the list; its elements (maybe derived from values)
            return row._replace(shape=core.SHAPE[shape], col=col, elem=row.col)
        if fd.is_required:
            # The runtime will not serialize a message without it (SerializeToString raises).
            row = self._value(fd, t, col, path, "always", rest)
            self._t.specs[row.col].null_reason = f"required field {fd.full_name} is null"
            return row
        presence = "explicit" if fd.has_presence else "implicit"
        return self._value(fd, t, col, path, presence, rest)

    def _rest_values(
        self, fd: FieldDescriptor, col: int, rest: int, rt: pa.DataType, path: str
    ) -> int:
        """The spec of `_unknown_wkt`'s values for field `fd` (its child `rest`, of type
        `rt`), slot for slot with the field's values (a list's or a map's: their elements
        must match, checked per batch)."""
        if is_map(fd) or is_repeated(fd):
            shape = pa.types.is_map if is_map(fd) else pa.types.is_list
            if not shape(rt):
                raise _type_error(f"{UNKNOWN_WKT}.{path}", "a map" if is_map(fd) else "a list", rt)
            self._t.specs[rest].align = col
            if is_map(fd):
                entries = self._spec(rest, "values", None, layout="struct")
                values = self._spec(entries, "field", rt.item_type, 1, "value")
            else:
                values = self._spec(rest, "values", rt.value_type)
            return values
        if rt not in _BINARY:
            raise _type_error(f"{UNKNOWN_WKT}.{path}", "binary", rt)
        return rest

    def _value(
        self,
        fd: FieldDescriptor,
        t: pa.DataType,
        col: int,
        path: str,
        presence: str,
        rest: int | None = None,
    ) -> EncodeEntry:
        """The entry of one value of `fd` (a singular field, an element, a key or a value);
        `rest`: the spec of what a well-known type's value cannot hold, slot for slot."""
        number = fd.number
        if not is_message(fd):
            kind, accepted, wire = _SCALARS[fd.type]
            if needs_utf8_check(fd):  # binary could write what the runtime must reject
                accepted = tuple(a for a in accepted if a not in _BINARY)
            check, aux = "none", 0
            if fd.type == _T.TYPE_ENUM and pa.types.is_dictionary(t):
                col = self._enum_names(fd, t, col, path)
            elif t not in accepted:
                raise _type_error(path, " or ".join(map(str, accepted)), t)
            elif fd.type == _T.TYPE_ENUM and fd.enum_type.is_closed:
                # The runtime cannot hold an undeclared value of a closed enum (decoding
                # keeps it among the unknown fields): it has no field to write it from.
                name = fd.enum_type.full_name
                check, aux = "enum", self._enum_set(fd)
                self._t.specs[col].reason = (
                    lambda a, k: f"{a[k].as_py()} is not a value of closed enum {name}"
                )
            elif needs_utf8_check(fd):
                check = "utf8"
                self._t.specs[col].reason = lambda a, k: (
                    "invalid UTF-8 in a string field (the schema requires valid UTF-8): "
                    f"{a.cast(pa.binary())[k].as_py()!r}"
                )
            row = _entry(number << 3 | wire, kind, "singular", presence, col)
            return row._replace(check=core.CHECK[check], aux=aux)
        group = fd.type == _T.TYPE_GROUP  # proto2 groups and editions DELIMITED
        name = fd.message_type.full_name
        # A struct is the plain message whatever its type (well_known_types=False), and
        # binary the bytes of a cut recursive type (Struct and Value are recursive too).
        wkt = WELL_KNOWN.get(name)
        if pa.types.is_struct(t) or (t in _BINARY and wkt != "wrapper"):
            wkt = None
        tag = number << 3 | (3 if group else 2)
        end = number << 3 | 4
        if wkt == "json":
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                raise _type_error(path, "string (JSON text)", t)
            # a Value with no kind decodes as null: inside a list or a map it is one again
            empty = presence == "always" or path.endswith("[]")
            col = self._spec(
                col,
                "given",
                pa.binary(),
                derive=_json_bytes(name, null_is_empty=empty),
                # a null is an empty message there, not nothing; and a null text may still
                # have its bytes kept (a Value with no kind)
                always=empty or rest is not None,
                reason=lambda a, k: f"not valid JSON for {name}: {a[k].as_py()!r}",
                other=-1 if rest is None else rest,
            )
            return _entry(
                tag, "raw_group" if group else "bytes", "singular", presence, col, end=end
            )
        if t in _BINARY and wkt is None:
            # A recursive type cut at max_depth: its bytes as they came, which need not be
            # canonical (map order, split messages), so parsed and serialized again.
            col = self._spec(
                col,
                "given",
                pa.binary(),
                derive=_canonical_bytes(
                    message_factory.GetMessageClass(fd.message_type), self._discard_unknown
                ),
                reason=lambda a, k: f"not a serialized {name}: {a[k].as_py()!r}",
            )
            return _entry(
                tag, "raw_group" if group else "bytes", "singular", presence, col, end=end
            )
        kind = "group" if group else "message"
        check, aux, scale = "none", 0, 0
        # (the unknown fields inside the value, after its fields, as the runtime writes them)
        inside = [] if rest is None else [_entry(0, "unknown", "singular", "explicit", rest)]
        if wkt in ("timestamp", "duration"):
            want = pa.types.is_timestamp if wkt == "timestamp" else pa.types.is_duration
            if not want(t):
                raise _type_error(path, wkt, t)
            node = self._temporal(fd.message_type, wkt, t, col, inside)
            # the value's range is checked where the message is written
            check, aux, scale = wkt, 8, _PER_SECOND[t.unit]
            self._t.specs[col].reason = functools.partial(_range_reason, wkt)
        elif (wkt == "date" and pa.types.is_date32(t)) or (
            wkt == "timeofday" and (pa.types.is_time64(t) or pa.types.is_time32(t))
        ):
            node = self._temporal(fd.message_type, wkt, t, col, inside)
        elif wkt == "wrapper":
            value_fd = fd.message_type.fields_by_name["value"]
            rows = [self._value(value_fd, t, col, path, "implicit"), *inside]
            node = self._wrap(fd.message_type, rows)
        elif wkt == "fieldmask":
            paths_fd = fd.message_type.fields_by_name["paths"]
            rows = [self._field(paths_fd, t, self._bound(col), fd.message_type, path), *inside]
            node = self._wrap(fd.message_type, rows)
        elif pa.types.is_struct(t):
            fields = [t.field(i) for i in range(t.num_fields)]
            source = self._bound(col)
            cols = [self._spec(source, "field", f.type, i, f.name) for i, f in enumerate(fields)]
            node = self._node(fd.message_type, fields, cols, path)
        else:
            raise _type_error(path, f"the struct of {name}", t)
        row = _entry(tag, kind, "singular", presence, col, child=node, end=end)
        return row._replace(check=core.CHECK[check], aux=aux, scale=scale)

    def _bound(self, col: int) -> int:
        """The batch's own array under a oneof member's case given (its struct children and
        list values are bound from the batch: the given array only says which slots are
        written), else `col` itself."""
        spec = self._t.specs[col]
        return spec.parent if spec.case is not None or spec.only_slots else col

    def _wrap(self, message: Descriptor, rows: list[EncodeEntry]) -> int:
        node = len(self._t.nodes)
        self._t.nodes.append(EncodeNode(first=len(self._t.entries), n_entries=len(rows)))
        self._t.entries.extend(rows)
        return node

    def _temporal(
        self, message: Descriptor, wkt: str, t: pa.DataType, col: int, inside: list[EncodeEntry]
    ) -> int:
        """A node whose fields are parts of the temporal column's slot, split by the core;
        `inside`: the unknown fields kept inside the value (`_unknown_wkt`), written after."""
        parts: dict[str, str]
        if wkt == "timestamp":
            parts = {"seconds": "seconds", "nanos": "nanos"}
        elif wkt == "duration":
            parts = {"seconds": "duration_seconds", "nanos": "duration_nanos"}
        elif wkt == "date":
            parts = {"year": "year", "month": "month", "day": "day"}
        else:
            parts = {"hours": "hours", "minutes": "minutes", "seconds": "time_seconds",
                     "nanos": "time_nanos"}  # fmt: skip
        width = t.bit_width // 8
        scale = _PER_SECOND[t.unit] if hasattr(t, "unit") else 1
        rows = []
        for fd in sorted(message.fields, key=lambda f: f.number):
            _, _, wire = _SCALARS[fd.type]
            row = _entry(fd.number << 3 | wire, "time", "singular", "implicit", col)
            rows.append(row._replace(aux=core.TIME_PART[parts[fd.name]] | width << 8, scale=scale))
        return self._wrap(message, rows + inside)

    def _enum_set(self, fd: FieldDescriptor) -> int:
        """The index of a closed enum's declared numbers among the plan's enum sets."""
        numbers = tuple(sorted({v.number for v in fd.enum_type.values}))
        if numbers not in self._t.enum_sets:
            self._t.enum_sets.append(numbers)
        return self._t.enum_sets.index(numbers)

    def _enum_names(self, fd: FieldDescriptor, t: pa.DataType, col: int, path: str) -> int:
        if not (pa.types.is_integer(t.index_type) and pa.types.is_string(t.value_type)):
            raise _type_error(path, "dictionary<int32, string> of enum names", t)
        numbers = {v.name: v.number for v in fd.enum_type.values}
        name = fd.enum_type.full_name
        closed = fd.enum_type.is_closed  # no undeclared numbers (see _value)
        return self._spec(
            col,
            "given",
            pa.int32(),
            derive=functools.partial(_enum_numbers, numbers, closed),
            reason=lambda a, k: f"{a[k].as_py()!r} is not a value of enum {name}",
        )

    # -- encoding -----------------------------------------------------------------------

    def encode(self, batch: pa.RecordBatch) -> pa.Array:
        n = batch.num_rows
        arrays: dict[int, pa.Array] = {}  # the pyarrow arrays Python needed, by spec
        keep: list[object] = []  # everything given whose address the core reads

        def derive(i: int, present: bool) -> EncodeColumn | None:
            spec = self._t.specs[i]
            if not present and not spec.always:
                return None  # no value to derive: the core reads the parent's validity
            parent = self._array(batch, spec.parent, arrays)
            if spec.case is not None:
                array, bad = self._only_case(batch, arrays, spec.case, parent), None
            elif spec.other >= 0:
                other = self._array(batch, spec.other, arrays)
                array, bad = spec.derive(parent, other)  # type: ignore[misc, call-arg]
            else:
                array, bad = spec.derive(parent)  # type: ignore[misc]
            arrays[i] = array
            return _address(array, bad, keep)

        for i in self._aligned:
            self._check_aligned(batch, arrays, i)
        capacity = int(self._bytes_per_row * n * 1.1) + 4096
        status, err_col, err_index, data, start, offsets, wide = self._core.encode(
            batch, n, derive, capacity, accelerator.encode_export()
        )
        keep.clear()  # the core has read them
        if status:
            row, where = self._locate(batch, arrays, err_col, err_index)
            reason = core.STATUS_TEXT.get(status, f"status {status}")
            spec = self._t.specs[err_col]
            if status == 2 and spec.null_reason is not None:
                reason = spec.null_reason
            elif status == 3 and spec.reason is not None:
                # a given array's reason speaks of the value it was derived from
                source = err_col if spec.access != "given" else spec.parent
                reason = spec.reason(self._array(batch, source, arrays), err_index)
            raise EncodeError(reason, row=row, path=where)
        data_buf = pa.py_buffer(data).slice(start)
        self._bytes_per_row = max(len(data_buf) / max(n, 1), 1.0)
        binary = pa.large_binary() if wide else pa.binary()
        return pa.Array.from_buffers(binary, n, [None, pa.py_buffer(offsets), data_buf])

    def _check_aligned(
        self, batch: pa.RecordBatch, arrays: dict[int, pa.Array], col: int
    ) -> None:
        """An `_unknown_wkt` list or map has as many elements as its field in every row."""
        # (the same offsets, not only the same lengths: the core reads both lists' elements
        # at the same positions)
        mine = _element_positions(self._array(batch, col, arrays))
        other = _element_positions(self._array(batch, self._t.specs[col].align, arrays))
        if np.array_equal(mine, other):
            return
        differ = (np.diff(mine) != np.diff(other)) | (mine[:-1] != other[:-1])
        row, where = self._locate(batch, arrays, col, int(np.flatnonzero(differ)[0]))
        raise EncodeError(
            "another number of elements than the field it belongs to", row=row, path=where
        )

    def _array(self, batch: pa.RecordBatch, i: int, arrays: dict[int, pa.Array]) -> pa.Array:
        """The pyarrow array of spec i (struct children with their parent's offset applied,
        as the core reads them): built only for given specs and errors."""
        found = arrays.get(i)
        if found is None:
            spec = self._t.specs[i]
            if spec.access == "column":
                found = batch.column(spec.index)
            elif spec.access == "field":
                found = self._array(batch, spec.parent, arrays).field(spec.index)
            elif spec.access == "values":
                found = self._array(batch, spec.parent, arrays).values
            else:  # given arrays are made before the core runs
                raise AssertionError(f"given spec {i} was not derived")
            arrays[i] = found
        return found

    def _only_case(
        self,
        batch: pa.RecordBatch,
        arrays: dict[int, pa.Array],
        case: tuple[int, tuple[str, ...], int],
        member: pa.Array,
    ) -> pa.Array:
        """Member k of a oneof where its case column names it; an EncodeError on the case
        column where it names no member, or this one while it is null."""
        at, names, k = case
        case_array = self._array(batch, at, arrays)
        array, bad = _only_case(member, case_array, names, k)
        if bad is not None:
            # (the slots of this batch's rows: a list's values may hold more)
            lo, hi = self._reachable(batch, arrays, at)
            slots = np.flatnonzero(bad[lo:hi])
            if len(slots):
                slot = lo + int(slots[0])
                row, where = self._locate(batch, arrays, at, slot)
                raise EncodeError(_case_reason(case_array, names, k, slot), row=row, path=where)
        return array

    def _reachable(
        self, batch: pa.RecordBatch, arrays: dict[int, pa.Array], col: int
    ) -> tuple[int, int]:
        """The logical slots of array `col` that the batch's rows reach: a list's values
        array holds the elements of rows outside a slice too."""
        spec = self._t.specs[col]
        if spec.access == "column":
            return 0, len(self._array(batch, col, arrays))
        lo, hi = self._reachable(batch, arrays, spec.parent)
        if spec.access == "values":
            offsets = _offsets(self._array(batch, spec.parent, arrays))
            return int(offsets[lo]), int(offsets[hi])
        return lo, hi

    def _locate(
        self, batch: pa.RecordBatch, arrays: dict[int, pa.Array], col: int, k: int
    ) -> tuple[int, str]:
        """(row, column path) of logical slot k of array `col`: ``points[3].x``."""
        parts: list[str] = []
        while True:
            spec = self._t.specs[col]
            if spec.access == "column":
                parts.append(spec.label)
                return k, "".join(reversed(parts))
            if spec.access == "field":
                parts.append(spec.label if spec.label.startswith("[") else f".{spec.label}")
            elif spec.access == "values":
                offsets = _offsets(self._array(batch, spec.parent, arrays))
                j = int(np.searchsorted(offsets, k, side="right")) - 1
                parts.append(f"[{k - int(offsets[j])}]")
                k = j
            col = spec.parent


def _entry(
    tag: int,
    kind: str,
    shape: str,
    presence: str,
    col: int,
    elem: int = -1,
    child: int = -1,
    end: int = 0,
) -> EncodeEntry:
    return EncodeEntry(
        tag=tag,
        end_tag=end,
        kind=core.KIND[kind],
        shape=core.SHAPE[shape],
        presence=core.PRESENCE[presence],
        col=col,
        elem=elem,
        child=child,
        oneof=0,
        check=core.CHECK["none"],
        aux=0,
        scale=0,
    )


def _matrix(record: type, rows: list) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(-1, len(record._fields))  # type: ignore[attr-defined]


def _spec_row(spec: _Spec) -> EncodeSpec:
    return EncodeSpec(
        parent=spec.parent,
        access=core.ACCESS[spec.access],
        child=spec.index,
        layout=core.LAYOUT[spec.layout],
        wide=int(spec.wide),
    )


def _layout(t: pa.DataType) -> str:
    """The buffers of an array of type t, as the core binds them."""
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_boolean(t):
        return "bool"
    if (
        pa.types.is_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_large_string(t)
    ):
        return "binary"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        return "list"
    if pa.types.is_dictionary(t):
        return "dictionary"
    return "fixed"


def _wide(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_large_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_list(t)
    )


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where and not name.startswith("[") else f"{where}{name}"


def _mismatch(where: str, name: str, problem: str) -> EncodeError:
    return EncodeError(f"schema mismatch: {problem}", row=None, path=_join(where, name))


def _type_error(path: str, expected: str, got: pa.DataType) -> EncodeError:
    return EncodeError(f"schema mismatch: expected {expected}, got {got}", row=None, path=path)


# -- buffers ----------------------------------------------------------------------------


def _address(array: pa.Array, bad: np.ndarray | None, keep: list[object]) -> EncodeColumn:
    """The column of a given array (a number or binary array made in Python) and its mask
    of slots that cannot be encoded."""
    keep.append(array)
    t = array.type
    buffers = array.buffers()
    validity = buffers[0].address if buffers[0] is not None and array.null_count else 0
    values = offsets = 0
    if _layout(t) == "binary":
        offsets = buffers[1].address
        values = buffers[2].address if buffers[2] is not None else 0
    else:
        values = buffers[1].address if buffers[1] is not None else 0
    bad_address = 0
    if bad is not None:
        bad = np.ascontiguousarray(bad, dtype=np.uint8)
        keep.append(bad)
        bad_address = bad.ctypes.data
    return EncodeColumn(
        validity=validity,
        offset=array.offset,
        values=values,
        offsets=offsets,
        wide=int(_wide(t)),
        bad=bad_address,
    )


def _element_positions(array: pa.Array) -> np.ndarray:
    """Where each row's elements of a list or map start and end in its values' buffers (the
    values' own offset applied): what the core reads."""
    return _offsets(array) + array.values.offset


def _offsets(array: pa.Array) -> np.ndarray:
    """The offsets of a list / map / binary array, its own offset applied."""
    large = pa.types.is_large_list(array.type) or pa.types.is_large_binary(array.type)
    dtype = np.int64 if large else np.int32
    raw = np.frombuffer(array.buffers()[1], dtype=dtype)
    return raw[array.offset : array.offset + len(array) + 1].astype(np.int64)


def _int64_view(array: pa.Array) -> np.ndarray:
    """The 64-bit values of a temporal array, nulls as whatever their slots hold."""
    width = array.type.bit_width // 8
    dtype = np.int64 if width == 8 else np.int32
    raw = np.frombuffer(array.buffers()[1], dtype=dtype)
    return raw[array.offset : array.offset + len(array)].astype(np.int64)


# -- given arrays -----------------------------------------------------------------------


def _range_reason(wkt: str, array: pa.Array, k: int) -> str:
    value = f"{int(_int64_view(array)[k])} {array.type.unit}"  # may not fit a datetime
    if wkt == "timestamp":
        return (
            f"timestamp {value} since the epoch is outside google.protobuf.Timestamp's range "
            "(0001-01-01 .. 9999-12-31)"
        )
    return f"duration {value} is outside google.protobuf.Duration's range (+-10,000 years)"


def _enum_numbers(
    numbers: dict[str, int], closed: bool, array: pa.Array
) -> tuple[pa.Array, np.ndarray | None]:
    """dictionary<int, string> of enum names -> int32 numbers (undeclared: decimal text,
    except for a closed enum)."""
    names = array.dictionary.to_pylist()
    table = np.zeros(len(names) + 1, dtype=np.int32)
    bad = np.zeros(len(names) + 1, dtype=np.uint8)
    for i, name in enumerate(names):
        number = numbers.get(name) if name is not None else None
        if number is None and name is not None and not closed:
            try:
                number = int(name) if name.lstrip("-").isdigit() else None
            except ValueError:
                number = None
            if number is not None and not -(2**31) <= number < 2**31:
                number = None
        if number is None:
            bad[i] = 1
        else:
            table[i] = number
    indices = array.indices.to_numpy(zero_copy_only=False)
    valid = np.asarray(array.is_valid())
    idx = np.where(valid, indices, len(names)).astype(np.int64)
    out = pa.array(table[idx], type=pa.int32(), mask=~valid)
    flags = bad[idx] & valid
    return out, (flags if flags.any() else None)


def _case_indices(case: pa.Array, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(the member each slot of a case column names, -1 for none; slots naming no member)."""
    valid = np.asarray(case.is_valid())
    members = pa.array(names, pa.utf8())
    if pa.types.is_dictionary(case.type):
        # by the dictionary's values (the indices of its null slots need not be in range)
        per_value = pc.index_in(case.dictionary.cast(pa.utf8()), value_set=members)
        lookup = np.append(per_value.fill_null(-2).to_numpy(zero_copy_only=False), -1)
        at = case.indices.to_numpy(zero_copy_only=False)
        index = lookup[np.where(valid, at, len(lookup) - 1).astype(np.int64)].astype(np.int32)
    else:
        found = pc.index_in(case, value_set=members)
        index = found.fill_null(-2).to_numpy(zero_copy_only=False).astype(np.int32)
        index[~valid] = -1
    unknown = index == -2
    index[unknown] = -1
    return index, unknown


def _only_case(
    member: pa.Array, case: pa.Array, names: tuple[str, ...], k: int
) -> tuple[pa.Array, np.ndarray | None]:
    """Member k of a oneof where its case column names it, null elsewhere; and the slots
    where the case names no member or names this one while it is null (_case_reason)."""
    index, unknown = _case_indices(case, names)
    chosen = index == k
    valid = np.asarray(member.is_valid())
    bad = unknown | (chosen & ~valid)
    if np.array_equal(chosen, valid):
        out = member  # (as decoded: the case is the member that is set)
    else:
        out = pc.if_else(pa.array(chosen), member, pa.nulls(len(member), member.type))
    return out, (bad if bad.any() else None)


def _unless_raw(struct: pa.Array, raw: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    """An Any's declared-type struct where its raw `value` is null, null elsewhere."""
    if raw.null_count == 0:
        return pa.nulls(len(struct), struct.type), None
    written = pc.and_(struct.is_valid(), raw.is_null())
    return pc.if_else(written, struct, pa.nulls(len(struct), struct.type)), None


def _case_reason(case: pa.Array, names: tuple[str, ...], k: int, slot: int) -> str:
    value = case[slot].as_py()
    if value not in names:
        return f"{value!r} is not a member of the oneof ({', '.join(names)})"
    return f"the case names {names[k]!r}, which is null"


def _json_bytes(message: str, null_is_empty: bool) -> Callable[..., tuple[pa.Array, np.ndarray | None]]:
    """JSON text -> the serialized Struct / Value / ListValue, one Python call per value.

    A null list element is an empty message (decode reads a Value with no kind as null).
    With `kept` (`_unknown_wkt`, keep_unknown), a value whose bytes were kept is written
    from them while its text is still the one they render to.
    """
    cls = jsontext.CLASSES[message]

    def derive(array: pa.Array, kept: pa.Array | None = None) -> tuple[pa.Array, np.ndarray | None]:
        out: list[bytes | None] = []
        bad = np.zeros(len(array), dtype=np.uint8)
        rests = kept.to_pylist() if kept is not None and kept.null_count < len(kept) else None
        for i, text in enumerate(array.to_pylist()):
            if rests is not None and rests[i] is not None:
                held = _kept_json(cls, rests[i], text)
                if held is not None:
                    out.append(held)
                    continue
            if text is None:
                out.append(b"" if null_is_empty else None)
                continue
            try:
                out.append(jsontext.to_bytes(cls, text))
            except ValueError:  # (json_format.ParseError too)
                out.append(b"")
                bad[i] = 1
        return pa.array(out, pa.binary()), (bad if bad.any() else None)

    return derive


def _kept_json(cls: type[Message], data: bytes, text: str | None) -> bytes | None:
    """The kept bytes of a JSON value, re-serialized, if `text` is what they render to
    (the value was not edited); else None."""
    try:
        held = cls.FromString(data)
        same = jsontext.render(held) == text
    except (ProtobufDecodeError, ValueError, RecursionError):
        return None
    return held.SerializeToString(deterministic=True) if same else None


def _canonical_bytes(cls: type[Message], discard_unknown: bool) -> Derive:
    """Serialized messages -> the runtime's deterministic serialization of each (Python),
    without their unknown fields (at any depth) when `discard_unknown`."""

    def derive(array: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
        out: list[bytes | None] = []
        bad = np.zeros(len(array), dtype=np.uint8)
        for i, data in enumerate(array.to_pylist()):
            if data is None:
                out.append(None)
                continue
            try:
                message = cls.FromString(data)
                if discard_unknown:
                    message.DiscardUnknownFields()
                out.append(message.SerializePartialToString(deterministic=True))
            except ProtobufDecodeError:
                out.append(b"")
                bad[i] = 1
        return pa.array(out, pa.binary()), (bad if bad.any() else None)

    return derive


def _varint_at(data: bytes, pos: int) -> tuple[int, int] | None:
    """(the varint at `pos`, the position after it), None when cut or too long."""
    value = shift = 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos
    return None


def _field_numbers(data: bytes) -> set[int] | None:
    """The field numbers of the records of an unknown-fields value (group members too);
    None if it does not read as records."""
    numbers = set()
    pos = 0
    while pos < len(data):
        read = _varint_at(data, pos)
        if read is None:
            return None
        key, pos = read
        numbers.add(key >> 3)
        wire = key & 7
        if wire in (0, 2):
            read = _varint_at(data, pos)
            if read is None:
                return None
            value, pos = read
            pos += value if wire == 2 else 0
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        elif wire not in (3, 4):  # (a group's records are read as records)
            return None
    return numbers if pos == len(data) else None


def _canonical_extensions(cls: type[Message], numbers: frozenset[int]) -> Derive:
    """A message's unknown-fields values, those holding an extension the schema declares
    put in the runtime's form: parsed as the message (the extensions become extensions,
    the rest stays unknown fields) and serialized deterministically. A value whose
    extensions leave a required field unset is bad: the runtime refuses the message."""

    def derive(array: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
        if not len(array) or array.null_count == len(array):
            return array, None
        values = array.to_pylist()
        bad = None
        changed = False
        for i, data in enumerate(values):
            if not data:
                continue
            held = _field_numbers(data)
            if held is None or not held & numbers:
                continue
            try:
                message = cls.FromString(data)
            except ProtobufDecodeError:
                continue  # (not the decoder's: left as it is)
            if not message.IsInitialized():
                # (not serialized: upb 6 crashes serializing such a message when it has a
                # map field, and in FindInitializationErrors too; docs/fuzzing.md)
                if bad is None:
                    bad = np.zeros(len(values), dtype=np.uint8)
                bad[i] = 1
                continue
            values[i] = message.SerializeToString(deterministic=True)
            changed = True
        out = pa.array(values, pa.binary()) if changed else array
        return out, bad

    return derive


def _extension_problem(message: Descriptor, data: bytes) -> str:
    held = message_factory.GetMessageClass(message).FromString(data)
    names = [
        field_name(fd)
        for fd, value in held.ListFields()
        if fd.is_extension
        and fd.message_type is not None
        and not all(v.IsInitialized() for v in (value if fd.is_repeated else [value]))
    ]
    return (
        f"a required field is null in extension {', '.join(names) or '?'} (kept among the "
        "unknown fields): the runtime cannot serialize the message"
    )


# -- map entry order --------------------------------------------------------------------


def _key_order(key_fd: FieldDescriptor) -> str:
    """How a map's keys sort on the wire (encoder.MAP_KEYS; the core's ``before`` says how,
    checked against the runtime in tests/test_encode.py): integers as unsigned numbers of
    their width, bools, strings bytewise."""
    if key_fd.type == _T.TYPE_STRING:
        return "string"
    if key_fd.type == _T.TYPE_BOOL:
        return "bool"
    if key_fd.cpp_type in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_UINT32):
        return "uint32"
    return "uint64"
