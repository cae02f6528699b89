from collections.abc import Buffer

from wirearrow._core.buffers import OwnedBuffer

KIND: dict[str, int]
SHAPE: dict[str, int]
PRESENCE: dict[str, int]
STATUS_TEXT: dict[int, str]
COL_WIDTH: int
ENTRY_WIDTH: int

def encode(
    cols: Buffer, entries: Buffer, nodes: Buffer, n_rows: int, capacity: int = 0
) -> tuple[int, int, int, OwnedBuffer | None, int, OwnedBuffer | None, bool]: ...
