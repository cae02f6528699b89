"""What the playground works on: a schema, a sample of records, and a plan to try on them.

Everything here is the public API (``load_plan``, ``Schema``, ``Transcoder``): the page sees
what ``wirearrow check`` and ``wirearrow transcode`` would do with the same plan. The work of
one request is bounded by the sample (at most ``Limits.max_records`` records and
``Limits.max_bytes`` bytes, read from the start of a file, never the whole file) and by the
size of the plan text.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import importlib
import io
import json
import math
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import yaml

from wirearrow.playground.lines import LineSyntaxErrors, parse_lines, to_yaml
from wirearrow.playground.records import (
    RecordsError,
    Sample,
    parse_pasted,
    sample_file,
    sample_upload,
)
from wirearrow.playground.schema_tree import schema_tree
from wirearrow.sources.format import FIELDS, RecordFormat

if TYPE_CHECKING:
    from wirearrow.schema import Schema
    from wirearrow.transcoder import Transcoder

__all__ = ["Limits", "PlaygroundError", "SchemaSource", "Session"]

MODES = ("yaml", "lines")
SCHEMA_KINDS = ("proto", "descriptor_set", "module")
DOWNLOADS = ("yaml", "parquet", "csv")
# How many records get their rows counted one by one (the fan-out column of the page).
FANOUT_RECORDS = 100
FANOUT_MIN = 20
MAX_CELL_CHARS = 300
NESTED_DEPTH = 8  # levels of a recursive message shown in the whole-message view
MAX_SCHEMAS = 16  # compiled schemas kept by a session
# The RecordFormat fields the page's records form sets (the others: a table's column, the
# Confluent schemas, which are the session's schema unless the command line names them).
PAGE_INPUT_FIELDS = (
    "format", "framing", "delimited_by", "compression", "ignore_unknown_fields", "schema_id",
)  # fmt: skip


class PlaygroundError(ValueError):
    """A request the playground cannot carry out; the message is shown on the page."""


@dataclass(frozen=True)
class Limits:
    """Bounds on the work of one request."""

    max_records: int = 1000
    max_bytes: int = 8 << 20
    preview_rows: int = 50
    max_plan_chars: int = 200_000
    # The first bytes of a file uploaded from the page (enough for a compressed sample).
    max_upload: int = 32 << 20


@dataclass(frozen=True)
class SchemaSource:
    """Where the schema comes from: a ``.proto`` file, a descriptor set or a module."""

    kind: str
    value: str
    message: str
    import_paths: tuple[str, ...] = ()

    def load(self) -> Schema:
        import wirearrow as wa

        if self.kind not in SCHEMA_KINDS:
            raise PlaygroundError(f"schema kind must be one of {', '.join(SCHEMA_KINDS)}")
        if not self.value.strip() or not self.message.strip():
            what = "module name" if self.kind == "module" else "file"
            raise PlaygroundError(f"give a {what} and a message name")
        if self.kind == "proto":
            return wa.Schema.from_proto(
                os.path.expanduser(self.value), self.message, import_paths=self.import_paths
            )
        if self.kind == "descriptor_set":
            return wa.Schema.from_descriptor_set(os.path.expanduser(self.value), self.message)
        try:
            module = importlib.import_module(self.value.strip())
        except Exception as err:  # an import runs the module's code: anything can fail
            raise PlaygroundError(f"cannot import {self.value!r}: {err}") from None
        file = getattr(module, "DESCRIPTOR", None)
        messages = getattr(file, "message_types_by_name", None)
        if messages is None:
            raise PlaygroundError(f"{self.value!r} is not a generated *_pb2 module")
        name = self.message.strip().rsplit(".", 1)[-1]
        if name not in messages:
            known = ", ".join(sorted(messages)) or "none"
            raise PlaygroundError(f"no message {name!r} in {self.value!r} (it has: {known})")
        return wa.Schema.from_message(messages[name])

    def proto_section(self) -> dict:
        """A plan's ``proto:`` for this schema. A descriptor set or a module has no
        ``.proto`` file: the section names the file the schema was read from, which lets the
        plan checker run (it only needs the file to exist) and is pointed out in the
        downloaded plan."""
        if self.kind == "module":
            module = importlib.import_module(self.value.strip())
            return {"file": os.path.abspath(module.__file__ or ""), "message": self.message}
        # A relative file is relative to an import path (protoc -I), as in a plan.
        section: dict = {"file": self.value, "message": self.message}
        if self.import_paths:
            section["import_paths"] = [os.path.abspath(p) for p in self.import_paths]
        return section


@dataclass
class Compiled:
    """A plan compiled for the preview (``transcoder`` None when it has problems)."""

    transcoder: Transcoder | None
    schema: Schema | None
    problems: list[dict] = field(default_factory=list)
    yaml_text: str = ""
    # A YAML plan's proto section (also when the rest of the plan has problems).
    source: SchemaSource | None = None


_SITE = re.compile(r"^(?P<where>.*?):(?P<line>\d+): ", re.S)


def _problem(text: str) -> dict:
    match = _SITE.match(text)
    return {"line": int(match.group("line")) if match else None, "text": text}


def _jsonable(value: object) -> object:
    """A decoded Arrow value as JSON: bytes as hex, times as ISO text, NaN as text."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        text = value.hex()
        return "0x" + (text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS] + "…")
    if isinstance(value, str) and len(value) > MAX_CELL_CHARS:
        return value[:MAX_CELL_CHARS] + "…"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta | decimal.Decimal):
        return str(value)
    return value


