"""Cold path: (schema, columns) -> decoder tables + leaves + fan-out tree.

Every column is resolved against the message descriptor here, once. All bad columns of a
plan are reported together (PlanError), each path error with a caret under its fault.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from google.protobuf.descriptor import Descriptor, FieldDescriptor, OneofDescriptor

from wirearrow._core.decoder import Program
from wirearrow.errors import PathError, PlanError, did_you_mean, quoted
from wirearrow.field_ids import (
    ELEMENT,
    MAP_KEY,
    MAP_VALUE,
    UNKNOWN,
    Key,
    KeyTree,
    number_step,
    type_keys,
    with_keys,
    with_unique_ids,
)
from wirearrow.options import MAX_DEPTH, Options
from wirearrow.paths import (
    And,
    Compare,
    FieldStep,
    FilterStep,
    IndexStep,
    KeyStep,
    Literal,
    Not,
    Or,
    Path,
    RelPath,
    SliceStep,
    Truthy,
    WildcardStep,
    format_path,
    parse_path,
)
from wirearrow.plan import functions as _functions  # noqa: F401  (registers the library)
from wirearrow.plan.expressions import (
    FUNCTIONS,
    Call,
    Expr,
    ExprTypeError,
    Function,
    Lit,
    MaybePath,
    PathRef,
    literal_problem,
    literal_type,
)
from wirearrow.plan.leaves import (
    CutLeaf,
    EnumLeaf,
    JsonLeaf,
    JsonRestLeaf,
    Leaf,
    ListLeaf,
    MapLeaf,
    OneofLeaf,
    ScalarLeaf,
    StructLeaf,
    TemporalLeaf,
)
from wirearrow.plan.program import NodeSpec, ProgramBuilder
from wirearrow.plan.selections import Operand, PredicateSpec, Selection
from wirearrow.plan.types import (
    ANY,
    WELL_KNOWN,
    case_columns,
    extensions_of,
    field_name,
    fields_of,
    is_map,
    is_message,
    is_repeated,
    needs_utf8_check,
    real_oneofs,
    scalar_kind,
)

__all__ = [
    "UNKNOWN_FIELDS",
    "UNKNOWN_WKT",
    "Column",
    "CompiledPlan",
    "check_expression_depth",
    "compile_plan",
    "deepest_whole_read",
]

# The pseudo-field of a message's unknown fields: their raw bytes (tag and value), in wire
# order; null when there are none. Readable by path, and added to every struct by keep_unknown.
UNKNOWN_FIELDS = "_unknown"
# keep_unknown: next to `_unknown`, a struct holding, per field read as a well-known type's
# value (Timestamp, wrappers, JSON ...), what that value cannot hold: the unknown fields
# inside it; a Struct / Value / ListValue's bytes where its JSON text cannot say it all.
UNKNOWN_WKT = "_unknown_wkt"
ONEOF_CASE_TYPE = pa.dictionary(pa.int32(), pa.utf8())
# Fields of the Arrow type of a whole message (structs, lists, maps and their leaves): a
# recursive type cut at max_depth has a plan this large only when it grows exponentially.
MAX_PLAN_FIELDS = 100_000
# any_types: at most this many declared types (each is a struct in every Any struct).
MAX_ANY_TYPES = 64
# Expressions are bound, fingerprinted and evaluated recursively: calls nest at most this
# deep (a YAML plan's own nesting limit allows about as many).
MAX_EXPR_DEPTH = 64


def check_expression_depth(columns: Sequence[object]) -> None:
    """PlanError for a column whose expression nests calls deeper than MAX_EXPR_DEPTH;
    before anything walks the expressions recursively (the plan cache's fingerprint)."""
    problems = []
    for i, column in enumerate(columns):
        expr = getattr(column, "expr", None)
        stack = [(expr, 1)] if isinstance(expr, Call) else []
        while stack:
            call, depth = stack.pop()
            if depth > MAX_EXPR_DEPTH:
                name = getattr(column, "output_name", None) or f"column {i}"
                problems.append(
                    f"column {quoted(name)}: expression nested deeper than {MAX_EXPR_DEPTH} calls"
                )
                break
            stack += [(a, depth + 1) for a in call.args if isinstance(a, Call)]
    if problems:
        raise PlanError(problems)


@dataclass(frozen=True, slots=True)
class Column:
    """One output column: a path into the message, or an expression, with a name.

    ``name`` defaults to the path text (an expression column needs one). ``strict=True`` makes a fixed index or slice bound
    that falls outside a list an error instead of a null / a shorter list.
    """

    path: str | None = None
    name: str | None = None
    strict: bool = False
    expr: Expr | None = None  # a computed column (wa.fn.cond, wa.fn.has, ...) instead of a path

    @property
    def output_name(self) -> str:
        return self.name if self.name is not None else (self.path or "")


@dataclass(frozen=True, eq=False)
class OutputColumn:
    """A path read into row-aligned values: an output column, or an expression's input."""

    name: str
    leaf: Leaf
    selection: Selection
    strict: bool
    tree: int = 0  # 0: the output rows' fan-out tree; else an aggregate's own (its fan-outs
    # are walked to reduce per record and never add output rows)


@dataclass(frozen=True, eq=False)
class BoundExpr:
    """An expression with its paths resolved to plan columns and its result type known."""

    type: pa.DataType
    input: int = -1  # index into CompiledPlan.columns (a path), or
    value: object = None  # a literal (input == -1 and function is None), or
    function: Function | None = None  # a call of `function` on `args`
    call: Call | None = None
    args: tuple[BoundExpr, ...] = ()
    tree: int = 0  # an aggregate call: the fan-out tree its arguments are read in


@dataclass(frozen=True, eq=False)
class CompiledPlan:
    program: Program
    columns: tuple[OutputColumn, ...]  # every path read: output columns and expression inputs
    outputs: tuple[tuple[str, int | BoundExpr], ...]  # schema order: a column index or an expr
    selections: tuple[Selection, ...]  # pre-order: parents before children, first child first
    trees: dict[int, tuple[Selection, ...]]  # every fan-out tree by root index (0: output rows)
    schema: pa.Schema
    keys: tuple[KeyTree, ...]  # each output column's field-id keys (wirearrow.field_ids)
    nodes: tuple[NodeSpec, ...]
    group_parents: tuple[int, ...]
    column_groups: tuple[int, ...]
    # Column -> column whose validity bytes it shares (-1: always valid): implicit-presence
    # fields, valid wherever their message is (see ProgramBuilder._derive_zero_defaults).
    validity_from: dict[int, int] = field(default_factory=dict)


def compile_plan(
    message: Descriptor, columns: Sequence[str | Column], options: Options, *, whole: bool = False
) -> CompiledPlan:
    """The plan of ``columns`` over ``message``; ``whole``: the columns are the message's
    top-level fields (and ``_unknown``), whose field ids follow their numbers
    (wirearrow.field_ids), where a flat plan's columns are keyed by their names."""
    check_expression_depth(columns)
    builder = ProgramBuilder(message, max_nesting=options.max_nesting)
    builder.extensions = options.extensions
    builder.reject_unvalidated = options.unvalidated_strings == "reject"
    resolver = _Resolver(builder, options)
    problems: list[str] = _bytes_as_string_problems(message, options)
    problems += _any_types_problems(message, options)
    inputs = _Inputs(resolver)
    outputs: list[tuple[str, int | BoundExpr]] = []
    seen: dict[str, int] = {}
    for i, spec in enumerate(columns):
        column = Column(spec) if isinstance(spec, str) else spec
        if not isinstance(column, Column):
            problems.append(f"column {i}: expected a path string or wa.Column, got {spec!r}")
            continue
        name = column.output_name
        if column.expr is not None and column.path is not None:
            problems.append(f"column {quoted(name)}: path and expr are mutually exclusive")
            continue
        if not name:
            problems.append(f"column {i}: an expression column needs a name")
            continue
        if name in seen:
            problems.append(
                f"column {i}: duplicate output name {quoted(name)} (also column {seen[name]})"
            )
            continue
        seen[name] = i
        try:
            if column.expr is not None:
                too_large = literal_problem(column.expr)
                if too_large is not None:
                    raise ExprTypeError(too_large)
                outputs.append((name, inputs.bind(column.expr)))
            elif column.path is not None:
                outputs.append((name, inputs.path(column.path, name, column.strict)))
            else:
                problems.append(f"column {quoted(name)}: needs a path or an expr")
        except (PathError, ValueError) as err:
            problems.append(f"column {quoted(name)}: {err}")
    if not columns:
        problems.append("a flat plan needs at least one column")
    if problems:
        raise PlanError(problems)
    if options.validate == "full":
        builder.validate_everything()
    fields = [
        pa.field(name, out.type if isinstance(out, BoundExpr) else inputs.columns[out].leaf.type)
        for name, out in outputs
    ]
    # Only the plan's schema carries the ids: the leaves' types, which the assembler builds
    # arrays of, stay without metadata (what a batch costs does not change).
    keys = tuple(
        _leaf_keys(
            f.type,
            None if isinstance(out, BoundExpr) else inputs.columns[out].leaf,
            _column_key(message, f.name) if whole else (f.name,),
        )
        for f, (_, out) in zip(fields, outputs, strict=True)
    )
    if options.field_ids:
        fields = [with_keys(f, tree) for f, tree in zip(fields, keys, strict=True)]
    schema = pa.schema(fields)
    if options.field_ids:
        schema = with_unique_ids(schema)
    return CompiledPlan(
        program=builder.build(),
        columns=tuple(inputs.columns),
        outputs=tuple(outputs),
        selections=tuple(resolver.preorder(resolver.root, _fan_out_order(inputs.columns))),
        trees={
            root.index: tuple(resolver.preorder(root, _fan_out_order(inputs.columns)))
            for root in resolver.roots
        },
        schema=schema,
        keys=keys,
        nodes=tuple(builder.nodes),
        group_parents=tuple(builder.groups),
        column_groups=tuple(g for _, g in builder.columns),
        validity_from=builder.validity_from,  # complete once build() has run, above
    )


def _column_key(message: Descriptor, name: str) -> Key:
    """The field-id key of a whole-message column: its field's (or extension's) number,
    ``_unknown``'s step, or (a column of no field) its name."""
    fd = message.fields_by_name.get(name)
    if fd is None and name.startswith("["):  # an extension read as a field: its number
        fd = next((f for f in extensions_of(message) if field_name(f) == name), None)
    if fd is not None:
        return (number_step(fd.number),)
    return (UNKNOWN,) if name == UNKNOWN_FIELDS else (name,)


def _child_step(name: str, number: int) -> int | str:
    """The field-id key step of a struct's child: its field number, `_unknown`'s step, or
    (a column of no field: a oneof's case) its name."""
    if number > 0:
        return number_step(number)
    return UNKNOWN if number == 0 else name


def _leaf_keys(t: pa.DataType, leaf: Leaf | None, key: Key) -> KeyTree:
    """The field-id key tree of a column of type ``t`` read as ``leaf`` (None: an
    expression): struct children keyed by their field numbers, list elements and map keys
    and values by their place (wirearrow.field_ids)."""
    if isinstance(leaf, StructLeaf) and pa.types.is_struct(t) and leaf.numbers:
        return key, tuple(
            _leaf_keys(t.field(i).type, child, (*key, _child_step(name, n)))
            for i, ((name, child), n) in enumerate(zip(leaf.children, leaf.numbers, strict=True))
        )
    if isinstance(leaf, ListLeaf) and pa.types.is_list(t):
        return key, (_leaf_keys(t.value_type, leaf.element, (*key, ELEMENT)),)
    if isinstance(leaf, MapLeaf) and pa.types.is_map(t):
        return key, (
            _leaf_keys(t.key_type, leaf.key, (*key, MAP_KEY)),
            _leaf_keys(t.item_type, leaf.value, (*key, MAP_VALUE)),
        )
    return type_keys(t, key)  # a scalar, or a type of no message (an expression's)
def _bytes_as_string_problems(message: Descriptor, options: Options) -> list[str]:
    """Each name of bytes_as_string must be a bytes field of the schema's pool."""
    names = options.bytes_as_string
    if not names:
        return []
    pool = message.file.pool
    problems = []
    for name in names:
        try:
            fd = pool.FindFieldByName(name)
        except KeyError:
            fd = None
        if fd is not None and fd.type != FieldDescriptor.TYPE_BYTES:
            kind = _TYPE_NAMES.get(fd.type, "other")
            article = "an" if kind[0] in "aeiou" else "a"
            problems.append(f"bytes_as_string: {quoted(name)} is {article} {kind} field, not bytes")
        elif fd is None:
            known = sorted(_bytes_fields(message))
            hint = did_you_mean(name, known) or (
                f" (the bytes fields: {', '.join(known[:20])}{', ...' if len(known) > 20 else ''})"
                if known
                else f" ({message.full_name} reaches no bytes field)"
            )
            problems.append(f"bytes_as_string: {quoted(name)} is not a field{hint}")
    return problems


def _any_types_problems(message: Descriptor, options: Options) -> list[str]:
    """Each name of any_types must be a message of the schema's pool; a bounded number."""
    names = options.any_types
    if len(names) > MAX_ANY_TYPES:
        return [f"any_types: {len(names)} types, more than the limit of {MAX_ANY_TYPES}"]
    problems = []
    for name in names:
        if _pool_message(message, name) is None:
            known = sorted(_reached_messages(message))
            problems.append(
                f"any_types: {quoted(name)} is not a message of the schema"
                f"{did_you_mean(name, known)}"
            )
    return problems


def _pool_message(message: Descriptor, name: str) -> Descriptor | None:
    try:
        declared = message.file.pool.FindMessageTypeByName(name)
    except KeyError:
        return None
    return None if declared.GetOptions().map_entry else declared


def _reached_messages(message: Descriptor) -> set[str]:
    """Full names of the messages of `message`'s file and those they reach (for hints)."""
    seen: set[str] = set()
    stack = [message, *message.file.message_types_by_name.values()]
    while stack and len(seen) < 10_000:
        m = stack.pop()
        if m.full_name in seen:
            continue
        seen.add(m.full_name)
        stack.extend(m.nested_types)
        stack.extend(f.message_type for f in m.fields if f.message_type is not None)
    return seen


_TYPE_NAMES = {
    getattr(FieldDescriptor, name): name.removeprefix("TYPE_").lower()
    for name in dir(FieldDescriptor)
    if name.startswith("TYPE_")
}


def _bytes_fields(message: Descriptor) -> set[str]:
    """Full names of the bytes fields reachable from `message` (each type walked once)."""
    seen: set[str] = set()
    found: set[str] = set()
    stack = [message]
    while stack:
        m = stack.pop()
        if m.full_name in seen:
            continue
        seen.add(m.full_name)
        for fd in m.fields:
            if fd.type == FieldDescriptor.TYPE_BYTES:
                found.add(fd.full_name)
            elif fd.message_type is not None:
                stack.append(fd.message_type)
    return found


def _fan_out_order(columns: Sequence[OutputColumn]) -> dict[int, int]:
    """For each selection: the first column whose rows fan out at or below it.

    A pick (imp[0]) holding a fan-out (imp[0].deals[*]) is ordered by that fan-out's first
    column, not by the pick's own first use (imp[0].id adds no rows).
    """
    order: dict[int, int] = {}
    for i, column in enumerate(columns):
        chain = column.selection.ancestors()
        fans = [k for k, s in enumerate(chain) if s.fans_out]
        if not fans:
            continue
        for s in chain[: fans[-1] + 1]:
            order.setdefault(s.index, i)
    return order


class _Inputs:
    """The paths a plan reads, each once: output columns and expression inputs alike."""

    def __init__(self, resolver: _Resolver) -> None:
        self.resolver = resolver
        self.columns: list[OutputColumn] = []
        self._by_key: dict[tuple[str, bool, int, bool], int] = {}

    def path(
        self,
        text: str,
        name: str,
        strict: bool = False,
        tree: Selection | None = None,
        map_key: bool = False,
    ) -> int:
        root = tree if tree is not None else self.resolver.root
        key = (text, strict, root.index, map_key)
        index = self._by_key.get(key)
        if index is None:
            parsed = parse_path(text)
            if map_key and not (parsed.steps and not isinstance(parsed.steps[-1], FieldStep)):
                raise ExprTypeError(
                    f"map_key reads the key of a map entry: m[*] or m[key], not {text!r}"
                )
            selection, leaf = self.resolver.resolve(parsed, root, map_key)
            key_field = getattr(leaf, "field", None)
            if map_key and not (
                key_field is not None
                and key_field.number == 1
                and key_field.containing_type.GetOptions().map_entry
            ):
                raise ExprTypeError(f"map_key needs a path ending on a map entry, not {text!r}")
            index = self._by_key[key] = len(self.columns)
            self.columns.append(OutputColumn(name, leaf, selection, strict, root.index))
        return index

    def bind(self, expr: Expr, tree: Selection | None = None) -> BoundExpr:
        """Resolve an expression's paths; inside an aggregate, in that aggregate's own tree."""
        if isinstance(expr, PathRef):
            index = self.path(expr.text, expr.text, tree=tree)
            return BoundExpr(self.columns[index].leaf.type, input=index)
        if isinstance(expr, MaybePath):
            if self._looks_like_path(expr.text):
                return self.bind(PathRef(expr.text), tree)
            return BoundExpr(pa.utf8(), value=expr.text)
        if isinstance(expr, Lit):
            return BoundExpr(literal_type(expr.value), value=expr.value)
        if isinstance(expr, Call):
            function = FUNCTIONS.get(expr.func)
            if function is None:
                raise ExprTypeError(f"unknown function {quoted(expr.func)}")
            function.check_arity(len(expr.args))
            if expr.param is not None and not (
                isinstance(expr.param, int) and -(2**63) <= expr.param < 2**63
            ):
                raise ExprTypeError(
                    f"{expr.func}: param must be an int64 integer, not {expr.param!r}"
                )
            if expr.func == "map_key":
                ref = expr.args[0]
                text = ref.text if isinstance(ref, PathRef | MaybePath) else None
                if text is None:
                    raise ExprTypeError("map_key takes a path (m[*] or m[key])")
                index = self.path(text, f"map_key({text})", tree=tree, map_key=True)
                return BoundExpr(self.columns[index].leaf.type, input=index)
            if expr.func == "enum_name":
                # The names travel in the call (literal = ((number, name), ...)): evaluators
                # see arrays, not descriptors.
                arg = self.bind(expr.args[0], tree)
                leaf = self.columns[arg.input].leaf if arg.input >= 0 else None
                fd = getattr(leaf, "field", None)
                if fd is None or fd.enum_type is None:
                    raise ExprTypeError("enum_name needs a path to an enum field")
                names = tuple((v.number, v.name) for v in fd.enum_type.values)
                call = Call("enum_name", expr.args, literal=names)
                return BoundExpr(
                    function.typer([arg.type], call), function=function, call=call, args=(arg,)
                )
            if function.aggregate and tree is not None:
                raise ExprTypeError(f"{expr.func} cannot be nested in another aggregate")
            if function.aggregate:
                # Each aggregate fans its paths out on its own: two aggregates over sibling
                # lists must not cross-join each other's elements.
                own = self.resolver.new_tree()
                args = tuple(self.bind(a, own) for a in expr.args)
                t = function.typer([a.type for a in args], expr)
                return BoundExpr(t, function=function, call=expr, args=args, tree=own.index)
            args = tuple(self.bind(a, tree) for a in expr.args)
            t = function.typer([a.type for a in args], expr)
            return BoundExpr(t, function=function, call=expr, args=args)
        raise ExprTypeError(f"not an expression: {expr!r}")

    def _looks_like_path(self, text: str) -> bool:
        # A bare builder string is a path when it names a field or looks like a path;
        # otherwise it is a string literal ("video" in cond(has(...), "video", "display")).
        if "." in text or "[" in text:
            return True
        return text in self.resolver.b.root.message.fields_by_name


class _Resolver:
    def __init__(self, builder: ProgramBuilder, options: Options) -> None:
        self.b = builder
        self.options = options
        self.root = Selection(0, None, 0, "root", text="")
        self.roots = [self.root]
        self._selections: dict[tuple, Selection] = {}
        self._count = 1
        self._sizes: dict[tuple, int] = {}  # memo of _struct_size
        self._planned_fields = 0  # of the struct columns resolved so far
        self._open_structs = 0  # structs being built around the current field
        self._bytes_as_string = frozenset(options.bytes_as_string)
        # any_types (the bad names are compile_plan's problems): in the option's order
        root = builder.root.message
        declared = ((n, _pool_message(root, n)) for n in options.any_types[:MAX_ANY_TYPES])
        self._any_types = tuple((n, d) for n, d in declared if d is not None)
        self._unpacking = 0  # structs of declared types being built around the current field

    def new_tree(self) -> Selection:
        """A fan-out tree of its own (for an aggregate): its root is the record too."""
        root = Selection(-len(self.roots), None, 0, "root", text="")
        self.roots.append(root)
        return root

    def preorder(self, root: Selection, order: dict[int, int]) -> list[Selection]:
        """Parents before children; siblings by `order` (the first column that fans out below
        them), so that the first fan-out in column order is the outermost loop."""
        out: list[Selection] = []

        def walk(s: Selection) -> None:
            out.append(s)
            # A pick (imp[0], a key, a filter on a singular message) adds no rows: the
            # fan-outs below it are ordered among its siblings, not right after it
            # (docs/paths.md, rule 5: only a fan-out's own nested fan-outs follow it).
            # The pick itself comes first: its children read its table.
            loops: list[Selection] = []

            def lift(c: Selection) -> None:
                if c.fans_out:
                    loops.append(c)
                    return
                out.append(c)
                for grandchild in c.children:
                    lift(grandchild)

            for child in sorted(s.children, key=lambda c: order.get(c.index, 1 << 62)):
                lift(child)
            for child in sorted(loops, key=lambda c: order.get(c.index, 1 << 62)):
                walk(child)

        walk(root)
        return out

    def _select(
        self, parent: Selection, group: int, kind: str, key: tuple, **kw: object
    ) -> Selection:
        ident = (parent.index, group, kind, key)
        sel = self._selections.get(ident)
        if sel is None:
            sel = Selection(self._count, parent, group, kind, **kw)  # type: ignore[arg-type]
            self._count += 1
            parent.children.append(sel)
            self._selections[ident] = sel
        return sel

    # -- paths --------------------------------------------------------------------------

    def resolve(
        self, path: Path, root: Selection | None = None, map_key: bool = False
    ) -> tuple[Selection, Leaf]:
        """The selection and leaf a path reads; `map_key`: the key of a path ending m[...]."""
        text = path.text
        node = self.b.root
        message = node.message
        if path.root is not None and path.root != message.full_name:
            raise PathError(
                f"root ({path.root}) is not the schema's message {message.full_name}",
                text,
                path.root_pos,
            )
        steps = list(path.steps)
        if not steps:
            raise PathError("the path does not read any field", text, 0)
        sel = root if root is not None else self.root
        i = 0
        while i < len(steps):
            step = steps[i]
            if not isinstance(step, FieldStep):
                raise PathError(f"{_describe(step)} must follow a field", text, step.pos)
            if message.full_name == ANY and step.name.startswith("["):
                # an Any's value read as a declared type: [pkg.Click]
                value_fd = message.fields_by_name["value"]
                message = self._declared(step.name[1:-1], text, step.pos)
                node = self.b.any_type(node, message)
                i += 1
                if i == len(steps):
                    self._unpacking += 1  # (an Any inside it is not unpacked, as in a struct)
                    try:
                        return sel, self._node_leaf(node, node.presence, self._stack(), value_fd)
                    finally:
                        self._unpacking -= 1
                continue
            fd = _field(message, step.name)
            if fd is None and step.name == UNKNOWN_FIELDS:
                if i != len(steps) - 1:
                    raise PathError(
                        f"{UNKNOWN_FIELDS} holds raw bytes: it has no fields or elements",
                        text,
                        steps[i + 1].pos,
                    )
                return sel, ScalarLeaf(node.group, pa.binary(), self.b.unknown(node))
            if fd is None and step.name == UNKNOWN_WKT and i == len(steps) - 1:
                rest = self._rest_leaf(node, self._stack())
                if rest is None:
                    raise PathError(
                        f"{message.full_name} has no field read as a well-known type's value: "
                        f"no {UNKNOWN_WKT}",
                        text,
                        step.pos,
                    )
                return sel, rest
            if fd is None:
                oneof = _oneof(message, step.name)
                if oneof is None:
                    raise PathError(_no_field(message, step.name), text, step.pos)
                if i != len(steps) - 1:
                    raise PathError(
                        f"{quoted(step.name)} is a oneof of {message.full_name} ({_members(oneof)}): "
                        "it reads which member is set; to read a value, name the member",
                        text,
                        steps[i + 1].pos,
                    )
                return sel, self._oneof_leaf(node, oneof)
            last = i == len(steps) - 1
            nxt = None if last else steps[i + 1]
            prefix = format_path(steps[: i + 1])
            if is_map(fd):
                if nxt is None:
                    return sel, self._map_leaf(node, fd)
                if isinstance(nxt, FieldStep) and nxt.name.startswith("["):
                    key = nxt.name[1:-1]
                    raise PathError(
                        f"map {fd.name!r}: [{key}] is read as an extension; quote string "
                        f'keys: ["{key}"]',
                        text,
                        nxt.pos,
                    )
                if isinstance(nxt, FieldStep):
                    raise PathError(
                        f"map {fd.name!r} needs [key] or [*] (its key/value cannot be traversed)",
                        text,
                        nxt.pos,
                    )
                group, entry = self.b.repeated(node, fd)
                assert isinstance(entry, NodeSpec)
                sel = self._map_selection(sel, group, entry, fd, nxt, text, prefix)
                value_fd = fd.message_type.fields_by_number[2]
                i += 2
                if map_key and i == len(steps):
                    return sel, self._scalar_leaf(entry, fd.message_type.fields_by_number[1])
                if is_message(value_fd):
                    if i == len(steps):
                        return sel, self._message_leaf(entry, value_fd, self._stack())
                    node = self.b.message(entry, value_fd)
                    message = value_fd.message_type
                    continue
                if i < len(steps):
                    raise PathError("a map's scalar value has no fields", text, steps[i].pos)
                return sel, self._scalar_leaf(entry, value_fd)
            if is_repeated(fd):
                if nxt is None:
                    return sel, self._list_leaf(node, fd, node.presence, self._stack())
                if self._is_json(fd) and not isinstance(nxt, FieldStep):
                    if isinstance(nxt, FilterStep):
                        raise PathError(
                            "filters apply to messages read field by field", text, nxt.pos
                        )
                    group, column = self.b.raw(node, fd)
                    sel = self._list_selection(sel, group, column, nxt, text, prefix)
                    if i + 2 < len(steps):
                        raise PathError(
                            f"{fd.message_type.full_name} is read as JSON: no fields",
                            text,
                            steps[i + 2].pos,
                        )
                    return sel, JsonLeaf(group, pa.utf8(), column, fd.message_type.full_name)
                if isinstance(nxt, FieldStep):
                    dot = "" if nxt.name.startswith("[") else "."
                    raise PathError(
                        f"{fd.name!r} is repeated: add [*], [N] or a slice before {dot}{nxt.name}",
                        text,
                        nxt.pos,
                    )
                if isinstance(nxt, KeyStep):
                    raise PathError(
                        f"{fd.name!r} is a list, not a map: no key index", text, nxt.pos
                    )
                group, child = self.b.repeated(node, fd)
                if isinstance(nxt, FilterStep) and not isinstance(child, NodeSpec):
                    raise PathError("filters apply to repeated messages", text, nxt.pos)
                pick = steps[i + 2] if isinstance(nxt, FilterStep) and i + 2 < len(steps) else None
                if isinstance(pick, IndexStep):
                    # [?(pred)][N]: the N-th match under each parent, one value, no fan-out
                    assert isinstance(child, NodeSpec) and isinstance(nxt, FilterStep)
                    sel = self._match_selection(sel, group, child, nxt, pick, text, prefix)
                    i += 1
                elif pick is not None and not isinstance(pick, FieldStep):
                    raise PathError(
                        f"{_describe(pick)} cannot follow a filter: only [N] (the N-th match, "
                        "[0] the first, [-1] the last)",
                        text,
                        pick.pos,
                    )
                else:
                    sel = self._list_selection(sel, group, child, nxt, text, prefix)
                i += 2
                if isinstance(child, NodeSpec):
                    node, message = child, fd.message_type
                    if i == len(steps):
                        return sel, self._node_leaf(child, -1, self._stack(), fd)
                    continue
                if i < len(steps):
                    raise PathError(
                        f"elements of {fd.name!r} are scalars: no fields", text, steps[i].pos
                    )
                return sel, self._scalar(group, fd, child)
            if is_message(fd):
                if nxt is None:
                    return sel, self._message_leaf(node, fd, self._stack())
                if isinstance(nxt, FilterStep):
                    child = self.b.message(node, fd)
                    predicate = self._predicate(child, nxt.predicate, text)
                    sel = self._select(
                        sel,
                        node.group,
                        "cond",
                        (prefix + format_path([nxt]),),
                        predicate=predicate,
                        text=prefix,
                    )
                    node, message = child, fd.message_type
                    i += 2
                    if i == len(steps):
                        return sel, self._node_leaf(child, child.presence, self._stack(), fd)
                    if not isinstance(steps[i], FieldStep):
                        raise PathError(
                            f"{fd.name!r} is not repeated: its filter keeps or drops one "
                            f"message, {_describe(steps[i])} cannot follow",
                            text,
                            steps[i].pos,
                        )
                    continue
                if not isinstance(nxt, FieldStep):
                    raise PathError(f"{fd.name!r} is not repeated: no index", text, nxt.pos)
                node = self.b.message(node, fd)
                message = fd.message_type
                i += 1
                continue
            if nxt is not None:
                what = (
                    "a scalar: it has no fields"
                    if isinstance(nxt, FieldStep)
                    else "not repeated: no index"
                )
                raise PathError(f"{fd.name!r} is {what}", text, nxt.pos)
            return sel, self._scalar_leaf(node, fd)
        raise AssertionError("unreachable")

    def _declared(self, name: str, text: str, pos: int) -> Descriptor:
        for full, declared in self._any_types:
            if full == name:
                return declared
        if not self._any_types:
            raise PathError(
                f"[{name}]: an Any's value is read as a type named in any_types "
                f"(any_types=[{name!r}])",
                text,
                pos,
            )
        names = [full for full, _ in self._any_types]
        raise PathError(
            f"[{name}] is not in any_types ({', '.join(names)}){did_you_mean(name, names)}",
            text,
            pos,
        )

    def _list_selection(
        self,
        sel: Selection,
        group: int,
        child: NodeSpec | int,
        step: object,
        text: str,
        prefix: str,
    ) -> Selection:
        here = prefix + format_path([step])  # type: ignore[list-item]
        if isinstance(step, WildcardStep):
            return self._select(sel, group, "all", (), text=prefix + "[*]")
        if isinstance(step, SliceStep):
            if step.step == 0:
                raise PathError("slice step must not be zero", text, step.pos)
            arg = (step.start, step.stop, step.step)
            # Spellings of one slice ([:2], [0:2], [0:2:1]) are one fan-out, not a cross join.
            s = 1 if step.step is None else step.step
            start = None if (step.start == 0 and s > 0) else step.start
            return self._select(sel, group, "slice", (start, step.stop, s), arg=arg, text=here)
        if isinstance(step, IndexStep):
            if not -(2**63) <= step.index < 2**63:
                raise PathError(f"index {step.index} is out of range for a list", text, step.pos)
            return self._select(sel, group, "index", (step.index,), arg=step.index, text=here)
        if isinstance(step, FilterStep):
            assert isinstance(child, NodeSpec)
            predicate = self._predicate(child, step.predicate, text)
            return self._select(sel, group, "filter", (here,), predicate=predicate, text=here)
        raise PathError(f"unexpected {_describe(step)}", text, step.pos)  # type: ignore[attr-defined]

    def _match_selection(
        self,
        sel: Selection,
        group: int,
        child: NodeSpec,
        step: FilterStep,
        pick: IndexStep,
        text: str,
        prefix: str,
    ) -> Selection:
        if not -(2**63) <= pick.index < 2**63:
            raise PathError(f"index {pick.index} is out of range for a list", text, pick.pos)
        predicate = self._predicate(child, step.predicate, text)
        here = prefix + format_path([step, pick])
        return self._select(
            sel, group, "match", (here,), arg=pick.index, predicate=predicate, text=here
        )

    def _map_selection(
        self,
        sel: Selection,
        group: int,
        entry: NodeSpec,
        fd: FieldDescriptor,
        step: object,
        text: str,
        prefix: str,
    ) -> Selection:
        key_fd = fd.message_type.fields_by_number[1]
        if isinstance(step, WildcardStep):
            # A key seen again replaces the earlier entry, as when the runtime parses a map.
            dedupe = self._scalar_leaf(entry, key_fd)
            return self._select(sel, group, "all", (), dedupe=dedupe, text=prefix + "[*]")
        if isinstance(step, IndexStep | KeyStep):
            key = step.index if isinstance(step, IndexStep) else step.key
            _check_key(key_fd, key, text, step.pos)
            leaf = self._scalar_leaf(entry, key_fd)
            predicate = PredicateSpec("==", (Operand(leaf), Operand(None, key)))
            here = prefix + format_path([step])
            return self._select(
                sel, group, "key", (repr(key),), arg=key, predicate=predicate, text=here
            )
        if isinstance(step, SliceStep):
            raise PathError("slices do not apply to maps", text, step.pos)
        raise PathError(f"{_describe(step)} does not apply to maps", text, step.pos)  # type: ignore[attr-defined]

    # -- filters ------------------------------------------------------------------------

    def _predicate(self, node: NodeSpec, p: object, text: str) -> PredicateSpec:
        if isinstance(p, And | Or):
            op = "and" if isinstance(p, And) else "or"
            return PredicateSpec(
                op, (self._predicate(node, p.left, text), self._predicate(node, p.right, text))
            )
        if isinstance(p, Not):
            return PredicateSpec("not", (self._predicate(node, p.operand, text),))
        if isinstance(p, Truthy):
            operand = self._operand(node, p.operand, text)
            if _kind_of(operand) in ("temporal", "other"):
                raise PathError(
                    "only numbers, strings, bytes and bools have a truth value: compare it",
                    text,
                    p.pos,
                )
            return PredicateSpec("truthy", (operand,))
        if isinstance(p, Compare):
            left = self._operand(node, p.left, text)
            right = self._operand(node, p.right, text)
            _check_comparable(left, right, text, p.pos)
            return PredicateSpec(p.op, (left, right))
        raise AssertionError(f"unknown predicate {p!r}")

    def _operand(self, node: NodeSpec, atom: object, text: str) -> Operand:
        if isinstance(atom, Literal):
            return Operand(None, atom.value)
        assert isinstance(atom, RelPath)
        message = node.message
        for k, name in enumerate(atom.fields):
            fd = _field(message, name)
            if fd is None:
                raise PathError(_no_field(message, name), text, atom.pos)
            if is_repeated(fd):
                raise PathError(
                    f"{name!r} is repeated: filters read singular fields", text, atom.pos
                )
            if k == len(atom.fields) - 1:
                if is_message(fd):
                    leaf = self._message_leaf(node, fd, self._stack())
                    if not isinstance(leaf, ScalarLeaf | TemporalLeaf):
                        raise PathError(
                            f"{name!r} is a message: compare one of its fields", text, atom.pos
                        )
                    return Operand(leaf)
                # filters compare enum numbers whatever the output form of enums, and
                # strings as the columns read them: a binary column's bytes with the
                # literal's UTF-8, a utf8 column as text (a value not UTF-8 is null there)
                return Operand(self._scalar(node.group, fd, self.b.scalar(node, fd), names=False))
            if not is_message(fd):
                raise PathError(f"{name!r} is a scalar: it has no fields", text, atom.pos)
            node = self.b.message(node, fd)
            message = fd.message_type
        raise AssertionError("unreachable")

    # -- leaves -------------------------------------------------------------------------

    def _well_known(self, message: Descriptor) -> str | None:
        """The dedicated mapping of a well-known type, None for a plain message."""
        return WELL_KNOWN.get(message.full_name) if self.options.well_known_types else None

    def _is_json(self, fd: FieldDescriptor) -> bool:
        return fd.message_type is not None and self._well_known(fd.message_type) == "json"

    def _stack(self) -> tuple[str, ...]:
        return (self.b.root.message.full_name,)

    def _cut(self, fd: FieldDescriptor, stack: tuple[str, ...]) -> bool:
        """Whether message field `fd` is read as serialized bytes instead of a struct.

        Only a recursive type is cut, and only with max_depth: without it, a recursive type
        read whole is a plan error naming the cycle.
        """
        name = fd.message_type.full_name
        if name not in stack:
            return False
        if self.options.max_depth is None:
            cycle = " -> ".join((*stack[stack.index(name) :], name))
            raise PathError(
                f"recursive message type ({cycle}) cannot be read whole at field "
                f"{fd.full_name}: set max_depth=N to keep levels below N as serialized bytes, "
                "or select its fields by path",
                fd.name,
                0,
            )
        return len(stack) > self.options.max_depth

    def _check_size(self, message: Descriptor, stack: tuple[str, ...], fd: FieldDescriptor) -> None:
        """A PathError before building a struct type that would take the plan over
        MAX_PLAN_FIELDS fields."""
        if self.options.max_depth is None:
            return  # no recursion is expanded: the type is no larger than the schema
        size = _struct_size(
            message,
            stack,
            self.options.max_depth,
            self._sizes,
            self._well_known,
            self.options.extensions,
        )
        self._planned_fields += size  # every column of the plan counts
        if self._planned_fields > MAX_PLAN_FIELDS:
            total = self._planned_fields
            self._planned_fields -= size  # not built: the other columns may still fit

            def shown(n: int) -> str:
                return f"{n:,}" if n < 10**15 else f"about 2**{n.bit_length() - 1}"

            raise PathError(
                f"{message.full_name} read whole with max_depth={self.options.max_depth} "
                f"has {shown(size)} fields, which would take the plan to {shown(total)} "
                f"(the limit is {MAX_PLAN_FIELDS:,}): lower max_depth, or select its "
                "fields by path",
                fd.name if fd is not None else "",
                0,
            )

    def _cut_leaf(self, group: int, column: int, fd: FieldDescriptor) -> CutLeaf:
        # The decoder stores a cut level's bytes without walking them: under
        # validate="full" the assembler parses them as upb would (docs/errors.md).
        full = self.options.validate == "full"
        return CutLeaf(group, pa.binary(), column, None, fd.message_type.full_name, full)

    def _scalar_leaf(self, node: NodeSpec, fd: FieldDescriptor) -> ScalarLeaf:
        return self._scalar(node.group, fd, self.b.scalar(node, fd))

    def _scalar(
        self, group: int, fd: FieldDescriptor, column: int, *, names: bool = True
    ) -> ScalarLeaf:
        if names and fd.type == FieldDescriptor.TYPE_ENUM and self.options.enums == "name":
            declared = tuple((v.number, v.name) for v in fd.enum_type.values)
            return EnumLeaf(group, pa.dictionary(pa.int32(), pa.utf8()), column, fd, declared)
        if fd.type == FieldDescriptor.TYPE_STRING:
            if self.options.unvalidated_strings == "binary" and not needs_utf8_check(fd):
                self.b.binary_columns.add(column)
                return ScalarLeaf(group, pa.binary(), column, fd)
            self.b.text_columns.add(column)
        elif fd.type == FieldDescriptor.TYPE_BYTES and fd.full_name in self._bytes_as_string:
            self.b.string_bytes.add(column)  # the decoder checks its UTF-8
            return ScalarLeaf(group, pa.utf8(), column, fd)
        return ScalarLeaf(group, scalar_kind(fd).arrow, column, fd)

    def _oneof_leaf(self, node: NodeSpec, oneof: OneofDescriptor) -> OneofLeaf:
        """Which member of `oneof` is set, from a column per member that is valid where it
        is (its value, or a sub-message's presence: its fields are not read)."""
        columns = []
        for fd in oneof.fields:
            entry = node.fields.get(fd.number)
            if is_message(fd):
                if self._is_json(fd) or (entry is not None and entry.raw):
                    columns.append(self.b.raw(node, fd)[1])
                else:
                    presence = self.b.message(node, fd).presence
                    columns.append(presence)
                continue
            # (as the member's own column reads it: a string moved to the unknown fields,
            # not being UTF-8, is not set)
            columns.append(self._scalar_leaf(node, fd).column)
        return OneofLeaf(
            node.group,
            ONEOF_CASE_TYPE,
            oneof.full_name,
            tuple(fd.name for fd in oneof.fields),
            tuple(columns),
        )

    # -- what well-known types' values cannot hold (keep_unknown) -------------------------

    def _rest_leaf(self, node: NodeSpec, stack: tuple[str, ...]) -> StructLeaf | None:
        """`_unknown_wkt` of a message: per field read as a well-known type's value, the
        unknown fields inside the value (or a JSON type's bytes), slot for slot with the
        field's own column; None when the message has no such field."""
        children = []
        numbers = []  # (a child's field id follows its field's number)
        for fd in fields_of(node.message, self.options.extensions):
            leaf = self._rest_of_field(node, fd, stack)
            if leaf is not None:
                children.append((field_name(fd), leaf))
                numbers.append(fd.number)
        if not children:
            return None
        t = pa.struct([pa.field(name, leaf.type) for name, leaf in children])
        return StructLeaf(node.group, t, node.presence, tuple(children), tuple(numbers))

    def _rest_of_field(
        self, node: NodeSpec, fd: FieldDescriptor, stack: tuple[str, ...]
    ) -> Leaf | None:
        value_fd = fd.message_type.fields_by_number[2] if is_map(fd) else fd
        if value_fd.message_type is None:
            return None
        wkt = self._well_known(value_fd.message_type)
        if wkt is None or wkt == "any":  # a struct: it has its own `_unknown`
            return None
        if is_map(fd):
            group, entry = self.b.repeated(node, fd)
            assert isinstance(entry, NodeSpec)
            key = self._scalar_leaf(entry, fd.message_type.fields_by_number[1])
            value = self._rest_of_value(entry, value_fd, wkt)
            t = pa.map_(key.type, pa.binary())
            return MapLeaf(node.group, t, group, key, value, node.presence)
        if is_repeated(fd):
            if wkt == "json":
                group, column = self.b.raw(node, fd)
                element: Leaf = JsonRestLeaf(group, pa.binary(), column, value_fd.message_type.full_name)
            else:
                group, child = self.b.repeated(node, fd)
                assert isinstance(child, NodeSpec)
                element = ScalarLeaf(group, pa.binary(), self.b.unknown(child))
            return ListLeaf(node.group, pa.list_(pa.binary()), group, element, node.presence)
        return self._rest_of_value(node, fd, wkt)

    def _rest_of_value(self, node: NodeSpec, fd: FieldDescriptor, wkt: str) -> Leaf:
        """The rest of one singular value of `fd` in `node` (a field, or a map's value)."""
        if wkt == "json":
            group, column = self.b.raw(node, fd)
            return JsonRestLeaf(group, pa.binary(), column, fd.message_type.full_name)
        child = self.b.message(node, fd)
        return ScalarLeaf(child.group, pa.binary(), self.b.unknown(child))

    def _field_leaf(self, node: NodeSpec, fd: FieldDescriptor, stack: tuple[str, ...]) -> Leaf:
        if is_map(fd):
            return self._map_leaf(node, fd, stack)
        if is_repeated(fd):
            return self._list_leaf(node, fd, node.presence, stack)
        if is_message(fd):
            return self._message_leaf(node, fd, stack)
        return self._scalar_leaf(node, fd)

    def _list_leaf(
        self, node: NodeSpec, fd: FieldDescriptor, presence: int, stack: tuple[str, ...]
    ) -> ListLeaf:
        if self._is_json(fd):
            group, column = self.b.raw(node, fd)
            json_leaf = JsonLeaf(group, pa.utf8(), column, fd.message_type.full_name)
            return ListLeaf(node.group, pa.list_(pa.utf8()), group, json_leaf, presence)
        if is_message(fd) and self._cut(fd, stack):
            group, column = self.b.raw(node, fd)
            raw = self._cut_leaf(group, column, fd)
            return ListLeaf(node.group, pa.list_(pa.binary()), group, raw, presence)
        group, child = self.b.repeated(node, fd)
        if isinstance(child, NodeSpec):
            element = self._node_leaf(child, -1, stack, fd)
        else:
            element = self._scalar(group, fd, child)
        return ListLeaf(node.group, pa.list_(element.type), group, element, presence)

    def _map_leaf(
        self, node: NodeSpec, fd: FieldDescriptor, stack: tuple[str, ...] | None = None
    ) -> MapLeaf:
        group, entry = self.b.repeated(node, fd)
        assert isinstance(entry, NodeSpec)
        key_fd, value_fd = (fd.message_type.fields_by_number[n] for n in (1, 2))
        key = self._scalar_leaf(entry, key_fd)
        value = self._field_leaf(entry, value_fd, stack or self._stack())
        return MapLeaf(node.group, pa.map_(key.type, value.type), group, key, value, node.presence)

    def _message_leaf(self, node: NodeSpec, fd: FieldDescriptor, stack: tuple[str, ...]) -> Leaf:
        if self._is_json(fd):
            group, column = self.b.raw(node, fd)
            return JsonLeaf(group, pa.utf8(), column, fd.message_type.full_name)
        if self._cut(fd, stack):
            group, column = self.b.raw(node, fd)
            return self._cut_leaf(group, column, fd)
        child = self.b.message(node, fd)
        return self._node_leaf(child, child.presence, stack, fd)

    def _node_leaf(
        self, node: NodeSpec, presence: int, stack: tuple[str, ...], fd: FieldDescriptor
    ) -> Leaf:
        """The value of a whole message held by `node` (a struct, or a well-known type)."""
        message = node.message
        wkt = self._well_known(message)
        fields = message.fields_by_name
        if wkt in ("timestamp", "duration"):
            unit = self.options.timestamp_unit
            cols: tuple[int, ...] = (
                self.b.scalar(node, fields["seconds"]),
                self.b.scalar(node, fields["nanos"]),
            )
            t = pa.timestamp(unit, tz="UTC") if wkt == "timestamp" else pa.duration(unit)
            return TemporalLeaf(node.group, t, wkt, cols, presence)
        if wkt == "date":
            cols = tuple(self.b.scalar(node, fields[n]) for n in ("year", "month", "day"))
            return TemporalLeaf(node.group, pa.date32(), wkt, cols, presence)
        if wkt == "timeofday":
            names = ("hours", "minutes", "seconds", "nanos")
            cols = tuple(self.b.scalar(node, fields[n]) for n in names)
            # nanoseconds when asked for them, else microseconds (finer than Arrow's time32)
            unit = "ns" if self.options.timestamp_unit == "ns" else "us"
            return TemporalLeaf(node.group, pa.time64(unit), wkt, cols, presence)
        if wkt == "wrapper":
            value = fields["value"]
            # `value` has implicit presence: it holds its default as soon as the wrapper is
            # present, so the column is null exactly when the wrapper is absent.
            return self._scalar_leaf(node, value)
        if wkt == "fieldmask":
            return self._list_leaf(node, fields["paths"], presence, stack)
        stack = (*stack, message.full_name)
        outermost = self._open_structs == 0
        if outermost:
            self._check_size(message, stack, fd)
        # An empty message is a struct with no children: Arrow holds it (and whether it is
        # present); a writer that cannot (Parquet) is the sink's concern.
        self._open_structs += 1
        try:
            children = tuple(
                (field_name(f), self._field_leaf(node, f, stack))
                for f in fields_of(message, self.options.extensions)
            )
            numbers = tuple(f.number for f in fields_of(message, self.options.extensions))
        finally:
            self._open_structs -= 1
        if message.full_name == ANY and self._any_types and self._unpacking == 0:
            # Each declared type, where the type URL names it. Not inside a declared type's
            # own struct: k types holding Anys would nest k! structs deep.
            self._unpacking += 1
            self._open_structs += 1
            try:
                for full, declared in self._any_types:
                    child = self.b.any_type(node, declared)
                    # (the Any is not on the stack: an Any inside is no recursion)
                    leaf = self._node_leaf(child, child.presence, stack[:-1], fd)
                    children = (*children, (f"[{full}]", leaf))
                    numbers = (*numbers, -1)  # (no field: keyed by its name)
            finally:
                self._unpacking -= 1
                self._open_structs -= 1
        if self.options.oneof_case:
            children = _with_cases(message, node.group, children, fd.name)
            # (a case column is no field: keyed by its name for its field id)
            number = {field_name(f): f.number for f in fields_of(message, self.options.extensions)}
            numbers = tuple(number.get(name, -1) for name, _ in children)
        if self.options.keep_unknown:
            if UNKNOWN_FIELDS in message.fields_by_name:
                raise PathError(
                    f"{message.full_name} has a field named {UNKNOWN_FIELDS}: it cannot also "
                    "hold the unknown fields (keep_unknown)",
                    fd.name,
                    0,
                )
            rest = self._rest_leaf(node, stack)
            if rest is not None:
                if UNKNOWN_WKT in message.fields_by_name:
                    raise PathError(
                        f"{message.full_name} has a field named {UNKNOWN_WKT}: it cannot also "
                        "hold what its well-known types cannot (keep_unknown)",
                        fd.name,
                        0,
                    )
                children = (*children, (UNKNOWN_WKT, rest))
                numbers = (*numbers, -1)  # (no field: keyed by its name)
            unknown = ScalarLeaf(node.group, pa.binary(), self.b.unknown(node))
            children = (*children, (UNKNOWN_FIELDS, unknown))
            numbers = (*numbers, 0)
        t = pa.struct([pa.field(name, leaf.type, nullable=True) for name, leaf in children])
        return StructLeaf(node.group, t, presence, children, numbers)


def _field(message: Descriptor, name: str) -> FieldDescriptor | None:
    if name.startswith("["):  # an extension, by its full name
        full = name[1:-1]
        return next((f for f in extensions_of(message) if f.full_name == full), None)
    fd = message.fields_by_name.get(name)
    if fd is None:
        # A proto2 group is also reachable by its type name (`G` for `group G = 1 {...}`).
        for f in message.fields:
            if f.type == FieldDescriptor.TYPE_GROUP and f.message_type.name == name:
                return f
    return fd


def _no_field(message: Descriptor, name: str) -> str:
    if name.startswith("["):
        if not message.extension_ranges:
            return f"{quoted(name)}: message {message.full_name} declares no extensions"
        known = [field_name(f) for f in extensions_of(message)]
        return (
            f"no extension {quoted(name)} of message {message.full_name} in the schema"
            f"{did_you_mean(name, known)}"
        )
    names = [f.name for f in message.fields] + [o.name for o in real_oneofs(message)]
    return f"field {quoted(name)} not in message {message.full_name}{did_you_mean(name, names)}"


def _oneof(message: Descriptor, name: str) -> OneofDescriptor | None:
    oneof = message.oneofs_by_name.get(name)
    return oneof if oneof is not None and oneof in real_oneofs(message) else None


def _members(oneof: OneofDescriptor) -> str:
    return "members: " + ", ".join(repr(f.name) for f in oneof.fields)


def _with_cases(
    message: Descriptor, group: int, children: tuple[tuple[str, Leaf], ...], where: str
) -> tuple[tuple[str, Leaf], ...]:
    """`children` of a struct with each oneof's case after the oneof's last member."""
    cases = case_columns(message)
    if not cases:
        return children
    leaves = dict(children)
    clash = [name for name in cases if name in leaves]
    if clash:
        raise PathError(
            f"{message.full_name} has a field named {clash[0]!r}: it cannot also hold the "
            "case of its oneof (oneof_case)",
            where,
            0,
        )
    after: dict[str, tuple[str, Leaf]] = {}
    for name, oneof in cases.items():
        columns = tuple(_presence_column(leaves[f.name]) for f in oneof.fields)
        names = tuple(f.name for f in oneof.fields)
        leaf = OneofLeaf(group, ONEOF_CASE_TYPE, oneof.full_name, names, columns)
        after[oneof.fields[-1].name] = (name, leaf)
    out: list[tuple[str, Leaf]] = []
    for child in children:
        out.append(child)
        if child[0] in after:
            out.append(after[child[0]])
    return tuple(out)


def _presence_column(leaf: Leaf) -> int:
    """A decoder column whose validity says the field a leaf reads is present."""
    if isinstance(leaf, ScalarLeaf | JsonLeaf):
        return leaf.column
    presence = getattr(leaf, "presence", -1)
    if presence < 0:
        raise AssertionError(f"a oneof member without presence: {leaf!r}")
    return presence


def _describe(step: object) -> str:
    return {
        IndexStep: "an index",
        KeyStep: "a key",
        WildcardStep: "[*]",
        SliceStep: "a slice",
        FilterStep: "a filter",
    }.get(type(step), "a step")


_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _check_key(key_fd: FieldDescriptor, key: object, text: str, pos: int) -> None:
    t = key_fd.type
    if t == FieldDescriptor.TYPE_STRING:
        ok = isinstance(key, str)
    elif t == FieldDescriptor.TYPE_BOOL:
        ok = isinstance(key, bool)
    else:
        lo, hi = _INT_RANGES[t]
        ok = isinstance(key, int) and not isinstance(key, bool) and lo <= key <= hi
    if not ok:
        kind = _TYPE_NAMES.get(t, str(t))
        shown = str(key).lower() if isinstance(key, bool) else repr(key)
        raise PathError(f"cannot index a map with {kind} keys by {shown}", text, pos)


_TYPE_NAMES = {
    getattr(FieldDescriptor, f"TYPE_{n.upper()}"): n
    for n in [
        "double",
        "float",
        "int64",
        "uint64",
        "int32",
        "fixed64",
        "fixed32",
        "bool",
        "string",
        "group",
        "message",
        "bytes",
        "uint32",
        "enum",
        "sfixed32",
        "sfixed64",
        "sint32",
        "sint64",
    ]
}


def deepest_whole_read(
    message: Descriptor, well_known_types: bool = True, extensions: bool = False
) -> int:
    """The largest max_depth (1..MAX_DEPTH) at which a whole-message plan of `message` stays
    within MAX_PLAN_FIELDS; 0 when none does. Counted as _check_size counts, without
    building the plan (which, near the bound, takes seconds)."""

    def well_known(t: Descriptor) -> str | None:
        return WELL_KNOWN.get(t.full_name) if well_known_types else None

    def fields(depth: int) -> int:
        memo: dict[tuple, int] = {}
        total = 0
        for f in fields_of(message, extensions):  # each top-level field is a column
            value = f.message_type.fields_by_number[2] if is_map(f) else f
            t = value.message_type
            if t is not None and well_known(t) is None:
                stack = (message.full_name, t.full_name)
                total += _struct_size(t, stack, depth, memo, well_known, extensions)
        return total

    low, high = 0, MAX_DEPTH  # the size grows with depth: find the last that fits
    while low < high:
        mid = (low + high + 1) // 2
        if fields(mid) <= MAX_PLAN_FIELDS:
            low = mid
        else:
            high = mid - 1
    return low


def _struct_size(
    message: Descriptor,
    stack: tuple[str, ...],
    max_depth: int,
    memo: dict[tuple, int],
    well_known: Callable[[Descriptor], str | None],
    extensions: bool = False,
) -> int:
    """Fields of the struct type _node_leaf builds for `message` (stack ends with it).

    Its cuts depend only on which types are on the stack and on its length up to
    max_depth, so equal subtrees are counted once: linear in the distinct (type, stack
    set, depth) triples, not in the (possibly exponential) size.
    """
    key = (message.full_name, frozenset(stack), min(len(stack), max_depth + 1))
    size = memo.get(key)
    if size is not None:
        return size
    size = 1
    for f in fields_of(message, extensions):
        value = f.message_type.fields_by_number[2] if is_map(f) else f
        size += 2 if is_map(f) else 0  # the map and its key
        t = value.message_type
        if t is None or well_known(t) is not None:
            size += 1
        elif t.full_name in stack and len(stack) > max_depth:
            size += 1  # cut: serialized bytes
        else:
            size += _struct_size(t, (*stack, t.full_name), max_depth, memo, well_known, extensions)
        size += 1 if is_repeated(f) and not is_map(f) else 0  # the list around it
    memo[key] = size
    return size


def _kind_of(operand: Operand) -> str:
    if operand.leaf is None:
        v = operand.value
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, int | float):
            return "number"
        return "string"
    t = operand.leaf.type
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return "number"
    if pa.types.is_string(t):
        return "string"
    if pa.types.is_binary(t):
        fd = getattr(operand.leaf, "field", None)
        # a string read as binary (unvalidated_strings="binary") is compared with the
        # literal's UTF-8 bytes
        return "string" if fd is not None and fd.type == FieldDescriptor.TYPE_STRING else "bytes"
    if pa.types.is_temporal(t):
        return "temporal"
    return "other"


def _check_comparable(left: Operand, right: Operand, text: str, pos: int) -> None:
    a, b = _kind_of(left), _kind_of(right)
    if a != b or a in ("other", "temporal"):
        raise PathError(f"cannot compare {a} with {b}", text, pos)
