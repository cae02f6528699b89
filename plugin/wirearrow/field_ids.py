"""Parquet field ids (``PARQUET:field_id``) for every Arrow field wirearrow produces.

Iceberg, Spark and Trino follow a Parquet column by its field id, not its name: a column
renamed or moved keeps its id, a column dropped never lends it to another. Protobuf already
has such an identity, the field number, but numbers repeat across nested messages, and a
table needs ids unique over the whole schema: nested fields, list elements and map keys and
values included, each a positive 32-bit integer.

An id here is a pure function of the field's **key** (no state, no table, no registry): the
same key gets the same id in every run, process, machine, schema version and wirearrow
release. A key is the path from the root to the field, one step a level:

* a protobuf field: its number (``n + 1`` as a step code); ``ELEMENT`` (0): the element
  of a list; ``UNKNOWN`` (1): a message's ``_unknown`` column (keep_unknown); a map's key
  and value are fields 1 and 2 of its entry message;
* a column that is not a protobuf field (a flat plan's column, an expression, an extra
  column such as ``_record_index`` or a carried one): its name, as the first step, then
  the steps above below it (a struct of an expression result: its children's names).

Ids live in three disjoint ranges (docs/evolution.md states the guarantee):

* ``1 .. 2**29-1``: a top-level protobuf field's id is its **field number**;
* ``2**29 .. 2**30-1``: a key of numbers whose Elias-gamma code fits in 28 bits (most
  paths up to four or five levels of small numbers): the code itself, so distinct keys
  never share an id (injective by construction);
* ``2**30 .. 2**31-2**24-1``: every other key (deeper paths, named columns): a 64-bit BLAKE2b
  hash of the key reduced to the range. Two such keys can meet on one id (about
  ``n**2 / 2**31`` for ``n`` of them in a schema: rare below thousands of fields, certain
  in a recursive message unrolled to 100,000). Every schema wirearrow builds goes through
  :func:`with_unique_ids`: of two fields on one id the shallower (then the one first by
  path) keeps it, the other is probed to a free id that is a pure function of its path
  and the id it lost -- so ids stay unique and reproducible, and a field that keeps its
  id keeps it when deeper fields are added (a larger ``max_depth``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator
from typing import TypeAlias

import pyarrow as pa

from wirearrow.errors import PlanError

__all__ = [
    "ELEMENT",
    "FIELD_ID",
    "MAP_KEY",
    "MAP_VALUE",
    "UNKNOWN",
    "Key",
    "KeyTree",
    "check_unique",
    "field_id",
    "field_id_of",
    "field_ids",
    "number_step",
    "type_keys",
    "with_children",
    "with_field_id",
    "with_keys",
    "with_missing_ids",
    "with_unique_ids",
    "without_field_ids",
]

FIELD_ID = b"PARQUET:field_id"  # the Arrow metadata key pyarrow writes as the Parquet field id
ELEMENT = 0  # step: the element of a list
UNKNOWN = 1  # step: a message's unknown fields (the `_unknown` column)
MAP_KEY = 2  # step: a map's key (field 1 of the entry message)
MAP_VALUE = 3  # step: a map's value (field 2 of the entry message)

Step: TypeAlias = int | str
Key: TypeAlias = tuple[Step, ...]
# A field's key and its nested fields' key trees, in the order of its type's children (a
# struct's fields; a list's element; a map's key, value).
KeyTree: TypeAlias = tuple[Key, tuple["KeyTree", ...]]

_MAX_NUMBER = 2**29 - 1  # protobuf's largest field number
_PACKED_BASE = 2**29
_PACKED_BITS = 28  # a packed key's code, after its leading 1 bit
_HASHED_BASE = 2**30
# Ids stay below 2**31 - 2**24: a table tool that numbers a column it adds from the largest
# id so far (Iceberg's last-column-id + 1) has 16 million left before 32 bits overflow.
_HEADROOM = 2**24
_HASHED_SPAN = 2**31 - _HEADROOM - _HASHED_BASE  # ids up to 2**31 - 2**24 - 1
_PERSON = b"wirearrow.fid.1"  # the hash's personalisation: changing it changes every id


def number_step(number: int) -> int:
    """The key step of protobuf field number ``number``."""
    if not 1 <= number <= _MAX_NUMBER:
        raise ValueError(f"a protobuf field number is 1..{_MAX_NUMBER}, not {number}")
    return number + 1


def field_id(key: Key) -> int:
    """The field id of ``key`` (1 .. 2**31-2**24-1): see the module's doc."""
    if not key:
        raise ValueError("a field key has at least one step")
    numbers = [s for s in key if type(s) is int]
    if len(numbers) == len(key):
        if len(numbers) == 1 and numbers[0] > UNKNOWN:
            return numbers[0] - 1  # a top-level field: its number
        packed = 1
        for step in numbers:
            x = step + 1  # Elias gamma codes x >= 1 in 2*len(x)-1 bits
            width = 2 * x.bit_length() - 1
            packed = (packed << width) | x
            if packed.bit_length() > _PACKED_BITS + 1:
                break
        else:
            return _PACKED_BASE + packed
    return _HASHED_BASE + _hash(key) % _HASHED_SPAN