def _locate(problem: str, columns, sites: list[int | None], where: str) -> str:
    """The compiler's ``column 'x': why`` as the plan checker words it:
    ``where:line: denormalizer.columns[i]: why``."""
    for i, column in enumerate(columns):
        prefix = f"column {column.output_name!r}: "
        if problem.startswith(prefix):
            line = sites[i] if i < len(sites) else None
            site = f"{where}:{line}" if line else where
            return f"{site}: denormalizer.columns[{i}]: {problem[len(prefix) :]}"
    return f"{where}: {problem}"


def _yaml_sites(text: str) -> dict:
    """Lines (1-based) of ``proto.file``, ``proto.message`` and each column of a YAML plan
    that has already loaded (so it parses)."""
    sites: dict = {}
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    for key, value in _pairs(root):
        if key == "proto":
            for k, v in _pairs(value):
                if k in ("file", "message"):
                    sites[f"proto.{k}"] = v.start_mark.line + 1
        elif key == "denormalizer":
            for k, v in _pairs(value):
                if k == "columns" and isinstance(v, yaml.SequenceNode):
                    sites["columns"] = [item.start_mark.line + 1 for item in v.value]
    return sites


def _pairs(node) -> list:
    if not isinstance(node, yaml.MappingNode):
        return []
    return [(k.value, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)]


def column_name(path: str, taken: set[str]) -> str:
    """A column name for a path: its words joined by ``_`` (``imp[*].banner.w`` ->
    ``imp_banner_w``), made unique among ``taken``."""
    base = "_".join(re.findall(r"[A-Za-z0-9]+", path)) or "column"
    if base[0].isdigit():
        base = f"c_{base}"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


