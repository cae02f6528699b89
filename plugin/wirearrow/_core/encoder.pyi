from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
from typing_extensions import Buffer, disjoint_base

from wirearrow._core.buffers import OwnedBuffer
from wirearrow._core.layout import EncodeColumn, EncodeEntry, EncodeNode, EncodeSpec

# numpy arrays are buffers, but numpy's stubs say so only from Python 3.12 on.
_Bytes: TypeAlias = Buffer | np.ndarray

KIND: dict[str, int]
SHAPE: dict[str, int]
PRESENCE: dict[str, int]
CHECK: dict[str, int]
TIME_PART: dict[str, int]
MAP_KEYS: dict[str, int]
ACCESS: dict[str, int]
LAYOUT: dict[str, int]
STATUS_TEXT: dict[int, str]
SPEC_WIDTH: int
COL_WIDTH: int
ENTRY_WIDTH: int
NODE_WIDTH: int

@disjoint_base
class Plan:
    n_specs: int
    n_entries: int
    n_nodes: int
    n_enum_sets: int
    def __init__(
        self,
        specs: _Bytes,
        entries: _Bytes,
        nodes: _Bytes,
        enum_sets: Any = (),
    ) -> None: ...
    def tables(self) -> tuple[list[EncodeSpec], list[EncodeEntry], list[EncodeNode]]: ...
    def columns(
        self,
        batch: Any,
        derive: Callable[[int, bool], EncodeColumn | None],
        export: Callable[[Any, int], None] | None = None,
    ) -> list[EncodeColumn]: ...
    def encode(
        self,
        batch: Any,
        n_rows: int,
        derive: Callable[[int, bool], EncodeColumn | None],
        capacity: int = 0,
        export: Callable[[Any, int], None] | None = None,
    ) -> tuple[int, int, int, OwnedBuffer | None, int, OwnedBuffer | None, bool]: ...
