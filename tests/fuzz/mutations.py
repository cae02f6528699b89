"""Structure-aware damage to protobuf records: the fuzz harness's mutators.

A record is split into its fields (tag, wire type, the bytes of the value) by a tolerant
reader; a mutation picks a level (the record, or a length-delimited value that itself reads
as a message, recursively), changes a field there, and writes the lengths of the enclosing
levels back, so that the damage sits deep inside an otherwise well-framed record. Every
mutator takes a ``random.Random``: a seed replays a run exactly.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MUTATORS", "Field", "fields", "mutate", "random_message"]


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def padded_varint(value: int, size: int) -> bytes:
    """``value`` as a varint of exactly ``size`` bytes (continuation bits, zero groups):
    valid up to 10 bytes, a decode error beyond."""
    short = bytearray(varint(value))
    while len(short) < size:
        short[-1] |= 0x80
        short.append(0)
    return bytes(short)


def _read_varint(data: bytes, pos: int) -> tuple[int, int] | None:
    value = shift = 0
    while pos < len(data) and shift < 70:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7
    return None


@dataclass
class Field:
    """One field of a message: its tag bytes and its value bytes (a length-delimited value
    without its length prefix; a group with its end tag)."""

    number: int
    wire_type: int
    tag: bytes
    value: bytes

    def encode(self) -> bytes:
        if self.wire_type == 2:
            return self.tag + varint(len(self.value)) + self.value
        return self.tag + self.value


def fields(data: bytes) -> list[Field] | None:
    """The fields of a message, or None when the bytes do not read as one."""
    out: list[Field] = []
    pos = 0
    while pos < len(data):
        read = _read_varint(data, pos)
        if read is None:
            return None
        key, after = read
        number, wire_type = key >> 3, key & 7
        tag = data[pos:after]
        pos = after
        if number == 0 or wire_type in (4, 6, 7):
            return None
        if wire_type == 0:
            read = _read_varint(data, pos)
            if read is None:
                return None
            value, end = data[pos : read[1]], read[1]
        elif wire_type in (1, 5):
            end = pos + (8 if wire_type == 1 else 4)
            value = data[pos:end]
        elif wire_type == 2:
            read = _read_varint(data, pos)
            if read is None or read[1] + read[0] > len(data):
                return None
            end = read[1] + read[0]
            value = data[read[1] : end]
        else:  # a group: up to its matching end tag
            end = _group_end(data, pos, number)
            if end is None:
                return None
            value = data[pos:end]
        if end > len(data):
            return None
        out.append(Field(number, wire_type, tag, value))
        pos = end
    return out


def _group_end(data: bytes, pos: int, number: int) -> int | None:
    depth = 1
    while pos < len(data):
        read = _read_varint(data, pos)
        if read is None:
            return None
        key, pos = read
        wire_type = key & 7
        if wire_type == 3:
            depth += 1
        elif wire_type == 4:
            depth -= 1
            if depth == 0:
                return pos if key >> 3 == number else None
        elif wire_type == 0:
            read = _read_varint(data, pos)
            if read is None:
                return None
            pos = read[1]
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
        elif wire_type == 2:
            read = _read_varint(data, pos)
            if read is None:
                return None
            pos = read[1] + read[0]
        else:
            return None
    return None


def _join(parts: list[Field]) -> bytes:
    return b"".join(f.encode() for f in parts)


def _tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


# -- mutators: (rng, the fields of one level, every seed record) -> new bytes of the level

Mutator = Callable[[random.Random, list[Field], list[bytes]], bytes]


def _bit_flip(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    data = bytearray(_join(parts))
    for _ in range(rng.randint(1, 3)):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def _truncate(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    data = _join(parts)
    return data[: rng.randrange(len(data))] if data else data


def _field_zero(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    junk = Field(0, rng.choice([0, 2, 5]), _tag(0, 0), b"\x01")
    parts = list(parts)
    parts.insert(rng.randint(0, len(parts)), junk)
    return _join(parts)


def _reserved_wire_type(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    wire = rng.choice([6, 7])
    number = rng.choice(parts).number if parts else rng.randint(1, 30)
    bad = Field(number, wire, _tag(number, wire), bytes(rng.randrange(256) for _ in range(3)))
    parts = list(parts)
    parts.insert(rng.randint(0, len(parts)), bad)
    return _join(parts)


def _group_mismatch(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    number = rng.choice(parts).number if parts else rng.randint(1, 30)
    choice = rng.randrange(4)
    if choice == 0:
        extra = _tag(number, 4)  # an end tag with nothing open
    elif choice == 1:
        extra = _tag(number, 3)  # a start tag never closed
    elif choice == 2:
        extra = _tag(number, 3) + _tag(number + 1, 4)  # closed by the wrong number
    else:
        extra = _tag(number, 3) + _tag(1, 0) + b"\x01" + _tag(number, 4)  # a valid group
    data = [f.encode() for f in parts]
    data.insert(rng.randint(0, len(data)), extra)
    return b"".join(data)


def _overlong_varint(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    """A tag, value or length re-encoded in more bytes than it needs: 10 at most is valid
    (upb accepts it), 11 is not."""
    if not parts:
        return _field_zero(rng, parts, seeds)
    parts = list(parts)
    i = rng.randrange(len(parts))
    f = parts[i]
    size = rng.choice([2, 5, 10, 10, 11])
    where = rng.randrange(3)
    if where == 0:
        tag = padded_varint(f.number << 3 | f.wire_type, size)
        parts[i] = Field(f.number, f.wire_type, tag, f.value)
        return _join(parts)
    if where == 1 and f.wire_type == 0:
        value = _read_varint(f.value, 0)
        if value is not None:
            parts[i] = Field(f.number, 0, f.tag, padded_varint(value[0], size))
        return _join(parts)
    out = [p.encode() for p in parts]
    if f.wire_type == 2:
        out[i] = f.tag + padded_varint(len(f.value), size) + f.value
    return b"".join(out)


def _huge_length(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    length = rng.choice([2**31 - 1, 2**31, 2**32 + 3, 2**63 - 1, 2**64 - 1, 1 << 40])
    number = rng.choice(parts).number if parts else 1
    out = [f.encode() for f in parts]
    out.insert(rng.randint(0, len(out)), _tag(number, 2) + varint(length) + b"xy")
    return b"".join(out)


_BAD_UTF8 = [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82", b"a\x80b", b"\xf4\x90\x80\x80"]


def _bad_utf8(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    parts = list(parts)
    delimited = [i for i, f in enumerate(parts) if f.wire_type == 2]
    bad = rng.choice(_BAD_UTF8)
    if delimited:
        i = rng.choice(delimited)
        f = parts[i]
        at = rng.randint(0, len(f.value))
        parts[i] = Field(f.number, 2, f.tag, f.value[:at] + bad + f.value[at:])
    else:
        number = rng.randint(1, 24)
        parts.append(Field(number, 2, _tag(number, 2), bad))
    return _join(parts)


def _packed_swap(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    """Packed <-> unpacked: a run of varints in one LEN value becomes one field per value,
    and unpacked varint fields of one number are packed together."""
    parts = list(parts)
    packed = [i for i, f in enumerate(parts) if f.wire_type == 2 and _varints(f.value)]
    if packed and rng.random() < 0.5:
        i = rng.choice(packed)
        f = parts[i]
        values = _varints(f.value) or []
        tag = _tag(f.number, 0)
        parts[i : i + 1] = [Field(f.number, 0, tag, varint(v)) for v in values]
        return _join(parts)
    numbers = [f.number for f in parts if f.wire_type == 0]
    if not numbers:
        return _join(parts)
    number = rng.choice(numbers)
    run = b"".join(f.value for f in parts if f.number == number and f.wire_type == 0)
    kept = [f for f in parts if not (f.number == number and f.wire_type == 0)]
    kept.insert(rng.randint(0, len(kept)), Field(number, 2, _tag(number, 2), run))
    return _join(kept)


def _varints(data: bytes) -> list[int] | None:
    out, pos = [], 0
    while pos < len(data):
        read = _read_varint(data, pos)
        if read is None:
            return None
        out.append(read[0])
        pos = read[1]
    return out


def _concatenate(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    """Two messages concatenated: a valid merge (last scalar wins, messages merge)."""
    other = rng.choice(seeds) if seeds else b""
    mine = _join(parts)
    return mine + other if rng.random() < 0.5 else other + mine


def _map_entry(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    """Odd map entries (any LEN value that reads as a message stands in for one): no key, no
    value, a key or value twice, an unknown field inside, fields in reverse order."""
    parts = list(parts)
    candidates = [i for i, f in enumerate(parts) if f.wire_type == 2 and fields(f.value)]
    if not candidates:
        entry = _tag(1, 0) + b"\x01" + _tag(1, 0) + b"\x02"
        n = rng.randint(1, 24)
        parts.append(Field(n, 2, _tag(n, 2), entry))
        return _join(parts)
    i = rng.choice(candidates)
    f = parts[i]
    inner = fields(f.value) or []
    choice = rng.randrange(5)
    if choice == 0:
        inner = [x for x in inner if x.number != 1]
    elif choice == 1:
        inner = [x for x in inner if x.number != 2]
    elif choice == 2 and inner:
        inner = [*inner, rng.choice(inner)]
    elif choice == 3:
        inner = [*inner, Field(7, 0, _tag(7, 0), b"\x2a")]
    else:
        inner = inner[::-1]
    parts[i] = Field(f.number, 2, f.tag, _join(inner))
    return _join(parts)


def _shuffle(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    """Reorder, drop or repeat fields: all valid for the runtime."""
    parts = list(parts)
    choice = rng.randrange(3)
    if choice == 0:
        rng.shuffle(parts)
    elif choice == 1 and parts:
        del parts[rng.randrange(len(parts))]
    elif parts:
        parts.insert(rng.randint(0, len(parts)), rng.choice(parts))
    return _join(parts)


def _wrong_wire_type(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    """A known field sent with another (valid) wire type: an unknown field for upb."""
    if not parts:
        return b""
    parts = list(parts)
    i = rng.randrange(len(parts))
    f = parts[i]
    wire = rng.choice([w for w in (0, 1, 2, 5) if w != f.wire_type])
    value = {0: b"\x05", 1: bytes(8), 5: bytes(4), 2: b"\x01z"}[wire]
    parts[i] = Field(f.number, wire, _tag(f.number, wire), value[1:] if wire == 2 else value)
    return _join(parts)


def _splice(rng: random.Random, parts: list[Field], seeds: list[bytes]) -> bytes:
    data = _join(parts)
    at = rng.randint(0, len(data))
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
    return data[:at] + junk + data[at:]


MUTATORS: dict[str, Mutator] = {
    "bit_flip": _bit_flip,
    "truncate": _truncate,
    "field_zero": _field_zero,
    "reserved_wire_type": _reserved_wire_type,
    "group_mismatch": _group_mismatch,
    "overlong_varint": _overlong_varint,
    "huge_length": _huge_length,
    "bad_utf8": _bad_utf8,
    "packed_swap": _packed_swap,
    "concatenate": _concatenate,
    "map_entry": _map_entry,
    "shuffle": _shuffle,
    "wrong_wire_type": _wrong_wire_type,
    "splice": _splice,
}


def mutate(rng: random.Random, record: bytes, seeds: list[bytes]) -> tuple[bytes, str]:
    """One structure-aware mutation of ``record``: (new bytes, what was done)."""
    name = rng.choice(sorted(MUTATORS))
    # Descend into a length-delimited value that reads as a message, now and then.
    chain: list[tuple[list[Field], int]] = []
    data = record
    parts = fields(data)
    while parts and rng.random() < 0.45:
        nested = [i for i, f in enumerate(parts) if f.wire_type == 2 and fields(f.value)]
        if not nested:
            break
        i = rng.choice(nested)
        chain.append((parts, i))
        parts = fields(parts[i].value)
    if parts is None:  # not a message at all (already damaged): raw damage only
        name = rng.choice(["bit_flip", "truncate", "splice", "concatenate"])
        parts = [Field(1, 2, b"", data)] if data else []
        out = MUTATORS[name](rng, [], seeds) if not data else _raw(rng, name, data, seeds)
        return out, f"{name} (raw)"
    out = MUTATORS[name](rng, parts, seeds)
    for outer, i in reversed(chain):
        f = outer[i]
        outer = list(outer)
        outer[i] = Field(f.number, 2, f.tag, out)
        out = _join(outer)
    return out, f"{name} at depth {len(chain)}"


def _raw(rng: random.Random, name: str, data: bytes, seeds: list[bytes]) -> bytes:
    if name == "truncate":
        return data[: rng.randrange(len(data))]
    if name == "concatenate":
        return data + rng.choice(seeds) if seeds else data
    if name == "splice":
        at = rng.randint(0, len(data))
        return data[:at] + bytes(rng.randrange(256) for _ in range(3)) + data[at:]
    out = bytearray(data)
    out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


# -- valid seed messages ---------------------------------------------------------------

_FLOATS = [0.0, -0.0, 1.5, -2.25, 1e300, -1e-300, float("inf"), float("-inf"), float("nan")]
_TEXT = ["", "a", "héllo", "日本語", "emoji \U0001f600", "x" * 40]


def random_message(rng: random.Random, cls: type, depth: int = 0, max_depth: int = 4) -> object:
    """A message of ``cls`` with random fields set (any schema; required fields too, most of
    the time), values including the extremes of each type."""
    message = cls()
    _fill(rng, message, depth, max_depth)
    return message


def _fill(rng: random.Random, message: object, depth: int, max_depth: int) -> None:
    from google.protobuf.descriptor import FieldDescriptor as F

    descriptor = message.DESCRIPTOR  # type: ignore[attr-defined]
    if descriptor.full_name == "google.protobuf.Value":
        _fill_value(rng, message, depth, max_depth)
        return
    # the fields, then the extensions the schema's pool declares for the message
    # (sorted: the pool lists them in an order of its own, which differs from run to run)
    extensions = sorted(descriptor.file.pool.FindAllExtensions(descriptor), key=lambda e: e.number) if descriptor.extension_ranges else []
    for fd in (*descriptor.fields, *extensions):
        required = fd.is_required and rng.random() < 0.95
        if not required and rng.random() < 0.45:
            continue
        is_message = fd.type in (F.TYPE_MESSAGE, F.TYPE_GROUP)
        if is_message and depth >= max_depth and not required:
            continue
        container = message.Extensions[fd] if fd.is_extension else getattr(message, fd.name)  # type: ignore[attr-defined]
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            key_fd, value_fd = fd.message_type.fields_by_number[1], fd.message_type.fields_by_number[2]
            for _ in range(rng.randint(0, 3)):
                key = _scalar(rng, key_fd)
                if value_fd.message_type is not None:
                    if depth < max_depth:
                        _fill(rng, container[key], depth + 1, max_depth)
                else:
                    container[key] = _scalar(rng, value_fd)
            continue
        if fd.is_repeated:
            for _ in range(rng.randint(0, 3)):
                if is_message:
                    _fill(rng, container.add(), depth + 1, max_depth)
                else:
                    container.append(_scalar(rng, fd))
            continue
        if is_message:
            child = container
            child.SetInParent()
            _fill(rng, child, depth + 1, max_depth)
        elif fd.is_extension:
            message.Extensions[fd] = _scalar(rng, fd)  # type: ignore[attr-defined]
        else:
            setattr(message, fd.name, _scalar(rng, fd))


def _fill_value(rng: random.Random, value: object, depth: int, max_depth: int) -> None:
    kind = rng.choice(["null", "number", "string", "bool", "struct", "list"])
    if kind in ("struct", "list") and depth >= max_depth:
        kind = "number"
    if kind == "null":
        value.null_value = 0  # type: ignore[attr-defined]
    elif kind == "number":
        value.number_value = rng.choice(_FLOATS)  # type: ignore[attr-defined]
    elif kind == "string":
        value.string_value = rng.choice(_TEXT)  # type: ignore[attr-defined]
    elif kind == "bool":
        value.bool_value = rng.random() < 0.5  # type: ignore[attr-defined]
    elif kind == "struct":
        fields = value.struct_value.fields  # type: ignore[attr-defined]
        for _ in range(rng.randint(0, 3)):
            _fill_value(rng, fields[rng.choice(_TEXT)], depth + 1, max_depth)
        value.struct_value.SetInParent()  # type: ignore[attr-defined]
    else:
        values = value.list_value.values  # type: ignore[attr-defined]
        for _ in range(rng.randint(0, 3)):
            _fill_value(rng, values.add(), depth + 1, max_depth)
        value.list_value.SetInParent()  # type: ignore[attr-defined]


def _scalar(rng: random.Random, fd: object) -> object:
    from google.protobuf.descriptor import FieldDescriptor as F

    t = fd.type  # type: ignore[attr-defined]
    if t == F.TYPE_ENUM:
        numbers = [v.number for v in fd.enum_type.values]  # type: ignore[attr-defined]
        if not fd.enum_type.is_closed and rng.random() < 0.2:  # type: ignore[attr-defined]
            return rng.choice([-1, 77, 2**31 - 1])
        return rng.choice(numbers)
    if t == F.TYPE_BOOL:
        return rng.random() < 0.5
    if t == F.TYPE_STRING:
        return rng.choice(_TEXT)
    if t == F.TYPE_BYTES:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 6)))
    if t in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        v = rng.choice(_FLOATS)
        return v if t == F.TYPE_DOUBLE or abs(v) < 1e30 or v != v or v in (float("inf"), float("-inf")) else 1.0
    bits = 64 if t in (F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64, F.TYPE_UINT64, F.TYPE_FIXED64) else 32
    unsigned = t in (F.TYPE_UINT32, F.TYPE_UINT64, F.TYPE_FIXED32, F.TYPE_FIXED64)
    lo, hi = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return rng.choice([lo, hi, 0, 1, -1 if not unsigned else 2, rng.randint(lo, hi)])
