"""The ``wirearrow`` command line: check a plan, transcode files to Parquet or into a table,
print schemas, measure a plan on real data.

    wirearrow check PLAN.yaml | SCHEMA.proto [-I DIR ...]
    wirearrow transcode PLAN.yaml FILES... -o OUT_DIR | -o out.parquet
    wirearrow transcode PLAN.yaml FILES... --to iceberg --warehouse DIR --table NS.NAME
    wirearrow transcode PLAN.yaml FILES... --to delta --table DIR
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
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

from wirearrow.arguments import (
    add_import_paths,
    add_input_arguments,
    add_output_arguments,
    add_schema_ids,
    in_flags,
    input_format,
    out_flags,
    output_of,
    positive,
    schema_id_arg,
)
from wirearrow.options import ON_ERROR
from wirearrow.sources.compression import strip_suffix

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from wirearrow.cache import ParserCache
    from wirearrow.config import PlanConfig
    from wirearrow.counts import Counts
    from wirearrow.output import Output
    from wirearrow.parquet import ParquetSink
    from wirearrow.plans import Resolved
    from wirearrow.schema import Schema
    from wirearrow.sources.format import RecordFormat
    from wirearrow.sources.framing import Tail
    from wirearrow.tables import TableWriter
    from wirearrow.transcoder import Decoded, Transcoder

__all__ = ["main"]

PROG = "wirearrow"
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


def _resolve(
    source: str, on_error: str | None = None, cache: ParserCache | None = None
) -> Resolved:
    """The plan of a YAML file, resolved as every engine resolves one; a CliError with
    every problem on a bad one."""
    from wirearrow.errors import WirearrowError
    from wirearrow.plans import resolve_plan

    if not os.path.exists(source):
        raise CliError(f"{source}: plan file not found")
    try:
        # A path-like, so that a file named without .yaml is never read as YAML text.
        return resolve_plan(pathlib.Path(source), on_error=on_error, cache=cache)
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


# --------------------------------------------------------------------------- transcode


def _dead_letter_schema() -> pa.Schema:
    import pyarrow as pa

    from wirearrow.dead_letters import DEAD_LETTER_SCHEMA

    return DEAD_LETTER_SCHEMA.append(pa.field("file", pa.utf8())).append(
        pa.field("file_offset", pa.int64())
    )


class _ParquetOut:
    """Where a file's batches go for Parquet output: its rows' sink, the run's dead letters'
    (with each one's record number and byte in its file)."""

    def __init__(self, sink: ParquetSink, dead_sink: ParquetSink | None) -> None:
        self.sink = sink
        self.dead_sink = dead_sink

    def committed(self, path: str) -> int:
        return 0  # files keep nothing of an earlier run

    def batch(self, path: str, decoded: Decoded, index_base: int, at: np.ndarray, ends: np.ndarray) -> None:
        rows, dead, _ = decoded
        if rows.num_rows:
            self.sink.write(rows)
        if self.dead_sink is not None and dead.num_rows:
            local = dead.column("index").to_numpy()
            columns = [
                (local + index_base).tolist(),
                *(dead.column(name).to_pylist() for name in ("offset", "path", "reason", "raw")),
                [path] * dead.num_rows,
                at[local].tolist(),
            ]
            self._write_dead(list(zip(*columns, strict=True)))

    def tail(self, path: str, index: int, tail: Tail) -> bool:
        """The file's unreadable tail as a dead letter; False when none are kept."""
        if self.dead_sink is None:
            return False
        self._write_dead([(index, 0, "", tail.reason, tail.raw, path, tail.offset)])
        return True

    def _write_dead(self, rows: list[tuple]) -> None:
        import pyarrow as pa

        assert self.dead_sink is not None
        schema = _dead_letter_schema()
        columns = list(zip(*rows, strict=True))
        batch = pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)],
            schema=schema,
        )
        self.dead_sink.write(batch)


