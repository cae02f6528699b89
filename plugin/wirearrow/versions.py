"""Schema versions in one output: the superset of the versions of a plan's message.

A plan reads one message (its *reference* version: the spec's schema); its records may have
been written with other versions of it (a Confluent schema id names each record's). Each
version is decoded with its own compiled plan, unchanged, then its columns are conformed to
the **superset** of every version's output, matched by field-id key (protobuf field
numbers, wirearrow.field_ids), never by name:

* a field only some versions have is null in the rows of the others;
* a field renamed under the same number keeps its column: every version is first
  :func:`aligned` to the reference's names (so the plan's paths resolve in each), and a
  field the reference lacks keeps the name of the first version that has it;
* a field whose type changed the way Iceberg allows (int32 -> int64, float -> double)
  takes the wider type; any other change of one field number is a PlanError naming the
  field, the versions and the types.

A flat plan's column whose path a version lacks (a field added later) is null for that
version's records. Nothing here runs per record: conforming is a few Arrow calls per
column that differs, per batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor

from wirearrow.cache import ParserCache
from wirearrow.errors import DecodeError, PathError, PlanError, SchemaError, quoted
from wirearrow.field_ids import Key, KeyTree, with_keys, with_unique_ids
from wirearrow.paths import FilterStep, SliceStep, WildcardStep, format_path, parse_path
from wirearrow.plan.compiler import Column
from wirearrow.schema import Schema
from wirearrow.sources.confluent import SchemaIds
from wirearrow.sources.records import Failure, Records
from wirearrow.spec import TranscodeSpec

__all__ = [
    "Route",
    "Router",
    "Shape",
    "Superset",
    "Versions",
    "aligned",
    "conformer",
    "label",
    "record_order",
]

# The widenings Iceberg allows (int -> long, float -> double), as Arrow types.
_WIDER = {
    (pa.int32(), pa.int64()): pa.int64(),
    (pa.float32(), pa.float64()): pa.float64(),
}


def aligned(version: Schema, reference: Schema) -> Schema:
    """``version`` with the reference's name for every field number both have, in the
    messages reached from the root (each paired with the reference's message at the same
    numbers): the plan's paths then resolve in it, and its columns are named as the
    reference's. ``version`` itself when no name differs."""
    renames: dict[str, dict[int, str]] = {}
    paired: dict[str, str] = {}
    pending: list[tuple[Descriptor, Descriptor]] = [(version.descriptor, reference.descriptor)]
    while pending:
        mine, theirs = pending.pop()
        if mine.full_name in paired:
            if paired[mine.full_name] != theirs.full_name and renames.get(mine.full_name):
                raise PlanError([
                    f"{mine.full_name} of version {version.message_name} stands where the "
                    f"reference has both {paired[mine.full_name]} and {theirs.full_name}: its "
                    "fields cannot take one set of names"
                ])
            continue
        paired[mine.full_name] = theirs.full_name
        if mine.full_name.startswith("google.protobuf."):
            continue
        names = {}
        for f in mine.fields:
            other = theirs.fields_by_number.get(f.number)
            if other is None:
                continue
            if other.name != f.name:
                names[f.number] = other.name
            if f.message_type is not None and other.message_type is not None:
                pending.append((f.message_type, other.message_type))
        if names:
            renames[mine.full_name] = names
    if not renames:
        return version
    files = descriptor_pb2.FileDescriptorSet.FromString(version.file_descriptor_set)
    for file in files.file:
        scope = f"{file.package}." if file.package else ""
        stack = [(scope, m) for m in file.message_type]
        while stack:
            prefix, message = stack.pop()
            full = prefix + message.name
            stack.extend((full + ".", m) for m in message.nested_type)
            renamed = renames.get(full)
            if not renamed:
                continue
            for field in message.field:
                if field.number in renamed:
                    field.name = renamed[field.number]
                    field.ClearField("json_name")
            taken: dict[str, int] = {}
            for field in message.field:
                if taken.setdefault(field.name, field.number) != field.number:
                    raise PlanError([
                        f"field name {quoted(field.name)} of {full} is field "
                        f"{taken[field.name]} in the reference and field {field.number} in "
                        f"version {version.message_name} ({version.fingerprint[:12]}): one "
                        "name cannot be two fields of one table"
                    ])
    return Schema.from_descriptor_set(files.SerializeToString(), version.message_name)


# ---- the superset ----------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """One version's output: its fields (in order) and their field-id key trees."""

    fields: tuple[pa.Field, ...]
    keys: tuple[KeyTree, ...]


