"""Hypothesis strategies for the differential tests: random schemas, values, wire bytes, plans.

* :func:`schema_specs` draws a :class:`SchemaSpec` (proto2, proto3 or edition 2023; 2–5
  messages that reference only later ones, so no recursion), which renders to ``.proto``
  text; :func:`compile_source` compiles it with the ``protoc`` bundled in ``grpcio-tools``
  into a descriptor set and message classes from a private pool.
* :func:`messages` draws message values of any descriptor: absent and empty sub-messages,
  empty repeateds, extreme integers, NaN/inf, unicode and empty strings, negative and (in open
  enums) undeclared enum numbers, map keys from a small set that plans also use.
* :func:`wire_bytes` serializes a message with a hand-written encoder that varies what the
  wire format allows: field order, packed vs unpacked, a singular sub-message split into two
  occurrences (merged by the parser), an earlier junk value for a singular scalar or another
  oneof member (last one wins), explicit zeros of implicit fields, map entries with the key
  or value left out or written value-first, an earlier entry for a key that a later one
  replaces, unknown fields of every wire type, known fields under a wrong wire type, bytes
  that are not UTF-8 in the strings the schema does not validate (proto2, editions NONE;
  not in map keys). Map entries are written in key order, any replaced entry before all
  of them, as :mod:`oracle` expects. The oracle parses these bytes
  with the runtime, so the encoder need not be right, only valid.
* :func:`plans` draws 1–8 paths over a descriptor, often extending an earlier path's prefix
  so that columns share fan-outs; a path may end on a oneof (which member is set).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import json
import pathlib
import struct
import tempfile
from collections.abc import Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import strategies as st

from wirearrow.plan.types import (
    extensions_of,
    field_name,
    is_closed_enum,
    is_repeated,
    needs_utf8_check,
)

__all__ = [
    "KEY_INTS",
    "KEY_STRINGS",
    "Compiled",
    "SchemaSpec",
    "compile_file",
    "compile_source",
    "delimited",
    "messages",
    "plans",
    "schema_specs",
    "tag",
    "varint",
    "wire_bytes",
]

_FD = FieldDescriptor
_WKT_INCLUDE = str(importlib.resources.files("grpc_tools") / "_proto")

# Map keys and the literals plans use to look them up come from these, so lookups hit.
KEY_STRINGS = ("", "a", "b", "k1", "ключ", "日本")
KEY_INTS = (0, 1, -1, 2, 7, 300)

# --------------------------------------------------------------------------------------------
# Compiling


@dataclasses.dataclass(frozen=True)
class Compiled:
    """A descriptor set and the message classes of a private pool built from it."""

    descriptor_set: bytes
    pool: descriptor_pool.DescriptorPool

    def message_class(self, full_name: str) -> type:
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(full_name))


def _protoc(directory: str, files: Sequence[str]) -> bytes:
    from grpc_tools import protoc  # heavy; only the tests that compile need it

    with tempfile.TemporaryDirectory() as scratch:
        out = pathlib.Path(scratch) / "set.pb"
        args = ["protoc", f"-I{directory}", f"-I{_WKT_INCLUDE}", f"--descriptor_set_out={out}"]
        if protoc.main([*args, "--include_imports", *files]) != 0:
            raise RuntimeError(f"protoc failed on {files} in {directory}")
        return out.read_bytes()


def _load(data: bytes) -> Compiled:
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(data).file:  # dependencies first
        pool.AddSerializedFile(file.SerializeToString())
    return Compiled(data, pool)


@functools.lru_cache(maxsize=256)
def compile_source(source: str) -> Compiled:
    """Compile one ``.proto`` text (file name ``gen.proto``); WKT imports resolve."""
    with tempfile.TemporaryDirectory() as directory:
        (pathlib.Path(directory) / "gen.proto").write_text(source, encoding="utf-8")
        try:
            return _load(_protoc(directory, ["gen.proto"]))
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{source}") from exc


@functools.lru_cache(maxsize=16)
def compile_file(path: str) -> Compiled:
    """Compile a ``.proto`` file on disk, its directory being the import root."""
    file = pathlib.Path(path)
    return _load(_protoc(str(file.parent), [file.name]))


# --------------------------------------------------------------------------------------------
# Random schemas

SCALAR_TYPES = (
    "double",
    "float",
    "int32",
    "int64",
    "uint32",
    "uint64",
    "sint32",
    "sint64",
    "fixed32",
    "fixed64",
    "sfixed32",
    "sfixed64",
    "bool",
    "string",
    "bytes",
)
MAP_KEY_TYPES = tuple(t for t in SCALAR_TYPES if t not in ("double", "float", "bytes"))
WKT_FILES = {
    "google.protobuf.Timestamp": "google/protobuf/timestamp.proto",
    "google.protobuf.Duration": "google/protobuf/duration.proto",
    **{
        f"google.protobuf.{kind}Value": "google/protobuf/wrappers.proto"
        for kind in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String")
    },
    "google.protobuf.BytesValue": "google/protobuf/wrappers.proto",
}
_SPECIAL_NUMBERS = (15, 16, 2047, 2048, 262143, 262144, 536870911)


@dataclasses.dataclass(frozen=True)
class EnumSpec:
    name: str
    values: tuple[tuple[str, int], ...]
    closed: bool  # proto2 enums are closed; edition 2023 ones when asked

    def render(self, syntax: str) -> str:
        lines = [f"enum {self.name} {{"]
        if syntax == "editions" and self.closed:
            lines.append("  option features.enum_type = CLOSED;")
        lines += [f"  {name} = {number};" for name, number in self.values]
        return "\n".join([*lines, "}"])


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    name: str
    number: int
    type: str  # a scalar type, an enum or message name, or a WKT full name
    label: str = ""  # "", "optional" or "repeated"
    key_type: str | None = None  # set for map<key_type, type>
    options: tuple[str, ...] = ()

    def render(self) -> str:
        options = f" [{', '.join(self.options)}]" if self.options else ""
        if self.key_type is not None:
            return f"map<{self.key_type}, {self.type}> {self.name} = {self.number}{options};"
        label = f"{self.label} " if self.label else ""
        return f"{label}{self.type} {self.name} = {self.number}{options};"


@dataclasses.dataclass(frozen=True)
class MessageSpec:
    name: str
    fields: tuple[FieldSpec, ...]
    oneofs: tuple[tuple[str, tuple[FieldSpec, ...]], ...] = ()
    extendable: bool = False  # declares extension numbers EXTENSION_RANGE
    extends: tuple[ExtendSpec, ...] = ()  # extensions declared inside this message

    def render(self) -> str:
        lines = [f"message {self.name} {{"]
        lines += [f"  {field.render()}" for field in self.fields]
        for name, members in self.oneofs:
            lines.append(f"  oneof {name} {{")
            lines += [f"    {member.render()}" for member in members]
            lines.append("  }")
        if self.extendable:
            lines.append(f"  extensions {EXTENSION_RANGE[0]} to {EXTENSION_RANGE[1]};")
        lines += ["  " + line for extend in self.extends for line in extend.render().split("\n")]
        return "\n".join([*lines, "}"])


EXTENSION_RANGE = (100, 199)


@dataclasses.dataclass(frozen=True)
class ExtendSpec:
    """``extend <extendee> { ... }``: extension fields of another message."""

    extendee: str
    fields: tuple[FieldSpec, ...]

    def render(self) -> str:
        lines = [f"extend {self.extendee} {{", *(f"  {f.render()}" for f in self.fields), "}"]
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class SchemaSpec:
    syntax: str  # "proto2", "proto3" or "editions" (edition 2023)
    enums: tuple[EnumSpec, ...]
    messages: tuple[MessageSpec, ...]
    file_options: tuple[str, ...] = ()
    package: str = "gen"
    extends: tuple[ExtendSpec, ...] = ()  # top-level extensions

    @property
    def root(self) -> str:
        return f"{self.package}.{self.messages[0].name}"

    def render(self) -> str:
        header = 'edition = "2023";' if self.syntax == "editions" else f'syntax = "{self.syntax}";'
        every_extend = (*self.extends, *(e for m in self.messages for e in m.extends))
        used = {
            field.type
            for message in self.messages
            for field in (*message.fields, *(m for _, ms in message.oneofs for m in ms))
        } | {field.type for extend in every_extend for field in extend.fields}
        imports = sorted({WKT_FILES[t] for t in used if t in WKT_FILES})
        parts = [header, f"package {self.package};"]
        parts += [f'import "{name}";' for name in imports]
        parts += [f"option {option};" for option in self.file_options]
        parts += [enum.render(self.syntax) for enum in self.enums]
        parts += [message.render() for message in self.messages]
        parts += [extend.render() for extend in self.extends]
        return "\n".join(parts) + "\n"


def _default_literal(draw: Any, type_name: str, enums: dict[str, EnumSpec]) -> str:
    if type_name in enums:
        return draw(st.sampled_from([name for name, _ in enums[type_name].values]))
    if type_name in ("float", "double"):
        return draw(st.sampled_from(["inf", "-inf", "nan", "1.5", "-2.25", "0"]))
    if type_name == "bool":
        return draw(st.sampled_from(["true", "false"]))
    if type_name == "string":
        return draw(st.sampled_from(['"def"', '""', '"d\\303\\251f"']))
    if type_name == "bytes":
        return draw(st.sampled_from(['"\\001b"', '""']))
    low = 0 if type_name.startswith(("uint", "fixed")) else -5
    return str(draw(st.integers(low, 5)))


@st.composite
def _enum_specs(draw: Any, index: int, syntax: str) -> EnumSpec:
    closed = syntax == "proto2" or (syntax == "editions" and draw(st.booleans()))
    numbers = draw(
        st.lists(
            st.sampled_from([0, 1, 2, 3, -1, -7, 5, 2**31 - 1, -(2**31)]),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    if not closed:  # an open enum's first value must be zero
        numbers = [0, *(n for n in numbers if n != 0)]
    return EnumSpec(
        f"E{index}", tuple((f"E{index}_V{i}", n) for i, n in enumerate(numbers)), closed
    )


@st.composite
def _field_spec(draw: Any, *, syntax: str, **kwargs: Any) -> FieldSpec:
    spec = draw(_field_spec_of(syntax=syntax, **kwargs))
    unvalidated = syntax == "editions" and spec.type == "string" and spec.key_type is None
    if unvalidated and draw(st.booleans()):  # a string the schema does not validate
        spec = dataclasses.replace(
            spec, options=(*spec.options, "features.utf8_validation = NONE")
        )
    return spec


@st.composite
def _field_spec_of(
    draw: Any,
    *,
    syntax: str,
    number: int,
    enums: dict[str, EnumSpec],
    later: Sequence[str],
    file_implicit: bool,
    in_oneof: bool,
) -> FieldSpec:
    categories = ["scalar", "scalar", "scalar", "wkt"]
    categories += ["enum"] * bool(enums) + ["message", "message"] * bool(later)
    category = draw(st.sampled_from(categories))
    if category == "scalar":
        type_name = draw(st.sampled_from(SCALAR_TYPES))
    elif category == "enum":
        type_name = draw(st.sampled_from(sorted(enums)))
    elif category == "message":
        type_name = draw(st.sampled_from(list(later)))
    else:
        type_name = draw(st.sampled_from(sorted(WKT_FILES)))
    name = f"f{number}"
    is_message = category in ("message", "wkt")
    closed_enum = category == "enum" and enums[type_name].closed
    if in_oneof:
        return FieldSpec(name, number, type_name)

    shape = draw(st.sampled_from(["singular", "singular", "repeated", "map"]))
    if shape == "map":
        key = draw(st.sampled_from(MAP_KEY_TYPES))
        if category == "enum" and (
            enums[type_name].values[0][1] != 0 or (closed_enum and file_implicit)
        ):
            type_name = "int32"  # a map's enum values start at zero, and are open if implicit
        return FieldSpec(name, number, type_name, key_type=key)
    if shape == "repeated":
        options: tuple[str, ...] = ()
        if not is_message and type_name not in ("string", "bytes") and draw(st.booleans()):
            options = {
                "proto2": ("packed = true",),
                "proto3": ("packed = false",),
                "editions": ("features.repeated_field_encoding = EXPANDED",),
            }[syntax]
        return FieldSpec(name, number, type_name, "repeated", options=options)

    # Singular: the presence rules of each syntax.
    explicit = True
    label = ""
    options = ()
    if syntax == "proto2":
        label = "optional"
    elif syntax == "proto3":
        label = "optional" if is_message or draw(st.booleans()) else ""
        explicit = is_message or label == "optional"
    elif not is_message:  # editions: presence is a feature, file-wide or per field
        choice = draw(st.sampled_from(["inherit", "IMPLICIT", "EXPLICIT"]))
        if closed_enum and (choice == "IMPLICIT" or (choice == "inherit" and file_implicit)):
            choice = "EXPLICIT"  # a closed enum cannot have implicit presence
        if choice != "inherit":
            options = (f"features.field_presence = {choice}",)
        explicit = choice == "EXPLICIT" or (choice == "inherit" and not file_implicit)
    if syntax != "proto3" and explicit and not is_message and draw(st.booleans()):
        options = (*options, f"default = {_default_literal(draw, type_name, enums)}")
    return FieldSpec(name, number, type_name, label, options=options)


@st.composite
def schema_specs(draw: Any, syntax: str | None = None, extensions: bool = False) -> SchemaSpec:
    """A random schema: 0–2 enums and 2–5 messages; the root is the first message.

    ``extensions``: proto2 or editions (proto3 has none), and some messages declare an
    extension range that other declarations extend, at the top level or inside a message:
    scalars, enums, later messages (no recursion), well-known types, repeated ones too."""
    if extensions and syntax is None:
        syntax = draw(st.sampled_from(["proto2", "editions"]))
    syntax = syntax or draw(st.sampled_from(["proto2", "proto3", "editions"]))
    file_implicit = syntax == "editions" and draw(st.booleans())
    enums = {
        spec.name: spec
        for spec in (draw(_enum_specs(i, syntax)) for i in range(draw(st.integers(0, 2))))
    }
    count = draw(st.integers(2, 5))
    names = [f"M{i}" for i in range(count)]
    specs = []
    for index, name in enumerate(names):
        numbers = draw(
            st.lists(
                st.one_of(st.integers(1, 24), st.sampled_from(_SPECIAL_NUMBERS)),
                min_size=1,
                max_size=8,
                unique=True,
            )
        )
        oneof_size = draw(st.integers(0, 3)) if len(numbers) >= 3 else 0
        oneof_size = oneof_size if oneof_size >= 2 else 0
        make = functools.partial(
            _field_spec,
            syntax=syntax,
            enums=enums,
            later=names[index + 1 :],
            file_implicit=file_implicit,
        )
        plain = [draw(make(number=n, in_oneof=False)) for n in numbers[oneof_size:]]
        members = tuple(draw(make(number=n, in_oneof=True)) for n in numbers[:oneof_size])
        oneofs = (("o1", members),) if members else ()
        specs.append(MessageSpec(name, tuple(plain), oneofs))
    options = ("features.field_presence = IMPLICIT",) if file_implicit else ()
    top: list[ExtendSpec] = []
    if extensions and syntax != "proto3" and not file_implicit:
        specs, top = _with_extensions(draw, syntax, enums, specs, names)
    return SchemaSpec(syntax, tuple(enums.values()), tuple(specs), options, extends=tuple(top))


def _with_extensions(
    draw: Any, syntax: str, enums: dict[str, EnumSpec], specs: list[MessageSpec], names: list[str]
) -> tuple[list[MessageSpec], list[ExtendSpec]]:
    """Some messages made extendable, each extended by 1-3 fields declared at the top level
    or inside another message."""
    top: list[ExtendSpec] = []
    nested: dict[int, list[ExtendSpec]] = {}
    extendable = set()
    for index, name in enumerate(names):
        if index and draw(st.integers(0, 2)) == 0:
            continue
        extendable.add(index)
        numbers = draw(
            st.lists(st.integers(*EXTENSION_RANGE), min_size=1, max_size=3, unique=True)
        )
        fields = []
        for number in numbers:
            kinds = ["scalar", "scalar", "wkt"] + ["enum"] * bool(enums)
            kinds += ["message"] * bool(names[index + 1 :])
            kind = draw(st.sampled_from(kinds))
            choices = {
                "scalar": SCALAR_TYPES,
                "wkt": sorted(WKT_FILES),
                "enum": sorted(enums),
                "message": names[index + 1 :],
            }[kind]
            type_name = draw(st.sampled_from(choices))
            repeated = draw(st.integers(0, 2)) == 0
            label = "repeated" if repeated else ("optional" if syntax == "proto2" else "")
            options: tuple[str, ...] = ()
            packable = kind in ("scalar", "enum") and type_name not in ("string", "bytes")
            if repeated and packable and draw(st.booleans()):
                options = ("packed = true",) if syntax == "proto2" else (
                    "features.repeated_field_encoding = EXPANDED",
                )
            fields.append(FieldSpec(f"x{index}_{number}", number, type_name, label, options=options))
        extend = ExtendSpec(name, tuple(fields))
        scope = draw(st.sampled_from([None, *range(len(names))]))
        if scope is None:
            top.append(extend)
        else:
            nested.setdefault(scope, []).append(extend)
    out = [
        dataclasses.replace(
            spec, extendable=i in extendable, extends=tuple(nested.get(i, ()))
        )
        for i, spec in enumerate(specs)
    ]
    return out, top


# --------------------------------------------------------------------------------------------
# Random values

_INT_RANGES = {
    _FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _FD.TYPE_UINT32: (0, 2**32 - 1),
    _FD.TYPE_FIXED32: (0, 2**32 - 1),
    _FD.TYPE_UINT64: (0, 2**64 - 1),
    _FD.TYPE_FIXED64: (0, 2**64 - 1),
}
_TEXT = st.one_of(
    st.sampled_from(["", "a", "é", "日本語", "😀", "\x00", "a\nb", "ключ"]), st.text(max_size=6)
)
# Timestamps stay inside what a Python datetime can hold (years 1..9999), as the spec asks.
_TS_SECONDS = st.one_of(
    st.sampled_from([0, -1, 1, -62135596800, 253402300799, 1_700_000_000]),
    st.integers(-62135596800, 253402300799),
)
_DURATION_SECONDS = st.integers(-315_576_000_000, 315_576_000_000)
_NANOS = st.integers(0, 999_999_999)


def _extremes(low: int, high: int) -> st.SearchStrategy[int]:
    edges = [
        v for v in (0, 1, -1, 127, 128, -129, 2**31 - 1, -(2**31), 2**32 - 1) if low <= v <= high
    ]
    return st.one_of(st.sampled_from([low, high, *edges]), st.integers(low, high))


def scalar_values(fd: FieldDescriptor) -> st.SearchStrategy[Any]:
    """Values of a non-message field (or of a map key / value field)."""
    if fd.type in _INT_RANGES:
        return _extremes(*_INT_RANGES[fd.type])
    if fd.type == _FD.TYPE_FLOAT:
        return st.floats(width=32)
    if fd.type == _FD.TYPE_DOUBLE:
        return st.floats()
    if fd.type == _FD.TYPE_BOOL:
        return st.booleans()
    if fd.type == _FD.TYPE_STRING:
        return _TEXT
    if fd.type == _FD.TYPE_BYTES:
        return st.one_of(st.sampled_from([b"", b"\x00", b"\xff\xfe"]), st.binary(max_size=6))
    if fd.type == _FD.TYPE_ENUM:
        declared = st.sampled_from([v.number for v in fd.enum_type.values])
        if fd.enum_type.is_closed:
            return declared
        return st.one_of(declared, _extremes(-(2**31), 2**31 - 1))
    raise AssertionError(f"not a scalar field: {fd.full_name}")


def map_keys(fd: FieldDescriptor) -> st.SearchStrategy[Any]:
    if fd.type == _FD.TYPE_STRING:
        return st.one_of(st.sampled_from(KEY_STRINGS), st.text(max_size=3))
    if fd.type == _FD.TYPE_BOOL:
        return st.booleans()
    low, high = _INT_RANGES[fd.type]
    return st.one_of(st.sampled_from([k for k in KEY_INTS if k >= low]), _extremes(low, high))


def _is_map(fd: FieldDescriptor) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def _is_message(fd: FieldDescriptor) -> bool:
    return fd.type in (_FD.TYPE_MESSAGE, _FD.TYPE_GROUP)


@functools.cache
def _real_oneofs(descriptor: Descriptor) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(oneof, member names) for the oneofs that are not a proto3 ``optional``'s synthetic one."""
    proto = descriptor_pb2.DescriptorProto()
    descriptor.CopyToProto(proto)
    synthetic = {f.oneof_index for f in proto.field if f.proto3_optional}
    return tuple(
        (oneof.name, tuple(fd.name for fd in oneof.fields))
        for index, oneof in enumerate(descriptor.oneofs)
        if index not in synthetic
    )