class _TableOut:
    """Where the batches go for a table output: a TableWriter, each record's position the
    byte where its frame starts in its file (the key: the file). Records an earlier run
    committed are skipped (``committed``: the byte every record before which is in both
    tables); the rest the writer filters table by table."""

    def __init__(self, writer: TableWriter, job: TranscodeJob) -> None:
        self.writer = writer
        self.job = job

    def committed(self, path: str) -> int:
        from wirearrow.tables import file_key

        return self.writer.resume()[file_key(path)]

    def batch(self, path: str, decoded: Decoded, index_base: int, at: np.ndarray, ends: np.ndarray) -> None:
        import pyarrow as pa

        from wirearrow.tables import file_key

        rows, dead, counts = decoded
        if self.writer.dead is not None:
            # where each one is in its file, as the Parquet dead letters say it
            dead = dead.append_column("file", pa.repeat(pa.scalar(path, pa.utf8()), dead.num_rows))
            dead = dead.append_column("file_offset", pa.array(at[dead.column("index").to_numpy()], pa.int64()))
        self.writer.write((rows, dead, counts), file_key(path), at, ends)

    def tail(self, path: str, index: int, tail: Tail) -> bool:
        import numpy as np

        from wirearrow.counts import Counts
        from wirearrow.dead_letters import dead_letter_table
        from wirearrow.errors import DecodeError

        kept = self.writer.dead is not None
        dead = dead_letter_table([(DecodeError(tail.reason, index=0, offset=0, path=""), tail.raw)])
        rows = self.job.empty_rows
        counts = Counts(records_in=1, records_failed=1, dead_letters=int(kept))
        at = np.array([tail.offset], np.int64)
        self.batch(path, (rows, dead if kept else dead.slice(0, 0), counts), index, at,  # type: ignore[arg-type]
                   at + tail.size)  # fmt: skip
        return kept


