from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeAlias, overload

import numpy as np
from typing_extensions import Buffer, disjoint_base

# numpy arrays are buffers, but numpy's stubs say so only from Python 3.12 on.
_Bytes: TypeAlias = Buffer | np.ndarray

@disjoint_base
class OwnedBuffer:
    @property
    def unwritten(self) -> bool: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

def pack_bits(flags: _Bytes, n: int) -> tuple[OwnedBuffer, int]: ...
def gather_strings(
    arena: _Bytes, offsets: _Bytes, valid: _Bytes, n: int, indices: np.ndarray | None = None
) -> tuple[OwnedBuffer | None, int, OwnedBuffer | None, OwnedBuffer | None]: ...
def buffer_pool(limit: int | None = None) -> dict[str, int]: ...

class PoolUser:
    """Made by each decode call (a thread's first one gives it a pool of its own)."""

@disjoint_base
class PoolOwner:
    """A thread's hold on its pool, kept in its thread state dict until the thread ends."""

def epoch_values(
    seconds: _Bytes,
    nanos: _Bytes,
    seconds_valid: _Bytes | None,
    nanos_valid: _Bytes | None,
    n: int,
    per: int,
) -> tuple[OwnedBuffer, OwnedBuffer | None, int, int]: ...

@disjoint_base
class ArrowTree:
    def __init__(
        self,
        prog: np.ndarray,
        kids: np.ndarray,
        roots: np.ndarray,
        schema: Any,  # a pyarrow Schema: _core names no pyarrow type
        import_batch: Callable[[int, Any], Any],
    ) -> None: ...
    def build(
        self,
        col_values: list[object],
        col_valid: list[object],
        col_arena: list[object],
        counts: list[int],
        list_offsets: dict[int, Any],
        given: dict[int, Any],
        rows: Sequence[np.ndarray | None] | None = None,
        drops: Sequence[Sequence[int]] | None = None,
        roots: np.ndarray | None = None,
        schema: Any = None,
        absent: np.ndarray | None = None,
        into: Any = None,  # the accelerator's TreeArrays
    ) -> Any: ...
    @overload
    def absent(
        self, counts: list[int] | np.ndarray, col_valid: list[object], given: Iterable[int], threshold: int,
        state_only: Literal[False] = False,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None: ...
    @overload
    def absent(
        self, counts: list[int] | np.ndarray, col_valid: list[object], given: Iterable[int], threshold: int,
        state_only: Literal[True],
    ) -> np.ndarray | None: ...
def epoch_outside(
    seconds: _Bytes,
    nanos: _Bytes,
    seconds_valid: _Bytes | None,
    nanos_valid: _Bytes | None,
    present: _Bytes | None,
    n: int,
    per: int,
    duration: bool,
) -> tuple[np.ndarray, np.ndarray]: ...

def copy_entries(values: list[Any], into: np.ndarray, source: np.ndarray) -> None: ...