def _fill(draw: Any, message: Any, depth: int, max_depth: int) -> None:
    descriptor = message.DESCRIPTOR
    name = descriptor.full_name
    if name == "google.protobuf.Timestamp":
        message.seconds = draw(_TS_SECONDS)
        message.nanos = draw(st.one_of(st.sampled_from([0, 999, 999_999_999]), _NANOS))
        return
    if name == "google.protobuf.Duration":
        seconds = draw(_DURATION_SECONDS)
        nanos = draw(st.one_of(st.sampled_from([0, 1, 999, 1000, 999_999_999]), _NANOS))
        negative = seconds < 0 or (seconds == 0 and draw(st.booleans()))
        message.seconds, message.nanos = seconds, -nanos if negative else nanos  # same sign
        return
    skipped = set()
    for _, members in _real_oneofs(descriptor):
        chosen = draw(st.sampled_from([None, *members]))
        skipped.update(m for m in members if m != chosen)
    oneof_members = {m for _, members in _real_oneofs(descriptor) for m in members}
    for fd in (*descriptor.fields, *extensions_of(descriptor)):
        if fd.name in skipped and not fd.is_extension:
            continue
        container = _value_of(message, fd)
        if _is_map(fd):
            key_fd, value_fd = fd.message_type.fields
            keys = draw(st.lists(map_keys(key_fd), max_size=3, unique=True))
            for key in keys:
                if _is_message(value_fd):
                    _fill_child(draw, container[key], depth, max_depth)
                else:
                    container[key] = draw(scalar_values(value_fd))
        elif is_repeated(fd):
            for _ in range(draw(st.integers(0, 3))):
                if _is_message(fd):
                    _fill_child(draw, container.add(), depth, max_depth)
                else:
                    container.append(draw(scalar_values(fd)))
        elif (fd.name in oneof_members and not fd.is_extension) or draw(st.booleans()):
            if _is_message(fd):
                _fill_child(draw, container, depth, max_depth)
                container.SetInParent()  # present even when left empty
            elif fd.is_extension:
                message.Extensions[fd] = draw(scalar_values(fd))
            else:
                setattr(message, fd.name, draw(scalar_values(fd)))