class TranscodeJob:
    """Files in, through one Transcoder, into Parquet sinks or tables; dead letters aside."""

    def __init__(
        self,
        tc: Transcoder,
        fmt: RecordFormat,
        *,
        batch_size: int,
        chunk_size: int,
        progress: Progress,
        source_column: str | None = None,
        offset_column: str | None = None,
        record_index: bool = False,
    ) -> None:
        self.tc = tc
        self.fmt = fmt
        # Each batch's records as decode takes them: the file's framing is split (and its
        # compression undone) here, so a batch is a framed piece of the file or, for
        # Confluent records, the records themselves; JSON records are its lines.
        self.batch_format = fmt.replace(compression="none", delimited_by=None)
        if not fmt.confluent and fmt.format == "binary":
            self.batch_format = self.batch_format.replace(framing=fmt.stream_framing)
        self.source_column = source_column
        self.offset_column = offset_column
        self.record_index = record_index  # a table's writer needs each row's record
        self.raising = tc.spec.on_error == "raise"
        self.batch_size = batch_size
        self.chunk_size = chunk_size
        self.progress = progress
        self.skipped = 0  # records an earlier run committed to the table already
        # The current file's first bytes (decompressed), and whether they are all of it:
        # what they look like is said when most of its first records fail.
        self._head = b""
        self._whole = False

    def framing_hint(self) -> str:
        """What the current file's first bytes look like when they do not read well as
        the input says (another framing, Confluent records, JSON, compressed), in the
        command line's words; "" when they read well or nothing else reads them."""
        from wirearrow.sources.sniff import hint

        fmt = self.fmt
        words = hint(
            self._head,
            format=fmt.format,
            framing=None if fmt.format == "json" else fmt.stream_framing,
            confluent=fmt.confluent,
            whole=self._whole,
        )
        return in_flags(words)

    def _first_batch(self, path: str, counts: Counts) -> None:
        """After a file's first batch: most of its records failed, and its bytes look
        like another input? Say so once, on stderr (the run goes on)."""
        if counts.records_failed * 2 <= counts.records_in:
            return
        words = self.framing_hint()
        if words:
            self.progress.clear()
            print(
                f"{PROG}: warning: {path}: {counts.records_failed:,} of the first "
                f"{counts.records_in:,} records failed; {words}",
                file=sys.stderr,
            )

    @property
    def empty_rows(self) -> pa.RecordBatch:
        """No rows, of the rows' schema: the plan's, the schema-id column, --source-column
        and --offset-column (what decoding no records gives)."""
        import numpy as np

        empty = [] if self.batch_format.framing is None or self.fmt.confluent else b""
        carry = self._carry("", np.zeros(0, np.int64))
        return self.tc.decode(empty, self.batch_format, carry=carry, record_index=self.record_index).rows

    @property
    def row_schema(self) -> pa.Schema:
        return self.empty_rows.schema

    def _carry(self, path: str, at: np.ndarray) -> dict | None:
        """The carry= of a batch whose records start at bytes ``at`` of the file ``path``."""
        import pyarrow as pa

        carry = {}
        if self.source_column is not None:
            carry[self.source_column] = pa.repeat(pa.scalar(path, pa.utf8()), len(at))
        if self.offset_column is not None:
            carry[self.offset_column] = pa.array(at, pa.int64())
        return carry or None

    def run_file(self, path: str, out: _ParquetOut | _TableOut) -> Counts:
        import numpy as np

        from wirearrow.counts import Counts
        from wirearrow.sources.compression import compression_of
        from wirearrow.sources.framing import FrameReader
        from wirearrow.sources.sniff import SNIFF_BYTES

        codec = compression_of(path, self.fmt.compression)
        if self.fmt.format == "json":
            if codec != "none":
                raise CliError(
                    f"{path}: compressed ({codec}) NDJSON input is not supported: "
                    "decompress it first"
                )
            return self.run_ndjson_file(path, out)
        done = out.committed(path)
        result = Counts()
        label = os.path.basename(path)
        with _open_input(path) as f:
            st = os.fstat(f.fileno())
            # A compressed file's size is not its records' size (progress shows no total).
            size = st.st_size if stat.S_ISREG(st.st_mode) and codec == "none" else None
            reader = FrameReader(
                _decompressed(_Reading(f, path), codec, path), self.fmt.stream_framing,
                block_bytes=self.chunk_size, size=size, name="the file",
            )  # fmt: skip
            t0 = time.perf_counter()
            record_base = 0
            self._head, self._whole = b"", False
            for frames in reader:
                if not frames.offset:
                    self._head = bytes(frames.data[:SNIFF_BYTES])
                    self._whole = size is not None and size <= SNIFF_BYTES
                view = memoryview(frames.data)
                # (frame ends: TFRecord's data CRC follows each record)
                base, ends = frames.offset, frames.frame_ends
                for i0 in range(0, len(frames), self.batch_size):
                    i1 = min(len(frames), i0 + self.batch_size)
                    lo, hi = (int(ends[i0 - 1]) if i0 else 0), int(ends[i1 - 1])
                    if base + hi <= done:  # every record of the batch is in the table
                        self.skipped += i1 - i0
                        continue
                    # Where each record's frame (length prefix) starts in the file.
                    frame_at = np.concatenate(([lo], ends[i0 : i1 - 1])) + base
                    # Confluent records keep their prefix: the file's framing is split first.
                    records = frames.records(i0, i1) if self.fmt.confluent else view[lo:hi]
                    counts = self._batch(
                        path, records, record_base + i0, frame_at, ends[i0:i1] + base, out
                    )
                    if not result.records_in:
                        self._first_batch(path, counts)
                    result += counts
                    self.progress.update(label, result.records_in, base + hi, size, t0)
                record_base += len(frames)
            tail = reader.tail
            if tail is not None:
                if self.raising:
                    raise CliError(f"{path}: {tail.reason}")
                if tail.offset < done:
                    self.skipped += 1
                else:
                    kept = out.tail(path, record_base, tail)
                    result += Counts(records_in=1, records_failed=1, dead_letters=int(kept))
            # The file's bytes read (framing included), for the summary's MB/s.
            read = reader.position + (tail.size if tail is not None else 0)
        return result.replace(bytes_in=read)

    def run_ndjson_file(self, path: str, out: _ParquetOut | _TableOut) -> Counts:
        """NDJSON of protojson records: one per non-blank line, in batches of batch_size."""
        import pyarrow as pa

        from wirearrow.counts import Counts
        from wirearrow.sources.protojson import ndjson_records, split_ndjson
        from wirearrow.sources.sniff import SNIFF_BYTES

        done = out.committed(path)
        result = Counts()
        label = os.path.basename(path)
        try:
            with pa.memory_map(path, "r") as f:
                buffer = f.read_buffer()
        except OSError as err:
            raise CliError(f"cannot read {path}: {err.strerror or err}") from err
        starts, ends = split_ndjson(buffer)
        self._head = bytes(memoryview(buffer)[:SNIFF_BYTES])
        self._whole = buffer.size <= SNIFF_BYTES
        t0 = time.perf_counter()
        for i0 in range(0, len(starts), self.batch_size):
            i1 = min(len(starts), i0 + self.batch_size)
            if int(ends[i1 - 1]) <= done:
                self.skipped += i1 - i0
                continue
            records = ndjson_records(buffer, starts[i0:i1], ends[i0:i1])
            counts = self._batch(path, records, i0, starts[i0:i1], ends[i0:i1], out, lines=True)
            if not i0:
                self._first_batch(path, counts)
            result += counts
            self.progress.update(label, result.records_in, int(ends[i1 - 1]), buffer.size, t0)
        return result.replace(bytes_in=buffer.size)

    def _batch(
        self,
        path: str,
        records: object,
        index_base: int,
        at: np.ndarray,
        ends: np.ndarray,
        out: _ParquetOut | _TableOut,
        lines: bool = False,
    ) -> Counts:
        """Decode one batch (its records start at bytes ``at`` of the file and end at
        ``ends``), hand its rows and dead letters to ``out``; returns its counts."""
        from wirearrow.errors import DecodeError

        try:
            decoded = self.tc.decode(
                records, self.batch_format, carry=self._carry(path, at), record_index=self.record_index
            )
        except DecodeError as err:
            j = err.index
            words = self.framing_hint()
            hint = f"; {words}" if words else ""
            if lines:
                raise CliError(
                    f"{path}: record {index_base + j} (the line at byte {int(at[j])}): "
                    f"{err.reason}" + (f" at {err.path}" if err.path else "") + hint
                ) from err
            located = DecodeError(
                err.reason, index=index_base + j, offset=err.offset, path=err.path
            )
            raise CliError(
                f"{path}: {located} (the record starts at byte {int(at[j])} of the file){hint}"
            ) from err
        out.batch(path, decoded, index_base, at, ends)
        return decoded.counts


