"""YAML plans: a schema, a column list and the transcoder's options in one file.

The reference's format (bufarrowlib, bufarrow-behaviour §4.1) loads unchanged::

    proto: {file: bidrequest.proto, message: BidRequestEvent, import_paths: [schema]}
    denormalizer:
      columns:
        - {name: imp_id, path: "imp[*].id"}
        - name: size
          expr: {func: concat, sep: x, args: [{path: "imp[*].banner.w"}, {path: "imp[*].banner.h"}]}

wirearrow's own keys sit next to it: no ``denormalizer`` (whole-message mode), ``errors``,
one key per transcoder option (``wirearrow.options``), ``output`` and ``input``
(docs/yaml.md is the reference of every key).

:func:`load_plan` checks the whole file before anything is compiled and raises one
:class:`~wirearrow.PlanError` listing every problem, each as ``file:line: key.path: message``.
Paths in the file (``proto.file``, ``import_paths``, output paths) are relative to the
file's directory. YAML is read with a ``yaml.SafeLoader`` subclass: no Python tags.

Column paths are parsed at load time; they are resolved against the schema (and the
``.proto`` file compiled) by :meth:`PlanConfig.schema` / :meth:`PlanConfig.transcoder`,
whose errors carry the same ``file:line:`` locations.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from wirearrow.cache import ParserCache
from wirearrow.errors import (
    MAX_QUOTED,
    PathError,
    PlanError,
    SchemaError,
    capped,
    did_you_mean,
    quoted,
)
from wirearrow.options import (
    ON_ERROR,
    OPTIONS,
    Choice,
    FieldNames,
    Flag,
    IntRange,
    option_problem,
    unknown_options,
)
from wirearrow.output import FIELDS as OUTPUT_FIELDS
from wirearrow.output import OUTPUT_FORMATS, Output, partition_problem
from wirearrow.paths import parse_path
from wirearrow.plan import functions as _functions  # noqa: F401  (registers the library)
from wirearrow.plan.compiler import Column
from wirearrow.plan.expressions import FUNCTIONS, Call, Expr, ExprTypeError, Lit, PathRef
from wirearrow.schema import Schema
from wirearrow.sources.format import CONFLUENT, FIELDS, RecordFormat
from wirearrow.spec import TranscodeSpec
from wirearrow.transcoder import Transcoder

__all__ = [
    "PlanConfig",
    "ProtoSource",
    "load_plan",
]

AUX_KEYS = ("sep", "literal", "literal2", "param")
# The reference's YAML function names (bufarrow-behaviour §3.3): a name here that FUNCTIONS
# lacks is reported as "not available yet" rather than unknown.
REFERENCE_FUNCTIONS = frozenset((
    "coalesce", "default", "cond", "has", "len", "eq", "ne", "lt", "le", "gt", "ge", "and",
    "or", "not", "add", "sub", "mul", "div", "mod", "abs", "ceil", "floor", "round", "min",
    "max", "concat", "upper", "lower", "trim", "trim_prefix", "trim_suffix", "cast_int",
    "cast_float", "cast_string", "strptime", "try_strptime", "age", "extract_year",
    "extract_month", "extract_day", "extract_hour", "extract_minute", "extract_second",
    "epoch_to_date", "date_part", "hash", "bucket", "mask", "coerce", "enum_name", "sum",
    "distinct", "list_concat",
))  # fmt: skip

# The transcoder's options are top-level keys of their own names, but for on_error: the
# errors key (a policy, or a mapping with the dead-letter path too).
_OPTION_KEYS = tuple(name for name in OPTIONS if name != "on_error")
_TOP_KEYS = (
    "proto", "custom_message", "versions", "denormalizer", "errors", *_OPTION_KEYS, "output", "input"
)
_PROTO_KEYS = ("file", "descriptor_set", "module", "message", "import_paths")
# Where a schema can come from: exactly one of these keys of `proto` (and custom_message).
_SCHEMA_KEYS = ("file", "descriptor_set", "module")
_COLUMN_KEYS = ("name", "path", "expr", "strict")
_EXPR_KEYS = ("func", "args", *AUX_KEYS)
_ARG_KEYS = ("path", "literal", "expr")
_ERRORS_KEYS = ("policy", "dead_letter_path")
_OUTPUT_KEYS = tuple(OUTPUT_FIELDS)  # output: an Output, under the same names
_INPUT_KEYS = tuple(FIELDS)  # input: a RecordFormat, under the same names
# The alternative format of pybufarrow's README, rejected by the reference too (§4.2).
_PYBUFARROW_KEYS = ("proto_file", "message_name", "denorm")
_INT64 = (-(2**63), 2**64 - 1)  # literals: int64, or uint64 above it
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


# ---- the typed result ------------------------------------------------------------------


@dataclass(frozen=True)
class ProtoSource:
    """Where the schema comes from: ``Schema.from_proto(file, message, import_paths=...)``,
    or, when set, ``Schema.from_descriptor_set(descriptor_set, message)`` or
    ``Schema.from_module(module, message)`` (``file`` is then empty).

    ``file`` is either relative to one of ``import_paths`` (protoc ``-I``) or an absolute
    path; ``import_paths`` and ``descriptor_set`` are absolute (resolved against the plan
    file's directory); ``module`` is a dotted module name.
    """

    file: str
    message: str
    import_paths: tuple[str, ...] = ()
    descriptor_set: str | None = None
    module: str | None = None

    def schema(self) -> Schema:
        if self.descriptor_set is not None:
            return Schema.from_descriptor_set(self.descriptor_set, self.message)
        if self.module is not None:
            return Schema.from_module(self.module, self.message)
        return Schema.from_proto(self.file, self.message, import_paths=self.import_paths)


@dataclass(frozen=True)
class PlanConfig:
    """A checked plan: build its :meth:`transcoder` (or just its :meth:`schema`).

    ``columns`` is None in whole-message mode (no ``denormalizer``). Paths are absolute.
    Frozen: :meth:`with_options` derives a variant (another ``on_error``, ...).
    """

    proto: ProtoSource
    columns: tuple[Column, ...] | None = None
    # The transcoder options the plan sets, as (name, value) pairs; every other option has
    # its default. Read them as ``options``, derive with ``with_options``.
    settings: tuple[tuple[str, Any], ...] = ()
    dead_letter_path: str | None = None
    # Where the rows go (output:): files or a table; paths absolute.
    output: Output = field(default_factory=Output)
    # The input: fields of a RecordFormat the plan sets, as (name, value) pairs (read them
    # as ``input``), and the source of each Confluent schema id of input.schemas (None:
    # the plan's own schema).
    input_settings: tuple[tuple[str, Any], ...] = ()
    schema_ids: tuple[tuple[int, ProtoSource | None], ...] = ()
    # versions: other versions of the plan's message whose records share its output
    # (docs/evolution.md), beside those input.schemas names
    version_sources: tuple[ProtoSource, ...] = ()
    source: str = "<dict>"  # the plan file as given, "<string>" or "<dict>"
    # Where things were written, for errors found later: "file:line" of each column, and
    # of proto.file / proto.message.
    _column_sites: tuple[str, ...] = field(default=(), repr=False, compare=False)
    _proto_sites: tuple[str, str] = field(default=("", ""), repr=False, compare=False)
    # custom_message: the message merged into proto's (bufarrow-behaviour §6), and its sites
    custom: ProtoSource | None = None
    _custom_sites: tuple[str, str] = field(default=("", ""), repr=False, compare=False)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def mode(self) -> str:
        """Either "flat" (a denormalizer column list) or "nested" (whole messages)."""
        return "nested" if self.columns is None else "flat"

    @property
    def options(self) -> dict[str, Any]:
        """Every transcoder option of this plan by name (defaults for those it does not set)."""
        return {**{name: f.default for name, f in OPTIONS.items()}, **dict(self.settings)}

    def with_options(self, **changes: Any) -> PlanConfig:
        """This plan with some transcoder options changed (checked: PlanError if invalid)."""
        unknown = unknown_options(changes)
        if unknown:
            raise TypeError(f"unknown transcoder options: {', '.join(unknown)}")
        problems = [
            f"{name} {why}" for name, value in changes.items() if (why := option_problem(name, value))
        ]
        if problems:
            raise PlanError(problems)
        settings = {**dict(self.settings), **changes}
        return replace(self, settings=tuple(settings.items()), _cache={})

    def schema(self) -> Schema:
        """Compile the ``.proto`` file (once per PlanConfig); errors name the plan's line.

        With ``custom_message``: the base message merged with it
        (:meth:`Schema.with_custom_message`), whose records are (base, custom) pairs.
        """
        key = (self.proto, self.custom)
        schema = self._cache.get(key)
        if schema is None:
            schema = _located_schema(self.proto, "proto", self._proto_sites, self.source)
            if self.custom is not None:
                custom = _located_schema(
                    self.custom, "custom_message", self._custom_sites, self.source
                )
                try:
                    schema = schema.with_custom_message(custom)
                except SchemaError as err:
                    site = self._custom_sites[0] or self.source
                    raise SchemaError(f"{site}: custom_message: {err}") from err
            self._cache[key] = schema
        return schema

    @property
    def input(self) -> RecordFormat:
        """How the plan's records arrive (its ``input:`` section; defaults elsewhere)."""
        settings = dict(self.input_settings)  # input.schemas: a registry's URL is there
        if self.schema_ids:
            settings["schemas"] = self.confluent_schema
        return RecordFormat(**settings)

    def confluent_schemas(self) -> dict[int, Schema]:
        """``{schema_id: Schema}`` of ``input.schemas`` (each compiled once)."""
        return {sid: self.confluent_schema(sid) for sid, _ in self.schema_ids}  # type: ignore[misc]

    def confluent_schema(self, schema_id: int) -> Schema | None:
        """The schema of a Confluent schema id of ``input.schemas`` (compiled on first use;
        an id without a source names the plan's own schema); None for other ids."""
        for sid, source in self.schema_ids:
            if sid != schema_id:
                continue
            if source is None:
                return self.schema()
            schema = self._cache.get(source)
            if schema is None:
                try:
                    schema = self._cache[source] = source.schema()
                except SchemaError as err:
                    raise SchemaError(f"{self.source}: input.schemas.{sid}: {err}") from err
            return schema
        return None

    def transcoder(self, cache: ParserCache | None = None) -> Transcoder:
        """The :class:`~wirearrow.Transcoder` of this plan (on ``cache``, if given).

        Path errors (a field the message does not have, ...) are raised as one
        :class:`~wirearrow.PlanError`, each problem located at its column's line.
        """
        spec = self.spec()
        try:
            return Transcoder(spec, cache=cache)
        except PlanError as err:
            raise PlanError([self.locate(problem) for problem in err.problems]) from err

    def spec(self) -> TranscodeSpec:
        """The :class:`~wirearrow.TranscodeSpec` of this plan (the schema compiled once)."""
        spec = self._cache.get("spec")
        if spec is None:
            spec = self._cache["spec"] = TranscodeSpec(
                self.schema(), self.columns, self.versions(), **dict(self.settings)
            )
        return spec

    def versions(self) -> tuple[Schema, ...]:
        """The other versions of the plan's message this plan reads: those ``versions:``
        lists, then the schemas of ``input.schemas`` that are not the plan's own
        (docs/evolution.md). Each compiled once."""
        own = self.schema().fingerprint
        found: dict[str, Schema] = {}
        for i, source in enumerate(self.version_sources):
            schema = self._cache.get(source)
            if schema is None:
                try:
                    schema = self._cache[source] = source.schema()
                except SchemaError as err:
                    raise SchemaError(f"{self.source}: versions[{i}]: {err}") from err
            if schema.fingerprint != own:
                found.setdefault(schema.fingerprint, schema)
        for sid, _ in self.schema_ids:
            schema = self.confluent_schema(sid)
            if schema is not None and schema.fingerprint != own:
                found.setdefault(schema.fingerprint, schema)
        return tuple(found.values())

    def locate(self, problem: str) -> str:
        """``column 'x': why`` (the compiler's words) -> ``file:line: denormalizer...: why``."""
        for i, column in enumerate(self.columns or ()):
            prefix = f"column {quoted(column.output_name)}: "
            if problem.startswith(prefix):
                site = self._column_sites[i] if i < len(self._column_sites) else self.source
                return f"{site}: denormalizer.columns[{i}]: {problem[len(prefix) :]}"
        return f"{self.source}: {problem}"


def _located_schema(
    source: ProtoSource, keypath: str, sites: tuple[str, str], where: str
) -> Schema:
    """``source.schema()``, its errors located at the plan key they are about."""
    try:
        return source.schema()
    except SchemaError as err:
        text = str(err)
        kind = (
            "descriptor_set"
            if source.descriptor_set is not None
            else ("module" if source.module is not None else "file")
        )
        key = f"{keypath}.message" if text.startswith("message ") else f"{keypath}.{kind}"
        site = sites[key.endswith(".message")] or where
        raise SchemaError(f"{site}: {key}: {text}") from err


# ---- YAML with line numbers --------------------------------------------------------------


class _Map(dict):
    """A YAML mapping that remembers where it and each of its keys started (1-based), and
    the text of each plain scalar value that YAML 1.1 turned into something else."""

    line: int | None = None
    key_lines: dict
    duplicates: list
    texts: dict


class _Seq(list):
    """A YAML sequence that remembers where it and each of its items started (1-based), and
    the text of each plain scalar item that YAML 1.1 turned into something else."""

    line: int | None = None
    item_lines: list
    texts: dict


def _plain_text(node: yaml.Node, value: object) -> str | None:
    """The source text of a plain (unquoted) scalar, unless it loaded as null.

    PyYAML follows YAML 1.1, where ``yes``/``on``/``off`` are booleans, ``1:20`` is 80 and
    ``2024-01-01`` a date; the reference reads its plans with Go's yaml.v3, which puts the
    text of any scalar into a string field as written. Keys that take a string use this
    text so that such plans load unchanged (``name: yes`` is the column "yes"). Null stays
    null: yaml.v3 reads ``name: null`` as an empty (missing) name too.
    """
    # (plain style is None for PyYAML's parser, "" for libyaml's)
    if isinstance(node, yaml.ScalarNode) and not node.style and value is not None:
        return node.value
    return None


# libyaml's parser (PyYAML's C extension, in its wheels) reads a plan ~70x faster than the
# pure-Python one (5 MB: 0.06 s against 4.2 s); the same safe constructors, the same marks.
_SafeLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LineLoader(_SafeLoader):
    """``yaml.SafeLoader`` (libyaml's where installed) whose mappings and sequences carry
    their line numbers."""


def _construct_map(loader: _LineLoader, node: yaml.MappingNode):
    data = _Map()
    data.line = node.start_mark.line + 1
    data.key_lines = {}
    data.duplicates = []
    data.texts = {}
    yield data
    loader.flatten_mapping(node)  # merge keys (<<)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                "found an unhashable key",
                key_node.start_mark,
            ) from None
        line = key_node.start_mark.line + 1
        if key in data.key_lines:
            data.duplicates.append((key, line))
        data.key_lines[key] = line
        data[key] = loader.construct_object(value_node, deep=False)
        text = _plain_text(value_node, data[key])
        if text is not None:
            data.texts[key] = text
        else:
            data.texts.pop(key, None)