def _value_of(message: Any, fd: FieldDescriptor) -> Any:
    return message.Extensions[fd] if fd.is_extension else getattr(message, fd.name)


def _fill_child(draw: Any, child: Any, depth: int, max_depth: int) -> None:
    if depth + 1 < max_depth and draw(st.integers(0, 3)) > 0:
        _fill(draw, child, depth + 1, max_depth)


def messages(descriptor: Descriptor, max_depth: int = 4) -> st.SearchStrategy[Any]:
    """Random values of ``descriptor``'s message class (acyclic use of types assumed)."""
    cls = message_factory.GetMessageClass(descriptor)

    @st.composite
    def build(draw: Any) -> Any:
        message = cls()
        _fill(draw, message, 0, max_depth)
        return message

    return build()


# --------------------------------------------------------------------------------------------
# Wire encoding


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32/int64/enum: ten bytes of two's complement
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def _zigzag(value: int) -> int:
    return value << 1 if value >= 0 else ((-value) << 1) - 1


_FIXED = {
    _FD.TYPE_FIXED32: "<I",
    _FD.TYPE_SFIXED32: "<i",
    _FD.TYPE_FLOAT: "<f",
    _FD.TYPE_FIXED64: "<Q",
    _FD.TYPE_SFIXED64: "<q",
    _FD.TYPE_DOUBLE: "<d",
}


