"""The fan-out tree: which element of which group each output row reads.

A Selection picks elements of one group under each element its parent selection picked.
`all`, `slice` and `filter` fan out (one row per picked element, correlated with the parent:
SQL UNNEST semantics); `index`, `key`, `match` (the N-th element a filter keeps) and `cond`
pick at most one element and add no rows.
Sibling fan-outs are cross-joined, the first one (in column order) outermost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wirearrow.plan.leaves import Leaf

__all__ = ["FANS_OUT", "Operand", "PredicateSpec", "Selection"]

FANS_OUT = frozenset({"all", "slice", "filter"})


@dataclass(frozen=True, eq=False)
class Operand:
    leaf: Leaf | None  # a field of the element, or
    value: object = None  # a literal


@dataclass(frozen=True, eq=False)
class PredicateSpec:
    """A filter predicate over the elements of one group (paths.py's AST, resolved)."""

    op: str  # "and" "or" "not" "truthy" or a comparison "==" "!=" "<" "<=" ">" ">="
    args: tuple[PredicateSpec | Operand, ...]


@dataclass(eq=False)
class Selection:
    index: int
    parent: Selection | None
    group: int
    kind: str  # "root" | "all" | "slice" | "filter" | "index" | "key" | "match" | "cond"
    arg: object = None  # slice (start, stop, step) | index (also match's) | key literal
    predicate: PredicateSpec | None = None  # filter, match, cond, and key (key == literal)
    text: str = ""  # the path up to and including this step, for messages
    dedupe: Leaf | None = None  # map [*]: the key; an entry whose key comes again is dropped
    children: list[Selection] = field(default_factory=list)

    @property
    def fans_out(self) -> bool:
        return self.kind in FANS_OUT

    def ancestors(self) -> list[Selection]:
        out: list[Selection] = []
        s: Selection | None = self
        while s is not None:
            out.append(s)
            s = s.parent
        return out[::-1]
