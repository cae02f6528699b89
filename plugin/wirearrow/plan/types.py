"""How each protobuf field kind is read off the wire and which Arrow type it becomes."""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

import pyarrow as pa
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, OneofDescriptor

from wirearrow._core.decoder import KIND

__all__ = [
    "ANY",
    "ONEOF_CASE",
    "WELL_KNOWN",
    "ScalarKind",
    "case_columns",
    "default_bytes",
    "extensions_of",
    "field_name",
    "fields_of",
    "is_closed_enum",
    "is_map",
    "is_packed",
    "is_repeated",
    "is_required",
    "needs_utf8_check",
    "real_oneofs",
    "scalar_kind",
]

_T = FieldDescriptor


@dataclass(frozen=True, slots=True)
class ScalarKind:
    kind: int  # decoder Kind
    wire_type: int  # wire type of one unpacked value
    width: int  # bytes of a column slot
    arrow: pa.DataType
    pack: str  # struct format of a slot's value, "" for views


def _k(kind: str, wire_type: int, width: int, arrow: pa.DataType, pack: str) -> ScalarKind:
    return ScalarKind(KIND[kind], wire_type, width, arrow, pack)


_SCALARS: dict[int, ScalarKind] = {
    _T.TYPE_INT32: _k("varint32", 0, 4, pa.int32(), "<i"),
    _T.TYPE_ENUM: _k("varint32", 0, 4, pa.int32(), "<i"),
    _T.TYPE_UINT32: _k("varint32", 0, 4, pa.uint32(), "<I"),
    _T.TYPE_INT64: _k("varint64", 0, 8, pa.int64(), "<q"),
    _T.TYPE_UINT64: _k("varint64", 0, 8, pa.uint64(), "<Q"),
    _T.TYPE_BOOL: _k("bool", 0, 1, pa.bool_(), "<?"),
    _T.TYPE_SINT32: _k("zigzag32", 0, 4, pa.int32(), "<i"),
    _T.TYPE_SINT64: _k("zigzag64", 0, 8, pa.int64(), "<q"),
    _T.TYPE_FIXED32: _k("fixed32", 5, 4, pa.uint32(), "<I"),
    _T.TYPE_SFIXED32: _k("fixed32", 5, 4, pa.int32(), "<i"),
    _T.TYPE_FLOAT: _k("fixed32", 5, 4, pa.float32(), "<f"),
    _T.TYPE_FIXED64: _k("fixed64", 1, 8, pa.uint64(), "<Q"),
    _T.TYPE_SFIXED64: _k("fixed64", 1, 8, pa.int64(), "<q"),
    _T.TYPE_DOUBLE: _k("fixed64", 1, 8, pa.float64(), "<d"),
    _T.TYPE_STRING: _k("bytes", 2, 8, pa.utf8(), ""),
    _T.TYPE_BYTES: _k("bytes", 2, 8, pa.binary(), ""),
}

# google.protobuf.Any: with any_types, its value is also read as the types declared there.
ANY = "google.protobuf.Any"

# Well-known message types with a dedicated Arrow mapping (decisions.md); recognised by
# full name so that descriptors compiled at run time match too.
WELL_KNOWN = {
    "google.protobuf.Timestamp": "timestamp",
    "google.protobuf.Duration": "duration",
    "google.protobuf.DoubleValue": "wrapper",
    "google.protobuf.FloatValue": "wrapper",
    "google.protobuf.Int64Value": "wrapper",
    "google.protobuf.UInt64Value": "wrapper",
    "google.protobuf.Int32Value": "wrapper",
    "google.protobuf.UInt32Value": "wrapper",
    "google.protobuf.BoolValue": "wrapper",
    "google.protobuf.StringValue": "wrapper",
    "google.protobuf.BytesValue": "wrapper",
    "google.protobuf.FieldMask": "fieldmask",
    "google.protobuf.Struct": "json",
    "google.protobuf.Value": "json",
    "google.protobuf.ListValue": "json",
    "google.protobuf.Any": "any",
    "google.type.Date": "date",
    "google.type.TimeOfDay": "timeofday",
}


def scalar_kind(field: FieldDescriptor) -> ScalarKind:
    return _SCALARS[field.type]


# protobuf 7 removed FieldDescriptor.label (deprecated in 6); 5.26 lacks the properties
# (is_repeated, is_required, is_packed) that replace it. The resolved features answer the
# same questions on every version: proto2 and proto3 files get their editions equivalents.
def is_repeated(field: FieldDescriptor) -> bool:
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated)
    return field.label == _T.LABEL_REPEATED


def is_required(field: FieldDescriptor) -> bool:
    required = getattr(field, "is_required", None)
    if required is not None:
        return bool(required)
    return field.label == _T.LABEL_REQUIRED