def _payload(fd: FieldDescriptor, value: Any) -> tuple[int, bytes]:
    """(wire type, bytes after the tag) of one non-message value."""
    if fd.type in _FIXED:
        fmt = _FIXED[fd.type]
        return (5 if struct.calcsize(fmt) == 4 else 1), struct.pack(fmt, value)
    if fd.type in (_FD.TYPE_SINT32, _FD.TYPE_SINT64):
        return 0, varint(_zigzag(value))
    if fd.type == _FD.TYPE_STRING:
        data = value.encode("utf-8")
        return 2, varint(len(data)) + data
    if fd.type == _FD.TYPE_BYTES:
        return 2, varint(len(value)) + value
    return 0, varint(int(value))  # int32/64, uint32/64, bool, enum


def _record(fd: FieldDescriptor, value: Any) -> bytes:
    wire_type, payload = _payload(fd, value)
    return tag(fd.number, wire_type) + payload


def delimited(number: int, body: bytes) -> bytes:
    return tag(number, 2) + varint(len(body)) + body


def _default(fd: FieldDescriptor) -> Any:
    if fd.type == _FD.TYPE_STRING:
        return ""
    if fd.type == _FD.TYPE_BYTES:
        return b""
    return 0.0 if fd.type in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE) else 0


def _is_default(fd: FieldDescriptor, value: Any) -> bool:
    """Whether leaving ``value`` out reads back the same (-0.0 is not the default)."""
    return _payload(fd, value) == _payload(fd, _default(fd))