def _record_format(args: argparse.Namespace, resolved: Resolved) -> RecordFormat:
    """How the files' records arrive: the plan's input, the command line's flags over it
    (``--schema-id``: the Confluent schema ids, each compiled now)."""
    from wirearrow.errors import WirearrowError

    plan = resolved.config
    assert plan is not None  # a plan file
    given: dict = {}
    if args.schema_id and getattr(args, "schema_registry", None):
        raise CliError("give --schema-id or --schema-registry, not both", 2)
    try:
        if getattr(args, "schema_registry", None):
            given["schemas"] = args.schema_registry
        elif args.schema_id:
            given["schemas"] = dict(_schema_id_arg(item, plan) for item in args.schema_id)
        elif plan.schema_ids:
            plan.confluent_schemas()  # every schema version compiles, now
    except (WirearrowError, ValueError, OSError) as err:
        raise CliError(str(err)) from err
    try:
        return input_format(args, plan.input, **given)
    except (TypeError, ValueError) as err:
        if "needs schemas=" in str(err):
            raise CliError(
                "--framing confluent needs the schema ids it accepts: --schema-id ID (the "
                "plan's message) or --schema-id ID=FILE.proto:MESSAGE, --schema-registry URL, "
                "or input.schemas in the plan",
                2,
            ) from err
        raise CliError(in_flags(str(err)), 2) from err


