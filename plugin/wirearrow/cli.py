"""The ``wirearrow`` command line: check a plan, transcode files to Parquet, print schemas,
measure a plan on real data.

    wirearrow check PLAN.yaml | SCHEMA.proto [-I DIR ...]
    wirearrow transcode PLAN.yaml FILES... -o OUT_DIR | -o out.parquet
    wirearrow schema PROTO MESSAGE [-I DIR ...] [--max-depth N]
    wirearrow bench PLAN.yaml FILE

Exit codes: 0 success; 1 a bad plan, schema or input (one line on stderr says why); 2 a
usage error; 130 interrupted. Heavy modules (pyarrow, the decoder) are imported by the
commands, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import re
import stat
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, TextIO

from wirearrow.arguments import add_import_paths
from wirearrow.parquet import PARQUET_COMPRESSIONS
from wirearrow.sources.compression import INPUT_COMPRESSIONS, strip_suffix

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from wirearrow.cache import ParserCache
    from wirearrow.config import PlanConfig
    from wirearrow.counts import Counts
    from wirearrow.parquet import ParquetSink
    from wirearrow.schema import Schema
    from wirearrow.sources.framing import Frames
    from wirearrow.transcoder import Transcoder

__all__ = ["main"]

PROG = "wirearrow"
FILE_FRAMINGS = ("varint", "u32le", "u32be", "tfrecord")
# "confluent": each record, delimited by --delimited-by, in the Confluent wire format.
FRAMING_CHOICES = (*FILE_FRAMINGS, "confluent")
POLICIES = ("raise", "skip", "dead_letter")
DEFAULT_FRAMING = "varint"
DEFAULT_BATCH_SIZE = 65_536
DEFAULT_CHUNK_SIZE = 16 * 1024 * 1024
# A dead letter for an unreadable stream tail keeps at most this many of its bytes.
PROGRESS_INTERVAL = 0.2  # seconds between progress-line redraws


class CliError(Exception):
    """A failure reported as one line on stderr, with an exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- plans


def _load_plan(source: str) -> PlanConfig:
    """The checked plan of a YAML file; a CliError with every problem on a bad one."""
    from wirearrow.config import load_plan
    from wirearrow.errors import WirearrowError

    if not os.path.exists(source):
        raise CliError(f"{source}: plan file not found")
    try:
        # A path-like, so that a file named without .yaml is never read as YAML text.
        return load_plan(pathlib.Path(source))
    except (WirearrowError, ValueError) as err:
        raise CliError(str(err)) from err


def _build_transcoder(
    plan: PlanConfig, on_error: str | None = None, cache: ParserCache | None = None
) -> Transcoder:
    """The plan's Transcoder, with ``on_error`` overriding the plan's policy when given."""
    from wirearrow.errors import WirearrowError

    try:
        if on_error is not None and on_error != plan.options["on_error"]:
            plan = plan.with_options(on_error=on_error)
        return plan.transcoder(cache)
    except (WirearrowError, ValueError) as err:
        raise CliError(str(err)) from err


# --------------------------------------------------------------------------- schema text


def format_schema(schema: pa.Schema) -> str:
    """An Arrow schema as an indented tree: one line per field, children below parents."""
    lines: list[str] = []
    for f in schema:
        _format_field(f, 0, lines)
    return "\n".join(lines)


def _format_field(f: pa.Field, depth: int, lines: list[str]) -> None:
    head, children = _type_head(f.type)
    lines.append(f"{'  ' * depth}{f.name}: {head}{'' if f.nullable else ' not null'}")
    for child in children:
        _format_field(child, depth + 1, lines)


