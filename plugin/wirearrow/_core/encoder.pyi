from collections.abc import Buffer

import numpy as np

from wirearrow._core.buffers import OwnedBuffer
from wirearrow._core.layout import EncodeColumn, EncodeEntry, EncodeNode

KIND: dict[str, int]
SHAPE: dict[str, int]
PRESENCE: dict[str, int]
STATUS_TEXT: dict[int, str]
COL_WIDTH: int
ENTRY_WIDTH: int
NODE_WIDTH: int

def tables(
    cols: Buffer, entries: Buffer, nodes: Buffer
) -> tuple[list[EncodeColumn], list[EncodeEntry], list[EncodeNode]]: ...

def encode(
    cols: Buffer, entries: Buffer, nodes: Buffer, n_rows: int, capacity: int = 0
) -> tuple[int, int, int, OwnedBuffer | None, int, OwnedBuffer | None, bool]: ...
def map_order(
    offsets: Buffer,
    n_entries: int,
    kind: int,
    key_offset: int,
    data: Buffer,
    key_offsets: Buffer | None,
    wide: bool,
) -> np.ndarray | None: ...