def _schema_id_arg(text: str, plan: PlanConfig) -> tuple[int, Schema]:
    """``ID`` (the plan's schema) or ``ID=FILE.proto:MESSAGE`` (found as protoc -I would,
    in the plan's import paths and the file's directory)."""
    import wirearrow as wa

    try:
        sid, file, message = schema_id_arg(text)
    except ValueError as err:
        raise CliError(str(err), 2) from None
    if file is None or message is None:
        return sid, plan.schema()
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


def _partial(path: str, root: str | None) -> str:
    """Where ``path`` is written until the run commits: ``.NAME.partial`` beside it, or for
    a file of the output directory ``root``, the same name in ``.ROOT.partial/`` beside
    that directory, where no glob of the output (``root/*``, ``root/**``) finds it."""
    if root is None:
        head, name = os.path.split(path)
        return os.path.join(head, f".{name}.partial")
    parent, name = os.path.split(os.path.normpath(root))
    return os.path.join(parent, f".{name}.partial", os.path.relpath(path, root))


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
    """The Parquet files of a run, committed together by renaming: each is written where no
    reader of the output looks (:func:`_partial`) and moved into place when the whole run
    has succeeded, the rows' files first, the dead letters' last. A run that fails or is
    killed leaves no file in the output (nor any of its finished ones: the output of a
    run is all of it or none); :meth:`discard` removes what it wrote."""

    def __init__(self) -> None:
        self._open: list[tuple[ParquetSink, str, str]] = []
        self._done: list[tuple[str, str]] = []

    def open(self, final: str, schema: pa.Schema, *, root: str | None = None, **options) -> ParquetSink:
        from wirearrow.parquet import ParquetSink

        partial = _partial(final, root)
        for folder in (os.path.dirname(partial), os.path.dirname(final)):
            if folder:
                os.makedirs(folder, exist_ok=True)
        sink = ParquetSink(partial, schema, **options)
        self._open.append((sink, partial, final))
        return sink

    def finish(self, sink: ParquetSink) -> None:
        for i, (s, partial, final) in enumerate(self._open):
            if s is sink:
                s.close()
                self._done.append((partial, final))
                del self._open[i]
                return

    def commit(self) -> None:
        """Move every finished file into place, in the order they were finished."""
        for partial, final in self._done:
            os.replace(partial, final)
            _remove_empty(os.path.dirname(partial))
        self._done = []

    def discard(self) -> None:
        for sink, partial, _ in self._open:
            sink.abort()
            self._done.append((partial, ""))
        for partial, _ in self._done:
            with contextlib.suppress(OSError):
                os.remove(partial)
            _remove_empty(os.path.dirname(partial))
        self._open, self._done = [], []