def _type_head(t: pa.DataType) -> tuple[str, list[pa.Field]]:
    import pyarrow as pa

    if pa.types.is_struct(t):
        return ("struct" if t.num_fields else "struct<>"), [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        key, _ = _type_head(t.key_type)
        value, children = _type_head(t.item_type)
        return f"map<{key}, {value}>", children
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner, children = _type_head(t.value_type)
        kind = "large_list" if pa.types.is_large_list(t) else "list"
        if pa.types.is_fixed_size_list(t):
            return f"fixed_size_list<{inner}, {t.list_size}>", children
        return f"{kind}<{inner}>", children
    return str(t), []


# --------------------------------------------------------------------------- output


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


class Progress:
    """A one-line progress display on stderr, redrawn with \\r; silent when disabled."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._last = 0.0
        self._width = 0

    def update(self, label: str, records: int, nbytes: int, total: int | None, t0: float) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last < PROGRESS_INTERVAL:
            return
        self._last = now
        elapsed = max(now - t0, 1e-9)
        pct = f" {100 * nbytes / total:5.1f}%" if total else ""
        text = (
            f"{label}:{pct} {records:,} records, {nbytes / 1e6:,.1f} MB, "
            f"{nbytes / 1e6 / elapsed:,.1f} MB/s"
        )
        pad = " " * max(self._width - len(text), 0)
        self._width = len(text)
        self.stream.write("\r" + text + pad)
        self.stream.flush()

    def clear(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
            self._last = 0.0


# --------------------------------------------------------------------------- reading


def _parse_size(text: str) -> int:
    """``16M``, ``64K``, ``1G`` or a plain byte count."""
    match = re.fullmatch(r"\s*(\d+)\s*([KkMmGg]i?[Bb]?)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 16M, 64K, 1048576)")
    n = int(match.group(1))
    unit = (match.group(2) or "").upper()[:1]
    n *= {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[unit]
    if n < 1:
        raise argparse.ArgumentTypeError("the size must be at least 1 byte")
    return n


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


# --------------------------------------------------------------------------- transcode


def _dead_letter_schema() -> pa.Schema:
    import pyarrow as pa

    from wirearrow.dead_letters import DEAD_LETTER_SCHEMA

    return DEAD_LETTER_SCHEMA.append(pa.field("file", pa.utf8())).append(
        pa.field("file_offset", pa.int64())
    )


@dataclass(slots=True)
class FileResult:
    records_in: int = 0
    rows_out: int = 0
    failed: int = 0
    bytes_in: int = 0

    def add(self, other: FileResult) -> None:
        self.records_in += other.records_in
        self.rows_out += other.rows_out
        self.failed += other.failed
        self.bytes_in += other.bytes_in


class TranscodeJob:
    """Files in, through one Transcoder, into Parquet sinks; dead letters aside."""

    def __init__(
        self,
        tc: Transcoder,
        *,
        framing: str,
        raising: bool,
        batch_size: int,
        chunk_size: int,
        progress: Progress,
        dead_sink: ParquetSink | None,
        input_format: str = "binary",
        ignore_unknown_fields: bool = False,
        compression: str = "auto",
        confluent: Confluent | None = None,
        source_column: str | None = None,
        offset_column: str | None = None,
    ) -> None:
        self.tc = tc
        self.source_column = source_column
        self.offset_column = offset_column
        # The file's framing; Confluent records are delimited by confluent.delimited_by.
        self.framing = framing if confluent is None else confluent.delimited_by
        self.confluent = confluent
        self.compression = compression
        self.input_format = input_format
        self.ignore_unknown_fields = ignore_unknown_fields
        self.raising = raising
        self.batch_size = batch_size
        self.chunk_size = chunk_size
        self.progress = progress
        self.dead_sink = dead_sink
        self.dead_schema = _dead_letter_schema() if dead_sink is not None else None

    @property
    def row_schema(self) -> pa.Schema:
        """The rows' schema: the plan's, then the --source-column and --offset-column."""
        import pyarrow as pa

        schema = self.tc.arrow_schema
        if self.confluent is not None:
            schema = self.confluent.row_schema(schema)
        if self.source_column is not None:
            schema = schema.append(pa.field(self.source_column, pa.utf8()))
        if self.offset_column is not None:
            schema = schema.append(pa.field(self.offset_column, pa.int64()))
        return schema

    def _carry(self, path: str, at: np.ndarray) -> dict | None:
        """The carry= of a batch whose records start at bytes ``at`` of the file ``path``."""
        import pyarrow as pa

        carry = {}
        if self.source_column is not None:
            carry[self.source_column] = pa.repeat(pa.scalar(path, pa.utf8()), len(at))
        if self.offset_column is not None:
            carry[self.offset_column] = pa.array(at, pa.int64())
        return carry or None

    def run_file(self, path: str, sink: ParquetSink) -> FileResult:
        import numpy as np

        from wirearrow.errors import DecodeError
        from wirearrow.sources.compression import compression_of
        from wirearrow.sources.framing import FrameReader

        codec = compression_of(path, self.compression)
        if self.input_format == "json":
            if codec != "none":
                raise CliError(
                    f"{path}: compressed ({codec}) NDJSON input is not supported: "
                    "decompress it first"
                )
            return self.run_ndjson_file(path, sink)
        result = FileResult()
        label = os.path.basename(path)
        with _open_input(path) as f:
            st = os.fstat(f.fileno())
            # A compressed file's size is not its records' size (progress shows no total).
            size = st.st_size if stat.S_ISREG(st.st_mode) and codec == "none" else None
            reader = FrameReader(
                _decompressed(_Reading(f, path), codec, path), self.framing,
                block_bytes=self.chunk_size, size=size, name="the file",
            )
            t0 = time.perf_counter()
            record_base = 0
            for frames in reader:
                view = memoryview(frames.data)
                # (frame ends: TFRecord's data CRC follows each record)
                base, ends = frames.offset, frames.frame_ends
                n = len(frames)
                for i0 in range(0, n, self.batch_size):
                    i1 = min(n, i0 + self.batch_size)
                    lo = int(ends[i0 - 1]) if i0 else 0
                    hi = int(ends[i1 - 1])
                    before = self.tc.stats
                    # Where each record's frame (length prefix) starts in the file.
                    frame_at = np.concatenate(([lo], ends[i0 : i1 - 1])) + base
                    try:
                        batch = self._transcode(
                            frames, view, i0, i1, lo, hi, self._carry(path, frame_at)
                        )
                    except DecodeError as err:
                        index = record_base + i0 + err.index
                        j = i0 + err.index
                        at = base + (int(ends[j - 1]) if j else 0)
                        located = DecodeError(
                            err.reason, index=index, offset=err.offset, path=err.path
                        )
                        raise CliError(
                            f"{path}: {located} (the record starts at byte {at} of the file)"
                        ) from err
                    self._took(result, before, batch, sink)
                    if self.dead_sink is not None:
                        self._dead_letters(path, record_base + i0, frame_at)
                    result.bytes_in = base + hi
                    self.progress.update(label, result.records_in, result.bytes_in, size, t0)
                record_base += n
            tail = reader.tail
            if tail is not None:
                if self.raising:
                    raise CliError(f"{path}: {tail.reason}")
                result.records_in += 1
                result.failed += 1
                if self.dead_sink is not None:
                    self._write_dead(
                        path,
                        [(record_base, 0, "", tail.reason, tail.raw, path, tail.offset)],
                    )
            result.bytes_in = reader.position + (tail.size if tail is not None else 0)
        return result

    def _transcode(
        self,
        frames: Frames,
        view: memoryview,
        i0: int,
        i1: int,
        lo: int,
        hi: int,
        carry: dict | None = None,
    ) -> pa.RecordBatch:
        """Records i0:i1 of ``frames`` (bytes lo:hi of its data, framed) as rows."""
        if self.confluent is None:
            return self.tc.transcode(view[lo:hi], framing=self.framing, carry=carry)
        # The file's framing is stripped first (one copy); each record keeps its prefix.
        return self.tc.transcode(
            frames.records(i0, i1),
            framing="confluent",
            schemas=self.confluent.schemas,
            schema_id=self.confluent.schema_id,
            carry=carry,
        )

    def run_ndjson_file(self, path: str, sink: ParquetSink) -> FileResult:
        """NDJSON of protojson records: one per non-blank line, in batches of batch_size."""
        import pyarrow as pa

        from wirearrow.errors import DecodeError
        from wirearrow.sources.protojson import ndjson_records, split_ndjson

        result = FileResult()
        label = os.path.basename(path)
        try:
            with pa.memory_map(path, "r") as f:
                buffer = f.read_buffer()
        except OSError as err:
            raise CliError(f"cannot read {path}: {err.strerror or err}") from err
        starts, ends = split_ndjson(buffer)
        t0 = time.perf_counter()
        for i0 in range(0, len(starts), self.batch_size):
            i1 = min(len(starts), i0 + self.batch_size)
            records = ndjson_records(buffer, starts[i0:i1], ends[i0:i1])
            before = self.tc.stats
            try:
                batch = self.tc.transcode(
                    records,
                    format="json",
                    ignore_unknown_fields=self.ignore_unknown_fields,
                    carry=self._carry(path, starts[i0:i1]),
                )
            except DecodeError as err:
                at = int(starts[i0 + err.index])
                raise CliError(
                    f"{path}: record {i0 + err.index} (the line at byte {at}): {err.reason}"
                    + (f" at {err.path}" if err.path else "")
                ) from err
            self._took(result, before, batch, sink)
            if self.dead_sink is not None:
                self._dead_letters(path, i0, starts[i0:i1])
            result.bytes_in = int(ends[i1 - 1])
            self.progress.update(label, result.records_in, result.bytes_in, buffer.size, t0)
        result.bytes_in = buffer.size
        return result

    def _took(
        self, result: FileResult, before: Counts, batch: pa.RecordBatch, sink: ParquetSink
    ) -> None:
        """Count one transcoded batch (the transcoder's stats since ``before``), write its rows."""
        after = self.tc.stats
        result.records_in += after.records_in - before.records_in
        result.failed += after.records_failed - before.records_failed
        result.rows_out += batch.num_rows
        if batch.num_rows:
            sink.write(batch)

    def _dead_letters(self, path: str, index_base: int, frames: np.ndarray) -> None:
        """Move the transcoder's dead letters to the side file, with file positions."""
        table = self.tc.dead_letters()
        if not table.num_rows:
            return
        local = table.column("index").to_numpy()
        rows = zip(
            (local + index_base).tolist(),
            table.column("offset").to_pylist(),
            table.column("path").to_pylist(),
            table.column("reason").to_pylist(),
            table.column("raw").to_pylist(),
            [path] * table.num_rows,
            frames[local].tolist(),
            strict=True,
        )
        self._write_dead(path, list(rows))

    def _write_dead(self, path: str, rows: list[tuple]) -> None:
        import pyarrow as pa

        assert self.dead_sink is not None and self.dead_schema is not None
        columns = list(zip(*rows, strict=True))
        batch = pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(columns, self.dead_schema, strict=True)],
            schema=self.dead_schema,
        )
        self.dead_sink.write(batch)


