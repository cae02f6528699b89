from collections.abc import Buffer, Sequence

KIND: dict[str, int]
FLAG: dict[str, int]
STATUS_TEXT: dict[int, str]
POLICY_RAISE: int
POLICY_SKIP: int

class Program:
    n_entries: int
    n_nodes: int
    n_cols: int
    n_groups: int
    max_depth: int
    def __init__(
        self,
        entries: Sequence[tuple[int, int, int, int, int, int, int, int, int]],
        nodes: Sequence[tuple[int, int, int, int, int, int, int, int]],
        dense: Sequence[int],
        defaults: Sequence[tuple[int, bytes]],
        clear_cols: Sequence[int],
        columns: Sequence[tuple[int, int]],
        groups: Sequence[int],
        max_depth: int,
    ) -> None: ...

class Result:
    group_parents: list[Buffer]
    group_counts: list[int]
    col_values: list[Buffer | None]  # a bytes column: count + 1 uint32 offsets into col_arena
    col_valid: list[Buffer]
    col_arena: list[Buffer | None]
    col_counts: list[int]
    errors: list[tuple[int, int, int, list[tuple[int, int, int]]]]
    records: int

def decode(
    program: Program,
    data: Buffer,
    starts: Buffer,
    ends: Buffer,
    policy: int,
    index_base: int = 0,
    capacity: Sequence[int] | None = None,
    arena_capacity: Sequence[int] | None = None,
    pooled: bool = True,
) -> Result: ...
