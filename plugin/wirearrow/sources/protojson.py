"""protojson (the protobuf runtime's canonical JSON form) in and out.

In: each JSON text becomes the wire bytes of the same message (``_core.jsonwire``, driven by
the tables compiled here once per schema), which the binary decoder then reads: the same
plan gives the same Arrow as the binary form, and a text is accepted exactly when
``json_format.Parse`` accepts it. Out: Arrow rows are encoded to wire bytes by the
Transcoder and printed by the runtime's ``json_format.MessageToJson``. See docs/json.md.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pyarrow as pa
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from wirearrow._core.jsonwire import KINDS, WKTS, Context, Field, Msg, to_wire
from wirearrow.errors import DecodeError
from wirearrow.plan.types import extensions_of, field_name
from wirearrow.sources.varint import varint

__all__ = ["JsonReader", "ndjson_records", "read_ndjson", "split_ndjson", "to_json"]

_WIRE_TYPE = {
    FieldDescriptor.TYPE_DOUBLE: 1,
    FieldDescriptor.TYPE_FIXED64: 1,
    FieldDescriptor.TYPE_SFIXED64: 1,
    FieldDescriptor.TYPE_FLOAT: 5,
    FieldDescriptor.TYPE_FIXED32: 5,
    FieldDescriptor.TYPE_SFIXED32: 5,
    FieldDescriptor.TYPE_STRING: 2,
    FieldDescriptor.TYPE_BYTES: 2,
    FieldDescriptor.TYPE_MESSAGE: 2,
    FieldDescriptor.TYPE_GROUP: 3,
}
_GENERIC_WKTS = {
    "google.protobuf.Timestamp",
    "google.protobuf.Duration",
    "google.protobuf.FieldMask",
}
_JSON_WKTS = {
    "google.protobuf.Struct": WKTS["struct"],
    "google.protobuf.Value": WKTS["value"],
    "google.protobuf.ListValue": WKTS["list"],
    "google.protobuf.Any": WKTS["any"],
}
assert set(KINDS.values()) == set(range(1, 19))  # the core's kinds are descriptor types


def _tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


class _Tables:
    """The converter tables of every message reachable from one root, built once."""

    def __init__(self, root: Descriptor) -> None:
        self._pool = root.file.pool
        self._msgs: dict[str, Msg] = {}
        self._lock = threading.Lock()
        self.root = self.msg(root)

    def msg(self, d: Descriptor) -> Msg:
        found = self._msgs.get(d.full_name)
        if found is not None:
            return found
        m = Msg()
        self._msgs[d.full_name] = m  # before the fields: recursive types point back at it
        m.full_name = d.full_name
        m.extendable = bool(d.extension_ranges)
        # The extensions the pool declares are fields named "[pkg.ext]" (json_format reads
        # them so); the runtime writes them after the fields, by number descending.
        fields = sorted(d.fields, key=lambda f: f.number)
        fields += sorted(extensions_of(d), key=lambda f: -f.number)
        m.fields = [self._field(f, slot) for slot, f in enumerate(fields)]
        m.by_json_name = {f.json_name: f for f in m.fields}
        m.by_name = {f.name: f for f in m.fields}
        if d.file.name == "google/protobuf/wrappers.proto":
            m.wkt = WKTS["wrapper"]
            m.value = m.by_name["value"]
        elif d.full_name in _GENERIC_WKTS:
            # The runtime's own FromJsonString (on a message reused for a whole batch): the
            # RFC 3339 and duration grammars are the runtime's, not a copy of them.
            m.wkt = WKTS["timestamp" if d.full_name == "google.protobuf.Timestamp" else "generic"]
            m.runtime_class = message_factory.GetMessageClass(d)
        elif d.full_name in _JSON_WKTS:
            m.wkt = _JSON_WKTS[d.full_name]
            if d.full_name == "google.protobuf.Any":
                m.key, m.value = m.by_name["type_url"], m.by_name["value"]
        if d.GetOptions().map_entry:
            m.key, m.value = m.by_name["key"], m.by_name["value"]
        return m

    def _field(self, f: FieldDescriptor, slot: int) -> Field:
        fd = Field()
        fd.name, fd.json_name, fd.number, fd.kind, fd.slot = (
            field_name(f),
            field_name(f) if f.is_extension else f.json_name,
            f.number,
            f.type,
            slot,
        )
        fd.repeated = f.is_repeated
        fd.packed = bool(f.is_packed)
        fd.presence = bool(f.has_presence)
        wire_type = _WIRE_TYPE.get(f.type, 0)
        fd.tag = _tag(f.number, wire_type)
        fd.packed_tag = _tag(f.number, 2)
        fd.end_tag = _tag(f.number, 4)
        if f.containing_oneof is not None:
            fd.oneof = f.containing_oneof.name
        if f.message_type is not None:
            fd.is_map = bool(f.message_type.GetOptions().map_entry)
            fd.value_message = f.message_type.full_name == "google.protobuf.Value"
            fd.sub = self.msg(f.message_type)
        if f.enum_type is not None:
            e = f.enum_type
            fd.enum_names = {v.name: v.number for v in e.values}
            fd.enum_numbers = frozenset(v.number for v in e.values)
            fd.enum_closed = bool(e.is_closed)
            fd.enum_full_name = e.full_name
            fd.null_enum = e.full_name == "google.protobuf.NullValue"
        return fd

    def resolve_any(self, type_name: str) -> Msg:
        """The tables of an ``Any``'s packed type, looked up in the schema's pool."""
        with self._lock:
            found = self._msgs.get(type_name)
            if found is not None:
                return found
            if len(self._msgs) > 10_000:  # type URLs come from the data: bound the tables
                raise KeyError(type_name)
            return self.msg(self._pool.FindMessageTypeByName(type_name))


class JsonReader:
    """protojson texts -> wire bytes of the schema's root message, one per accepted text.

    ``ignore_unknown_fields`` and ``max_recursion_depth`` mean what they mean to
    ``json_format.Parse``; ``Any`` types are looked up in the schema's descriptor pool.
    """

    def __init__(
        self, descriptor: Descriptor, *, ignore_unknown_fields: bool = False,
        max_recursion_depth: int = 100,
    ) -> None:
        self._tables = _Tables(descriptor)
        self._ignore_unknown = bool(ignore_unknown_fields)
        self._max_depth = int(max_recursion_depth)

    def to_wire(self, records: object) -> tuple[pa.Array, np.ndarray, list]:
        """(wire BinaryArray, input index of each, [(DecodeError, raw text)] of rejects)."""
        texts = _texts(records)
        ctx = Context(self._ignore_unknown, self._max_depth, self._tables.resolve_any)
        wire, errors = to_wire(self._tables.root, texts, ctx)
        failures = []
        keep = np.ones(len(texts), dtype=bool)
        for position, reason, path in errors:
            keep[position] = False
            raw = texts[position]
            raw = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
            err = DecodeError(f"JSON: {reason}", index=position, offset=0, path=path)
            failures.append((err, None if raw is None else bytes(raw)))
        index = np.flatnonzero(keep).astype(np.int64)
        return pa.array(wire, type=pa.binary()), index, failures


def _texts(records: object) -> list:
    if isinstance(records, pa.ChunkedArray):
        records = pa.concat_arrays(records.chunks) if records.num_chunks else pa.array([])
    if isinstance(records, pa.Array):
        t = records.type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_binary(t) or pa.types.is_large_binary(t)):
            raise TypeError(f"JSON records must be a string or binary array, not {t}")
        return records.to_pylist()
    if isinstance(records, str | bytes | bytearray | memoryview):
        raise TypeError("records must be a sequence of JSON texts; for NDJSON use read_ndjson")
    return list(records)  # type: ignore[call-overload]


def split_ndjson(buffer: object) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the non-blank lines of NDJSON bytes, newlines excluded."""
    data = np.frombuffer(buffer, dtype=np.uint8)  # type: ignore[call-overload]
    newlines = np.flatnonzero(data == 0x0A)
    starts = np.concatenate([[0], newlines + 1]).astype(np.int64)
    ends = np.concatenate([newlines, [len(data)]]).astype(np.int64)
    space = np.isin(data, np.frombuffer(b" \t\r\n", dtype=np.uint8))
    nonspace = np.concatenate([[0], np.cumsum(~space, dtype=np.int64)])
    real = nonspace[ends] - nonspace[starts] > 0  # a line of JSON whitespace is no record
    return starts[real], ends[real]


