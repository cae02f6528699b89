from collections.abc import Callable
from typing import Any

from typing_extensions import disjoint_base

KINDS: dict[str, int]
WKTS: dict[str, int]

class JsonError(Exception):
    reason: str
    path: str
    def __init__(self, reason: str, path: str = "") -> None: ...

@disjoint_base
class Field:
    name: str
    json_name: str
    number: int
    kind: int
    slot: int
    repeated: bool
    packed: bool
    presence: bool
    is_map: bool
    oneof: str | None
    tag: bytes
    packed_tag: bytes
    end_tag: bytes
    sub: Msg | None
    enum_names: dict[str, int] | None
    enum_numbers: frozenset[int]
    enum_closed: bool
    enum_full_name: str
    null_enum: bool
    value_message: bool

@disjoint_base
class Msg:
    full_name: str
    by_json_name: dict[str, Field]
    by_name: dict[str, Field]
    fields: list[Field]
    extendable: bool
    wkt: int
    runtime_class: Any
    key: Field
    value: Field

@disjoint_base
class Context:
    ignore_unknown: bool
    max_depth: int
    resolve_any: Callable[[str], Msg]
    def __init__(
        self, ignore_unknown: bool, max_depth: int, resolve_any: Callable[[str], Msg]
    ) -> None: ...

def parse_text(text: str | bytes) -> Any: ...
def slow_parse(text: str | bytes) -> Any: ...
def to_wire(
    root: Msg, texts: list[Any], ctx: Context
) -> tuple[list[bytes], list[tuple[int, str, str]]]: ...
