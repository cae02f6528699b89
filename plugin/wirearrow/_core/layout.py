"""The rows of the compiled tables, described once.

The plan builders (wirearrow.plan.program for the decoder, wirearrow.plan.encoding for the
encoder) make these records by field name; the extensions read them by field name too
(decoder.Program takes sequences of them, encoder.encode int64 matrices whose columns are
the fields in this order), and hand them back from their C structs (Program.entry / node /
column, encoder.tables) so tests/test_layout.py can check that every field survives the trip.
The C structs are in tables.pxd; a field added here and not there, or not copied, fails it.

Plain Python on purpose: the builders import it without importing the extensions' internals,
and mypy checks the builders against it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "DecodeAnySpec",
    "DecodeColumn",
    "DecodeDefault",
    "DecodeEntry",
    "DecodeEnumSet",
    "DecodeMapSpec",
    "DecodeNode",
    "EncodeColumn",
    "EncodeEntry",
    "EncodeNode",
    "EncodeSpec",
    "position",
]


# -- decoder (tables.pxd: FieldEntry, Node; ColumnStore / GroupStore are per call) ---------


class DecodeEntry(NamedTuple):
    """One field of a node (FieldEntry; its `action` is derived by Program)."""

    number: int  # field number
    wire_type: int  # wire type of one unpacked value
    kind: int  # decoder.KIND
    flags: int  # decoder.FLAG bits
    column: int  # column slot written (scalar kinds), -1 = read and drop
    child: int  # node descended into (message kinds), else -1
    group: int  # element group opened per occurrence (repeated), else -1
    clear: int  # first index into clear_cols (oneof siblings to unset), -1 = none
    n_clear: int
    aux: int  # flag "closed": its DecodeEnumSet; flag "map": its DecodeMapSpec; kind "any":
    # its DecodeAnySpec; else -1


class DecodeNode(NamedTuple):
    """One message at one position of the plan trie (Node)."""

    entries: int  # first DecodeEntry of this node
    n_entries: int
    dense: int  # first slot of this node in the dense table
    dense_len: int  # field numbers below it are looked up directly
    group: int  # group whose current element this node's columns belong to (-1: checked only)
    presence: int  # column marked present when the node is entered, -1 = none
    defaults: int  # first index into the defaults
    n_defaults: int
    unknown: int  # bytes column of the raw unknown fields, -1 = skip them, -2 = a map entry
    # that holds one is not inserted (upb keeps it whole as an unknown field of the parent)


class DecodeColumn(NamedTuple):
    width: int  # 0 (presence only), 1, 4 or 8 (bytes columns: 8)
    group: int  # one slot per element of this group


class DecodeAnySpec(NamedTuple):
    """The declared types of an Any field (AnySpec, AnyType): a value whose type URL ends
    in `/name` is decoded by the node of that name."""

    names: tuple[str, ...]  # full message names
    nodes: tuple[int, ...]  # the node of each


class DecodeEnumSet(NamedTuple):
    """The declared values of a closed enum (EnumSet): any other value is an unknown field."""

    values: tuple[int, ...]  # sorted, distinct int32


class DecodeMapSpec(NamedTuple):
    """What a map's entries may hold (MapSpec): an entry with anything else, or with an
    undeclared value of a closed enum, is an unknown field of the parent, as upb keeps it."""

    key_wire_type: int
    value_wire_type: int
    key_form: int  # decoder.FORM: how the key is written back
    value_form: int
    key_implicit: int  # 1: implicit presence, a zero key is not written back
    value_implicit: int
    value_enum: int  # DecodeEnumSet of a closed-enum value, -1 = none


class DecodeDefault(NamedTuple):
    column: int  # an implicit-presence column filled on entry to its node
    value: bytes  # 16 bytes, little-endian, the first `width` used


# -- encoder (tables.pxd: EncodeSpec, ArrowColumn, EncodeEntry, EncodeNode) -------------


class EncodeSpec(NamedTuple):
    """How one Arrow array is reached from the batch (compiled once per Arrow schema)."""

    parent: int  # the spec of the parent array, -1 = the batch
    access: int  # encoder.ACCESS: column, field, values or given (built in Python per call)
    child: int  # which column of the batch / child of the parent
    layout: int  # encoder.LAYOUT: the array's buffers
    wide: int  # 1: 64-bit offsets


class EncodeColumn(NamedTuple):
    """One Arrow array of one batch (addresses are 0 for none)."""

    validity: int  # validity bitmap address, 0 when all valid
    offset: int  # the array's offset (physical slot = logical index + offset)
    values: int  # fixed-width values, boolean bitmap or string data
    offsets: int  # int32 (int64 when wide) offsets of strings / lists
    wide: int  # 1: 64-bit offsets
    bad: int  # 1 byte per logical slot: cannot be encoded


class EncodeEntry(NamedTuple):
    """One field of an encoder node, nodes' entries in ascending field number."""

    tag: int  # field number << 3 | wire type (2 when packed)
    end_tag: int  # groups: field number << 3 | 4, else 0
    kind: int  # encoder.KIND
    shape: int  # encoder.SHAPE
    presence: int  # encoder.PRESENCE
    col: int  # the field's array, indexed like its message
    elem: int  # repeated: the element array, else -1
    child: int  # messages, groups, map entries: the node, else -1
    oneof: int  # 1-based oneof of the message, 0 = none
    check: int  # encoder.CHECK of each value
    aux: int  # time part | slot width << 8 (kind "time"), enum set (check "enum"), slot width
    # (checks "timestamp" / "duration"), key order (encoder.MAP_KEYS of a map field), else 0
    scale: int  # units a second of a temporal slot, else 0


class EncodeNode(NamedTuple):
    first: int  # first EncodeEntry
    n_entries: int


def position(record: type[tuple], name: str) -> int:
    """The index of field `name` of a record (its column in an encoder matrix)."""
    fields: tuple[str, ...] = record._fields  # type: ignore[attr-defined]
    return fields.index(name)
