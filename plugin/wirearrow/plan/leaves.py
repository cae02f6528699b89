"""What a plan column reads, as a tree of leaves over element groups.

Every leaf produces one Arrow value per element of its `group`; a column then picks, for
each output row, the element its selection assigns to that row (see selections.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from google.protobuf.descriptor import FieldDescriptor

__all__ = [
    "JsonLeaf",
    "JsonRestLeaf",
    "Leaf",
    "ListLeaf",
    "MapLeaf",
    "OneofLeaf",
    "ScalarLeaf",
    "StructLeaf",
    "TemporalLeaf",
]


@dataclass(frozen=True, eq=False)
class Leaf:
    group: int
    type: pa.DataType


@dataclass(frozen=True, eq=False)
class ScalarLeaf(Leaf):
    column: int
    field: FieldDescriptor | None = None  # the protobuf field (enum names, map keys)


@dataclass(frozen=True, eq=False)
class CutLeaf(ScalarLeaf):
    """A recursive message below the max_depth cut: its serialized bytes (binary)."""

    message: str = ""  # full name of the message type
    validate: bool = False  # validate="full": the bytes must parse as that message


@dataclass(frozen=True, eq=False)
class StructLeaf(Leaf):
    presence: int  # column, -1 when the struct is always present (a list element)
    children: tuple[tuple[str, Leaf], ...]
    # each child's protobuf field number (0: `_unknown`; -1: no field, keyed by its name: a
    # oneof's case, `_unknown_wkt`)
    numbers: tuple[int, ...] = ()


@dataclass(frozen=True, eq=False)
class ListLeaf(Leaf):
    """A repeated field read whole: the elements of `child_group` under each element."""

    child_group: int
    element: Leaf
    presence: int  # column of the message holding the field, -1 = always present


@dataclass(frozen=True, eq=False)
class MapLeaf(Leaf):
    child_group: int
    key: Leaf
    value: Leaf
    presence: int


@dataclass(frozen=True, eq=False)
class TemporalLeaf(Leaf):
    """Timestamp, Duration, google.type.Date or TimeOfDay from their component columns."""

    kind: str
    columns: tuple[int, ...]
    presence: int


@dataclass(frozen=True, eq=False)
class JsonLeaf(Leaf):
    """google.protobuf.Struct / Value / ListValue, rendered as JSON text."""

    column: int  # views of the serialized sub-message
    message: str  # full name


@dataclass(frozen=True, eq=False)
class EnumLeaf(ScalarLeaf):
    """An enum read as the names of its values: dictionary<int32, utf8>."""

    names: tuple[tuple[int, str], ...] = ()  # (number, name), declaration order


@dataclass(frozen=True, eq=False)
class OneofLeaf(Leaf):
    """Which member of a oneof is set: dictionary<int32, utf8> of the member names (index =
    the member's position in the oneof), null when none is."""

    oneof: str  # full name of the oneof
    names: tuple[str, ...]  # member names, declaration order: the dictionary
    # Per member, a decoder column whose validity says the member is set (its value, its
    # presence, or the views of its bytes); the decoder unsets a member's columns when
    # another member comes, so at most one is valid per element.
    columns: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class JsonRestLeaf(Leaf):
    """keep_unknown: a Struct / Value / ListValue's serialized bytes where its JSON text
    cannot say everything the runtime holds (unknown fields inside it, a Value with no kind,
    a NaN's payload), null where the text can (binary)."""

    column: int  # views of the serialized sub-message (the JsonLeaf's column)
    message: str  # full name
