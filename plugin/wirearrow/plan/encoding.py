"""Arrow rows -> protobuf bytes: the cold half of ``Transcoder.encode``.

:class:`EncodingPlan` walks a message descriptor and the Arrow schema of a whole-message
batch once, checking that every column has the type nested mode gives that field, and
compiles flat tables for ``wirearrow._core.encoder``: one *node* per message shape, one
*entry* per field (field number order, so output is in field-number order), one *column
spec* per Arrow array the encoder reads. Per batch, :meth:`EncodingPlan.encode` resolves
each spec to an array, derives the helper arrays the wire needs (Timestamp seconds and
nanos, Date parts, enum numbers from names, JSON texts re-serialized, map entries in the
runtime's deterministic order) with vectorised pyarrow / numpy, and hands the buffer
addresses to the core, which encodes the whole batch with the GIL released.

Output matches ``SerializeToString(deterministic=True)`` of the protobuf runtime (upb):
fields by number, unknown fields (``_unknown``) last, map entries as upb orders them
(see :func:`_map_order`), both key and value written in every entry.
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import json_format, message_factory, struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import Message

from wirearrow._core import encoder as core
from wirearrow._core.layout import EncodeColumn, EncodeEntry, EncodeNode, position
from wirearrow.errors import EncodeError
from wirearrow.plan.types import (
    WELL_KNOWN,
    is_map,
    is_message,
    is_packed,
    is_repeated,
    needs_utf8_check,
)

__all__ = ["UNKNOWN_FIELD", "EncodingPlan"]

UNKNOWN_FIELD = "_unknown"

_T = FieldDescriptor
# Columns of the encoder's cols matrix set after _address (see layout.EncodeColumn).
_BAD = position(EncodeColumn, "bad")
_PERM = position(EncodeColumn, "perm")

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
    _T.TYPE_BYTES: ("bytes", (pa.binary(), pa.large_binary()), 2),
}
_BINARY = (pa.binary(), pa.large_binary())
_JSON = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}
_JSON_CLASSES = {
    "google.protobuf.Struct": struct_pb2.Struct,
    "google.protobuf.Value": struct_pb2.Value,
    "google.protobuf.ListValue": struct_pb2.ListValue,
}
# Timestamp / Duration bounds (google/protobuf/timestamp.proto, duration.proto).
_TS_MIN, _TS_MAX = -62_135_596_800, 253_402_300_799  # 0001-01-01 .. 9999-12-31T23:59:59
_DUR_MAX = 315_576_000_000  # +-10,000 years
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}

# A derivation: the parent array -> (derived array, bad mask or None). A check: the array
# -> bad mask or None. A reason: (array, logical index) -> text of the error.
Derive = Callable[[pa.Array], tuple[pa.Array, "np.ndarray | None"]]
Check = Callable[[pa.Array], "np.ndarray | None"]
Reason = Callable[[pa.Array, int], str]


@dataclass(eq=False)
class _Spec:
    """How to reach one Arrow array from the batch, and what to derive or check on it."""

    parent: int  # -1: a batch column
    access: str  # "column" | "field" | "values" | "derived"
    index: int = 0  # column / child index
    label: str = ""  # path piece for errors: a name (column, field) or "key" / "value"
    derive: Derive | None = None
    check: Check | None = None
    reason: Reason | None = None
    null_reason: str | None = None  # a required field: a null is this error
    map_keys: str | None = None  # a map column: how its keys sort ("signed", "string", ...)


@dataclass
class _Tables:
    specs: list[_Spec] = field(default_factory=list)
    entries: list[EncodeEntry] = field(default_factory=list)
    nodes: list[EncodeNode] = field(default_factory=list)


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
        roots = [self._spec(-1, "column", i, f.name) for i, f in enumerate(schema)]
        self._node_into(0, descriptor, list(schema), roots, "")
        t = self._t
        self._entries = np.array(t.entries, dtype=np.int64).reshape(-1, len(EncodeEntry._fields))
        self._nodes = np.array(t.nodes, dtype=np.int64).reshape(-1, len(EncodeNode._fields))
        self._bytes_per_row = 64.0

    # -- compiling ----------------------------------------------------------------------

    def _spec(self, parent: int, access: str, index: int = 0, label: str = "", **kw) -> int:
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
        for fd in sorted(message.fields, key=lambda f: f.number):
            arrow_field, col = by_name[fd.name]
            path = _join(where, fd.name)
            row = self._field(fd, arrow_field.type, col, message, path)
            oneof = fd.containing_oneof
            rows.append(
                row._replace(oneof=oneofs.get(oneof.full_name, 0) if oneof is not None else 0)
            )
        if unknown is not None:
            arrow_field, col = unknown
            if arrow_field.type not in _BINARY:
                raise _mismatch(where, UNKNOWN_FIELD, f"must be binary, not {arrow_field.type}")
            rows.append(_entry(0, "unknown", "singular", "explicit", col))
        first = len(self._t.entries)
        self._t.entries.extend(rows)
        self._t.nodes[node] = EncodeNode(first=first, n_entries=len(rows))

    def _field(
        self, fd: FieldDescriptor, t: pa.DataType, col: int, container: Descriptor, path: str
    ) -> EncodeEntry:
        if is_map(fd):
            if not pa.types.is_map(t):
                raise _type_error(path, "a map", t)
            entry_fd = fd.message_type
            key_fd, value_fd = entry_fd.fields_by_number[1], entry_fd.fields_by_number[2]
            self._t.specs[col].map_keys = _key_order(key_fd)
            entries = self._spec(col, "values")
            key_col = self._spec(entries, "field", 0, "key")
            value_col = self._spec(entries, "field", 1, "value")
            rows = [
                self._value(key_fd, t.key_type, key_col, f"{path}[].key", "always"),
                self._value(value_fd, t.item_type, value_col, f"{path}[].value", "always"),
            ]
            node = len(self._t.nodes)
            self._t.nodes.append(EncodeNode(first=len(self._t.entries), n_entries=2))
            self._t.entries.extend(rows)
            return _entry(fd.number << 3 | 2, "message", "repeated", "explicit", col, entries, node)
        if is_repeated(fd):
            if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
                raise _type_error(path, "a list", t)
            values = self._spec(col, "values")
            row = self._value(fd, t.value_type, values, f"{path}[]", "explicit")
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
            row = self._value(fd, t, col, path, "always")
            self._t.specs[row.col].null_reason = f"required field {fd.full_name} is null"
            return row
        presence = "explicit" if fd.has_presence else "implicit"
        return self._value(fd, t, col, path, presence)

    def _value(
        self, fd: FieldDescriptor, t: pa.DataType, col: int, path: str, presence: str
    ) -> EncodeEntry:
        """The entry of one value of `fd` (a singular field, an element, a key or a value)."""
        number = fd.number
        if not is_message(fd):
            kind, accepted, wire = _SCALARS[fd.type]
            if needs_utf8_check(fd):  # binary could write what the runtime must reject
                accepted = tuple(a for a in accepted if a not in _BINARY)
            if fd.type == _T.TYPE_ENUM and pa.types.is_dictionary(t):
                col = self._enum_names(fd, t, col, path)
            elif t not in accepted:
                raise _type_error(path, " or ".join(map(str, accepted)), t)
            elif fd.type == _T.TYPE_ENUM and fd.enum_type.is_closed:
                # The runtime cannot hold an undeclared value of a closed enum (decoding
                # keeps it among the unknown fields): it has no field to write it from.
                name = fd.enum_type.full_name
                spec = self._t.specs[col]
                spec.check = functools.partial(
                    _undeclared, _Declared({v.number for v in fd.enum_type.values})
                )
                spec.reason = lambda a, k: f"{a[k].as_py()} is not a value of closed enum {name}"
            elif needs_utf8_check(fd):
                spec = self._t.specs[col]
                spec.check = _invalid_utf8
                spec.reason = lambda a, k: (
                    "invalid UTF-8 in a string field (the schema requires valid UTF-8): "
                    f"{a.cast(pa.binary())[k].as_py()!r}"
                )
            return _entry(number << 3 | wire, kind, "singular", presence, col)
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
                "derived",
                derive=_json_bytes(name, null_is_empty=empty),
                reason=lambda a, k: f"not valid JSON for {name}: {a[k].as_py()!r}",
            )
            return _entry(
                tag, "raw_group" if group else "bytes", "singular", presence, col, end=end
            )
        if t in _BINARY and wkt is None:
            # A recursive type cut at max_depth: its bytes as they came, which need not be
            # canonical (map order, split messages), so parsed and serialized again.
            col = self._spec(
                col,
                "derived",
                derive=_canonical_bytes(
                    message_factory.GetMessageClass(fd.message_type), self._discard_unknown
                ),
                reason=lambda a, k: f"not a serialized {name}: {a[k].as_py()!r}",
            )
            return _entry(
                tag, "raw_group" if group else "bytes", "singular", presence, col, end=end
            )
        kind = "group" if group else "message"
        if wkt in ("timestamp", "duration"):
            want = pa.types.is_timestamp if wkt == "timestamp" else pa.types.is_duration
            if not want(t):
                raise _type_error(path, wkt, t)
            node = self._temporal(fd.message_type, wkt, t, col, path)
        elif (wkt == "date" and pa.types.is_date32(t)) or (
            wkt == "timeofday" and (pa.types.is_time64(t) or pa.types.is_time32(t))
        ):
            node = self._temporal(fd.message_type, wkt, t, col, path)
        elif wkt == "wrapper":
            value_fd = fd.message_type.fields_by_name["value"]
            node = self._wrap(fd.message_type, [self._value(value_fd, t, col, path, "implicit")])
        elif wkt == "fieldmask":
            paths_fd = fd.message_type.fields_by_name["paths"]
            node = self._wrap(
                fd.message_type, [self._field(paths_fd, t, col, fd.message_type, path)]
            )
        elif pa.types.is_struct(t):
            fields = [t.field(i) for i in range(t.num_fields)]
            cols = [self._spec(col, "field", i, f.name) for i, f in enumerate(fields)]
            node = self._node(fd.message_type, fields, cols, path)
        else:
            raise _type_error(path, f"the struct of {name}", t)
        return _entry(tag, kind, "singular", presence, col, child=node, end=end)

    def _wrap(self, message: Descriptor, rows: list[EncodeEntry]) -> int:
        node = len(self._t.nodes)
        self._t.nodes.append(EncodeNode(first=len(self._t.entries), n_entries=len(rows)))
        self._t.entries.extend(rows)
        return node

    def _temporal(self, message: Descriptor, wkt: str, t: pa.DataType, col: int, path: str) -> int:
        """A node whose fields are helper arrays derived from the temporal column."""
        spec = self._t.specs[col]
        parts: tuple[str, ...]
        split: Callable
        if wkt in ("timestamp", "duration"):
            per_second = _PER_SECOND[t.unit]
            parts = ("seconds", "nanos")
            split = functools.partial(_split_seconds, per_second, wkt == "duration")
            spec.check = functools.partial(_seconds_out_of_range, per_second, wkt)
            spec.reason = functools.partial(_range_reason, wkt)
        elif wkt == "date":
            parts = ("year", "month", "day")
            split = _split_date
        else:
            parts = ("hours", "minutes", "seconds", "nanos")
            split = functools.partial(_split_time, _PER_SECOND[t.unit])
        rows = []
        for fd in sorted(message.fields, key=lambda f: f.number):
            position = parts.index(fd.name)
            helper = self._spec(col, "derived", derive=_part(split, position))
            kind, _, wire = _SCALARS[fd.type]
            rows.append(_entry(fd.number << 3 | wire, kind, "singular", "implicit", helper))
        return self._wrap(message, rows)

    def _enum_names(self, fd: FieldDescriptor, t: pa.DataType, col: int, path: str) -> int:
        if not (pa.types.is_integer(t.index_type) and pa.types.is_string(t.value_type)):
            raise _type_error(path, "dictionary<int32, string> of enum names", t)
        numbers = {v.name: v.number for v in fd.enum_type.values}
        name = fd.enum_type.full_name
        closed = fd.enum_type.is_closed  # no undeclared numbers (see _value)
        return self._spec(
            col,
            "derived",
            derive=functools.partial(_enum_numbers, numbers, closed),
            reason=lambda a, k: f"{a[k].as_py()!r} is not a value of enum {name}",
        )

    # -- encoding -----------------------------------------------------------------------

    def encode(self, batch: pa.RecordBatch) -> pa.Array:
        n = batch.num_rows
        arrays: list[pa.Array] = []
        keep: list[object] = []  # everything whose address the core reads
        cols = np.zeros((len(self._t.specs), len(EncodeColumn._fields)), dtype=np.int64)
        for i, spec in enumerate(self._t.specs):
            bad = None
            if spec.access == "column":
                array = batch.column(spec.index)
            elif spec.access == "field":
                array = arrays[spec.parent].field(spec.index)
            elif spec.access == "values":
                array = arrays[spec.parent].values
            else:
                array, bad = spec.derive(arrays[spec.parent])  # type: ignore[misc]
            if spec.check is not None:
                bad = spec.check(array)
            arrays.append(array)
            cols[i] = _address(array, keep)
            if bad is not None:
                bad = np.ascontiguousarray(bad, dtype=np.uint8)
                keep.append(bad)
                cols[i, _BAD] = bad.ctypes.data
            if spec.map_keys is not None:
                perm = _map_order(array, spec.map_keys)
                if perm is not None:
                    keep.append(perm)
                    cols[i, _PERM] = perm.ctypes.data
        capacity = int(self._bytes_per_row * n * 1.1) + 4096
        status, err_col, err_index, data, start, offsets, wide = core.encode(
            cols, self._entries, self._nodes, n, capacity
        )
        del keep
        if status:
            row, where = self._locate(arrays, err_col, err_index)
            reason = core.STATUS_TEXT.get(status, f"status {status}")
            spec = self._t.specs[err_col]
            if status == 2 and spec.null_reason is not None:
                reason = spec.null_reason
            elif status == 3 and spec.reason is not None:
                # a derived array's reason speaks of the value it was derived from
                source = arrays[spec.parent] if spec.access == "derived" else arrays[err_col]
                reason = spec.reason(source, err_index)
            raise EncodeError(reason, row=row, path=where)
        data_buf = pa.py_buffer(data).slice(start)
        self._bytes_per_row = max(len(data_buf) / max(n, 1), 1.0)
        binary = pa.large_binary() if wide else pa.binary()
        return pa.Array.from_buffers(binary, n, [None, pa.py_buffer(offsets), data_buf])

    def _locate(self, arrays: list[pa.Array], col: int, k: int) -> tuple[int, str]:
        """(row, column path) of logical slot k of array `col`: ``points[3].x``."""
        parts: list[str] = []
        while True:
            spec = self._t.specs[col]
            if spec.access == "column":
                parts.append(spec.label)
                return k, "".join(reversed(parts))
            if spec.access == "field":
                parts.append(f".{spec.label}")
            elif spec.access == "values":
                parent = arrays[spec.parent]
                offsets = _offsets(parent)
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
    )


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _mismatch(where: str, name: str, problem: str) -> EncodeError:
    return EncodeError(f"schema mismatch: {problem}", row=None, path=_join(where, name))


def _type_error(path: str, expected: str, got: pa.DataType) -> EncodeError:
    return EncodeError(f"schema mismatch: expected {expected}, got {got}", row=None, path=path)


# -- buffers ----------------------------------------------------------------------------


def _address(array: pa.Array, keep: list[object]) -> EncodeColumn:
    """The cols row of an array: its own buffers (children are separate specs)."""
    keep.append(array)
    t = array.type
    buffers = array.buffers()
    validity = buffers[0].address if buffers[0] is not None and array.null_count else 0
    values = offsets = wide = 0
    if pa.types.is_struct(t):
        pass
    elif (
        pa.types.is_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_large_string(t)
    ):
        offsets = buffers[1].address
        values = buffers[2].address if buffers[2] is not None else 0
        wide = int(pa.types.is_large_binary(t) or pa.types.is_large_string(t))
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        offsets = buffers[1].address
        wide = int(pa.types.is_large_list(t))
    elif pa.types.is_dictionary(t):
        pass  # read through its derived numbers
    else:
        values = buffers[1].address if buffers[1] is not None else 0
    return EncodeColumn(
        validity=validity,
        offset=array.offset,
        values=values,
        offsets=offsets,
        wide=wide,
        bad=0,
        perm=0,
    )


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


# -- derived arrays ---------------------------------------------------------------------


class _Declared:
    """The numbers of a closed enum: a lookup table over their range (or a sorted array
    when the range is too sparse for one)."""

    def __init__(self, numbers: set[int]) -> None:
        self.numbers = np.array(sorted(numbers), dtype=np.int64)
        self.low = int(self.numbers[0])
        span = int(self.numbers[-1]) - self.low + 1
        self.table = None
        if span <= 1 << 16:
            self.table = np.zeros(span, dtype=bool)
            self.table[self.numbers - self.low] = True

    def missing(self, values: np.ndarray) -> np.ndarray:
        if self.table is None:
            return ~np.isin(values, self.numbers)
        at = values.astype(np.int64) - self.low
        inside = (at >= 0) & (at < len(self.table))
        return ~(inside & self.table[np.where(inside, at, 0)])


def _undeclared(declared: _Declared, array: pa.Array) -> np.ndarray | None:
    """Slots holding a number the (closed) enum does not declare (nulls are not)."""
    if not len(array):
        return None
    values = array.fill_null(declared.low).to_numpy(zero_copy_only=False)
    bad = declared.missing(values)
    return bad.view(np.uint8) if bad.any() else None


_HIGH_BITS = np.uint64(0x8080808080808080)


def _invalid_utf8(array: pa.Array) -> np.ndarray | None:
    """Slots of a string array that are not valid UTF-8 (a binary array viewed as string).

    Fast paths over the values the slots span: no byte >= 0x80 (ASCII); or the span as a
    whole is valid UTF-8 and no slot starts or ends inside a character, so each slot is.
    """
    n = len(array)
    data = array.buffers()[2]
    if n == 0 or data is None:
        return None
    dtype = np.int64 if pa.types.is_large_string(array.type) else np.int32
    cuts: np.ndarray = np.frombuffer(array.buffers()[1], dtype=dtype)
    cuts = cuts[array.offset : array.offset + n + 1].astype(np.int64)
    lo, hi = int(cuts[0]), int(cuts[-1])
    span = np.frombuffer(data, dtype=np.uint8)[lo:hi]
    whole = len(span) & ~7  # eight bytes at a time: the high bits of a uint64
    if not (span[:whole].view(np.uint64) & _HIGH_BITS).any() and not (span[whole:] >= 0x80).any():
        return None
    try:
        codecs.utf_8_decode(span.tobytes(), "strict", True)
        inner = cuts[(cuts > lo) & (cuts < hi)] - lo
        if not ((span[inner] & 0xC0) == 0x80).any():
            return None
    except UnicodeDecodeError:
        pass
    bad = np.zeros(n, dtype=np.uint8)
    for k, value in enumerate(array.cast(pa.binary()).to_pylist()):
        if value is not None:
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                bad[k] = 1
    return bad if bad.any() else None


def _part(split: Callable, position: int) -> Derive:
    def derive(array: pa.Array) -> tuple[pa.Array, None]:
        return pa.array(split(array)[position]), None

    return derive


def _split_seconds(per_second: int, duration: bool, array: pa.Array):
    v = _int64_view(array)
    seconds = v // per_second
    rest = v - seconds * per_second
    if duration:  # seconds and nanos carry the same sign (duration.proto)
        negative = (rest != 0) & (v < 0)
        seconds = seconds + negative
        rest = rest - negative * per_second
    nanos = rest * (1_000_000_000 // per_second)
    return seconds.astype(np.int64), nanos.astype(np.int32)


def _seconds_out_of_range(per_second: int, wkt: str, array: pa.Array) -> np.ndarray | None:
    seconds = _int64_view(array) // per_second
    if wkt == "timestamp":
        bad = (seconds < _TS_MIN) | (seconds > _TS_MAX)
    else:
        bad = (seconds < -_DUR_MAX - 1) | (seconds > _DUR_MAX)
    return bad if bad.any() else None


def _range_reason(wkt: str, array: pa.Array, k: int) -> str:
    value = f"{int(_int64_view(array)[k])} {array.type.unit}"  # may not fit a datetime
    if wkt == "timestamp":
        return (
            f"timestamp {value} since the epoch is outside google.protobuf.Timestamp's range "
            "(0001-01-01 .. 9999-12-31)"
        )
    return f"duration {value} is outside google.protobuf.Duration's range (+-10,000 years)"


def _split_date(array: pa.Array):
    days = _int64_view(array).astype("datetime64[D]")
    months = days.astype("datetime64[M]")
    years = days.astype("datetime64[Y]")
    year = years.astype(np.int64) + 1970
    month = months.astype(np.int64) - (year - 1970) * 12 + 1
    day = (days - months).astype(np.int64) + 1
    return year.astype(np.int32), month.astype(np.int32), day.astype(np.int32)


def _split_time(per_second: int, array: pa.Array):
    v = _int64_view(array)
    seconds, rest = np.divmod(v, per_second)
    hours, seconds = np.divmod(seconds, 3600)
    minutes, seconds = np.divmod(seconds, 60)
    nanos = rest * (1_000_000_000 // per_second)
    return tuple(x.astype(np.int32) for x in (hours, minutes, seconds, nanos))


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


def _json_bytes(message: str, null_is_empty: bool) -> Derive:
    """JSON text -> the serialized Struct / Value / ListValue, one Python call per value.

    A null list element is an empty message (decode reads a Value with no kind as null).
    """
    cls = _JSON_CLASSES[message]

    def derive(array: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
        out: list[bytes | None] = []
        bad = np.zeros(len(array), dtype=np.uint8)
        for i, text in enumerate(array.to_pylist()):
            if text is None:
                out.append(b"" if null_is_empty else None)
                continue
            try:
                value = cls()
                json_format.Parse(text, value)
                out.append(value.SerializeToString(deterministic=True))
            except (ValueError, json_format.ParseError):
                out.append(b"")
                bad[i] = 1
        return pa.array(out, pa.binary()), (bad if bad.any() else None)

    return derive


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


# -- map entry order --------------------------------------------------------------------

_UNSIGNED = {
    _T.TYPE_INT32: np.uint32,
    _T.TYPE_SINT32: np.uint32,
    _T.TYPE_SFIXED32: np.uint32,
    _T.TYPE_UINT32: np.uint32,
    _T.TYPE_FIXED32: np.uint32,
    _T.TYPE_INT64: np.uint64,
    _T.TYPE_SINT64: np.uint64,
    _T.TYPE_SFIXED64: np.uint64,
    _T.TYPE_UINT64: np.uint64,
    _T.TYPE_FIXED64: np.uint64,
}


def _key_order(key_fd: FieldDescriptor) -> str:
    if key_fd.type == _T.TYPE_STRING:
        return "string"
    if key_fd.type == _T.TYPE_BOOL:
        return "bool"
    return np.dtype(_UNSIGNED[key_fd.type]).name


def _map_order(array: pa.Array, order: str) -> np.ndarray | None:
    """Logical entry indices of a map array, each map's entries in upb's deterministic order.

    upb writes backwards and sorts keys ascending with its comparators, so on the wire:
    integer keys descend as *unsigned* numbers of their width (-1 first, 0 last), bools
    descend (true first), strings ascend bytewise except that a string comes after every
    longer string it is a prefix of ("ab", "a", "b", ""). Checked against the runtime in
    tests/test_encode.py.
    """
    offsets = _offsets(array)
    entries = array.values
    lo, hi = int(offsets[0]), int(offsets[-1])
    if hi - lo < 2:
        return None
    fast = _map_order_short(offsets, entries, order)
    if fast is not None:
        return fast
    keys = entries.field(0).slice(lo, hi - lo)
    owner = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    if order == "string":
        raw = keys.cast(pa.binary())
        if pc.any(pc.match_substring(raw, b"\xff")).as_py():
            # a 0xff byte (proto2 strings are not UTF-8 checked): sort such keys in Python
            values = raw.to_pylist()
            inside = sorted(
                range(len(values)),
                key=lambda i: (owner[i], functools.cmp_to_key(_upb_string_order)(values[i])),
            )
            sorted_idx = np.asarray(inside, dtype=np.int64)
        else:
            # 0xff never occurs in UTF-8: as a terminator it sorts a prefix after its
            # extensions, which is upb's order
            terminated = pc.binary_join_element_wise(raw, pa.scalar(b"", pa.binary()), b"\xff")
            table = pa.table({"o": owner, "k": terminated})
            sorted_idx = pc.sort_indices(
                table, sort_keys=[("o", "ascending"), ("k", "ascending")]
            ).to_numpy()
    else:
        if order == "bool":
            key = np.asarray(keys.cast(pa.uint8()).fill_null(0)).astype(np.uint64)
        else:
            key = np.asarray(keys.fill_null(0)).view(order).astype(np.uint64)
        sorted_idx = np.lexsort((~key, owner))
    perm = np.arange(len(entries), dtype=np.int64)
    perm[lo:hi] = sorted_idx.astype(np.int64) + lo
    return perm


def _map_order_short(offsets: np.ndarray, entries: pa.StructArray, order: str) -> np.ndarray | None:
    """_map_order in the core when no key is null and no map is long (the usual batch)."""
    keys = entries.field(0)  # flattened: the struct's offset applied
    if keys.null_count:
        return None
    buffers = keys.buffers()
    if order == "string":
        kind, key_offsets, data = 0, buffers[1], buffers[2]
        wide = pa.types.is_large_string(keys.type) or pa.types.is_large_binary(keys.type)
    else:
        kind = 1 if order == "bool" else np.dtype(order).itemsize
        key_offsets, data, wide = None, buffers[1], False
    return core.map_order(
        np.ascontiguousarray(offsets, dtype=np.int64),
        len(entries),
        kind,
        keys.offset,
        np.frombuffer(data if data is not None else b"", dtype=np.uint8),
        None if key_offsets is None else np.frombuffer(key_offsets, dtype=np.uint8),
        wide,
    )


def _upb_string_order(a: bytes, b: bytes) -> int:
    common = min(len(a), len(b))
    if a[:common] != b[:common]:
        return -1 if a[:common] < b[:common] else 1
    return (len(a) < len(b)) - (len(a) > len(b))