@dataclass(frozen=True, slots=True)
class Confluent:
    """Confluent-framed records: the schema of each accepted schema id, the file framing
    that delimits the records, and the schema-id column (False: none)."""

    schemas: dict
    delimited_by: str = DEFAULT_FRAMING
    schema_id: bool | str = False

    def row_schema(self, base: pa.Schema) -> pa.Schema:
        """The rows' schema: the plan's, and the schema-id column when asked for."""
        import pyarrow as pa

        if self.schema_id is False:
            return base
        name = "_schema_id" if self.schema_id is True else str(self.schema_id)
        if name in base.names:
            raise CliError(f"the schema-id column {name!r} is already a column of the plan", 2)
        return base.append(pa.field(name, pa.int64(), nullable=False))


def _confluent(args: argparse.Namespace, plan: PlanConfig, framing: str) -> Confluent | None:
    """--framing confluent's settings: the command line's, else the plan's input:."""
    from wirearrow.errors import WirearrowError

    if framing != "confluent":
        for flag, value in (
            ("--schema-id", args.schema_id),
            ("--delimited-by", args.delimited_by),
            ("--schema-id-column", args.schema_id_column),
        ):
            if value:
                raise CliError(f"{flag} is for --framing confluent", 2)
        return None
    try:
        if args.schema_id:
            schemas: dict[int, Schema] = {}
            for item in args.schema_id:
                sid, schema = _schema_id_arg(item, plan)
                schemas[sid] = schema
        else:
            schemas = plan.confluent_schemas()
    except (WirearrowError, ValueError, OSError) as err:
        raise CliError(str(err)) from err
    if not schemas:
        raise CliError(
            "--framing confluent needs the schema ids it accepts: --schema-id ID (the plan's "
            "message) or --schema-id ID=FILE.proto:MESSAGE, or input.schemas in the plan",
            2,
        )
    column = args.schema_id_column
    if column is None:
        column = plan.input.schema_id
    return Confluent(
        schemas, args.delimited_by or plan.input.delimited_by or DEFAULT_FRAMING, column
    )