def _remove_empty(folder: str) -> None:
    """Remove a staging directory once it holds nothing."""
    if os.path.basename(folder).endswith(".partial"):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def cmd_transcode(args: argparse.Namespace) -> int:
    policy = args.on_error
    if args.dead_letters is not None:
        if policy not in (None, "dead_letter"):
            raise CliError("--dead-letters needs --on-error dead_letter (or no --on-error)", 2)
        policy = "dead_letter"
    cache = _profile_cache(args.profile)
    resolved = _resolve(args.plan, policy, cache)
    plan = resolved.config
    assert plan is not None
    if plan.custom is not None:
        raise CliError(
            f"{args.plan}: custom_message plans read (base, custom) record pairs, which files "
            "of framed records do not hold: use Transcoder.transcode(base, custom=...)",
            2,
        )
    try:
        output = output_of(args, plan.output)
    except ValueError as err:
        raise CliError(out_flags(str(err)), 2) from err
    fmt = _record_format(args, resolved)
    tc = resolved.transcoder
    extra = [name for name in (args.source_column, args.offset_column) if name is not None]
    try:
        plain = TranscodeJob(tc, fmt, batch_size=1, chunk_size=1, progress=Progress(False))
        row_names = plain.row_schema.names
    except ValueError as err:  # the schema-id column's name is the plan's
        raise CliError(in_flags(str(err)), 2) from err
    for name in extra:
        if name in row_names or extra.count(name) > 1:
            raise CliError(f"column {name!r} is already in the output: give another name", 2)
    _check_inputs(args.files)
    progress = Progress(sys.stderr.isatty() and not args.no_progress)
    job = TranscodeJob(
        tc,
        fmt,
        batch_size=args.batch_size or DEFAULT_BATCH_SIZE,
        chunk_size=args.chunk_size,
        progress=progress,
        source_column=args.source_column,
        offset_column=args.offset_column,
        record_index=output.is_table,
    )
    t0 = time.perf_counter()
    if output.is_table:
        total, where = _into_table(args, job, output)
    else:
        total, where = _into_files(args, job, output, plan)
    elapsed = max(time.perf_counter() - t0, 1e-9)
    mb = total.bytes_in / 1e6
    print(
        f"{total.records_in:,} records in, {total.rows_out:,} rows out, {total.records_failed:,} failed, "
        f"{mb:,.1f} MB in {elapsed:.2f} s ({mb / elapsed:,.1f} MB/s) -> {where}"
    )
    if cache is not None:
        try:
            cache.save(args.profile)
        except OSError as err:
            raise CliError(f"cannot write the profile: {err}") from err
    return 0


def _into_files(
    args: argparse.Namespace, job: TranscodeJob, output: Output, plan: PlanConfig
) -> tuple[Counts, str]:
    """Parquet files: each written as ``.NAME.partial`` and renamed when complete."""
    from wirearrow.counts import Counts
    from wirearrow.parquet import DEFAULT_ROW_GROUP_SIZE

    if not output.path:
        raise CliError(
            "no output: give -o OUT_DIR or -o FILE.parquet (or --to iceberg / --to delta and "
            "--table), or output: in the plan",
            2,
        )
    out_path = os.fspath(output.path)
    single, targets = _outputs(args.files, out_path)
    dead_path = None
    if job.tc.spec.on_error == "dead_letter":
        dead_path = args.dead_letters or plan.dead_letter_path or _default_dead_path(out_path, single)
    options: dict[str, Any] = {
        "row_group_size": output.row_group_size or DEFAULT_ROW_GROUP_SIZE,
        "compression": output.compression,
    }
    outputs = _Outputs()
    total = Counts()
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            dead_sink = None
            if dead_path is not None:
                dead_sink = outputs.open(
                    dead_path,
                    _dead_letter_schema(),
                    row_group_size=10_000,
                    compression=output.compression,
                    max_buffer_bytes=64 << 20,
                )
            if not single:
                os.makedirs(out_path, exist_ok=True)
            root = None if single else out_path
            shared = outputs.open(out_path, job.row_schema, **options) if single else None
            for source, target in zip(args.files, targets, strict=True):
                sink = shared if shared is not None else outputs.open(target, job.row_schema, root=root, **options)
                total += job.run_file(source, _ParquetOut(sink, dead_sink))
                if shared is None:
                    outputs.finish(sink)
            if shared is not None:
                outputs.finish(shared)
            if dead_sink is not None:
                outputs.finish(dead_sink)
            outputs.commit()
    except BaseException as err:
        job.progress.clear()
        outputs.discard()
        if isinstance(err, OSError):
            raise CliError(f"cannot write the output: {err}") from err
        raise
    job.progress.clear()
    where = out_path if single or len(targets) > 1 else targets[0]
    if dead_path is not None:
        where += f"; dead letters -> {dead_path}"
    return total, where