def _unknown_field(draw: Any, used: set[int]) -> bytes:
    number = draw(st.sampled_from([n for n in (99, 1000, 12345, 536870910) if n not in used]))
    kind = draw(st.sampled_from(["varint", "fixed64", "bytes", "fixed32", "group"]))
    if kind == "varint":
        return tag(number, 0) + varint(draw(st.integers(0, 2**64 - 1)))
    if kind == "fixed64":
        return tag(number, 1) + draw(st.binary(min_size=8, max_size=8))
    if kind == "fixed32":
        return tag(number, 5) + draw(st.binary(min_size=4, max_size=4))
    if kind == "bytes":
        return delimited(number, draw(st.binary(max_size=5)))
    inner = tag(1, 0) + varint(draw(st.integers(0, 300))) + delimited(2, b"xy")
    return tag(number, 3) + inner + tag(number, 4)


def _undeclared(draw: Any, fd: FieldDescriptor) -> int:
    """A value of closed enum `fd` it does not declare (upb keeps it as an unknown field)."""
    declared = {v.number for v in fd.enum_type.values}
    return draw(
        st.sampled_from([n for n in (4, 6, 63, 64, 1000, -2, -(2**31) + 1) if n not in declared])
    )


def _closed_enum_noise(draw: Any, descriptor: Descriptor) -> list[bytes]:
    """Undeclared values of the message's closed-enum fields: singular or unpacked records,
    or a packed run (upb: each one an unknown varint record), which leave the field as it is."""
    fields = [fd for fd in descriptor.fields if is_closed_enum(fd)]
    if not fields or draw(st.integers(0, 3)) != 0:
        return []
    fd = draw(st.sampled_from(fields))
    values = draw(st.lists(st.builds(lambda: None), min_size=1, max_size=2))
    numbers = [_undeclared(draw, fd) for _ in values]
    if is_repeated(fd) and draw(st.booleans()):
        return [delimited(fd.number, b"".join(varint(n) for n in numbers))]
    return [tag(fd.number, 0) + varint(n) for n in numbers]