def ndjson_records(buffer: object, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The lines [starts, ends) of ``buffer`` as one BinaryArray (one copy, no newlines)."""
    data = np.frombuffer(buffer, dtype=np.uint8)  # type: ignore[call-overload]
    # keep the bytes inside the lines: +1 at each start, -1 at each end
    marks = np.zeros(len(data) + 1, dtype=np.int64)
    np.add.at(marks, starts, 1)
    np.add.at(marks, ends, -1)
    values = data[np.cumsum(marks[:-1]) > 0]
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=offsets[1:])
    large = len(values) >= 2**31
    t = pa.large_binary() if large else pa.binary()
    off = offsets if large else offsets.astype(np.int32)
    return pa.Array.from_buffers(t, len(starts), [None, pa.py_buffer(off), pa.py_buffer(values)])


def read_ndjson(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview | pa.Buffer,
) -> pa.BinaryArray:
    """The records of newline-delimited JSON (a file path or a buffer): one per non-blank line.

    One copy of the bytes, without the newlines; a line holding only JSON whitespace is no
    record. Over 2 GiB of text comes back as a LargeBinaryArray.
    """
    if isinstance(source, str | os.PathLike):
        with pa.memory_map(os.fspath(source), "r") as f:
            buffer = f.read_buffer()
    else:
        buffer = source if isinstance(source, pa.Buffer) else pa.py_buffer(source)
    starts, ends = split_ndjson(buffer)
    return ndjson_records(buffer, starts, ends)


def to_json(
    descriptor: Descriptor,
    wire: pa.Array,
    *,
    preserving_proto_field_name: bool = False,
    always_print_fields_with_no_presence: bool = False,
    use_integers_for_enums: bool = False,
    indent: int | None = None,
) -> pa.StringArray:
    """Serialized messages -> their protojson text, exactly as ``json_format.MessageToJson``."""
    cls = message_factory.GetMessageClass(descriptor)
    pool = descriptor.file.pool
    texts: list[str | None] = []
    for raw in wire.to_pylist():
        if raw is None:
            texts.append(None)
            continue
        texts.append(
            json_format.MessageToJson(
                cls.FromString(raw),
                preserving_proto_field_name=preserving_proto_field_name,
                always_print_fields_with_no_presence=always_print_fields_with_no_presence,
                use_integers_for_enums=use_integers_for_enums,
                indent=indent,
                descriptor_pool=pool,
            )
        )
    return pa.array(texts, type=pa.utf8())