def _into_table(args: argparse.Namespace, job: TranscodeJob, output: Output) -> tuple[Counts, str]:
    """An Iceberg or Delta table: a commit per input file (or every --commit-every
    batches), each recording how far into its file it got; a run started again resumes
    where the last commit left each file (records before are skipped, none is written
    twice) and a run killed leaves the tables at their last commit."""
    from wirearrow.counts import Counts
    from wirearrow.tables import CommitConflict, TableSchemaError, TableWriter

    if args.dead_letters is not None:
        raise CliError(
            "--dead-letters is a Parquet file; a table's dead letters go to a table of their "
            "own (--dead-letter-table, default: the table's name + _dead_letters)",
            2,
        )
    if not output.table:
        what = "NAMESPACE.NAME" if output.format == "iceberg" else "DIR"
        raise CliError(f"--to {output.format} needs --table {what} (or output.table in the plan)", 2)
    dead_letters = job.tc.spec.on_error == "dead_letter"
    total = Counts()
    try:
        # Without --commit-every: one commit per input file (below), none in between.
        writer = TableWriter.open(output.replace(commit_every=output.commit_every or 1 << 62),
                                  dead_letters=dead_letters)  # fmt: skip
    except ValueError as err:  # no catalog, no warehouse
        raise CliError(out_flags(str(err)), 2) from err
    except ImportError as err:
        raise CliError(str(err)) from err
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            with writer:
                out = _TableOut(writer, job)
                for source in args.files:
                    total += job.run_file(source, out)
                    if output.commit_every is None:
                        writer.commit()  # one commit per input file
    except (CommitConflict, TableSchemaError) as err:
        job.progress.clear()
        raise CliError(str(err)) from err
    except BaseException:
        job.progress.clear()
        raise
    job.progress.clear()
    versions = [c.version for c in writer.commits if c.version is not None]
    where = f"{output.format} table {output.table}"
    if versions:
        where += f" ({len(writer.commits) // (2 if dead_letters else 1)} commit(s), now at version {versions[-1]})"
    if job.skipped:
        where += f"; {job.skipped:,} records already in the table skipped"
    if dead_letters:
        where += f"; dead letters -> {output.format} table {output.dead_letter_table}"
    return total, where


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
    resolved = _resolve(args.plan)
    plan, tc = resolved.config, resolved.transcoder
    assert plan is not None
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

    resolved = _resolve(args.plan)
    tc = resolved.transcoder
    assert resolved.config is not None
    try:
        fmt = input_format(args, resolved.config.input)
    except (TypeError, ValueError) as err:
        raise CliError(in_flags(str(err)), 2) from err
    if fmt.confluent or fmt.format == "json":
        raise CliError("bench reads framed protobuf records; give --framing", 2)
    framing = fmt.stream_framing
    try:
        records = wa.read_delimited(args.file, framing=framing, compression=fmt.compression)
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
    add_input_arguments(tr)
    add_schema_ids(tr)
    tr.add_argument(
        "--schema-registry",
        metavar="URL",
        help="--framing confluent: fetch the schema of each schema id from this "
        "Confluent-compatible schema registry (docs/evolution.md); default: the plan's "
        "input.schemas",
    )
    tr.add_argument(
        "--on-error",
        choices=ON_ERROR,
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
        type=positive,
        metavar="N",
        help=f"at most N records per transcode call (default {DEFAULT_BATCH_SIZE})",
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
    add_output_arguments(tr.add_argument_group("output (each flag over the plan's output:)"))
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
        type=positive,
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
    add_input_arguments(bench, ("framing", "compression"))
    bench.add_argument(
        "--repeat",
        type=positive,
        default=5,
        metavar="N",
        help="timed runs, after one warm-up (default 5)",
    )
    bench.add_argument(
        "--batch-size",
        type=positive,
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