_WRONG_PAYLOAD = {0: varint(5), 1: bytes(8), 2: varint(1) + b"x", 5: bytes(4)}


def _rejected_entry(draw: Any, fd: FieldDescriptor) -> bytes:
    """A map entry upb does not insert but keeps whole as an unknown field of the parent: one
    with an unknown field, a key or value under another wire type, or (a closed-enum value)
    an undeclared value. The value, if a message, is empty: upb writes a kept entry back with
    its value re-serialized, wirearrow with the value's bytes as they came."""
    key_fd, value_fd = fd.message_type.fields
    parts = []
    if draw(st.booleans()):
        parts.append(_record(key_fd, draw(map_keys(key_fd))))
    if draw(st.booleans()):
        if _is_message(value_fd):
            parts.append(delimited(2, b""))
        else:
            parts.append(_record(value_fd, draw(scalar_values(value_fd))))
    extras = ["unknown", "key wire type", "value wire type"]
    if is_closed_enum(value_fd):
        extras.append("undeclared")
    extra = draw(st.sampled_from(extras))
    if extra == "unknown":
        parts.append(_unknown_field(draw, {1, 2}))
    elif extra == "undeclared":
        parts.append(tag(2, 0) + varint(_undeclared(draw, value_fd)))
    else:
        number, field = (1, key_fd) if extra == "key wire type" else (2, value_fd)
        right = 2 if _is_message(field) else _payload(field, _default(field))[0]
        wrong = draw(st.sampled_from([w for w in _WRONG_PAYLOAD if w != right]))
        parts.append(tag(number, wrong) + _WRONG_PAYLOAD[wrong])
    return delimited(fd.number, b"".join(draw(st.permutations(parts))))


def _message_body(draw: Any, message: Any) -> list[bytes]:
    """The message as wire chunks; cutting the list anywhere keeps every field's order."""
    descriptor = message.DESCRIPTOR
    present = {fd.full_name for fd, _ in message.ListFields()}
    groups: list[list[bytes]] = []
    for fd in (*descriptor.fields, *extensions_of(descriptor)):
        if fd.full_name in present:
            groups.append(_field_chunks(draw, message, fd))
        elif not is_repeated(fd) and not fd.has_presence and draw(st.integers(0, 5)) == 0:
            groups.append([_record(fd, _default(fd))])  # an explicit zero reads as absent
    if len(groups) > 1 and draw(st.booleans()):
        groups = draw(st.permutations(groups))
    used = {fd.number for fd in descriptor.fields}
    for _ in range(draw(st.integers(0, 2)) if draw(st.integers(0, 3)) == 0 else 0):
        groups.insert(draw(st.integers(0, len(groups))), [_unknown_field(draw, used)])
    for chunk in _closed_enum_noise(draw, descriptor):
        groups.insert(draw(st.integers(0, len(groups))), [chunk])
    for chunk in _wrong_wire_type_noise(draw, descriptor):
        groups.insert(draw(st.integers(0, len(groups))), [chunk])
    return [chunk for group in groups for chunk in group]


_FIXED64 = (_FD.TYPE_FIXED64, _FD.TYPE_SFIXED64, _FD.TYPE_DOUBLE)
_FIXED32 = (_FD.TYPE_FIXED32, _FD.TYPE_SFIXED32, _FD.TYPE_FLOAT)


def _wrong_wire_type_noise(draw: Any, descriptor: Descriptor) -> list[bytes]:
    """A known field (not a group, not a map) under a wire type it cannot have: upb keeps it
    as an unknown field and leaves the field as it is. A repeated scalar's packed form (2)
    is not wrong, so it is not drawn for one."""
    if draw(st.integers(0, 4)):
        return []
    fields = [fd for fd in descriptor.fields if fd.type != _FD.TYPE_GROUP and not _is_map(fd)]
    if not fields:
        return []
    fd = draw(st.sampled_from(fields))
    if _is_message(fd) or fd.type in (_FD.TYPE_STRING, _FD.TYPE_BYTES):
        right = {2}
    else:
        right = {1 if fd.type in _FIXED64 else 5 if fd.type in _FIXED32 else 0}
        if is_repeated(fd):
            right.add(2)
    wrong = draw(st.sampled_from([w for w in _WRONG_PAYLOAD if w not in right]))
    return [tag(fd.number, wrong) + _WRONG_PAYLOAD[wrong]]