def _schema_id_arg(text: str, plan: PlanConfig) -> tuple[int, Schema]:
    """``ID`` (the plan's schema) or ``ID=FILE.proto:MESSAGE`` (found as protoc -I would,
    in the plan's import paths and the file's directory)."""
    import wirearrow as wa

    head, sep, source = text.partition("=")
    try:
        sid = int(head)
        if not 0 <= sid < 1 << 31:
            raise ValueError
    except ValueError:
        raise CliError(f"--schema-id {text!r}: the id is an integer from 0 to 2**31-1", 2) from None
    if not sep:
        return sid, plan.schema()
    file, colon, message = source.rpartition(":")
    if not colon or not file or not message:
        raise CliError(f"--schema-id {text!r}: expected ID=FILE.proto:MESSAGE", 2)
    roots = [*plan.proto.import_paths, os.path.dirname(os.path.abspath(file))]
    return sid, wa.Schema.from_proto(file, message, import_paths=roots)


class _Reading:
    """A file's ``read``, its OSError turned into a CliError naming the file."""

    def __init__(self, file: BinaryIO, path: str) -> None:
        self.file, self.path = file, path

    def read(self, n: int) -> bytes:
        try:
            return self.file.read(n) or b""
        except OSError as err:
            raise CliError(f"cannot read {self.path}: {err.strerror or err}") from err


def _decompressed(stream: _Reading, codec: str, path: str) -> object:
    """``stream`` itself, or its decompressed bytes (a break becomes the reader's tail)."""
    if codec == "none":
        return stream
    from wirearrow.sources.compression import open_decompressed

    try:
        return open_decompressed(stream, codec, name="the file")
    except ImportError as err:
        raise CliError(f"{path}: {err}") from err


def _open_input(path: str) -> BinaryIO:
    try:
        return open(path, "rb", buffering=0)
    except OSError as err:
        raise CliError(f"cannot read {path}: {err.strerror or err}") from err


def _partial(path: str) -> str:
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.partial")


def _outputs(inputs: Sequence[str], output: str) -> tuple[bool, list[str]]:
    """(single file?, the output path of each input)."""
    single = not os.path.isdir(output) and output.endswith(".parquet")
    if single:
        return True, [output] * len(inputs)
    paths = []
    seen: dict[str, str] = {}
    for source in inputs:
        stem = strip_suffix(os.path.basename(source.rstrip("/" + os.sep)))
        stem = os.path.splitext(stem)[0] or stem
        target = os.path.join(output, stem + ".parquet")
        if target in seen:
            raise CliError(
                f"{source} and {seen[target]} would both be written to {target}; "
                "give -o FILE.parquet to write one file, or rename the inputs",
                code=2,
            )
        seen[target] = source
        paths.append(target)
    return False, paths


def _default_dead_path(output: str, single: bool) -> str:
    if single:
        return output[: -len(".parquet")] + ".dead_letters.parquet"
    return output.rstrip("/" + os.sep) + ".dead_letters.parquet"


