from typing import TypeAlias

import numpy as np
from typing_extensions import Buffer

from wirearrow._core.buffers import OwnedBuffer
from wirearrow._core.layout import EncodeColumn, EncodeEntry, EncodeNode

# numpy arrays are buffers, but numpy's stubs say so only from Python 3.12 on.
_Bytes: TypeAlias = Buffer | np.ndarray

KIND: dict[str, int]
SHAPE: dict[str, int]
PRESENCE: dict[str, int]
STATUS_TEXT: dict[int, str]
COL_WIDTH: int
ENTRY_WIDTH: int
NODE_WIDTH: int

def tables(
    cols: _Bytes, entries: _Bytes, nodes: _Bytes
) -> tuple[list[EncodeColumn], list[EncodeEntry], list[EncodeNode]]: ...

def encode(
    cols: _Bytes, entries: _Bytes, nodes: _Bytes, n_rows: int, capacity: int = 0
) -> tuple[int, int, int, OwnedBuffer | None, int, OwnedBuffer | None, bool]: ...
def map_order(
    offsets: _Bytes,
    n_entries: int,
    kind: int,
    key_offset: int,
    data: _Bytes,
    key_offsets: _Bytes | None,
    wide: bool,
) -> np.ndarray | None: ...