def _message_record(draw: Any, fd: FieldDescriptor, message: Any) -> list[bytes]:
    """A sub-message as one occurrence, or (when singular) split in two that the parser merges."""
    number = fd.number
    body = _message_body(draw, message)
    if body and not is_repeated(fd) and draw(st.integers(0, 3)) == 0:
        cut = draw(st.integers(0, len(body)))
        return [delimited(number, b"".join(body[:cut])), delimited(number, b"".join(body[cut:]))]
    return [delimited(number, b"".join(body))]


# Bytes that are not UTF-8, which the runtime accepts in a string it does not validate.
NOT_UTF8 = (b"\xc3\x28", b"\xff", b"\xed\xa0\x80", b"a\x80b", b"\xf4\x90\x80\x80")


def _value_record(draw: Any, fd: FieldDescriptor, value: Any) -> list[bytes]:
    if _is_message(fd):
        return _message_record(draw, fd, value)
    if (
        fd.type == _FD.TYPE_STRING
        and not needs_utf8_check(fd)
        # (a map's value: the whole entry becomes an unknown field of the parent; keys
        # are not drawn so, as the runtime cannot iterate such a map for the oracle)
        and not (fd.containing_type.GetOptions().map_entry and fd.number == 1)
        and draw(st.integers(0, 5)) == 0
    ):
        return [delimited(fd.number, draw(st.sampled_from(NOT_UTF8)))]
    return [_record(fd, value)]


def _field_chunks(draw: Any, message: Any, fd: FieldDescriptor) -> list[bytes]:
    value = _value_of(message, fd)
    if _is_map(fd):
        key_fd, value_fd = fd.message_type.fields
        chunks = []
        moved = False  # a value not UTF-8: its entry becomes an unknown field of the parent
        for key in sorted(value):  # the oracle reads map entries in key order
            item = value[key]
            key_part = (
                b"" if _is_default(key_fd, key) and draw(st.booleans()) else _record(key_fd, key)
            )
            if _is_message(value_fd):
                value_part = b"".join(_value_record(draw, value_fd, item))
                if item.ByteSize() == 0 and draw(st.booleans()):
                    value_part = b""
            else:
                value_part = b"".join(_value_record(draw, value_fd, item))
                moved |= value_part != _record(value_fd, item)
                if _is_default(value_fd, item) and draw(st.booleans()):
                    value_part = b""
            parts = [key_part, value_part]
            if draw(st.integers(0, 4)) == 0:
                parts.reverse()
            chunks.append(delimited(fd.number, b"".join(parts)))
        # An earlier entry that a later one replaces (not when an entry moved: wirearrow's
        # column would keep the earlier one, docs/types.md).
        if chunks and not moved and draw(st.integers(0, 4)) == 0:
            key = draw(st.sampled_from(sorted(value)))
            if _is_message(value_fd):
                earlier = draw(messages(value_fd.message_type, max_depth=1))
                junk = delimited(2, b"".join(_message_body(draw, earlier)))
            else:
                junk = _record(value_fd, draw(scalar_values(value_fd)))
            chunks.insert(0, delimited(fd.number, _record(key_fd, key) + junk))
        if draw(st.integers(0, 3)) == 0:  # an entry upb keeps as an unknown field instead
            chunks.insert(draw(st.integers(0, len(chunks))), _rejected_entry(draw, fd))
        return chunks
    if is_repeated(fd):
        packable = not _is_message(fd) and fd.type not in (_FD.TYPE_STRING, _FD.TYPE_BYTES)
        if packable and draw(st.booleans()):  # packed, in one or two runs, whatever the schema
            cut = draw(st.integers(0, len(value)))
            runs = [list(value)[:cut], list(value)[cut:]] if draw(st.booleans()) else [list(value)]
            return [
                delimited(fd.number, b"".join(_payload(fd, v)[1] for v in run))
                for run in runs
                if run
            ]
        return [chunk for item in value for chunk in _value_record(draw, fd, item)]
    chunks = []
    if draw(st.integers(0, 4)) == 0:  # something earlier that the real value must override
        oneof = fd.containing_oneof
        others = [f for f in (oneof.fields if oneof else ()) if f.number != fd.number]
        other = draw(st.sampled_from(others)) if others and draw(st.booleans()) else fd
        if _is_message(other):
            if other.number != fd.number:  # another oneof member: cleared by the real one
                chunks.append(delimited(other.number, b""))
        else:
            chunks.append(_record(other, draw(scalar_values(other))))
    return chunks + _value_record(draw, fd, value)


@st.composite
def wire_bytes(draw: Any, message: Any) -> bytes:
    """``message`` serialized with random but valid wire-format variations."""
    return b"".join(_message_body(draw, message))


# --------------------------------------------------------------------------------------------
# Random plans

_WKT_LEAVES = {"google.protobuf.Any", "google.protobuf.FieldMask", *WKT_FILES}
_INT_LIKE = {*_INT_RANGES, _FD.TYPE_ENUM}


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _comparison(draw: Any, fd: FieldDescriptor, rel: str) -> str:
    if fd.type == _FD.TYPE_BOOL:
        return draw(st.sampled_from([rel, f"!{rel}", f"{rel} == true", f"{rel} != false"]))
    if fd.type == _FD.TYPE_STRING:
        op = draw(st.sampled_from(["==", "!=", "<", ">="]))
        literal = _literal(draw(st.sampled_from(KEY_STRINGS)))
    else:
        unsigned = fd.type in (_FD.TYPE_UINT32, _FD.TYPE_UINT64, _FD.TYPE_FIXED32, _FD.TYPE_FIXED64)
        op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
        literal = str(draw(st.sampled_from([0, 1, 2, 7] if unsigned else [0, 1, 2, -1, 7])))
    if draw(st.integers(0, 5)) == 0:
        return rel  # a lone field: truthiness
    return f"{rel} {op} {literal}" if draw(st.integers(0, 4)) else f"{literal} {op} {rel}"