def _check_inputs(files: Sequence[str]) -> None:
    """Fail before any work when an input cannot be opened."""
    for source in files:
        try:
            with open(source, "rb"):
                pass
        except IsADirectoryError:
            raise CliError(f"cannot read {source}: is a directory") from None
        except OSError as err:
            raise CliError(f"cannot read {source}: {err.strerror or err}") from None


class _Outputs:
    """The Parquet files of a run, each written as ``.NAME.partial`` and renamed when
    complete; :meth:`discard` removes the partial ones after a failure."""

    def __init__(self) -> None:
        self._open: list[tuple[ParquetSink, str, str]] = []

    def open(self, final: str, schema: pa.Schema, **options) -> ParquetSink:
        from wirearrow.parquet import ParquetSink

        parent = os.path.dirname(final)
        if parent:
            os.makedirs(parent, exist_ok=True)
        partial = _partial(final)
        sink = ParquetSink(partial, schema, **options)
        self._open.append((sink, partial, final))
        return sink

    def finish(self, sink: ParquetSink) -> None:
        for i, (s, partial, final) in enumerate(self._open):
            if s is sink:
                s.close()
                os.replace(partial, final)
                del self._open[i]
                return

    def discard(self) -> None:
        for sink, partial, _ in self._open:
            sink.abort()
            with contextlib.suppress(OSError):
                os.remove(partial)
        self._open = []


def cmd_transcode(args: argparse.Namespace) -> int:
    from wirearrow.parquet import DEFAULT_ROW_GROUP_SIZE

    plan = _load_plan(args.plan)
    if plan.custom is not None:
        raise CliError(
            f"{args.plan}: custom_message plans read (base, custom) record pairs, which files "
            "of framed records do not hold: use Transcoder.transcode(base, custom=...)",
            2,
        )
    framing = args.framing or plan.input.framing or DEFAULT_FRAMING
    confluent = _confluent(args, plan, framing)
    policy = args.on_error
    if args.dead_letters is not None:
        if policy not in (None, "dead_letter"):
            raise CliError("--dead-letters needs --on-error dead_letter (or no --on-error)", 2)
        policy = "dead_letter"
    policy = policy or plan.options["on_error"]
    cache = _profile_cache(args.profile)
    tc = _build_transcoder(plan, policy, cache)

    extra = [name for name in (args.source_column, args.offset_column) if name is not None]
    row_schema = tc.arrow_schema if confluent is None else confluent.row_schema(tc.arrow_schema)
    for name in extra:
        if name in row_schema.names or extra.count(name) > 1:
            raise CliError(f"column {name!r} is already in the output: give another name", 2)
    output = args.output or plan.output.path
    if not output:
        raise CliError(
            "no output: give -o OUT_DIR or -o FILE.parquet, or output.path in the plan", 2
        )
    output = os.fspath(output)
    single, targets = _outputs(args.files, output)
    _check_inputs(args.files)
    dead_path = None
    if policy == "dead_letter":
        dead_path = args.dead_letters or plan.dead_letter_path or _default_dead_path(output, single)

    options = {
        "row_group_size": args.row_group_size
        or plan.output.row_group_size
        or DEFAULT_ROW_GROUP_SIZE,
        "compression": args.compression or plan.output.compression,
    }
    progress = Progress(sys.stderr.isatty() and not args.no_progress)
    outputs = _Outputs()
    total = FileResult()
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            dead_sink = None
            if dead_path is not None:
                dead_sink = outputs.open(
                    dead_path,
                    _dead_letter_schema(),
                    row_group_size=10_000,
                    compression=options["compression"],
                    max_buffer_bytes=64 << 20,
                )
            job = TranscodeJob(
                tc,
                framing=framing,
                raising=policy == "raise",
                batch_size=args.batch_size or DEFAULT_BATCH_SIZE,
                chunk_size=args.chunk_size,
                progress=progress,
                dead_sink=dead_sink,
                input_format=args.format or plan.input.format or "binary",
                ignore_unknown_fields=args.ignore_unknown_fields
                or plan.input.ignore_unknown_fields,
                compression=args.input_compression or plan.input.compression or "auto",
                confluent=confluent,
                source_column=args.source_column,
                offset_column=args.offset_column,
            )
            if not single:
                os.makedirs(output, exist_ok=True)
            shared = outputs.open(output, job.row_schema, **options) if single else None
            for source, target in zip(args.files, targets, strict=True):
                sink = (
                    shared
                    if shared is not None
                    else outputs.open(target, job.row_schema, **options)
                )
                total.add(job.run_file(source, sink))
                if shared is None:
                    outputs.finish(sink)
            if shared is not None:
                outputs.finish(shared)
            if dead_sink is not None:
                outputs.finish(dead_sink)
    except BaseException as err:
        progress.clear()
        outputs.discard()
        if isinstance(err, OSError):
            raise CliError(f"cannot write the output: {err}") from err
        raise
    progress.clear()
    elapsed = max(time.perf_counter() - t0, 1e-9)
    mb = total.bytes_in / 1e6
    line = (
        f"{total.records_in:,} records in, {total.rows_out:,} rows out, {total.failed:,} failed, "
        f"{mb:,.1f} MB in {elapsed:.2f} s ({mb / elapsed:,.1f} MB/s) -> "
        f"{output if single or len(targets) > 1 else targets[0]}"
    )
    if dead_path is not None:
        line += f"; dead letters -> {dead_path}"
    print(line)
    if cache is not None:
        try:
            cache.save(args.profile)
        except OSError as err:
            raise CliError(f"cannot write the profile: {err}") from err
    return 0


