from typing import TypeAlias

import numpy as np
from typing_extensions import Buffer

from wirearrow._core.buffers import OwnedBuffer

# numpy arrays are buffers, but numpy's stubs say so only from Python 3.12 on.
_Bytes: TypeAlias = Buffer | np.ndarray

def select_slice(
    offsets: _Bytes, parents: _Bytes, start: int | None, stop: int | None, step: int | None
) -> tuple[np.ndarray, np.ndarray]: ...
def group_offsets(parents: _Bytes, n_parent: int) -> np.ndarray: ...
def list_offsets(parents: _Bytes, n_parent: int) -> OwnedBuffer: ...
def expand(rows: _Bytes, sel: _Bytes, sel_off: _Bytes) -> tuple[np.ndarray, np.ndarray]: ...
def keys_unique(
    offsets: _Bytes, values: _Bytes, width: int, arena: _Bytes, strings: bool
) -> bool: ...
def take_indices(idx: _Bytes, n_elements: int) -> tuple[np.ndarray | None, int] | None: ...
