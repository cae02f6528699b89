"""Base-128 varints in Python, for the few places that write or read one outside the core
(a Confluent prefix, a JSON record's tag): the core's own readers are in ``_core/wire.pxd``.

Protobuf's encoding: seven bits a byte, least significant group first, the high bit set on
every byte but the last; ZigZag maps a signed n to ``(n << 1) ^ (n >> 63)``.
"""

from __future__ import annotations

__all__ = ["read_varint", "varint", "zigzag"]


def varint(value: int) -> bytes:
    """``value`` (>= 0, < 2**64) as a varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zigzag(value: int) -> int:
    """ZigZag of a signed 64-bit value (what sint64 and Confluent's indexes write)."""
    return (value << 1) ^ (value >> 63)


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``data[pos]`` and the position after it; IndexError when cut short."""
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
