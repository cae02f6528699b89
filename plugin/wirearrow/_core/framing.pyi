from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
from typing_extensions import Buffer

from wirearrow._core.buffers import OwnedBuffer

# numpy arrays are buffers, but numpy's stubs say so only from Python 3.12 on.
_Bytes: TypeAlias = Buffer | np.ndarray

FRAMINGS: dict[str, int]
TRAILERS: dict[str, int]

HARDWARE_CRC32C: bool

def crc32c(data: _Bytes, masked: bool = False, table: bool = False) -> int: ...
def split(
    data: _Bytes, framing: int, base: int = 0
) -> tuple[OwnedBuffer, OwnedBuffer, int, OwnedBuffer | None]: ...
def frame(data: _Bytes, offsets: _Bytes, framing: int) -> OwnedBuffer: ...
def prefix(data: _Bytes, offsets: _Bytes, head: _Bytes) -> tuple[OwnedBuffer, OwnedBuffer, bool]: ...
def array_bounds(offsets_buffer: _Bytes, first: int, n: int, wide: bool) -> OwnedBuffer: ...
def compact(
    data: _Bytes, starts: _Bytes, ends: _Bytes
) -> tuple[OwnedBuffer, OwnedBuffer, bool]: ...
def pack_records(
    records: Sequence[_Bytes | None],
) -> tuple[OwnedBuffer, OwnedBuffer, OwnedBuffer, list[int]]: ...

CONFLUENT_OK: int
CONFLUENT_BAD_MAGIC: int
CONFLUENT_TRUNCATED: int
CONFLUENT_BAD_INDEX: int
CONFLUENT_UNKNOWN_ID: int
CONFLUENT_WRONG_MESSAGE: int

def confluent_prefixes(
    data: _Bytes,
    starts: _Bytes,
    ends: _Bytes,
    ids: _Bytes,
    path_offsets: _Bytes,
    path_values: _Bytes,
) -> tuple[OwnedBuffer, OwnedBuffer, OwnedBuffer]: ...

MERGE_OK: int
MERGE_UNDECLARED: int
MERGE_MALFORMED: int

def merge_custom(
    base: _Bytes,
    base_starts: _Bytes,
    base_ends: _Bytes,
    custom: _Bytes,
    custom_starts: _Bytes,
    custom_ends: _Bytes,
    numbers: _Bytes,
) -> tuple[OwnedBuffer, OwnedBuffer, OwnedBuffer, OwnedBuffer, OwnedBuffer, OwnedBuffer]: ...