def is_packed(field: FieldDescriptor) -> bool:
    """A repeated scalar written packed (proto3 default, [packed=true], editions PACKED)."""
    packed = getattr(field, "is_packed", None)
    if packed is not None:
        return bool(packed)
    if not is_repeated(field) or field.type in _NEVER_PACKED:
        return False
    features = _features(field)
    return features is not None and features.repeated_field_encoding == features.PACKED


_NEVER_PACKED = (_T.TYPE_STRING, _T.TYPE_BYTES, _T.TYPE_MESSAGE, _T.TYPE_GROUP)


def is_map(field: FieldDescriptor) -> bool:
    return (
        is_repeated(field)
        and field.message_type is not None
        and field.message_type.GetOptions().map_entry
    )


def is_message(field: FieldDescriptor) -> bool:
    return field.type in (_T.TYPE_MESSAGE, _T.TYPE_GROUP)


def _features(field: FieldDescriptor):
    get = getattr(field, "_GetFeatures", None)
    return get() if get is not None else None


def is_closed_enum(field: FieldDescriptor) -> bool:
    """An enum field of a closed enum (proto2, editions enum_type CLOSED): upb keeps an
    undeclared value as an unknown field instead of storing it."""
    if field.type != _T.TYPE_ENUM:
        return False
    closed = getattr(field.enum_type, "is_closed", None)
    if closed is not None:
        return bool(closed)
    features = _features(field.enum_type)
    if features is not None:
        return features.enum_type == features.CLOSED
    return getattr(field.file, "syntax", "proto2") == "proto2"


def needs_utf8_check(field: FieldDescriptor) -> bool:
    """proto3 strings (and editions strings with utf8_validation VERIFY) must be valid UTF-8."""
    if field.type != _T.TYPE_STRING:
        return False
    features = _features(field)
    if features is not None:
        return features.utf8_validation == features.VERIFY
    return getattr(field.file, "syntax", "proto2") == "proto3"


@functools.lru_cache(maxsize=16384)
def real_oneofs(message: Descriptor) -> tuple[OneofDescriptor, ...]:
    """The oneofs a user declared: not the synthetic one protoc makes for each proto3
    ``optional`` field (the descriptor API does not tell them apart; its proto does)."""
    if not message.oneofs:
        return ()
    proto = descriptor_pb2.DescriptorProto()
    message.CopyToProto(proto)
    synthetic = {
        f.oneof_index for f in proto.field if f.proto3_optional and f.HasField("oneof_index")
    }
    return tuple(o for o in message.oneofs if o.index not in synthetic)


@functools.lru_cache(maxsize=16384)
def extensions_of(message: Descriptor) -> tuple[FieldDescriptor, ...]:
    """The extensions of `message` declared anywhere in its pool (the schema's descriptor
    set), by field number."""
    if not message.extension_ranges:
        return ()
    return tuple(sorted(message.file.pool.FindAllExtensions(message), key=lambda f: f.number))


def field_name(field: FieldDescriptor) -> str:
    """A field's name as a column and a path step: an extension is ``[pkg.ext]``, as
    protojson and the text format write it."""
    return f"[{field.full_name}]" if field.is_extension else field.name


def fields_of(message: Descriptor, extensions: bool) -> tuple[FieldDescriptor, ...]:
    """The fields of `message` in declaration order, then (`extensions`) its extensions."""
    fields = tuple(message.fields)
    return (*fields, *extensions_of(message)) if extensions else fields


# With oneof_case, each struct (and the record) gets, per oneof, the name of the member set:
# the child named ONEOF_CASE.format(oneof name).
ONEOF_CASE = "{}_case"


def case_columns(message: Descriptor) -> dict[str, OneofDescriptor]:
    """The `<oneof>_case` names of a message's oneofs (oneof_case=True)."""
    return {ONEOF_CASE.format(o.name): o for o in real_oneofs(message)}


def has_presence(field: FieldDescriptor, container: Descriptor) -> bool:
    """Explicit presence: an absent field reads as null, not as its default value.

    Map entry keys and values never have presence: a missing one means the default.
    """
    if container.GetOptions().map_entry:
        return False
    return bool(field.has_presence)


def default_bytes(field: FieldDescriptor) -> bytes:
    """A column slot holding the field's default value, padded to the 16-byte table slot."""
    sk = scalar_kind(field)
    if not sk.pack:
        return bytes(16)  # an empty view
    value = field.default_value
    if field.type == _T.TYPE_ENUM and not isinstance(value, int):
        value = field.enum_type.values[0].number if field.enum_type.values else 0
    return struct.pack(sk.pack, value).ljust(16, b"\0")