class Session:
    """The playground's state, shared by every request (one lock: one request at a time)."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.lock = threading.Lock()
        self.schema: Schema | None = None
        self.schema_source: SchemaSource | None = None
        self.schema_note = ""
        self.sample = Sample()
        # How the records were given (a file path or an upload) and read (self.input), so
        # that another framing, format or compression reads the same records again.
        self.input = RecordFormat()
        self._records_from: tuple = ()
        # Confluent records: the schema of each id (None: every id is the session's schema).
        self.schema_ids: dict[int, Schema | None] | None = None
        self._last_good: Compiled | None = None  # the last plan that compiled
        self.base_dir = os.getcwd()
        self.plan_name = "plan.yaml"
        self.plan_text = ""
        self.mode = "lines"
        self._schemas: dict[SchemaSource, Schema] = {}

    # -- setting things up ------------------------------------------------------------

    def open_plan(self, path: str) -> None:
        """Start from a YAML plan file: its text, its directory, its schema."""
        try:
            with open(path, encoding="utf-8") as stream:
                self.plan_text = stream.read(self.limits.max_plan_chars + 1)
        except (OSError, UnicodeDecodeError) as err:
            reason = getattr(err, "strerror", None) or err
            raise PlaygroundError(f"cannot read {path}: {reason}") from None
        self.mode = "yaml"
        self.plan_name = os.path.basename(path)
        self.base_dir = os.path.dirname(os.path.abspath(path))
        compiled = self.compile(self.plan_text, "yaml")
        self._adopt_schema(compiled)

    def set_schema(self, source: SchemaSource) -> None:
        from wirearrow.errors import WirearrowError

        try:
            schema = self._schema_of(source)
        except (WirearrowError, OSError, TypeError) as err:
            raise PlaygroundError(str(err)) from None
        if source != self.schema_source:
            self._last_good = None  # a plan of another schema
        self.schema, self.schema_source = schema, source

    def record_format(self, fields: dict) -> RecordFormat:
        """The RecordFormat of the page's (or the command line's) input fields; Confluent
        records read with the session's schema ids (see :attr:`schema_ids`)."""
        unknown = sorted(set(fields) - set(FIELDS))
        if unknown:
            raise PlaygroundError(f"unknown input options: {', '.join(unknown)}")
        if fields.get("framing") == "confluent" and fields.get("schemas") is None:
            fields = {**fields, "schemas": self.schema_of_id}
        try:
            return RecordFormat(**fields)
        except (TypeError, ValueError) as err:
            raise PlaygroundError(str(err)) from None

    def schema_of_id(self, schema_id: int) -> Schema | None:
        """RecordFormat.schemas of the session's Confluent records: the schema of a Confluent schema id: as the command line's --schema-id named it
        (an id alone: the session's schema), else any id is the session's schema."""
        if self.schema_ids is None:
            return self.schema
        if schema_id not in self.schema_ids:
            return None
        return self.schema_ids[schema_id] or self.schema

    def set_records_file(self, path: str, fmt: RecordFormat) -> None:
        """The sample of a file of records read as ``fmt`` says (Confluent records without
        schemas=: see :meth:`record_format`)."""
        self._read_records(("file", path), fmt)

    def set_records_upload(self, name: str, data: bytes, fmt: RecordFormat, size: int | None = None) -> None:
        """The sample of a file uploaded from the page: ``data``, its first bytes (``size``:
        the whole file's, when more than ``data``)."""
        name = os.path.basename(name.replace("\\", "/")) or "upload"
        self._read_records(("upload", name, bytes(data), max(size or 0, len(data))), fmt)

    def reread_records(self, fmt: RecordFormat) -> None:
        """The same records (file or upload) read as ``fmt`` says: another framing,
        compression or format."""
        if not self._records_from:
            raise PlaygroundError("no records file yet: give a path or upload a file")
        self._read_records(self._records_from, fmt)

    def _read_records(self, source: tuple, fmt: RecordFormat) -> None:
        if fmt.confluent and fmt.schemas is None:
            fmt = fmt.replace(schemas=self.schema_of_id)
        limits = {"max_records": self.limits.max_records, "max_bytes": self.limits.max_bytes}
        try:
            if source[0] == "file":
                sample = sample_file(source[1], fmt, **limits)
            else:
                _, name, data, size = source
                sample = sample_upload(name, data, fmt, size=size, **limits)
        except RecordsError as err:
            raise PlaygroundError(str(err)) from None
        self.sample, self.input, self._records_from = sample, fmt, source

    def set_records_pasted(self, text: str, fmt: RecordFormat | None = None) -> None:
        """One record pasted as hex or base64 (a protojson record as its text, when
        ``fmt`` says format json; with a Confluent prefix when it says framing confluent)."""
        fmt = fmt or RecordFormat()
        if fmt.confluent and fmt.schemas is None:
            fmt = fmt.replace(schemas=self.schema_of_id)
        try:
            self.sample = parse_pasted(text, self.limits.max_bytes, fmt)
        except RecordsError as err:
            raise PlaygroundError(str(err)) from None

    def input_fields(self) -> list[dict]:
        """The page's records form: each input field with its choices, its doc and the
        value the current records were read with (one definition: RecordFormat's)."""
        fields = []
        for name in PAGE_INPUT_FIELDS:
            f = FIELDS[name]
            value = getattr(self.input, name)
            fields.append(
                {
                    "name": name,
                    "doc": f.metadata["doc"],
                    "choices": list(f.metadata.get("choices") or ()),
                    "default": f.default,
                    "value": value,
                }
            )
        return fields

    def state(self) -> dict:
        return {
            "schema": schema_tree(self.schema.descriptor) if self.schema is not None else None,
            "schema_source": dataclasses.asdict(self.schema_source) if self.schema_source else None,
            "records": self.sample.describe(),
            "plan": self.plan_text,
            "plan_name": self.plan_name,
            "mode": self.mode,
            "input": self.input_fields(),
            "records_from": self._records_from[0] if self._records_from else None,
            "limits": dataclasses.asdict(self.limits),
        }

    # -- compiling a plan -------------------------------------------------------------

    def compile(self, text: str, mode: str) -> Compiled:
        """The plan's transcoder, or the problems ``wirearrow check`` would report."""
        if mode not in MODES:
            raise PlaygroundError(f"mode must be one of {', '.join(MODES)}")
        if len(text) > self.limits.max_plan_chars:
            raise PlaygroundError(
                f"the plan is longer than {self.limits.max_plan_chars:,} characters"
            )
        if mode == "yaml":
            return self._compile_yaml(text)
        return self._compile_lines(text)

    def _schema_of(self, source: SchemaSource) -> Schema:
        """``source``'s schema, compiled once per session (protoc is the slow part of an edit)."""
        schema = self._schemas.get(source)
        if schema is None:
            if len(self._schemas) >= MAX_SCHEMAS:
                self._schemas.clear()
            schema = self._schemas[source] = source.load()
        return schema

    def _transcoder(self, schema, plan, where: str, sites: list[int | None]) -> Compiled:
        """The preview's transcoder of ``plan`` on ``schema``; the compiler's problems placed
        at the line of their column (``sites[i]``: line of column i), as the plan checker
        places them. Bad records become dead letters in the preview whatever the plan's
        policy, so that they are listed rather than stop it."""
        import wirearrow as wa
        from wirearrow.errors import PlanError, WirearrowError

        options = {**plan.options, "on_error": "dead_letter"}
        try:
            tc = wa.Transcoder(schema, plan.columns, **options)
        except PlanError as err:
            problems = [_locate(p, plan.columns or (), sites, where) for p in err.problems]
            return Compiled(None, None, [_problem(p) for p in problems])
        except WirearrowError as err:
            return Compiled(None, None, [_problem(f"{where}: {err}")])
        return Compiled(tc, schema)

    def _compile_yaml(self, text: str) -> Compiled:
        from wirearrow.config import load_plan
        from wirearrow.errors import SchemaError, WirearrowError

        where = self.plan_name
        try:
            plan = load_plan(text, base_dir=self.base_dir)
        except WirearrowError as err:
            problems = getattr(err, "problems", None) or [str(err)]
            named = [p.replace("<string>", where, 1) for p in problems]
            return Compiled(None, None, [_problem(p) for p in named], text, self._proto_of(text))
        if plan.custom is not None:  # its records are (base, custom) pairs: none here
            message = "custom_message plans read record pairs; the playground reads single records"
            return Compiled(None, None, [_problem(f"{where}: custom_message: {message}")], text)
        source = _schema_source(plan.proto)
        sites = _yaml_sites(text)
        try:
            schema = self._schema_of(source)
        except SchemaError as err:
            # As PlanConfig.schema() reports it: at the proto key the error is about.
            message = str(err)
            key = "proto.message" if message.startswith("message ") else "proto.file"
            line = sites.get(key)
            site = f"{where}:{line}" if line else where
            return Compiled(None, None, [_problem(f"{site}: {key}: {message}")], text, source)
        compiled = self._transcoder(schema, plan, where, sites.get("columns", []))
        compiled.yaml_text, compiled.source = text, source
        return compiled

    def _proto_of(self, text: str) -> SchemaSource | None:
        """The schema a plan with problems names, when its ``proto:`` section is sound by
        itself (so the tree to fix its paths by stays): None when it is not, or the text
        is not YAML."""
        from wirearrow.config import load_plan
        from wirearrow.errors import WirearrowError

        try:
            data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("proto"), dict):
            return None
        try:
            return _schema_source(load_plan({"proto": data["proto"]}, base_dir=self.base_dir).proto)
        except (WirearrowError, ValueError, TypeError):
            return None

    def _adopt_schema(self, compiled: Compiled) -> dict | None:
        """Follow the schema a YAML plan names (also one with problems, when its proto
        section is sound): the tree of the new schema, None when it is the same or does not
        compile (the last good schema stays)."""
        from wirearrow.errors import WirearrowError

        source = compiled.source
        if source is None or source == self.schema_source:
            return None
        schema = compiled.schema
        if schema is None:
            try:
                schema = self._schema_of(source)
            except (WirearrowError, OSError, TypeError, PlaygroundError):
                return None
        self.schema, self.schema_source = schema, source
        return schema_tree(schema.descriptor)

    def _compile_lines(self, text: str) -> Compiled:
        from wirearrow.config import load_plan
        from wirearrow.errors import WirearrowError

        where = "plan"
        if self.schema is None or self.schema_source is None:
            return Compiled(None, None, [_problem("no schema yet: load one above")])
        try:
            lines = parse_lines(text, where)
        except LineSyntaxErrors as err:
            return Compiled(None, None, [_problem(p) for p in err.problems])
        proto = self.schema_source.proto_section()
        yaml_text, line_of = to_yaml(lines, proto, flow=True)
        try:
            plan = load_plan(yaml_text, base_dir=self.base_dir)
        except WirearrowError as err:
            problems = []
            for p in getattr(err, "problems", None) or [str(err)]:
                match = re.match(r"<string>:(\d+): ", p)
                if match and int(match.group(1)) in line_of:
                    p = f"{where}:{line_of[int(match.group(1))]}: {p[match.end() :]}"
                problems.append(_problem(p.replace("<string>", where, 1)))
            return Compiled(None, None, problems, yaml_text)
        compiled = self._transcoder(self.schema, plan, where, list(lines.lines))
        compiled.yaml_text = yaml_text
        return compiled

    # -- previews ---------------------------------------------------------------------

    def evaluate(self, text: str, mode: str, record: int = 0) -> dict:
        """The page's whole answer to an edit: problems, or the preview of the sample."""
        compiled = self.compile(text, mode)
        out: dict = {
            "problems": compiled.problems,
            "records": self.sample.describe(),
            "preview": None,
            "nested": None,
        }
        tree = self._adopt_schema(compiled)  # a YAML plan names its schema: the tree follows
        if tree is not None:
            out["schema"] = tree
        if compiled.transcoder is not None:
            self._last_good = compiled
        elif self._last_good is None:
            return out
        # A plan with problems: the preview of the last plan that compiled, marked stale.
        shown = self._last_good
        assert shown.transcoder is not None and shown.schema is not None
        out["stale"] = compiled.transcoder is None
        preview = out["preview"] = self._preview(shown.transcoder)
        out["nested"] = self._nested(shown.schema, record)
        failed, n = preview["failed"], preview["num_records"]
        if n and failed * 2 > n:  # most records fail: is it how they are read?
            words = self.sample.framing_hint()
            if words:
                out["hint"] = f"{failed:,} of the {n:,} records fail: {words}."
        return out

    def _preview(self, tc) -> dict:
        import pyarrow as pa

        records, fmt = self.sample.records, self.sample.fmt
        batch, dead_letters, counts = tc.decode(records, fmt)
        dead = dead_letters.to_pylist()
        # Rows per record, one record at a time: until the shown rows are covered, and
        # for at least FANOUT_MIN records (a per-record call each: not the whole sample).
        fanout: list[int] = []
        for record in records[:FANOUT_RECORDS]:
            if len(fanout) >= FANOUT_MIN and sum(fanout) >= self.limits.preview_rows:
                break
            fanout.append(tc.decode([record], fmt).rows.num_rows)
        shown = batch.slice(0, self.limits.preview_rows)
        rows = [_jsonable(list(r.values())) for r in shown.to_pylist()]
        return {
            "columns": [{"name": f.name, "type": str(f.type)} for f in batch.schema],
            "rows": rows,
            "num_rows": batch.num_rows,
            "num_records": len(records),
            "failed": len(dead),
            "rows_per_record": fanout,
            "dead_letters": [
                {
                    "record": d["index"],
                    "frame_offset": self.sample.offsets[d["index"]],
                    "offset": d["offset"],
                    "path": d["path"],
                    "reason": d["reason"],
                }
                for d in dead
            ],
            "bytes_in": counts.bytes_in,
            "nested_type": any(
                pa.types.is_nested(f.type) for f in batch.schema
            ),
        }

    def _nested(self, schema, record: int) -> dict | None:
        import wirearrow as wa

        records = self.sample.records
        if not records:
            return None
        record = min(max(int(record), 0), len(records) - 1)
        try:
            whole = wa.Transcoder(schema, on_error="dead_letter")
        except wa.PlanError:
            # A recursive message cannot be read whole: levels below NESTED_DEPTH are shown
            # as their serialized bytes.
            whole = wa.Transcoder(schema, on_error="dead_letter", max_depth=NESTED_DEPTH)
        batch, dead_letters, _ = whole.decode([records[record]], self.sample.fmt)
        dead = dead_letters.to_pylist()
        value = batch.to_pylist()[0] if batch.num_rows else None
        return {
            "record": record,
            "frame_offset": self.sample.offsets[record],
            "size": len(records[record]),
            "value": _jsonable(value),
            "error": dead[0]["reason"] if dead else None,
        }

    # -- downloads and edits ----------------------------------------------------------

    def download(self, text: str, mode: str, fmt: str) -> tuple[bytes, str, str]:
        """(content, media type, file name) of the plan as YAML or the preview's rows."""
        if fmt not in DOWNLOADS:
            raise PlaygroundError(f"format must be one of {', '.join(DOWNLOADS)}")
        stem = os.path.splitext(self.plan_name)[0] or "plan"
        if fmt == "yaml":
            return self._yaml(text, mode).encode(), "application/yaml", f"{stem}.yaml"
        compiled = self.compile(text, mode)
        if compiled.transcoder is None:
            raise PlaygroundError("the plan has problems: " + compiled.problems[0]["text"])
        batch = compiled.transcoder.decode(self.sample.records, self.sample.fmt).rows
        if fmt == "parquet":
            return _parquet(batch), "application/vnd.apache.parquet", f"{stem}.parquet"
        return _csv(batch), "text/csv", f"{stem}.csv"

    def _yaml(self, text: str, mode: str) -> str:
        if mode == "yaml":
            return text
        if self.schema is None or self.schema_source is None:
            raise PlaygroundError("no schema yet: load one above")
        try:
            lines = parse_lines(text, "plan")
        except LineSyntaxErrors as err:
            raise PlaygroundError(err.problems[0]) from None
        body, _ = to_yaml(lines, self.schema_source.proto_section(), flow=False)
        head = "# A wirearrow plan (docs/yaml.md), written by wirearrow playground.\n"
        if self.schema_source is not None and self.schema_source.kind != "proto":
            head += (
                f"# The schema came from a {self.schema_source.kind.replace('_', ' ')}: point "
                "proto.file at the message's .proto file to run this plan.\n"
            )
        return head + body

    def add_column(self, text: str, mode: str, path: str) -> str:
        """The plan text with a column reading ``path`` added at the end of its columns."""
        if mode == "lines":
            return (text.rstrip("\n") + "\n" if text.strip() else "") + path + "\n"
        return _add_yaml_column(text, path)