def _profile_cache(path: str | None) -> ParserCache | None:
    """--profile: start from the saved profile when the file exists, profile this run."""
    from wirearrow.cache import ParserCache

    if path is None:
        return None
    if not os.path.exists(path):
        return ParserCache()
    try:
        return ParserCache.load(path)
    except (OSError, ValueError) as err:
        raise CliError(f"{path}: not a wirearrow profile ({err})") from err


# --------------------------------------------------------------------------- check / schema


def cmd_check(args: argparse.Namespace) -> int:
    from wirearrow.errors import WirearrowError
    from wirearrow.parquet import writable_schema

    if args.plan.endswith(".proto"):
        return _check_proto(args.plan, args.import_paths)
    if args.import_paths:
        raise CliError("-I applies to a .proto file; a plan names its import_paths itself")
    plan = _load_plan(args.plan)
    tc = _build_transcoder(plan, None)
    schema = tc.arrow_schema
    framing = plan.input.framing
    parts = [tc.schema.message_name, f"{len(schema)} columns", f"on_error={tc.spec.on_error}"]
    if framing:
        parts.append(f"framing={framing}")
    if plan.schema_ids:
        try:
            plan.confluent_schemas()  # every schema version compiles
        except (WirearrowError, ValueError) as err:
            raise CliError(str(err)) from err
        parts.append("schema ids " + ",".join(str(sid) for sid, _ in plan.schema_ids))
    print(f"{args.plan}: OK ({', '.join(parts)})")
    print(format_schema(schema))
    _, dropped = writable_schema(schema)
    if dropped:
        print(
            f"{PROG}: warning: Parquet cannot store a struct with no fields; transcode drops: "
            + ", ".join(dropped),
            file=sys.stderr,
        )
    return 0


def _recursive_types(message: object) -> list[str]:
    """Full names of the message types reachable from ``message`` that reach themselves:
    the types a whole-message read can only cut with max_depth. Well-known types are
    leaves (Struct and Value are JSON, not nested structs)."""
    from google.protobuf.descriptor import Descriptor

    def children(d: Descriptor) -> list[Descriptor]:
        out = []
        for f in d.fields:
            t = f.message_type
            if t is not None and t.GetOptions().map_entry:
                t = t.fields_by_number[2].message_type  # a map's value
            if t is not None and not t.file.name.startswith("google/protobuf/"):
                out.append(t)
        return out

    def reachable(start: Descriptor) -> dict[str, Descriptor]:
        seen: dict[str, Descriptor] = {}
        stack = children(start)
        while stack:
            d = stack.pop()
            if d.full_name not in seen:
                seen[d.full_name] = d
                stack.extend(children(d))
        return seen

    assert isinstance(message, Descriptor)
    found = {message.full_name: message, **reachable(message)}
    return sorted(name for name, d in found.items() if name in reachable(d))