class _Node:
    """A field of the superset while it is merged: name, type (leaves), children by key."""

    __slots__ = ("children", "field", "key", "name", "origin", "type")

    def __init__(self, field: pa.Field, tree: KeyTree, origin: str) -> None:
        self.key: Key = tree[0]
        self.name = field.name
        self.field = field
        self.type = field.type
        self.origin = origin  # the first version that has it
        self.children: dict[Key, _Node] = {}
        for child, sub in zip(_nested(field.type), tree[1], strict=True):
            self.children[sub[0]] = _Node(child, sub, origin)

    def kind(self) -> str:
        t = self.type
        if pa.types.is_struct(t):
            return "struct"
        if pa.types.is_map(t):
            return "map"
        if pa.types.is_list(t):
            return "list"
        return "leaf"


def _nested(t: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [t.value_field]
    return []


def _describe(path: str, key: Key) -> str:
    last = key[-1]
    if isinstance(last, int) and last > 1 and all(isinstance(s, int) for s in key):
        return f"field {path} (number {last - 1})"
    return f"column {path}" if len(key) == 1 else f"field {path}"


class Superset:
    """The superset of some versions' :class:`Shape`; :meth:`add` merges one more."""

    def __init__(self, field_ids: bool) -> None:
        self.field_ids = field_ids
        self._roots: dict[Key, _Node] = {}

    def add(self, shape: Shape, label: str) -> None:
        """Merge ``shape`` (version ``label``) in; a PlanError lists every field it
        cannot share (and leaves the superset as it was)."""
        problems: list[str] = []
        roots = dict(self._roots)
        for field, tree in zip(shape.fields, shape.keys, strict=True):
            node = _Node(field, tree, label)
            have = roots.get(node.key)
            roots[node.key] = node if have is None else self._merged(have, node, field.name, problems)
        if problems:
            raise PlanError(problems)
        self._roots = roots
        self._check_names(list(self._roots.values()), "", problems)
        if problems:
            raise PlanError(problems)

    def _merged(self, have: _Node, new: _Node, path: str, problems: list[str]) -> _Node:
        kind = have.kind()
        if kind != new.kind() or (kind == "leaf" and not have.type.equals(new.type)):
            wider = _WIDER.get((have.type, new.type)) or _WIDER.get((new.type, have.type))
            if kind == "leaf" and new.kind() == "leaf" and wider is not None:
                out = _copy(have)
                out.type = wider
                return out
            problems.append(
                f"{_describe(path, have.key)}: {have.type} in {have.origin} but {new.type} in "
                f"{new.origin}: an incompatible change of one field number (a table can "
                "widen int32 to int64 and float to double, nothing else)"
            )
            return have
        if kind == "leaf":
            return have
        out = _copy(have)
        for key, child in new.children.items():
            mine = out.children.get(key)
            sub = f"{path}.{child.name}" if kind == "struct" else (
                f"{path}[*]" if kind == "list" else f"{path}[{'key' if key[-1] == 2 else 'value'}]"
            )
            if mine is None:
                out.children[key] = child
            elif kind == "map" and key[-1] == 2 and not mine.type.equals(child.type):
                problems.append(
                    f"{_describe(sub, key)}: map keys of {mine.type} in {mine.origin} but "
                    f"{child.type} in {child.origin}: a map's key type cannot change"
                )
            else:
                out.children[key] = self._merged(mine, child, sub, problems)
        return out

    def _check_names(self, nodes: list[_Node], where: str, problems: list[str]) -> None:
        """Names are unique among the fields of each struct (and of the output)."""
        seen: dict[str, _Node] = {}
        for node in nodes:
            other = seen.setdefault(node.name, node)
            if other is not node:
                problems.append(
                    f"{where or 'the output'} has two fields named {quoted(node.name)}: "
                    f"{_describe(node.name, other.key)} from {other.origin} and "
                    f"{_describe(node.name, node.key)} from {node.origin} (one name cannot "
                    "be two fields of one table)"
                )
        for node in nodes:
            path = f"{where}.{node.name}" if where else node.name
            if node.kind() == "struct":
                self._check_names(list(node.children.values()), path, problems)
            else:  # a list's element, a map's key and value: their own structs
                self._check_names(list(node.children.values()), f"{path}[*]", problems)

    # -- the result ----------------------------------------------------------------------

    def shape(self) -> Shape:
        """The superset's fields (ids set when field_ids) and key trees."""
        fields, trees = [], []
        for node in self._roots.values():
            field, tree = _built(node)
            fields.append(with_keys(field, tree) if self.field_ids else field)
            trees.append(tree)
        if self.field_ids:
            # as the compiler does for one version: two hashed keys on one id move the
            # deeper field (then the later by path) to a probed free id
            fields = list(with_unique_ids(pa.schema(fields)))
        return Shape(tuple(fields), tuple(trees))


def _copy(node: _Node) -> _Node:
    out = object.__new__(_Node)
    out.key, out.name, out.field, out.type, out.origin = (
        node.key, node.name, node.field, node.type, node.origin
    )
    out.children = dict(node.children)
    return out


def _built(node: _Node) -> tuple[pa.Field, KeyTree]:
    """The Arrow field of a merged node (nested types rebuilt from its children)."""
    built = [_built(child) for child in node.children.values()]
    fields = [f for f, _ in built]
    t = node.type
    if pa.types.is_struct(t):
        t = pa.struct(fields)
    elif pa.types.is_map(t):
        t = pa.map_(fields[0], fields[1], keys_sorted=t.keys_sorted)
    elif pa.types.is_list(t):
        t = pa.list_(fields[0])
    field = pa.field(node.name, t, nullable=node.field.nullable)
    return field, (node.key, tuple(tree for _, tree in built))


# ---- conforming a version's columns to the superset -----------------------------------

Convert = Callable[[pa.Array], pa.Array]


def conformer(
    version: Shape, superset: Shape
) -> Callable[[Sequence[pa.Array], int], list[pa.Array]] | None:
    """How a batch of ``version``'s columns (n rows) becomes the superset's columns; None
    when they are the same already (same keys, order and types)."""
    by_key = {tree[0]: i for i, tree in enumerate(version.keys)}
    plan: list[tuple[int, Convert | None] | pa.DataType] = []
    same = len(version.fields) == len(superset.fields)
    for position, (field, tree) in enumerate(zip(superset.fields, superset.keys, strict=True)):
        i = by_key.get(tree[0])
        if i is None:
            plan.append(field.type)
            same = False
            continue
        convert = _converter(version.fields[i].type, version.keys[i], field.type, tree)
        plan.append((i, convert))
        same = same and convert is None and i == position
    if same:
        return None

    def conform(columns: Sequence[pa.Array], n: int) -> list[pa.Array]:
        out = []
        for step in plan:
            if isinstance(step, pa.DataType):
                out.append(pa.nulls(n, step))
            else:
                i, convert = step
                out.append(columns[i] if convert is None else convert(columns[i]))
        return out

    return conform


def _converter(vt: pa.DataType, vtree: KeyTree, st: pa.DataType, stree: KeyTree) -> Convert | None:
    """How an array of type ``vt`` becomes one of ``st`` (same key); None: as it is."""
    if vt.equals(st) and _same_keys(vtree, stree):
        return None
    if pa.types.is_struct(st):
        by_key = {sub[0]: i for i, sub in enumerate(vtree[1])}
        steps: list[tuple[int, Convert | None] | pa.DataType] = []
        for j, sub in enumerate(stree[1]):
            i = by_key.get(sub[0])
            if i is None:
                steps.append(st.field(j).type)
            else:
                steps.append((i, _converter(vt.field(i).type, vtree[1][i], st.field(j).type, sub)))
        fields = [st.field(j) for j in range(st.num_fields)]

        def struct(arr: pa.Array) -> pa.Array:
            n = len(arr)
            children = [
                pa.nulls(n, s) if isinstance(s, pa.DataType)
                else (arr.field(s[0]) if s[1] is None else s[1](arr.field(s[0])))
                for s in steps
            ]
            mask = arr.is_null() if arr.null_count else None
            return pa.StructArray.from_arrays(children, fields=fields, mask=mask)

        return struct
    if pa.types.is_list(st):
        element = _converter(vt.value_type, vtree[1][0], st.value_type, stree[1][0])

        def as_list(arr: pa.Array) -> pa.Array:
            values = arr.values if element is None else element(arr.values)
            mask = arr.is_null() if arr.null_count else None
            return pa.ListArray.from_arrays(arr.offsets, values, type=st, mask=mask)

        return as_list
    if pa.types.is_map(st):
        value = _converter(vt.item_type, vtree[1][1], st.item_type, stree[1][1])

        def as_map(arr: pa.Array) -> pa.Array:
            items = arr.items if value is None else value(arr.items)
            mask = arr.is_null() if arr.null_count else None
            return pa.MapArray.from_arrays(arr.offsets, arr.keys, items, type=st, mask=mask)

        return as_map
    return lambda arr: arr.cast(st)  # a widening the superset allowed


def _same_keys(a: KeyTree, b: KeyTree) -> bool:
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(
        _same_keys(x, y) for x, y in zip(a[1], b[1], strict=True)
    )


def record_order(parts: Sequence[np.ndarray]) -> np.ndarray | None:
    """The order that puts the rows of several versions' parts (each row's input record,
    part after part) back in record order; None when they already are."""
    joined = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if len(joined) < 2 or bool(np.all(joined[1:] >= joined[:-1])):
        return None
    return np.argsort(joined, kind="stable")


# ---- the versions of one transcoder -----------------------------------------------------


def label(schema: Schema) -> str:
    """How errors name a version: its file and message."""
    return f"{schema.descriptor.file.name} ({schema.message_name})"


@dataclass(frozen=True)
class _State:
    """What a batch decodes with: the superset's schema and each version's conformer
    (index = version; None: the version's columns are the superset's already)."""

    schema: pa.Schema
    conformers: tuple[Callable[[Sequence[pa.Array], int], list[pa.Array]] | None, ...]


class Versions:
    """The versions of a plan's message a transcoder decodes, and their superset.

    Version 0 is the reference (the spec's schema). Others join from the spec's
    ``versions`` (at plan time: a PlanError refuses an incompatible one) or when a record
    names one (:meth:`index`: an incompatible one is refused with its reason, which its
    records' dead letters carry). The superset only grows; :attr:`state` is swapped whole,
    so a batch decodes with one consistent snapshot. Thread-safe.
    """

    def __init__(self, spec: TranscodeSpec, cache: ParserCache) -> None:
        self.reference = spec.replace(versions=())
        self._cache = cache
        self._lock = threading.Lock()
        self._specs: list[TranscodeSpec] = [self.reference]
        self._shapes: list[Shape] = []
        # each version's decoded columns that are its output (None: all; the others only
        # keep the rows of a column the version lacks: Versions._compiled)
        self._kept: list[tuple[int, ...] | None] = [None]
        self._by_fingerprint: dict[str, int | str] = {spec.schema.fingerprint: 0}
        self._superset = Superset(spec.field_ids)
        plan = cache.entry(self.reference).plan
        shape = Shape(tuple(plan.schema), plan.keys)
        self._superset.add(shape, f"the plan's {label(spec.schema)}")
        self._shapes.append(shape)
        self.state = self._rebuilt()
        for version in spec.versions:
            found = self.index(version, label(version))
            if isinstance(found, str):
                raise PlanError([found])

    @property
    def schema(self) -> pa.Schema:
        return self.state.schema

    def spec(self, index: int) -> TranscodeSpec:
        """The spec version ``index`` is decoded with (its schema aligned to the
        reference's names; a flat plan's columns it cannot read left out)."""
        return self._specs[index]

    def kept(self, index: int) -> tuple[int, ...] | None:
        """The positions of version ``index``'s decoded columns that are its output (None:
        all of them)."""
        return self._kept[index]

    def index(self, schema: Schema, name: str) -> int | str:
        """The version of ``schema`` (rooted at any message: taken at the plan's), joining
        the superset if it is new; a string: why it cannot (its records are bad records)."""
        try:
            schema = schema.message(self.reference.schema.message_name)
        except SchemaError as err:
            return f"{name} does not define {self.reference.schema.message_name}: {err}"
        found = self._by_fingerprint.get(schema.fingerprint)
        if found is not None:
            return found
        return self._join(schema, name)

    def _join(self, schema: Schema, name: str) -> int | str:
        with self._lock:
            found = self._by_fingerprint.get(schema.fingerprint)
            if found is not None:
                return found
            try:
                spec, shape, keep = self._compiled(schema, name)
                self._superset.add(shape, name)
            except PlanError as err:
                why = f"{name} cannot share the output of {label(self.reference.schema)}: " + (
                    "; ".join(err.problems)
                )
                self._by_fingerprint[schema.fingerprint] = why
                return why
            self._specs.append(spec)
            self._shapes.append(shape)
            self._kept.append(keep)
            index = len(self._specs) - 1
            self._by_fingerprint[schema.fingerprint] = index
            self.state = self._rebuilt()
            return index

    def _compiled(
        self, schema: Schema, name: str
    ) -> tuple[TranscodeSpec, Shape, tuple[int, ...] | None]:
        """The spec and output shape of version ``schema``: the reference's columns over
        its aligned schema; a column whose path it lacks (a field added later) is null for
        its records. Such a column still fans out as far as the version can follow its
        path (``lines[*].note.text`` without ``note``: read as ``lines[*]``, one row per
        line, its values dropped): its records get the rows the reference's would. The
        third value: the decoded columns kept (None: all)."""
        spec = self.reference.replace(schema=aligned(schema, self.reference.schema))
        try:
            plan = self._cache.entry(spec).plan
        except PlanError as err:
            columns = spec.columns
            if columns is None:
                raise PlanError([f"{name}: {p}" for p in err.problems]) from None
            absent, other = set(), []
            for problem in err.problems:
                column = next(
                    (c for c in columns if problem.startswith(f"column {quoted(c.output_name)}: ")),
                    None,
                )
                if column is not None and " not in message " in problem:
                    absent.add(column.output_name)
                else:
                    other.append(f"{name}: {problem}")
            if other:
                raise PlanError(other) from None
            kept_columns, placeholders = [], set()
            for c in columns:
                if c.output_name not in absent:
                    kept_columns.append(c)
                    continue
                stand_in = self._fan_out_stand_in(spec, c)
                if stand_in is not None:
                    kept_columns.append(stand_in)
                    placeholders.add(len(kept_columns) - 1)
            if len(kept_columns) == len(placeholders):
                raise PlanError([f"{name} has none of the plan's columns"]) from None
            spec = spec.replace(columns=tuple(kept_columns))
            plan = self._cache.entry(spec).plan
            keep = tuple(i for i in range(len(kept_columns)) if i not in placeholders)
            fields = tuple(plan.schema.field(i) for i in keep)
            keys = tuple(plan.keys[i] for i in keep)
            return spec, Shape(fields, keys), (keep if placeholders else None)
        return spec, Shape(tuple(plan.schema), plan.keys), None

    def _fan_out_stand_in(self, spec: TranscodeSpec, column: Column) -> Column | None:
        """The longest prefix of ``column``'s path that ends in a fan-out (``[*]``, a slice,
        a filter) and that the version can read, as a column of the same name; None when
        there is none (the column adds no rows: leaving it out changes nothing else)."""
        if column.path is None:
            return None  # an expression: left out (docs/evolution.md)
        try:
            path = parse_path(column.path)
        except PathError:
            return None
        root = f"({path.root})" if path.root else ""
        cuts = [
            i + 1
            for i, step in enumerate(path.steps)
            if isinstance(step, WildcardStep | SliceStep | FilterStep)
        ]
        for cut in reversed(cuts):
            stand_in = Column(path=root + format_path(path.steps[:cut]), name=column.output_name)
            try:
                self._cache.entry(spec.replace(columns=(stand_in,)))
            except PlanError:
                continue
            return stand_in
        return None

    def _rebuilt(self) -> _State:
        superset = self._superset.shape()
        return _State(
            pa.schema(superset.fields),
            tuple(conformer(shape, superset) for shape in self._shapes),
        )


# A batch's schema ids, sorted, and each one's version (-1-k: the k-th refused version).
Route = tuple[np.ndarray, np.ndarray]
# What one version's decode gives: its columns, each row's record position in the part,
# failures, bytes decoded, values that lost precision, strings not UTF-8 (Transcoder._decode).
PartDecode = Callable[[int, Records], tuple[list[pa.Array], "np.ndarray | None", list[Failure], int, int, int]]
# What decode() gives: the rows, each row's record, its schema id, failures and the counts.
Decoded = tuple[pa.RecordBatch, np.ndarray, np.ndarray, list[Failure], int, int, int]


class Router:
    """A transcoder's schema versions as its batches meet them: which version each
    Confluent schema id decodes with (cached per schema-id lookup and its generation), the
    :class:`Versions` made at once for the spec's or when a record first names a version
    other than the plan's own, and the decode of a batch version by version. Thread-safe."""

    def __init__(self, spec: TranscodeSpec, cache: ParserCache) -> None:
        self._spec = spec
        self._cache = cache
        self._lock = threading.Lock()
        self.versions: Versions | None = Versions(spec, cache) if spec.versions else None
        # by SchemaIds identity: (it, its generation, sorted ids, each one's version, or
        # None when every id is the plan's own schema)
        self._routes: dict[int, tuple[object, int, np.ndarray | None, np.ndarray | None]] = {}
        self._refusals: list[str] = []  # why each refused version cannot share the output

    def _versioned(self) -> Versions:
        with self._lock:
            if self.versions is None:
                self.versions = Versions(self._spec, self._cache)
            return self.versions

    def route(self, lookup: SchemaIds) -> Route | None:
        """The route of the ids ``lookup`` accepted; None when each names the plan's own
        schema (the batch is decoded as one, as without versions)."""
        held = self._routes.get(id(lookup))
        generation = lookup.generation
        if held is not None and held[0] is lookup and held[1] == generation:
            return None if held[2] is None else (held[2], held[3])  # type: ignore[return-value]
        generation, accepted = lookup.accepted()
        own = self._spec.schema.fingerprint
        message = self._spec.schema.message_name
        foreign = {}
        for sid, schema in accepted.items():
            try:
                same = schema.message(message).fingerprint == own
            except SchemaError:
                same = False  # its records were refused by the prefix reader already
            if not same:
                foreign[sid] = schema
        table: Route | None = None
        if foreign or self.versions is not None:
            versions = self._versioned()
            ids = np.array(sorted(accepted), dtype=np.int64)
            where = np.zeros(len(ids), dtype=np.int64)
            for i, sid in enumerate(ids.tolist()):
                if sid in foreign:
                    found = versions.index(foreign[sid], f"Confluent schema id {sid}")
                    if isinstance(found, str):
                        with self._lock:
                            self._refusals.append(found)
                            found = -len(self._refusals)
                    where[i] = found
            table = (ids, where)
        if len(self._routes) > 8:
            self._routes.clear()
        self._routes[id(lookup)] = (
            lookup, generation, None if table is None else table[0], None if table is None else table[1]
        )
        return table

    def decode(
        self, records: Records, route: Route, decode_part: PartDecode, on_error: str
    ) -> Decoded:
        """Each version's records decoded by ``decode_part`` and conformed to the superset,
        the rows put back in record order."""
        versions = self._versioned()
        ids, where = route
        assert records.schema_ids is not None
        of_record = where[np.searchsorted(ids, records.schema_ids)]
        state = versions.state
        keep_raw = on_error == "dead_letter"
        failures = list(records.failures)
        errors: list[DecodeError] = [e for e, _ in failures]
        n_bytes = precision_lost = not_utf8 = 0
        parts: list[tuple[list[pa.Array], np.ndarray, np.ndarray]] = []
        for version in np.unique(of_record).tolist():
            mask = of_record == version
            if version < 0:  # a version that cannot share the output: bad records
                why = self._refusals[-version - 1]
                for pos in np.flatnonzero(mask).tolist():
                    err = DecodeError(why, index=int(records.index[pos]), offset=0, path="")
                    errors.append(err)
                    failures.append((err, records.raw(pos) if keep_raw else None))
                continue
            part = records.subset(mask)
            try:
                columns, positions, failed, b, p, u = decode_part(version, part)
            except DecodeError as err:  # raising: the lowest bad record of every version
                errors.append(err)
                continue
            assert positions is not None and part.schema_ids is not None
            failures += failed
            n_bytes, precision_lost, not_utf8 = n_bytes + b, precision_lost + p, not_utf8 + u
            kept = versions.kept(version)
            if kept is not None:
                columns = [columns[i] for i in kept]
            conform = state.conformers[version]
            if conform is not None:
                columns = conform(columns, len(positions))
            parts.append((columns, part.index[positions], part.schema_ids[positions]))
        if on_error == "raise" and errors:
            raise min(errors, key=lambda e: e.index)
        if not parts:
            empty = state.schema.empty_table().to_batches()
            rows = empty[0] if empty else pa.RecordBatch.from_pylist([], schema=state.schema)
            none = np.zeros(0, dtype=np.int64)
            return rows, none, none, failures, n_bytes, precision_lost, not_utf8
        if len(parts) == 1:
            columns, row_records, row_ids = parts[0]
        else:
            columns = [
                pa.concat_arrays([p[0][i] for p in parts]) for i in range(len(state.schema))
            ]
            row_records = np.concatenate([p[1] for p in parts])
            row_ids = np.concatenate([p[2] for p in parts])
        rows = pa.RecordBatch.from_arrays(columns, schema=state.schema)
        order = record_order([p[1] for p in parts])
        if order is not None:
            rows = rows.take(pa.array(order))
            row_records, row_ids = row_records[order], row_ids[order]
        return rows, row_records, row_ids, failures, n_bytes, precision_lost, not_utf8