def _hash(key: Key) -> int:
    data = bytearray()
    for step in key:
        if isinstance(step, str):
            raw = step.encode("utf-8", "surrogatepass")
            data += b"\x01" + _varint(len(raw)) + raw
        else:
            data += b"\x00" + _varint(step)
    return int.from_bytes(hashlib.blake2b(bytes(data), digest_size=8, person=_PERSON).digest(), "big")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _metadata(field: pa.Field, key: Key) -> dict[bytes, bytes]:
    metadata = dict(field.metadata or {})
    metadata[FIELD_ID] = str(field_id(key)).encode()
    return metadata


def type_keys(t: pa.DataType, key: Key) -> KeyTree:
    """The key tree of a field of type ``t`` keyed ``key``, children by their place: a
    list's element ``ELEMENT``, a map's key and value ``MAP_KEY`` and ``MAP_VALUE``, a
    struct's children their names (for types that do not come from a protobuf message:
    an expression's result, a carried column)."""
    return key, tuple(
        type_keys(child.type, (*key, step)) for step, child in _children(t, names=True)
    )


def _children(t: pa.DataType, names: bool = False) -> list[tuple[Step, pa.Field]]:
    """The fields nested right below a field of type ``t``, each with its structural step."""
    if pa.types.is_struct(t):
        return [(t.field(i).name if names else i, t.field(i)) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [(MAP_KEY, t.key_field), (MAP_VALUE, t.item_field)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [(ELEMENT, t.value_field)]
    return []


def with_children(t: pa.DataType, children: list[pa.Field]) -> pa.DataType:
    """``t`` with its nested fields replaced by ``children`` (same types but metadata)."""
    if pa.types.is_struct(t):
        return pa.struct(children)
    if pa.types.is_map(t):
        return pa.map_(children[0], children[1], keys_sorted=t.keys_sorted)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(children[0], t.list_size)
    if pa.types.is_large_list(t):
        return pa.large_list(children[0])
    if pa.types.is_list(t):
        return pa.list_(children[0])
    return t


def with_keys(field: pa.Field, tree: KeyTree) -> pa.Field:
    """``field`` and every field nested in it with the id of its key in ``tree``."""
    key, subtrees = tree
    nested = [f for _, f in _children(field.type)]
    if len(nested) != len(subtrees):
        raise ValueError(f"the key tree of {field.name} does not match its type {field.type}")
    t = with_children(field.type, [with_keys(f, sub) for f, sub in zip(nested, subtrees, strict=True)])
    return field.with_type(t).with_metadata(_metadata(field, key))


def with_field_id(field: pa.Field, key: Key) -> pa.Field:
    """``field`` with the id of ``key`` and its nested fields with the ids of
    :func:`type_keys`."""
    return with_keys(field, type_keys(field.type, key))


def field_id_of(field: pa.Field) -> int | None:
    """The field id ``field`` carries, None when it has none."""
    raw = (field.metadata or {}).get(FIELD_ID)
    return int(raw) if raw is not None else None


def _walk(fields: object, where: str = "") -> Iterator[tuple[str, pa.Field]]:
    """Every field of ``fields`` (a schema or struct), nested ones too, by display path."""
    for f in fields:  # type: ignore[attr-defined]
        path = f"{where}.{f.name}" if where else f.name
        yield path, f
        yield from _walk_type(f.type, path)


def _walk_type(t: pa.DataType, path: str) -> Iterator[tuple[str, pa.Field]]:
    if pa.types.is_struct(t):
        yield from _walk(t, path)
    elif pa.types.is_map(t):
        for label, child in (("key", t.key_field), ("value", t.item_field)):
            yield f"{path}[{label}]", child
            yield from _walk_type(child.type, f"{path}[{label}]")
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield f"{path}[*]", t.value_field
        yield from _walk_type(t.value_field.type, f"{path}[*]")


def field_ids(schema: pa.Schema) -> dict[str, int]:
    """The id of every field of ``schema`` that has one, by path (``a.b``, a list's element
    ``a[*]``, a map's ``m[key]`` and ``m[value]``): what a table sink maps to its own ids."""
    return {path: i for path, f in _walk(schema) if (i := field_id_of(f)) is not None}


def check_unique(schema: pa.Schema, what: str = "the output schema") -> None:
    """A :class:`~wirearrow.PlanError` when two fields of ``schema`` share an id."""
    seen: dict[int, str] = {}
    problems = []
    for path, f in _walk(schema):
        i = field_id_of(f)
        if i is None:
            continue
        other = seen.setdefault(i, path)
        if other != path:
            problems.append(
                f"field id {i} of {path} is also the id of {other} in {what}: two field "
                "keys hashed to one id (docs/evolution.md: field ids); rename the column, or "
                "set field_ids=False to write no ids"
            )
    if problems:
        raise PlanError(problems)


def with_unique_ids(schema: pa.Schema, movable: Collection[str] = ()) -> pa.Schema:
    """``schema`` with no id on two fields: where hashed ids collide, the field first by
    (top-level column not in ``movable``, depth, path) keeps the id and the others move to
    a probed free id in the hashed range (see the module's doc). ``schema`` itself when no
    two ids meet (the common case: one walk). Two fields sharing an id outside the hashed
    range were not numbered here (metadata the caller set): a PlanError naming both."""
    walked = [(path, i) for path, f in _walk(schema) if (i := field_id_of(f)) is not None]
    ids = [i for _, i in walked]
    used = set(ids)
    if len(used) == len(ids):
        return schema
    owner: dict[int, str] = {}
    moved: dict[str, int] = {}
    for path, i in sorted(walked, key=lambda pi: _priority(pi[0], movable)):
        other = owner.setdefault(i, path)
        if other == path:
            continue
        if i < _HASHED_BASE:
            raise PlanError(
                [
                    f"field id {i} of {path} is also the id of {other}: ids below "
                    f"{_HASHED_BASE} are protobuf field numbers and packed paths, which "
                    "wirearrow never gives twice; the schema's field metadata was set by hand"
                ]
            )
        probe = 0
        new = i
        while new in used:
            probe += 1
            new = _HASHED_BASE + _hash(("probe", i, path, probe)) % _HASHED_SPAN
        used.add(new)
        moved[path] = new
    return pa.schema(_with_moved(schema, "", moved), metadata=schema.metadata)


def _priority(path: str, movable: Collection[str]) -> tuple[bool, int, str]:
    top = path.split(".", 1)[0].split("[", 1)[0]
    return top in movable, path.count(".") + path.count("["), path


def _with_moved(fields: object, where: str, moved: dict[str, int]) -> list[pa.Field]:
    """``fields`` (a schema or struct) with the ids of ``moved`` set, by :func:`_walk`'s paths."""
    out = []
    for f in fields:  # type: ignore[attr-defined]
        path = f"{where}.{f.name}" if where else f.name
        out.append(_moved_field(f, path, moved))
    return out


def _moved_field(f: pa.Field, path: str, moved: dict[str, int]) -> pa.Field:
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct(_with_moved(t, path, moved))
    elif pa.types.is_map(t):
        key = _moved_field(t.key_field, f"{path}[key]", moved)
        item = _moved_field(t.item_field, f"{path}[value]", moved)
        t = pa.map_(key, item, keys_sorted=t.keys_sorted)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t = with_children(t, [_moved_field(t.value_field, f"{path}[*]", moved)])
    f = f.with_type(t)
    if path in moved:
        metadata = dict(f.metadata or {})
        metadata[FIELD_ID] = str(moved[path]).encode()
        f = f.with_metadata(metadata)
    return f


def with_missing_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` with an id on every field: those that carry none (a column added after
    the decode: an engine's Kafka offset, a dead letter's) get the id of their name and
    position, as named columns do; a schema without any id is left as it is (ids were
    turned off). Checked unique."""
    walked = list(_walk(schema))
    if not any(field_id_of(f) is not None for _, f in walked):
        return schema
    if all(field_id_of(f) is not None for _, f in walked):
        return schema
    fields = [
        f if _all_ids(f) else _fill(f, (f.name,))
        for f in schema
    ]
    return with_unique_ids(pa.schema(fields, metadata=schema.metadata))


def _all_ids(f: pa.Field) -> bool:
    return field_id_of(f) is not None and all(
        field_id_of(c) is not None for _, c in _walk_type(f.type, f.name)
    )


def _fill(f: pa.Field, key: Key) -> pa.Field:
    """``f`` and its children with ids where they have none, keyed below ``key``."""
    children = [_fill(child, (*key, step)) for step, child in _children(f.type, names=True)]
    f = f.with_type(with_children(f.type, children))
    return f if field_id_of(f) is not None else f.with_metadata(_metadata(f, key))


def without_field_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` with no ``PARQUET:field_id`` anywhere (other metadata kept)."""

    def strip(f: pa.Field) -> pa.Field:
        f = f.with_type(with_children(f.type, [strip(c) for _, c in _children(f.type)]))
        metadata = {k: v for k, v in (f.metadata or {}).items() if k != FIELD_ID}
        return f.with_metadata(metadata) if metadata else f.remove_metadata()

    return pa.schema([strip(f) for f in schema], metadata=schema.metadata)