def _check_proto(path: str, import_paths: Sequence[str]) -> int:
    """Compile a .proto, list its messages, and say which need max_depth to be read whole."""
    import wirearrow as wa
    from wirearrow.transcoder import max_depth_limit

    try:
        schemas = wa.Schema.declared_in(path, import_paths=import_paths)
    except (wa.WirearrowError, OSError) as err:
        raise CliError(str(err)) from err
    print(f"{path}: OK ({len(schemas)} message{'' if len(schemas) == 1 else 's'})")
    for schema in schemas:
        name = schema.message_name
        cycles = _recursive_types(schema.descriptor)
        if not cycles:
            print(name)
            continue
        what = "recursive" if name in cycles else "holds recursive types"
        limit = max_depth_limit(schema)
        need = (
            f"read whole with max_depth 1..{limit}"
            if limit
            else "too large to read whole at any max_depth: select its fields by path"
        )
        print(f"{name}: {what} {', '.join(cycles)}; {need}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    import wirearrow as wa

    try:
        schema = wa.Schema.load(args.proto, args.message, import_paths=args.import_paths)
        cycles = _recursive_types(schema.descriptor)
        if cycles and args.max_depth is None:
            raise CliError(
                f"{schema.message_name} holds recursive types ({', '.join(cycles)}): pass "
                f"--max-depth N to nest N levels, deeper ones as serialized bytes "
                f"(`{PROG} check {args.proto}` gives the range)"
            )
        tc = wa.Transcoder(schema, max_depth=args.max_depth)
    except (wa.WirearrowError, OSError) as err:
        raise CliError(str(err)) from err
    print(format_schema(tc.arrow_schema))
    return 0


# --------------------------------------------------------------------------- bench


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def cmd_bench(args: argparse.Namespace) -> int:
    from google.protobuf import message_factory
    from google.protobuf.internal import api_implementation

    import wirearrow as wa

    plan = _load_plan(args.plan)
    tc = _build_transcoder(plan, None)
    framing = args.framing or plan.input.framing or DEFAULT_FRAMING
    if framing == "confluent":
        raise CliError("bench does not read Confluent-framed records; give --framing", 2)
    try:
        records = wa.read_delimited(args.file, framing=framing)
    except OSError as err:
        raise CliError(f"cannot read {args.file}: {err.strerror or err}") from err
    except ValueError as err:
        raise CliError(f"{args.file}: {err}") from err
    n = len(records)
    if not n:
        raise CliError(f"{args.file}: no records")
    batch = args.batch_size or DEFAULT_BATCH_SIZE
    slices = [records.slice(i, batch) for i in range(0, n, batch)]

    def run_wirearrow() -> int:
        rows = 0
        for s in slices:
            rows += tc.transcode(s).num_rows
        tc.dead_letters()  # a dead_letter plan would keep them all: drop them
        return rows

    cls = message_factory.GetMessageClass(tc.schema.descriptor)
    parse = cls.FromString
    py_records = records.to_pylist()
    payload = sum(map(len, py_records))  # the records' bytes, without the framing

    def run_protobuf() -> int:
        failed = 0
        for r in py_records:
            try:
                parse(r)
            except Exception:
                failed += 1
        return failed

    try:
        rows = run_wirearrow()  # warm-up
    except wa.DecodeError as err:
        raise CliError(f"{args.file}: {err} (the plan's on_error is raise)") from err
    failed = run_protobuf()
    wa_times, pb_times = [], []
    for _ in range(args.repeat):
        t = time.perf_counter()
        run_wirearrow()
        wa_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        run_protobuf()
        pb_times.append(time.perf_counter() - t)
    wa_t, pb_t = _median(wa_times), _median(pb_times)
    impl = api_implementation.Type()
    print(
        f"{os.path.basename(args.file)}: {n:,} records, {payload / 1e6:,.2f} MB ({framing}); "
        f"{tc.schema.message_name}, {len(tc.arrow_schema)} columns; median of {args.repeat}"
    )
    print(
        f"wirearrow  {n / wa_t:>14,.0f} msg/s {payload / 1e6 / wa_t:>10,.1f} MB/s   {rows:,} rows"
    )
    note = f"; {failed:,} records failed to parse" if failed else ""
    print(
        f"protobuf   {n / pb_t:>14,.0f} msg/s {payload / 1e6 / pb_t:>10,.1f} MB/s   "
        f"{impl} FromString, no Arrow{note}"
    )
    print(f"ratio      {pb_t / wa_t:>14.1f}x  (wirearrow msg/s / protobuf msg/s)")
    return 0


# --------------------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Protobuf wire bytes to Apache Arrow and Parquet.",
        epilog="Exit codes: 0 success, 1 bad plan or input, 2 usage error, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    plan_help = "a YAML plan (docs/yaml.md)"

    check = commands.add_parser(
        "check",
        help="validate a plan and print its Arrow schema, or check a .proto schema",
        description=(
            "Load a plan, compile its schema and columns, print the Arrow schema. Given a "
            ".proto file instead: compile it, list its messages, and name the recursive "
            "types and the max_depth range that reads each message whole."
        ),
    )
    check.add_argument("plan", metavar="PLAN.yaml|SCHEMA.proto", help=plan_help)
    add_import_paths(check, "protoc include directory for a .proto (repeatable)")
    check.set_defaults(func=cmd_check)

    tr = commands.add_parser(
        "transcode",
        help="length-delimited protobuf files to Parquet",
        description=(
            "Stream framed protobuf files through a plan into Parquet, a chunk at a time "
            "(memory stays bounded whatever the file size)."
        ),
    )
    tr.add_argument("plan", metavar="PLAN.yaml", help=plan_help)
    tr.add_argument("files", metavar="FILE", nargs="+", help="framed protobuf records")
    tr.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="a directory (one NAME.parquet per input FILE) or FILE.parquet (all inputs "
        "in one file); default: the plan's output.path",
    )
    tr.add_argument(
        "--framing",
        choices=FRAMING_CHOICES,
        help="length prefix of each record; default: the plan's input.framing, else varint",
    )
    tr.add_argument(
        "--delimited-by",
        choices=FILE_FRAMINGS,
        help="--framing confluent: the length prefix of each record in the file; default: "
        "the plan's input.delimited_by, else varint",
    )
    tr.add_argument(
        "--schema-id",
        action="append",
        metavar="ID[=FILE.proto:MESSAGE]",
        help="--framing confluent: a schema id to accept (repeat for several): ID alone "
        "names the plan's message, ID=FILE.proto:MESSAGE another schema version; default: "
        "the plan's input.schemas",
    )
    tr.add_argument(
        "--schema-id-column",
        nargs="?",
        const=True,
        metavar="NAME",
        help="--framing confluent: add each row's schema id as a column (default name "
        "_schema_id); default: the plan's input.schema_id",
    )
    tr.add_argument(
        "--format",
        choices=("binary", "json"),
        help="binary: framed protobuf records; json: NDJSON of protojson records (one per "
        "line); default: the plan's input.format, else binary",
    )
    tr.add_argument(
        "--ignore-unknown-fields",
        action="store_true",
        help="JSON input: skip unknown fields and enum names (as json_format.Parse's option)",
    )
    tr.add_argument(
        "--on-error",
        choices=POLICIES,
        help="what a bad record does; default: the plan's errors.policy, else raise",
    )
    tr.add_argument(
        "--dead-letters",
        metavar="PATH",
        help="dead-letter Parquet file; implies --on-error dead_letter; default: the "
        "plan's errors.dead_letter_path, else next to the output (OUT.dead_letters.parquet)",
    )
    tr.add_argument(
        "--source-column",
        metavar="NAME",
        help="add a column NAME: each row's input FILE, as given",
    )
    tr.add_argument(
        "--offset-column",
        metavar="NAME",
        help="add a column NAME: the byte in its FILE where each row's record starts (its "
        "length prefix; NDJSON: its line)",
    )
    tr.add_argument(
        "--batch-size",
        type=_positive,
        metavar="N",
        help=f"at most N records per transcode call (default {DEFAULT_BATCH_SIZE})",
    )
    tr.add_argument(
        "--row-group-size",
        type=_positive,
        metavar="N",
        help="rows per Parquet row group; default: the plan's output.row_group_size, else 128000",
    )
    tr.add_argument(
        "--compression",
        choices=PARQUET_COMPRESSIONS,
        help="Parquet compression; default: the plan's output.compression",
    )
    tr.add_argument(
        "--input-compression",
        choices=INPUT_COMPRESSIONS,
        help="the input files' codec; default: the plan's input.compression, else auto "
        "(by suffix: .gz, .bz2, .zst, .xz; zstd needs the zstandard package). A compressed "
        "file is read as a stream, whole",
    )
    tr.add_argument(
        "--chunk-size",
        type=_parse_size,
        default=DEFAULT_CHUNK_SIZE,
        metavar="SIZE",
        help="bytes read at a time, e.g. 64K, 16M (default 16M)",
    )
    tr.add_argument(
        "--no-progress", action="store_true", help="no progress line, even on a terminal"
    )
    tr.add_argument(
        "--profile",
        metavar="PROFILE.json",
        help="parser-cache profile: read it first if it exists (buffers sized from the start), "
        "profile this run, and write the merged profile back (docs/cache.md)",
    )
    tr.set_defaults(func=cmd_transcode)

    sc = commands.add_parser(
        "schema",
        help="print the nested Arrow schema of a message",
        description="Print the whole-message (nested) Arrow schema of MESSAGE in PROTO.",
    )
    sc.add_argument(
        "proto",
        metavar="PROTO",
        help="a .proto file, a FileDescriptorSet file (protoc --descriptor_set_out, buf build) "
        "or the dotted name of a generated _pb2 module (imported: runs its code)",
    )
    sc.add_argument("message", metavar="MESSAGE", help="full name or unique suffix")
    add_import_paths(sc, "protoc include directory (repeatable)")
    sc.add_argument(
        "--max-depth",
        type=_positive,
        metavar="N",
        help="read recursive types N levels deep, deeper levels as their serialized bytes",
    )
    sc.set_defaults(func=cmd_schema)

    bench = commands.add_parser(
        "bench",
        help="measure a plan on a file against protobuf parsing",
        description=(
            "Time the plan on the records of FILE (loaded in memory) and the protobuf "
            "runtime's FromString on the same records; print the medians and the ratio."
        ),
    )
    bench.add_argument("plan", metavar="PLAN.yaml", help=plan_help)
    bench.add_argument("file", metavar="FILE", help="framed protobuf records")
    bench.add_argument("--framing", choices=FILE_FRAMINGS, help="as for transcode")
    bench.add_argument(
        "--repeat",
        type=_positive,
        default=5,
        metavar="N",
        help="timed runs, after one warm-up (default 5)",
    )
    bench.add_argument(
        "--batch-size",
        type=_positive,
        metavar="N",
        help=f"records per transcode call (default {DEFAULT_BATCH_SIZE})",
    )
    bench.set_defaults(func=cmd_bench)

    from wirearrow import playground  # argparse only: the server loads when it runs

    playground.configure(
        commands.add_parser(
            "playground", help=playground.HELP, description=playground.DESCRIPTION
        )
    )
    return parser


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("wirearrow")
    except Exception:  # pragma: no cover
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0) if not isinstance(exit_.code, str) else 2
    try:
        return args.func(args)
    except CliError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (| head): not an error of ours; keep the interpreter's
        # final flush from failing too.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