def _add_yaml_column(text: str, path: str) -> str:
    """Insert ``- name: ..., path: ...`` after the last item of denormalizer.columns (block
    style), keeping the rest of the text (comments included) as it is."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader) if text.strip() else None
    except yaml.YAMLError:
        raise PlaygroundError("fix the YAML first: the column goes into its list") from None
    lines = text.splitlines()
    taken: set[str] = set()
    denormalizer = columns = None
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            if key.value == "denormalizer" and isinstance(value, yaml.MappingNode):
                denormalizer = value
                for k, v in value.value:
                    if k.value == "columns":
                        columns = v
    if isinstance(columns, yaml.SequenceNode):
        for item in columns.value:
            if isinstance(item, yaml.MappingNode):
                for k, v in item.value:
                    if k.value == "name" and isinstance(v, yaml.ScalarNode):
                        taken.add(v.value)
    name = column_name(path, taken)
    quoted = json.dumps(path)
    if isinstance(columns, yaml.SequenceNode) and columns.value and not columns.flow_style:
        indent = " " * max(columns.value[0].start_mark.column - 2, 0)
        end = max(item.end_mark.line for item in columns.value)
        # end_mark is where the next token starts: step back over blank and comment lines.
        last = min(end, len(lines) - 1)
        while last > 0 and (not lines[last].strip() or lines[last].lstrip().startswith("#")):
            last -= 1
        if lines[last].strip() and _indent(lines[last]) < len(indent):
            last -= 1  # the next key's line, at a lower indentation
        new = [f"{indent}- name: {name}", f"{indent}  path: {quoted}"]
        return "\n".join(lines[: last + 1] + new + lines[last + 1 :]) + "\n"
    if denormalizer is None and (root is None or isinstance(root, yaml.MappingNode)):
        block = f"denormalizer:\n  columns:\n    - name: {name}\n      path: {quoted}\n"
        return (text.rstrip("\n") + "\n" if text.strip() else "") + block
    raise PlaygroundError(
        "cannot place the column: write denormalizer.columns as a block list (- name: ...)"
    )


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _parquet(batch) -> bytes:
    import wirearrow as wa

    with tempfile.TemporaryDirectory(prefix="wirearrow-playground-") as tmp:
        target = os.path.join(tmp, "preview.parquet")
        wa.write_parquet(batch, target)
        with open(target, "rb") as stream:
            return stream.read()


def _csv(batch) -> bytes:
    """CSV has no nested values: list, struct and map cells are written as JSON text."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    columns, names = [], []
    for f, column in zip(batch.schema, batch.columns, strict=True):
        names.append(f.name)
        if pa.types.is_nested(f.type) or pa.types.is_dictionary(f.type):
            values = [
                None if v is None else json.dumps(_jsonable(v), ensure_ascii=False)
                for v in column.to_pylist()
            ]
            column = pa.array(values, type=pa.utf8())
        elif pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type):
            column = pa.array(
                [None if v is None else base64.b64encode(v).decode() for v in column.to_pylist()],
                type=pa.utf8(),
            )
        columns.append(column)
    buffer = io.BytesIO()
    pacsv.write_csv(pa.table(columns, names=names), buffer)
    return buffer.getvalue()


def _schema_source(proto) -> SchemaSource:
    """A loaded plan's ``proto`` (config.ProtoSource) as the session's SchemaSource."""
    if proto.descriptor_set is not None:
        return SchemaSource("descriptor_set", proto.descriptor_set, proto.message)
    if proto.module is not None:
        return SchemaSource("module", proto.module, proto.message)
    return SchemaSource("proto", proto.file, proto.message, tuple(proto.import_paths))