def _filter_fields(descriptor: Descriptor) -> list[tuple[str, FieldDescriptor]]:
    """Relative paths (``.w``, ``.banner.w``) a predicate on ``descriptor`` may compare."""
    out = []
    for fd in descriptor.fields:
        if is_repeated(fd):
            continue
        if fd.type in _INT_LIKE or fd.type in (_FD.TYPE_BOOL, _FD.TYPE_STRING):
            out.append((f".{fd.name}", fd))
        elif _is_message(fd) and fd.message_type.full_name not in _WKT_LEAVES:
            for sub in fd.message_type.fields:
                if not is_repeated(sub) and (sub.type in _INT_LIKE or sub.type == _FD.TYPE_STRING):
                    out.append((f".{fd.name}.{sub.name}", sub))
    return out


def _predicate(draw: Any, descriptor: Descriptor) -> str | None:
    candidates = _filter_fields(descriptor)
    if not candidates:
        return None

    def atom() -> str:
        rel, fd = draw(st.sampled_from(candidates))
        return _comparison(draw, fd, rel)

    shape = draw(st.integers(0, 5))
    if shape == 0:
        return f"{atom()} && {atom()}"
    if shape == 1:
        return f"{atom()} || {atom()}"
    if shape == 2:
        return f"!({atom()})"
    return atom()


_LIST_SELECTORS = [
    "[*]",
    "[*]",
    "[0]",
    "[-1]",
    "[1]",
    "[1:]",
    "[:2]",
    "[::-1]",
    "[::2]",
    "[-2:]",
    "[3:1]",
    "[:]",
]


def _walk(
    draw: Any, prefix: str, descriptor: Descriptor, depth: int
) -> tuple[str, list[tuple[str, Descriptor]]]:
    """Extend ``prefix`` (a path at a message) to a leaf; also return where it could branch."""
    stems = []
    text = prefix
    while True:
        oneofs = [name for name, _ in _real_oneofs(descriptor)]
        if oneofs and draw(st.integers(0, 5)) == 0:  # which member of a oneof is set
            name = draw(st.sampled_from(oneofs))
            return (f"{text}.{name}" if text else name), stems
        fd = draw(st.sampled_from([*descriptor.fields, *extensions_of(descriptor)]))
        name = field_name(fd)
        text = f"{text}.{name}" if text and not fd.is_extension else f"{text}{name}"
        can_go_on = depth < 4
        element = fd
        if _is_map(fd):
            key_fd, element = fd.message_type.fields
            choice = draw(st.sampled_from(["leaf", "wild", "key", "key"]))
            if choice == "leaf":
                return text, stems
            text += "[*]" if choice == "wild" else f"[{_literal(draw(_key_literals(key_fd)))}]"
        elif is_repeated(fd):
            choice = draw(st.sampled_from(["leaf", "filter", "match", *_LIST_SELECTORS]))
            if choice == "leaf":
                return text, stems
            predicate = (
                _predicate(draw, fd.message_type)
                if choice in ("filter", "match") and _is_message(fd)
                else None
            )
            if predicate and choice == "match":  # the N-th kept element: no fan-out
                text += f"[?({predicate})][{draw(st.sampled_from([0, -1, 1, -2]))}]"
            elif predicate:
                text += f"[?({predicate})]"
            else:
                text += choice if choice not in ("filter", "match") else "[*]"
        if not _is_message(element):
            return text, stems
        inner = element.message_type
        if inner.full_name in _WKT_LEAVES:
            if can_go_on and draw(st.integers(0, 9)) == 0:  # into the WKT's own fields
                descriptor, depth = inner, depth + 1
                continue
            return text, stems
        if not is_repeated(fd) and can_go_on and draw(st.integers(0, 9)) == 0:
            predicate = _predicate(draw, inner)  # a filter on a singular message keeps or drops it
            text += f"[?({predicate})]" if predicate else ""
        if not can_go_on or draw(st.integers(0, 3)) == 0:
            return text, stems  # a struct leaf
        stems.append((text, inner))
        descriptor, depth = inner, depth + 1


def _key_literals(fd: FieldDescriptor) -> st.SearchStrategy[Any]:
    if fd.type == _FD.TYPE_STRING:
        return st.sampled_from(KEY_STRINGS)
    if fd.type == _FD.TYPE_BOOL:
        return st.booleans()
    low = _INT_RANGES[fd.type][0]
    return st.sampled_from([k for k in KEY_INTS if k >= low])


@st.composite
def plans(draw: Any, descriptor: Descriptor, max_columns: int = 8) -> list[str]:
    """1..max_columns distinct paths; later ones often grow from an earlier one's prefix."""
    stems: list[tuple[str, Descriptor]] = [("", descriptor)]
    paths: list[str] = []
    for _ in range(draw(st.integers(1, max_columns))):
        prefix, at = stems[draw(st.integers(0, len(stems) - 1))]
        path, more = _walk(draw, prefix, at, prefix.count(".") + (prefix != ""))
        stems += more
        if path not in paths:
            paths.append(path)
    return paths
