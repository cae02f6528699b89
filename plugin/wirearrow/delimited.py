"""Streams of length-delimited protobuf records: files and framed buffers."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from wirearrow._core.framing import FRAMINGS, compact, split

__all__ = ["FRAMINGS", "read_delimited", "split_framed"]


def _framing_code(framing: str) -> int:
    try:
        return FRAMINGS[framing]
    except KeyError:
        raise ValueError(f"framing must be one of {sorted(FRAMINGS)}, not {framing!r}") from None


def split_framed(buffer: object, framing: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(starts, ends, consumed) of the whole records in a framed buffer, without copying.

    `consumed` < len(buffer) means the buffer ends inside a record (a truncated stream).
    """
    starts, ends, consumed = split(memoryview(buffer).cast("B"), _framing_code(framing))
    return np.frombuffer(starts, dtype=np.int64), np.frombuffer(ends, dtype=np.int64), consumed


def read_delimited(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview | pa.Buffer,
    framing: str = "varint",
) -> pa.BinaryArray:
    """Read every record of a length-delimited stream into a BinaryArray (one copy).

    framing: "varint" (protobuf's writeDelimitedTo), "u32le" or "u32be" (4-byte lengths).
    A stream that ends inside a record raises ValueError naming the byte offset.
    Records over 2 GiB in total come back as a LargeBinaryArray.
    """
    if isinstance(source, str | os.PathLike):
        with pa.memory_map(os.fspath(source), "r") as f:
            buffer = f.read_buffer()
    else:
        buffer = source
    view = memoryview(buffer).cast("B")
    starts, ends, consumed = split_framed(view, framing)
    if consumed != len(view):
        raise ValueError(
            f"truncated {framing} stream: the record at byte {consumed} runs past the end "
            f"({len(view) - consumed} bytes left)"
        )
    offsets, values, large = compact(view, starts, ends)
    t = pa.large_binary() if large else pa.binary()
    return pa.Array.from_buffers(
        t, len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(values)]
    )
