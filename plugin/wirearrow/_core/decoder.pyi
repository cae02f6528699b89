from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
from typing_extensions import Buffer, disjoint_base

from wirearrow._core.layout import (
    DecodeAnySpec,
    DecodeColumn,
    DecodeDefault,
    DecodeEntry,
    DecodeEnumSet,
    DecodeMapSpec,
    DecodeNode,
)

# numpy arrays are buffers, but numpy's stubs say so only from Python 3.12 on.
_Bytes: TypeAlias = Buffer | np.ndarray

KIND: dict[str, int]
FLAG: dict[str, int]
FORM: dict[str, int]
STATUS_TEXT: dict[int, str]
ANY_TYPE_LEVEL: int
POLICY_RAISE: int
POLICY_SKIP: int

@disjoint_base
class Program:
    @property
    def n_entries(self) -> int: ...
    @property
    def n_nodes(self) -> int: ...
    @property
    def n_cols(self) -> int: ...
    @property
    def n_groups(self) -> int: ...
    @property
    def n_defaults(self) -> int: ...
    @property
    def max_nesting(self) -> int: ...
    @property
    def n_enum_sets(self) -> int: ...
    @property
    def n_map_specs(self) -> int: ...
    @property
    def n_any_specs(self) -> int: ...
    def __init__(
        self,
        entries: Sequence[DecodeEntry],
        nodes: Sequence[DecodeNode],
        dense: Sequence[int],
        defaults: Sequence[DecodeDefault],
        clear_cols: Sequence[int],
        columns: Sequence[DecodeColumn],
        groups: Sequence[int],
        max_nesting: int,
        enum_sets: Sequence[DecodeEnumSet] = (),
        map_specs: Sequence[DecodeMapSpec] = (),
        any_specs: Sequence[DecodeAnySpec] = (),
    ) -> None: ...
    def any_spec(self, i: int) -> DecodeAnySpec: ...
    def entry(self, i: int) -> DecodeEntry: ...
    def node(self, i: int) -> DecodeNode: ...
    def column(self, i: int) -> DecodeColumn: ...
    def default(self, i: int) -> DecodeDefault: ...
    def enum_set(self, i: int) -> DecodeEnumSet: ...
    def map_spec(self, i: int) -> DecodeMapSpec: ...
    def _spare_state(self) -> tuple[list[int], list[int]] | None: ...

@disjoint_base
class Result:
    # Lists of the buffers decode() made (OwnedBuffer; a bytes column's col_values: count + 1
    # uint32 offsets into its col_arena). The assembler takes them over: it drops each one
    # (None) once read and shares validity arrays between columns, hence Any.
    @property
    def group_parents(self) -> list[Any]: ...
    @property
    def group_counts(self) -> list[int]: ...
    @property
    def group_sizes(self) -> np.ndarray: ...
    @property
    def col_values(self) -> list[Any]: ...
    @property
    def col_valid(self) -> list[Any]: ...
    @property
    def col_arena(self) -> list[Any]: ...
    @property
    def col_counts(self) -> list[int]: ...
    @property
    def arena_bytes(self) -> np.ndarray: ...
    @property
    def errors(self) -> list[tuple[int, int, int, list[tuple[int, int, int]]]]: ...
    @property
    def records(self) -> int: ...
    @property
    def moved(self) -> int: ...
    @property
    def input_bytes(self) -> int: ...

@disjoint_base
class Context:
    # The working state of one decode() call and its one owner (C fields only): made and
    # dropped inside decode(), never handed out.
    ...

@disjoint_base
class ExportZeros:
    # The zeroed block and its views that one export() shares among the unwritten columns
    # (C fields only): made and dropped inside decode(), never handed out.
    ...

def decode(
    program: Program,
    data: _Bytes,
    starts: _Bytes,
    ends: _Bytes,
    policy: int,
    index_base: int = 0,
    capacity: Sequence[int] | np.ndarray | None = None,
    arena_capacity: Sequence[int] | np.ndarray | None = None,
    pooled: bool = True,
) -> Result: ...

def set_packed_enum_sign_extends(on: bool) -> None: ...