def _construct_seq(loader: _LineLoader, node: yaml.SequenceNode):
    data = _Seq()
    data.line = node.start_mark.line + 1
    data.item_lines = [child.start_mark.line + 1 for child in node.value]
    data.texts = {}
    yield data
    for i, child in enumerate(node.value):
        data.append(loader.construct_object(child, deep=False))
        text = _plain_text(child, data[-1])
        if text is not None:
            data.texts[i] = text


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


# A plan is untrusted input: its shape is bounded before anything walks it. Nodes count
# every mapping, sequence and scalar once per place it appears, an alias expanded in full
# (a few aliases that each repeat the one before would otherwise multiply the work of every
# later step); depth counts nested mappings and sequences (a deep expr is three per call).
MAX_PLAN_NODES = 100_000
MAX_PLAN_NESTING = 200
# The text of a plan, in bytes (load_plan's max_bytes): checked before it is parsed, a file
# before it is read. 4 MiB is tens of thousands of columns; libyaml parses it in ~0.05 s.
MAX_PLAN_BYTES = 4 * 2**20


def _check_yaml_shape(text: str, where: str) -> None:
    """PlanError for YAML deeper than MAX_PLAN_NESTING or larger than MAX_PLAN_NODES once
    its aliases are expanded, or with an alias inside its own anchor; from the event
    stream, without building anything (PyYAML composes nodes recursively)."""
    # Open collections: [expanded nodes, height, anchor]; sizes and heights of closed anchors.
    open_: list[list] = [[0, 0, None]]
    sizes: dict[str, tuple[int, int]] = {}
    total = 0

    def fail(event: yaml.Event, what: str) -> None:
        line = f":{event.start_mark.line + 1}" if event.start_mark is not None else ""
        raise PlanError([f"{where}{line}: YAML: {what}"])

    try:
        for event in yaml.parse(text, Loader=_LineLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                open_.append([1, 1, event.anchor])
                if len(open_) - 1 > MAX_PLAN_NESTING:
                    fail(event, f"nested deeper than {MAX_PLAN_NESTING} levels")
                size = 1
            elif isinstance(event, yaml.CollectionEndEvent):
                size, height, anchor = open_.pop()
                if anchor is not None:
                    sizes[anchor] = (size, height)
                open_[-1][0] += size
                open_[-1][1] = max(open_[-1][1], height + 1)
                continue
            elif isinstance(event, yaml.ScalarEvent):
                size, height = 1, 1
                if event.anchor is not None:
                    sizes[event.anchor] = (1, 1)
            elif isinstance(event, yaml.AliasEvent):
                if event.anchor not in sizes:
                    if any(frame[2] == event.anchor for frame in open_):
                        fail(event, f"alias *{event.anchor} inside its own anchor (recursive)")
                    continue  # an undefined alias: the parser reports it below
                size, height = sizes[event.anchor]
                if len(open_) - 1 + height > MAX_PLAN_NESTING:
                    fail(event, f"nested deeper than {MAX_PLAN_NESTING} levels (alias *{event.anchor})")
            else:
                continue
            total += size
            if total > MAX_PLAN_NODES:
                fail(event, f"more than {MAX_PLAN_NODES:,} nodes with every alias expanded")
            if not isinstance(event, yaml.CollectionStartEvent):
                open_[-1][0] += size
                open_[-1][1] = max(open_[-1][1], height + 1)
    except yaml.MarkedYAMLError as err:
        # libyaml refuses deep nesting itself, scanning ahead of the events (flow style)
        if "maximum nesting depth" in (err.problem or ""):
            line = f":{err.problem_mark.line + 1}" if err.problem_mark is not None else ""
            raise PlanError([f"{where}{line}: YAML: nested deeper than {MAX_PLAN_NESTING} levels"]) from None
        return  # malformed YAML: yaml.load reports it with its place
    except yaml.YAMLError:
        return


def _check_data_shape(data: object, where: str) -> None:
    """The limits of _check_yaml_shape for an already parsed mapping: iterative, each
    shared dict or list measured once, a cycle an error."""
    measured: dict[int, tuple[int, int]] = {}  # id -> (expanded nodes, height)
    on_path: set[int] = set()
    stack: list[tuple[object, bool]] = [(data, False)]
    while stack:
        obj, children_done = stack.pop()
        if not isinstance(obj, Mapping | list | tuple):
            continue
        key = id(obj)
        if key in measured:
            continue
        items = list(obj.keys()) + list(obj.values()) if isinstance(obj, Mapping) else list(obj)
        if not children_done:
            if key in on_path:
                raise PlanError([f"{where}: the plan contains itself (a cycle)"])
            on_path.add(key)
            if len(on_path) > MAX_PLAN_NESTING:
                raise PlanError([f"{where}: nested deeper than {MAX_PLAN_NESTING} levels"])
            stack.append((obj, True))
            for item in items:
                if isinstance(item, Mapping | list | tuple):
                    if id(item) in on_path:
                        raise PlanError([f"{where}: the plan contains itself (a cycle)"])
                    stack.append((item, False))
            continue
        on_path.discard(key)
        size, height = 1, 1
        for item in items:
            sub = measured.get(id(item), (1, 0)) if isinstance(item, Mapping | list | tuple) else (1, 0)
            size += sub[0]
            height = max(height, sub[1] + 1)
        if size > MAX_PLAN_NODES:
            raise PlanError([f"{where}: more than {MAX_PLAN_NODES:,} nodes with every shared part expanded"])
        if height > MAX_PLAN_NESTING:
            raise PlanError([f"{where}: nested deeper than {MAX_PLAN_NESTING} levels"])
        measured[key] = (size, height)


def _parse_yaml(text: str, where: str) -> object:
    _check_yaml_shape(text, where)
    try:
        return yaml.load(text, Loader=_LineLoader)  # a SafeLoader subclass: safe
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        what = err.problem or err.context or "invalid YAML"
        if err.context and err.problem:
            what = f"{err.problem} ({err.context})"
        if "alias" in (err.context or "") or "'['" in what or "found '*'" in what:
            what += "; in flow style ({...} or [...]) quote paths that contain [ ] or *"
        if "constructor for the tag" in what:
            what += " (plans are read with yaml.safe_load rules: no Python tags)"
        raise PlanError([f"{where}{line}: YAML: {what}"]) from None
    except yaml.YAMLError as err:
        raise PlanError([f"{where}: YAML: {err}"]) from None


# ---- checking --------------------------------------------------------------------------


def _join(base: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, datetime.date):
        return "a date (quote it to get a string)"
    return type(value).__name__


def _suggest(word: str, choices: Sequence[str]) -> str:
    return did_you_mean(word, choices)


def _is_default(key: str, value: object) -> bool:
    """An aux value that means "not set" in the reference (its §4.1 defaults)."""
    if key == "sep":
        return value == ""
    if key == "param":
        return value == 0 and not isinstance(value, bool)
    return value is None


def _choices(values: Sequence[str]) -> str:
    return ", ".join(values)


# YAML 1.2 (yaml.v3) booleans; any other YAML 1.1 boolean (yes, On, n, ...) is a string there.
_YAML12_BOOLS = frozenset(("true", "True", "TRUE", "false", "False", "FALSE"))
# Numbers YAML 1.2 reads that YAML 1.1 leaves as text: 1e3 (no dot), 0o17.
_YAML12_FLOAT = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+")
_YAML12_OCTAL = re.compile(r"0o[0-7]+")


def _reference_literal(value: object, text: str | None) -> object:
    """A literal as the reference's yaml.v3 types it (YAML 1.2 core schema) rather than as
    PyYAML's YAML 1.1 does: ``yes``/``off`` and ``1:20`` are strings, so are dates (yaml.v3
    keeps timestamp-looking scalars as text in an untyped field), ``1e3`` is a float."""
    if text is None:  # quoted, or not from YAML text
        return value
    if isinstance(value, bool) and text not in _YAML12_BOOLS:
        return text
    if isinstance(value, int | float) and not isinstance(value, bool) and ":" in text:
        return text
    if isinstance(value, str) and _YAML12_FLOAT.fullmatch(value):
        return float(value)
    if isinstance(value, str) and _YAML12_OCTAL.fullmatch(value):
        return int(value[2:], 8)
    return value


class _Checker:
    """Walks the loaded YAML, builds the typed plan and gathers every problem."""

    def __init__(self, where: str, base_dir: str, has_lines: bool) -> None:
        self.where = where
        self.base_dir = base_dir
        self.has_lines = has_lines
        self._problems: list[tuple[int, str]] = []
        # The well-formed columns: (column, index in the list, line), for path checks.
        self._columns: list[tuple[Column, int, int | None]] = []

    @property
    def problems(self) -> list[str]:
        """Every problem, in file order (by line; as found within a line)."""
        return [text for _, text in sorted(self._problems, key=lambda p: p[0])]

    # -- reporting --------------------------------------------------------------------

    def site(self, line: int | None) -> str:
        return f"{self.where}:{line}" if self.has_lines and line is not None else self.where

    def problem(self, line: int | None, keypath: str, message: str) -> None:
        where = self.site(line)
        text = f"{where}: {keypath}: {message}" if keypath else f"{where}: {message}"
        self._problems.append((line or 0, text))

    @staticmethod
    def key_line(mapping: Mapping, key: object) -> int | None:
        lines = getattr(mapping, "key_lines", None)
        if lines and key in lines:
            return lines[key]
        return getattr(mapping, "line", None)

    @staticmethod
    def text(container: Any, key: object) -> object:
        """``container[key]`` for a key that takes a string: a plain scalar YAML 1.1 read as
        a boolean, number or date comes back as written (see :func:`_plain_text`)."""
        texts = getattr(container, "texts", None)
        if texts and key in texts:
            return texts[key]
        return container[key]

    @staticmethod
    def item_line(seq: Sequence, i: int, default: int | None) -> int | None:
        lines = getattr(seq, "item_lines", None)
        if lines and i < len(lines):
            return lines[i]
        return default

    # -- shapes -----------------------------------------------------------------------

    def mapping(
        self,
        value: object,
        keypath: str,
        line: int | None,
        allowed: Sequence[str],
        required: Sequence[str] = (),
    ) -> Mapping | None:
        """``value`` as a mapping with only ``allowed`` keys, ``required`` ones non-null."""
        if not isinstance(value, Mapping):
            self.problem(line, keypath, f"expected a mapping, got {_kind(value)}")
            return None
        # A missing key is reported at the key holding this mapping (block mappings start
        # on their first key's line).
        holder_line = line if line is not None else getattr(value, "line", None)
        for key in required:
            if value.get(key) is None:
                self.problem(holder_line, _join(keypath, key), "required key is missing")
        for key, dup_line in getattr(value, "duplicates", ()):
            self.problem(dup_line, _join(keypath, str(key)), "duplicate key (YAML keeps the last)")
        for key in value:
            key_line = self.key_line(value, key)
            if not isinstance(key, str):
                self.problem(key_line, keypath, f"keys are strings, got {capped(repr(key), MAX_QUOTED)}")
            elif key not in allowed:
                hint = _suggest(key, allowed)
                if not keypath and key in _PYBUFARROW_KEYS:
                    hint = (
                        " (pybufarrow's README format is not a real format; write "
                        "proto: {file, message} and denormalizer: {columns: [...]})"
                    )
                self.problem(
                    key_line,
                    _join(keypath, key),
                    f"unknown key{hint}; expected one of: {_choices(allowed)}",
                )
        return value

    def string(self, value: object, keypath: str, line: int | None) -> str | None:
        if not isinstance(value, str):
            self.problem(line, keypath, f"expected a string, got {_kind(value)}")
            return None
        if not value.strip():
            self.problem(line, keypath, "must not be empty")
            return None
        return value

    def string_list(self, value: object, keypath: str, line: int | None) -> list[str] | None:
        if not isinstance(value, list):
            self.problem(line, keypath, f"expected a list of strings, got {_kind(value)}")
            return None
        out = []
        for i in range(len(value)):
            text = self.string(self.text(value, i), _join(keypath, i), self.item_line(value, i, line))
            if text is not None:
                out.append(text)
        return out if len(out) == len(value) else None

    def choice(
        self,
        value: object,
        keypath: str,
        line: int | None,
        allowed: Sequence[str],
        fold_case: bool = False,
    ) -> str | None:
        if not isinstance(value, str):
            self.problem(line, keypath, f"expected one of {_choices(allowed)}, got {_kind(value)}")
            return None
        text = value.lower() if fold_case else value
        if text in allowed:
            return text
        self.problem(
            line,
            keypath,
            f"unknown value {quoted(value)}{_suggest(text, allowed)}; expected one of: "
            f"{_choices(allowed)}",
        )
        return None

    def integer(
        self,
        value: object,
        keypath: str,
        line: int | None,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(line, keypath, f"expected an integer, got {_kind(value)}")
            return None
        if minimum is not None and value < minimum:
            self.problem(line, keypath, f"must be at least {minimum}, got {value}")
            return None
        if maximum is not None and value > maximum:
            self.problem(line, keypath, f"must be at most {maximum}, got {value}")
            return None
        return value

    def option(self, value: object, key: str, line: int | None, rule: object) -> object:
        """A transcoder option's value, checked by the kind of its rule."""
        if isinstance(rule, Choice):
            return self.choice(value, key, line, rule.values)
        if isinstance(rule, IntRange):
            return self.integer(value, key, line, minimum=rule.low, maximum=rule.high)
        if isinstance(rule, Flag):
            return self.boolean(value, key, line)
        if isinstance(rule, FieldNames):
            names = self.string_list(value, key, line)
            return tuple(names) if names is not None else None
        raise TypeError(f"no YAML check for the rule of option {key}: {rule!r}")

    def boolean(self, value: object, keypath: str, line: int | None) -> bool | None:
        if not isinstance(value, bool):
            self.problem(line, keypath, f"expected true or false, got {_kind(value)}")
            return None
        return value

    def local_path(self, value: object, keypath: str, line: int | None) -> str | None:
        text = self.string(value, keypath, line)
        if text is None:
            return None
        return os.path.normpath(os.path.join(self.base_dir, os.path.expanduser(text)))

    # -- sections ---------------------------------------------------------------------

    def plan(self, data: object) -> PlanConfig | None:
        if data is None:
            self.problem(1, "", "the plan is empty; it needs at least proto: {file, message}")
            return None
        root = self.mapping(data, "", 1, _TOP_KEYS, required=("proto",))
        if root is None:
            return None

        def at(key: str) -> tuple[object, int | None]:
            return root.get(key), self.key_line(root, key)

        proto, proto_sites = None, ("", "")
        if root.get("proto") is not None:  # else: reported as a missing required key
            proto, proto_sites = self.proto(*at("proto"), "proto")
        custom, custom_sites = None, ("", "")
        if root.get("custom_message") is not None:
            custom, custom_sites = self.proto(*at("custom_message"), "custom_message")
        versions = self.versions(*at("versions"))
        columns, column_sites = self.denormalizer(root, *at("denormalizer"))
        on_error, dead_letter_path = self.errors(*at("errors"))
        settings: dict[str, Any] = {}
        if on_error is not None:
            settings["on_error"] = on_error
        for key in _OPTION_KEYS:
            value, line = at(key)
            if value is not None:
                checked = self.option(value, key, line, OPTIONS[key].metadata["rule"])
                if checked is not None:
                    settings[key] = checked
        for key, value in settings.items():
            why = option_problem(key, value)  # the spec's rule is the last word
            if why is not None:
                self.problem(self.key_line(root, key), key, why)
        output = self.output(*at("output"))
        input_settings, schema_ids = self.input(*at("input"))
        if self.problems and proto is not None:
            self.path_problems(proto)
        if self.problems or proto is None:
            return None
        return PlanConfig(
            proto=proto,
            columns=columns,
            settings=tuple(settings.items()),
            dead_letter_path=dead_letter_path,
            output=output,
            input_settings=input_settings,
            schema_ids=schema_ids,
            version_sources=versions,
            source=self.where,
            _column_sites=column_sites,
            _proto_sites=proto_sites,
            custom=custom,
            _custom_sites=custom_sites,
        )

    def path_problems(self, proto: ProtoSource) -> None:
        """A plan with other problems: also the path errors of its well-formed columns
        (found by compiling them, as transcoder() would), so that all come in one report.
        A plan without other problems leaves this to transcoder(): loading it never needs
        the schema."""
        if not self._columns:
            return
        try:
            Transcoder(proto.schema(), columns=[c for c, _, _ in self._columns])
        except SchemaError:
            return  # the schema's own errors come from schema() / transcoder(), located
        except PlanError as err:
            for problem in err.problems:
                for column, i, line in self._columns:
                    prefix = f"column {quoted(column.output_name)}: "
                    if problem.startswith(prefix):
                        keypath = f"denormalizer.columns[{i}]"
                        self.problem(line, keypath, problem[len(prefix) :])
                        break

    def proto(
        self, value: object, line: int | None, keypath: str, resolve: bool = True
    ) -> tuple[ProtoSource | None, tuple[str, str]]:
        sites = (self.site(line), self.site(line))
        if not isinstance(value, Mapping):
            self.mapping(value, keypath, line, _PROTO_KEYS)  # reports the type
            return None, sites
        given = [key for key in _SCHEMA_KEYS if value.get(key) is not None]
        source_key = given[0] if given else "file"
        holder_line = line if line is not None else getattr(value, "line", None)
        if not given:
            self.problem(
                holder_line,
                _join(keypath, "file"),
                "required key is missing (or give descriptor_set: a serialized "
                "FileDescriptorSet, or module: a generated _pb2 module)",
            )
        elif len(given) > 1:
            self.problem(
                holder_line,
                keypath,
                "needs exactly one of file (.proto source), descriptor_set (a serialized "
                f"FileDescriptorSet) or module (a generated _pb2 module); got {', '.join(given)}",
            )
        m = self.mapping(value, keypath, line, _PROTO_KEYS, required=("message",))
        if m is None:  # not reached: value is a mapping
            return None, sites
        file_line = self.key_line(m, source_key)
        message_line = self.key_line(m, "message")
        sites = (self.site(file_line), self.site(message_line))
        if source_key != "file" and len(given) == 1:
            return self.other_source(m, keypath, source_key, resolve), sites
        file = self.text(m, "file") if m.get("file") is not None else None
        message = self.text(m, "message") if m.get("message") is not None else None
        if file is not None:
            file = self.string(file, _join(keypath, "file"), file_line)
        if message is not None:
            message = self.string(message, _join(keypath, "message"), message_line)
        roots: list[str] = []
        raw_roots = m.get("import_paths")
        roots_path = _join(keypath, "import_paths")
        roots_line = self.key_line(m, "import_paths")
        if raw_roots is not None:
            if isinstance(raw_roots, str) or not isinstance(raw_roots, Sequence):
                self.problem(
                    roots_line,
                    roots_path,
                    f"expected a list of directories, got {_kind(raw_roots)}",
                )
            else:
                for i, raw in enumerate(raw_roots):
                    item_line = self.item_line(raw_roots, i, roots_line)
                    raw = self.text(raw_roots, i)
                    root = self.local_path(raw, _join(roots_path, i), item_line)
                    if root is None:
                        continue
                    if resolve and not os.path.isdir(root):
                        self.problem(
                            item_line, _join(roots_path, i), f"{raw!r} is not a directory ({root})"
                        )
                        continue
                    roots.append(root)
        if file is None or message is None or not resolve:
            return None, sites
        located = self.locate_proto(file, roots, _join(keypath, "file"), file_line)
        if located is None:
            return None, sites
        return ProtoSource(located, message.strip(), tuple(roots)), sites

    def other_source(self, m: Mapping, keypath: str, key: str, resolve: bool) -> ProtoSource | None:
        """``proto: {descriptor_set: ...}`` or ``proto: {module: ...}`` (no import paths)."""
        key_path, key_line = _join(keypath, key), self.key_line(m, key)
        message = (
            self.string(
                self.text(m, "message"), _join(keypath, "message"), self.key_line(m, "message")
            )
            if m.get("message") is not None
            else None
        )
        if m.get("import_paths") is not None:
            self.problem(
                self.key_line(m, "import_paths"),
                _join(keypath, "import_paths"),
                f"is for file (.proto source); a {key.replace('_', ' ')} needs none",
            )
        if key == "descriptor_set":
            path = self.local_path(self.text(m, key), key_path, key_line)
            if path is not None and resolve and not os.path.isfile(path):
                self.problem(key_line, key_path, f"{m[key]!r} not found ({path})")
                path = None
            if path is None or message is None or not resolve:
                return None
            return ProtoSource("", message.strip(), descriptor_set=path)
        module = self.string(self.text(m, key), key_path, key_line)
        if module is not None and not _MODULE_NAME.fullmatch(module.strip()):
            self.problem(key_line, key_path, f"{module!r} is not a Python module name (a.b.c_pb2)")
            module = None
        if module is None or message is None or not resolve:
            return None
        return ProtoSource("", message.strip(), module=module.strip())

    def locate_proto(
        self, file: str, roots: Sequence[str], keypath: str, line: int | None
    ) -> str | None:
        """protoc ``-I`` semantics: relative to an import path, else to the plan's directory."""
        expanded = os.path.expanduser(file)
        tried: list[str] = []
        if not os.path.isabs(expanded):
            virtual = os.path.normpath(expanded).replace(os.sep, "/")
            if not virtual.startswith("../"):
                for root in roots:
                    candidate = os.path.join(root, virtual)
                    if os.path.isfile(candidate):
                        return virtual
                    tried.append(candidate)
        disk = os.path.normpath(os.path.join(self.base_dir, expanded))
        if os.path.isfile(disk):
            return disk
        tried.append(disk)
        self.problem(line, keypath, f"{file!r} not found; tried: {', '.join(tried)}")
        return None

    def denormalizer(
        self, root: Mapping, value: object, line: int | None
    ) -> tuple[tuple[Column, ...] | None, tuple[str, ...]]:
        if "denormalizer" not in root:
            return None, ()  # whole-message mode
        if value is None:
            self.problem(
                line,
                "denormalizer",
                "is empty: give it columns, or remove the key to read whole messages",
            )
            return None, ()
        m = self.mapping(value, "denormalizer", line, ("columns",), required=("columns",))
        if m is None or m.get("columns") is None:
            return None, ()
        raw = m["columns"]
        cols_line = self.key_line(m, "columns")
        if isinstance(raw, str) or not isinstance(raw, Sequence):
            self.problem(
                cols_line, "denormalizer.columns", f"expected a list of columns, got {_kind(raw)}"
            )
            return None, ()
        if not raw:
            self.problem(
                cols_line,
                "denormalizer.columns",
                "needs at least one column (remove denormalizer to read whole messages)",
            )
            return None, ()
        columns: list[Column] = []
        sites: list[str] = []
        seen: dict[str, tuple[int, int | None]] = {}
        for i, item in enumerate(raw):
            item_line = self.item_line(raw, i, cols_line)
            keypath = f"denormalizer.columns[{i}]"
            column = self.column(item, keypath, item_line)
            if column is None:
                continue
            name = column.output_name
            named = item.get("name") is not None
            name_line = self.key_line(item, "name") if named else item_line
            if name in seen:
                first, first_line = seen[name]
                also = f", line {first_line}" if self.has_lines and first_line else ""
                self.problem(
                    name_line,
                    _join(keypath, "name") if named else keypath,
                    f"duplicate column name {quoted(name)} (also denormalizer.columns[{first}]{also})",
                )
                continue
            seen[name] = (i, name_line)
            columns.append(column)
            sites.append(self.site(item_line))
            self._columns.append((column, i, item_line))
        return tuple(columns), tuple(sites)

    def column(self, value: object, keypath: str, line: int | None) -> Column | None:
        m = self.mapping(value, keypath, line, _COLUMN_KEYS)
        if m is None:
            return None
        line = getattr(m, "line", None) or line
        ok = True
        name = self.text(m, "name") if m.get("name") is not None else None
        if name is not None:
            name = self.string(name, _join(keypath, "name"), self.key_line(m, "name"))
            ok = ok and name is not None
        strict = False
        if m.get("strict") is not None:
            checked = self.boolean(
                m["strict"], _join(keypath, "strict"), self.key_line(m, "strict")
            )
            ok = ok and checked is not None
            strict = bool(checked)
        has_path, has_expr = m.get("path") is not None, m.get("expr") is not None
        if has_path and has_expr:
            self.problem(line, keypath, "path and expr are mutually exclusive; keep one")
            return None
        if not has_path and not has_expr:
            self.problem(line, keypath, "either path or expr must be set")
            return None
        if has_path:
            text = self.path(self.text(m, "path"), _join(keypath, "path"), self.key_line(m, "path"))
            if text is None or not ok:
                return None
            return Column(text, name=name, strict=strict)
        expr = self.expr(m["expr"], _join(keypath, "expr"), self.key_line(m, "expr"))
        if strict:
            self.problem(
                self.key_line(m, "strict"),
                _join(keypath, "strict"),
                "strict applies to path columns only (an expr column has no index to check)",
            )
            ok = False
        if "name" not in m or m["name"] is None:
            self.problem(line, _join(keypath, "name"), "an expr column needs a name")
            ok = False
        if expr is None or not ok:
            return None
        return Column(name=name, expr=expr)

    def path(self, value: object, keypath: str, line: int | None) -> str | None:
        text = self.string(value, keypath, line)
        if text is None:
            return None
        try:
            parse_path(text)
        except PathError as err:
            self.problem(line, keypath, err.render())
            return None
        return text

    def expr(self, value: object, keypath: str, line: int | None) -> Call | None:
        m = self.mapping(value, keypath, line, _EXPR_KEYS, required=("func",))
        if m is None:
            return None
        line = getattr(m, "line", None) or line
        ok = True
        function = None
        func = self.text(m, "func") if m.get("func") is not None else None
        func_path, func_line = _join(keypath, "func"), self.key_line(m, "func")
        if func is not None:
            func = self.string(func, func_path, func_line)
            if func is not None:
                function = FUNCTIONS.get(func)
                if function is None and func in REFERENCE_FUNCTIONS:
                    self.problem(
                        func_line, func_path, f"function {quoted(func)} is not available in wirearrow yet"
                    )
                elif function is None:
                    known = sorted(set(FUNCTIONS) | REFERENCE_FUNCTIONS)
                    self.problem(
                        func_line, func_path, f"unknown function {quoted(func)}{_suggest(func, known)}"
                    )
        ok = function is not None
        args: list[Expr] = []
        raw_args = m.get("args")
        args_path, args_line = _join(keypath, "args"), self.key_line(m, "args")
        if raw_args is not None:
            if isinstance(raw_args, str) or not isinstance(raw_args, Sequence):
                self.problem(
                    args_line, args_path, f"expected a list of args, got {_kind(raw_args)}"
                )
                ok = False
                raw_args = None
            else:
                for i, item in enumerate(raw_args):
                    arg = self.arg(
                        item, _join(args_path, i), self.item_line(raw_args, i, args_line)
                    )
                    if arg is None:
                        ok = False
                    else:
                        args.append(arg)
        aux: dict[str, Any] = {}
        for key in AUX_KEYS:
            if m.get(key) is None:
                continue
            key_path, key_line = _join(keypath, key), self.key_line(m, key)
            if function is not None and key not in function.aux:
                if _is_default(key, m[key]):
                    continue  # spelled out at its default (sep: "", param: 0): harmless
                takes = ", ".join(sorted(function.aux)) or "none"
                self.problem(
                    key_line, key_path, f"{function.name} does not take {quoted(key)} (it takes: {takes})"
                )
                ok = False
                continue
            if key == "sep":
                sep = self.text(m, key)
                if not isinstance(sep, str):
                    self.problem(
                        key_line, key_path, f"expected a string, got {_kind(m[key])} (quote it)"
                    )
                    ok = False
                    continue
                aux[key] = sep
            elif key == "param":
                param = self.integer(m[key], key_path, key_line)
                if param is None:
                    ok = False
                    continue
                aux[key] = param
            else:
                literal = self.literal(
                    _reference_literal(m[key], m.texts.get(key) if isinstance(m, _Map) else None),
                    key_path,
                    key_line,
                )
                if literal is None:
                    ok = False
                    continue
                aux[key] = literal.value
        if function is not None and (raw_args is not None or "args" not in m):
            try:
                function.check_arity(len(raw_args or ()))
            except ExprTypeError as err:
                self.problem(args_line if raw_args is not None else line, args_path, str(err))
                ok = False
        if not ok or func is None:
            return None
        return Call(func, tuple(args), **aux)

    def arg(self, value: object, keypath: str, line: int | None) -> Expr | None:
        m = self.mapping(value, keypath, line, _ARG_KEYS)
        if m is None:
            return None
        line = getattr(m, "line", None) or line
        given = [key for key in _ARG_KEYS if m.get(key) is not None]
        if len(given) != 1:
            self.problem(
                line,
                keypath,
                f"each arg needs exactly one of: path, literal, expr (got {len(given)})",
            )
            return None
        key = given[0]
        key_path, key_line = _join(keypath, key), self.key_line(m, key)
        if key == "path":
            text = self.path(self.text(m, key), key_path, key_line)
            return None if text is None else PathRef(text)
        if key == "literal":
            text = m.texts.get(key) if isinstance(m, _Map) else None
            return self.literal(_reference_literal(m[key], text), key_path, key_line)
        return self.expr(m[key], key_path, key_line)

    def literal(self, value: object, keypath: str, line: int | None) -> Lit | None:
        if isinstance(value, bool | str | float):
            return Lit(value)
        if isinstance(value, int):
            if _INT64[0] <= value <= _INT64[1]:
                return Lit(value)
            self.problem(line, keypath, f"integer literal {value} does not fit in 64 bits")
            return None
        self.problem(
            line,
            keypath,
            f"unsupported literal type: {_kind(value)}; a literal is a string, number or boolean",
        )
        return None

    def errors(self, value: object, line: int | None) -> tuple[str | None, str | None]:
        if value is None:
            return None, None
        if isinstance(value, str):  # shorthand: errors: skip
            return self.choice(value, "errors", line, ON_ERROR), None
        m = self.mapping(value, "errors", line, _ERRORS_KEYS)
        if m is None:
            return None, None
        policy = None
        if m.get("policy") is not None:
            policy = self.choice(m["policy"], "errors.policy", self.key_line(m, "policy"), ON_ERROR)
        dead_letter_path = None
        if m.get("dead_letter_path") is not None:
            key_line = self.key_line(m, "dead_letter_path")
            dead_letter_path = self.local_path(
                m["dead_letter_path"], "errors.dead_letter_path", key_line
            )
            if m.get("policy") is None:
                policy = "dead_letter"  # a dead-letter path alone implies the policy
            elif policy is not None and policy != "dead_letter":
                self.problem(
                    key_line,
                    "errors.dead_letter_path",
                    f"needs policy: dead_letter (policy {policy!r} keeps no dead letters)",
                )
        return policy, dead_letter_path

    def versions(self, value: object, line: int | None) -> tuple[ProtoSource, ...]:
        """versions: a list of {file | descriptor_set | module, message, import_paths}."""
        if value is None:
            return ()
        if isinstance(value, str) or not isinstance(value, Sequence) or not value:
            self.problem(
                line,
                "versions",
                "expected a list of schemas ({file: ..., message: ...}), got " + _kind(value),
            )
            return ()
        out = []
        for i, item in enumerate(value):
            located, _ = self.proto(item, self.item_line(value, i, line), f"versions[{i}]")
            if located is not None:
                out.append(located)
        return tuple(out)

    def output(self, value: object, line: int | None) -> Output:
        """output: an :class:`~wirearrow.Output`, its keys and checks from its fields."""
        if value is None:
            return Output()
        m = self.mapping(value, "output", line, _OUTPUT_KEYS)
        if m is None:
            return Output()
        given: dict[str, Any] = {}
        fmt = "parquet"
        if m.get("format") is not None:
            fmt = self.choice(
                m["format"], "output.format", self.key_line(m, "format"), OUTPUT_FORMATS,
                fold_case=True,
            ) or fmt  # fmt: skip
            given["format"] = fmt
        for key in _OUTPUT_KEYS:
            if key == "format" or m.get(key) is None:
                continue
            keypath, key_line = f"output.{key}", self.key_line(m, key)
            raw = m[key]
            choices = OUTPUT_FIELDS[key].metadata.get("choices")
            checked: Any = None
            if choices is not None:
                checked = self.choice(raw, keypath, key_line, choices, fold_case=True)
            elif key in ("row_group_size", "commit_every"):
                checked = self.integer(m[key], keypath, key_line, 1)
            elif key == "partition":
                checked = self.partition(m[key], keypath, key_line)
            elif key == "catalog":
                checked = self.catalog(m[key], keypath, key_line)
            elif key == "path" or key == "warehouse" or (
                fmt == "delta" and key in ("table", "dead_letters")
            ):
                # files and directories: relative to the plan (URIs as they are)
                text = self.string(raw, keypath, key_line)
                checked = text if text is None or "://" in text else self.local_path(text, keypath, key_line)
            else:
                checked = self.string(raw, keypath, key_line)
            if checked is not None:
                given[key] = checked
        try:
            return Output(**given)
        except ValueError as err:
            self.problem(line, "output", str(err))
            return Output()

    def partition(self, value: object, keypath: str, line: int | None) -> tuple[str, ...] | None:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list):
            self.problem(line, keypath, f"expected a list of partition fields, got {_kind(value)}")
            return None
        out = []
        for i, item in enumerate(items):
            why = partition_problem(item)
            if why is not None:
                self.problem(self.item_line(items, i, line), f"{keypath}[{i}]", why)
                continue
            out.append(item)
        return tuple(out) if len(out) == len(items) else None

    def catalog(self, value: object, keypath: str, line: int | None) -> str | dict[str, str] | None:
        if isinstance(value, str):
            return self.string(value, keypath, line)
        if not isinstance(value, Mapping):
            self.problem(line, keypath, f"expected a URL, a catalog name or a mapping of properties, got {_kind(value)}")
            return None
        props: dict[str, str] = {}
        for key, item in value.items():
            if not isinstance(key, str) or isinstance(item, Mapping | list) or item is None:
                self.problem(
                    self.key_line(value, key), f"{keypath}.{key}",
                    "a catalog property is a name and a scalar value",
                )  # fmt: skip
                continue
            props[key] = str(item).lower() if isinstance(item, bool) else str(item)
        return props

    def input(
        self, value: object, line: int | None
    ) -> tuple[tuple[tuple[str, Any], ...], tuple[tuple[int, ProtoSource | None], ...]]:
        """input: the RecordFormat fields it sets, and input.schemas' sources."""
        if value is None:
            return (), ()
        m = self.mapping(value, "input", line, _INPUT_KEYS)
        if m is None:
            return (), ()
        settings: dict[str, Any] = {}
        for key in ("format", "framing", "delimited_by", "compression"):
            if m.get(key) is not None:
                chosen = self.choice(
                    m[key],
                    f"input.{key}",
                    self.key_line(m, key),
                    FIELDS[key].metadata["choices"],
                    fold_case=key == "compression",
                )
                if chosen is not None:
                    settings[key] = chosen
        if m.get("ignore_unknown_fields") is not None:
            key = "ignore_unknown_fields"
            flag = self.boolean(m[key], f"input.{key}", self.key_line(m, key))
            if flag is not None:
                settings[key] = flag
        if m.get("column") is not None:
            column = self.string(m["column"], "input.column", self.key_line(m, "column"))
            if column is not None:
                settings["column"] = column
        schemas: tuple[tuple[int, ProtoSource | None], ...] = ()
        if isinstance(m.get("schemas"), str):  # a schema registry's URL
            url = self.string(m["schemas"], "input.schemas", self.key_line(m, "schemas"))
            if url is not None and not re.match(r"https?://", url.strip()):
                self.problem(
                    self.key_line(m, "schemas"),
                    "input.schemas",
                    f"a schema registry is an http:// or https:// URL, not {url!r}",
                )
            elif url is not None:
                settings["schemas"] = url.strip()
        else:
            schemas = self.schema_ids(m.get("schemas"), self.key_line(m, "schemas"))
        raw_id = m.get("schema_id")
        if raw_id is not None:
            id_line = self.key_line(m, "schema_id")
            if isinstance(raw_id, bool):
                settings["schema_id"] = raw_id
            elif isinstance(raw_id, str) and raw_id.strip():
                settings["schema_id"] = raw_id.strip()
            else:
                self.problem(
                    id_line,
                    "input.schema_id",
                    f"expected true, false or a column name, got {_kind(raw_id)}",
                )
        confluent = settings.get("framing") == CONFLUENT
        for key in ("schemas", "delimited_by", "schema_id"):
            if m.get(key) is not None and not confluent:
                self.problem(self.key_line(m, key), f"input.{key}", "is for framing: confluent")
        if confluent and not schemas and m.get("schemas") is None:
            self.problem(
                self.key_line(m, "framing"),
                "input.framing",
                "confluent needs input.schemas: the schema of each Confluent schema id "
                "({7: null} for the plan's proto, or {7: {file: ..., message: ...}})",
            )
        if not self.problems:
            try:  # the combinations RecordFormat refuses, located at the section
                RecordFormat(**{**settings, "schemas": {} if confluent else None})
            except (TypeError, ValueError) as err:
                self.problem(line, "input", str(err))
        return tuple(settings.items()), schemas

    def schema_ids(
        self, value: object, line: int | None
    ) -> tuple[tuple[int, ProtoSource | None], ...]:
        """input.schemas: {schema_id: null | "proto" | {file, message, import_paths}} (or a
        registry's URL: read by input())."""
        if value is None:
            return ()
        if not isinstance(value, Mapping) or not value:
            self.problem(
                line, "input.schemas", f"expected a mapping of schema ids or a schema registry URL, got {_kind(value)}"
            )
            return ()
        out: list[tuple[int, ProtoSource | None]] = []
        for key, source in value.items():
            keypath = f"input.schemas.{key}"
            key_line = self.key_line(value, key) or line
            if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < 1 << 31:
                self.problem(key_line, keypath, "a schema id is an integer from 0 to 2**31-1")
                continue
            if source is None or source == "proto":
                out.append((key, None))
                continue
            located, _ = self.proto(source, key_line, keypath)
            if located is not None:
                out.append((key, located))
        return tuple(out)


# ---- entry point -------------------------------------------------------------------------

_YAML_SUFFIX = re.compile(r"\.ya?ml$", re.I)


def _too_large(where: str, size: int, max_bytes: int) -> PlanError:
    return PlanError([
        f"{where}: the plan is {size:,} bytes, over the limit of {max_bytes:,} "
        "(load_plan(..., max_bytes=N) raises it)"
    ])


def _read_plan_file(where: str, max_bytes: int) -> str:
    try:
        with open(where, "rb") as stream:
            raw = stream.read(max_bytes + 1)  # never more than the limit into memory
            if len(raw) > max_bytes:
                size = os.fstat(stream.fileno()).st_size
                raise _too_large(where, max(size, len(raw)), max_bytes)
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise PlanError([f"{where}: cannot read the plan: {reason}"]) from None


def load_plan(
    source: str | os.PathLike[str] | bytes | Mapping[str, Any] | PlanConfig,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    max_bytes: int = MAX_PLAN_BYTES,
) -> PlanConfig:
    """Read and check a YAML plan; every problem at once in one :class:`~wirearrow.PlanError`.

    ``source`` is a path to a YAML file (a ``str`` naming an existing file or ending in
    ``.yaml``/``.yml``, or any path-like), YAML text (``str`` or ``bytes``), or the already
    parsed mapping. Relative paths inside the plan resolve against the file's directory
    (for text and mappings: ``base_dir``, default the current directory).

    Plans are untrusted input: YAML text over ``max_bytes`` (UTF-8; default
    ``MAX_PLAN_BYTES``, 4 MiB) is a PlanError before it is parsed.
    """
    if isinstance(source, PlanConfig):
        return source
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes must be a positive integer, not {max_bytes!r}")
    base = os.path.abspath(os.fspath(base_dir)) if base_dir is not None else None
    data: object
    if isinstance(source, Mapping):
        where, data, has_lines = "<dict>", source, False
        _check_data_shape(data, where)
        base = base or os.getcwd()
    elif isinstance(source, os.PathLike) or (
        isinstance(source, str)
        and "\n" not in source
        and (_YAML_SUFFIX.search(source.strip()) or os.path.isfile(source))
    ):
        where = os.fspath(source)
        text = _read_plan_file(where, max_bytes)
        data, has_lines = _parse_yaml(text, where), True
        base = base or os.path.dirname(os.path.abspath(where))
    elif isinstance(source, str | bytes | bytearray):
        where = "<string>"
        # (a str's UTF-8 size: at most 4 bytes a character, encoded only near the limit)
        if len(source) > max_bytes or (isinstance(source, str) and 4 * len(source) > max_bytes):
            size = len(source) if not isinstance(source, str) else len(source.encode("utf-8", "surrogatepass"))
            if size > max_bytes:
                raise _too_large(where, size, max_bytes)
        try:
            text = source.decode("utf-8") if isinstance(source, bytes | bytearray) else source
        except UnicodeDecodeError as err:
            raise PlanError([f"{where}: cannot read the plan: {err}"]) from None
        data, has_lines = _parse_yaml(text, where), True
        base = base or os.getcwd()
    else:
        raise TypeError(f"a plan is a path, YAML text or a mapping, not {type(source).__name__}")
    checker = _Checker(where, base, has_lines)
    plan = checker.plan(data)
    if checker.problems or plan is None:
        raise PlanError(checker.problems or [f"{where}: invalid plan"])
    return plan
