"""The write half in Ray Data: Arrow rows -> protobuf records (:class:`Encode`,
:func:`encode`) and -> files of framed records (:func:`write_delimited`)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import posixpath
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from wirearrow.dead_letters import DEAD_LETTER_SCHEMA
from wirearrow.errors import EncodeError
from wirearrow.sources.confluent import message_index as message_index_of
from wirearrow.sources.framing import check_framing, frame_records
from wirearrow.transcoder import Transcoder

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.data import Dataset

    from wirearrow.config import PlanConfig

    PlanLike = Transcoder | PlanConfig | str | os.PathLike[str] | bytes | Mapping[str, Any]
from wirearrow.ray.datasource import filesystem_of
from wirearrow.ray.ledger import BatchResult, Ledger, WorkerStats, open_job_ledger
from wirearrow.ray.runtime import is_object_ref, ray_module, whereami
from wirearrow.ray.transcode import (
    TranscodeResult,
    _JobHandle,
    _load,
    _policy,
    _result,
    job_step,
    put_plan,
    write_dead_letters,
)

# The column Encode writes the records to, unless told.
RECORD_COLUMN = "record"


def _whole_message(tc: Transcoder) -> Transcoder:
    if tc.spec.columns is not None:
        raise ValueError(
            "encoding needs a whole-message plan (no columns: a flat plan does not hold "
            "every field of the message); e.g. wirearrow.Transcoder(schema)"
        )
    return tc


def rows_key(batch: pa.Table) -> str:
    """A name of a batch of rows by its content (the same rows give the same key on any
    worker, in any attempt): its row count, schema and first, middle and last rows."""
    n = batch.num_rows
    h = hashlib.blake2b(digest_size=12)
    h.update(n.to_bytes(8, "little"))
    h.update(str(batch.schema).encode())
    if n:
        h.update(repr(batch.take(sorted({0, n // 2, n - 1})).to_pylist()).encode())
    return h.hexdigest()


class Encode:
    """A callable class for ``Dataset.map_batches``: a batch of rows -> a batch of records.

    ``plan``: a whole-message plan (a :class:`~wirearrow.Transcoder` without columns, a
    PlanConfig, YAML, or best an ``ObjectRef`` from :func:`~wirearrow.ray.put_plan`:
    each actor compiles it once, here). The batch's columns are the message's fields
    (the rows ``transcode`` gives for that plan, filtered or changed in Ray), except
    ``keep``: columns carried onto the output as they are (a Kafka key, a partition).
    Returns a table of ``keep`` and ``column`` (default ``"record"``): one binary record
    per row, byte-identical to the runtime's ``SerializeToString(deterministic=True)``.

    ``framing="confluent"``: each record gets the Confluent prefix of ``schema_id``
    (``message_index``: the message's path in its file, by default found from the plan's
    schema), as Confluent's serializers write Kafka values.

    ``on_error`` overrides the plan's policy: "raise" (an :class:`~wirearrow.EncodeError`
    naming the row and column fails the batch), "skip" (bad rows are left out and counted)
    or "dead_letter": also kept in ``dead_letters`` (a directory: one Parquet file per batch
    that has any) and/or reported to ``ledger`` (what :func:`encode` passes). Dead letters
    are ``DEAD_LETTER_SCHEMA`` (``index``: the row in the batch; ``path`` and ``reason``
    from the EncodeError; ``raw`` null) plus ``source``: the whole input row.
    """

    def __init__(
        self,
        plan: PlanLike | ObjectRef,
        column: str = RECORD_COLUMN,
        *,
        keep: Sequence[str] = (),
        framing: str | None = None,
        schema_id: int | None = None,
        message_index: Sequence[int] | None = None,
        on_error: str | None = None,
        dead_letters: str | os.PathLike[str] | None = None,
        filesystem: pafs.FileSystem | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        started = time.perf_counter()
        compiles = 0
        if is_object_ref(plan):
            plan = ray_module().get(plan)
            compiles += isinstance(plan, Transcoder)
        if not isinstance(plan, Transcoder):
            compiles += 1
        self._tc = _whole_message(_policy(_load(plan), on_error))
        self._column = column
        self._keep = tuple(keep)
        if column in self._keep:
            raise ValueError(f"column {column!r} is also a keep= column")
        if framing not in (None, "confluent"):
            raise ValueError(f'a record column\'s framing is None or "confluent", not {framing!r}')
        if (framing is None) != (schema_id is None):
            raise ValueError('framing="confluent" and schema_id= go together')
        self._framing = framing
        self._schema_id = schema_id
        self._message_index = (
            tuple(message_index) if message_index is not None else message_index_of(self._tc.schema)
        )
        if framing is not None:  # checked now, not on the first batch
            frame_records(pa.array([], pa.binary()), framing, schema_id=schema_id,
                          message_index=self._message_index)
        self._policy = self._tc.spec.on_error
        self._ledger = ledger
        self._dead_dir: str | None = None
        self._fs: pafs.FileSystem | None = None
        if dead_letters is not None:
            self._fs, self._dead_dir = filesystem_of(os.fspath(dead_letters), filesystem)
            self._fs.create_dir(self._dead_dir, recursive=True)
        if self._policy == "dead_letter" and self._dead_dir is None and ledger is None:
            raise ValueError(
                'on_error="dead_letter" needs somewhere to put them: dead_letters=<directory>, '
                "or use wirearrow.ray.encode(), which collects them"
            )
        worker, node = whereami()
        self._stats = WorkerStats(
            worker=worker, node=node, pid=os.getpid(), compiles=compiles,
            init_seconds=time.perf_counter() - started,
        )

    @property
    def stats(self) -> WorkerStats:
        """What this instance did (``bytes_in``: the bytes of the records it wrote)."""
        return self._stats

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        if not isinstance(batch, pa.Table):
            raise TypeError(
                f"Encode takes pyarrow Tables (map_batches(..., batch_format='pyarrow')), "
                f"not {type(batch).__name__}"
            )
        records, failures, dead = self.encode_table(batch)
        out = batch.select(list(self._keep))
        if len(failures):
            good = np.ones(batch.num_rows, dtype=bool)
            good[failures] = False
            out = out.filter(pa.array(good))
        out = out.append_column(pa.field(self._column, records.type), pa.chunked_array([records]))
        n, failed = batch.num_rows, len(failures)
        result = BatchResult(
            key=rows_key(batch),
            records_in=n,
            records_ok=n - failed,
            records_failed=failed,
            rows_out=n - failed,
            bytes_in=_value_bytes(records),
            dead_letters=dead.num_rows if dead is not None else 0,
        )
        written = None
        if dead is not None and self._dead_dir is not None:
            assert self._fs is not None
            written = write_dead_letters(self._fs, self._dead_dir, dead, result.key)
        s = self._stats
        self._stats = dataclasses.replace(
            s,
            batches=s.batches + 1,
            records_in=s.records_in + n,
            records_ok=s.records_ok + n - failed,
            records_failed=s.records_failed + failed,
            rows_out=s.rows_out + n - failed,
            bytes_in=s.bytes_in + result.bytes_in,
            dead_letters=s.dead_letters + result.dead_letters,
            transcode_seconds=s.transcode_seconds + time.perf_counter() - started,
        )
        if self._ledger is not None:
            self._ledger.report(
                self._stats, result, dead if self._dead_dir is None else None, written
            )
        return out

    def encode_table(self, batch: pa.Table) -> tuple[pa.Array, np.ndarray, pa.Table | None]:
        """(records of the good rows, positions of the bad rows, their dead letters or
        None): the step without its accounting, for sinks that write the records."""
        missing = [name for name in self._keep if name not in batch.column_names]
        if missing:
            raise KeyError(f"keep columns not in the batch: {missing}")
        rows = batch.drop_columns(list(self._keep)) if self._keep else batch
        if self._policy == "raise":
            try:
                records = self._tc.encode(rows)
            except EncodeError as err:
                if err.row is not None and hasattr(err, "add_note"):
                    err.add_note(f"input row: {batch.slice(err.row, 1).to_pylist()[0]}")
                raise
            failures = np.zeros(0, dtype=np.int64)
        else:
            encoded = self._tc.encode(rows, on_error="dead_letter")
            failures = encoded.failures.column("row").to_numpy()
            records = encoded.records
            if len(failures):
                records = records.drop_null()
        if self._framing is not None:
            records = frame_records(
                records, self._framing, schema_id=self._schema_id, message_index=self._message_index
            )
        dead = None
        if len(failures) and self._policy == "dead_letter":
            dead = _dead_letters(batch, encoded.failures)
        return records, failures, dead


def _value_bytes(records: pa.Array) -> int:
    return int(pc.sum(pc.binary_length(records)).as_py() or 0) if len(records) else 0


def _dead_letters(batch: pa.Table, failures: pa.Table) -> pa.Table:
    """DEAD_LETTER_SCHEMA rows of the rows that failed, with the whole row as ``source``."""
    rows = failures.column("row")
    n = len(rows)
    dead = pa.table(
        [
            rows,
            pa.array(np.zeros(n, dtype=np.int64)),
            failures.column("path"),
            failures.column("reason"),
            pa.nulls(n, pa.binary()),
        ],
        schema=DEAD_LETTER_SCHEMA,
    )
    source = batch.take(rows)
    struct = pa.StructArray.from_arrays(
        [c.combine_chunks() for c in source.columns], fields=list(source.schema)
    )
    return dead.append_column("source", struct)


# ---- the one-call path -------------------------------------------------------------------

_TASK_ENCODERS: OrderedDict[str, Encode] = OrderedDict()


def _encode_task(batch: pa.Table, *, job: str, **encode_args: Any) -> pa.Table:
    """``map_batches`` function of :func:`encode`: one Encode per worker process and job."""
    return job_step(_TASK_ENCODERS, job, functools.partial(Encode, **encode_args))(batch)


def encode(
    ds: Dataset,
    plan: PlanLike | ObjectRef,
    column: str = RECORD_COLUMN,
    *,
    keep: Sequence[str] = (),
    framing: str | None = None,
    schema_id: int | None = None,
    message_index: Sequence[int] | None = None,
    on_error: str | None = None,
    dead_letters: str | os.PathLike[str] | None = None,
    filesystem: pafs.FileSystem | None = None,
    batch_size: int | None = None,
    **map_batches_args: Any,
) -> TranscodeResult:
    """Encode the rows of ``ds`` with a whole-message ``plan``: the one-call path.

    The plan is compiled here and shipped once; Ray tasks run an :class:`Encode` per
    worker process (built once per job). Returns a :class:`~wirearrow.ray.TranscodeResult`
    -- a Dataset of ``keep`` and ``column`` -- whose ``job_stats()`` count rows in / ok /
    failed (``bytes_in``: the records' bytes) and whose ``dead_letters`` hold the rows that
    could not be encoded, with ``path`` and ``reason`` and the row as ``source``. Other
    keyword arguments go to ``map_batches``.
    """
    ray = ray_module()
    if not ray.is_initialized():
        ray.init()
    ref = put_plan(plan, on_error=on_error)
    ledger = open_job_ledger()
    fs = dead_dir = None
    if dead_letters is not None:
        fs, dead_dir = filesystem_of(os.fspath(dead_letters), filesystem)
    args = {
        "plan": ref, "column": column, "keep": tuple(keep), "framing": framing,
        "schema_id": schema_id, "message_index": message_index, "dead_letters": dead_dir,
        "filesystem": fs, "ledger": ledger,
    }
    rows = ds.map_batches(
        cast(Any, _encode_task),
        fn_kwargs={"job": ledger.job, **args},
        batch_format="pyarrow",
        zero_copy_batch=True,
        batch_size=batch_size,
        **map_batches_args,
    )
    return cast(TranscodeResult, _result(rows, _JobHandle(ledger), dead_dir, fs, "tasks", None))


# ---- framed files ------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteStats:
    """What :func:`write_delimited` wrote: ``rows_in == records_out + rows_failed``;
    ``dead_letters``: failed rows written to ``dead_letter_files``; ``bytes_out``: the
    files' bytes (framing included)."""

    rows_in: int = 0
    records_out: int = 0
    rows_failed: int = 0
    dead_letters: int = 0
    bytes_out: int = 0
    files: tuple[str, ...] = ()
    dead_letter_files: tuple[str, ...] = ()

    @classmethod
    def combine(cls, parts: Iterable[WriteStats]) -> WriteStats:
        parts = list(parts)
        return cls(
            rows_in=sum(p.rows_in for p in parts),
            records_out=sum(p.records_out for p in parts),
            rows_failed=sum(p.rows_failed for p in parts),
            dead_letters=sum(p.dead_letters for p in parts),
            bytes_out=sum(p.bytes_out for p in parts),
            files=tuple(sorted(f for p in parts for f in p.files)),
            dead_letter_files=tuple(sorted(f for p in parts for f in p.dead_letter_files)),
        )


_EXTENSIONS = {"tfrecord": "tfrecord"}


@functools.cache
def _datasink_class() -> type:
    """DelimitedDatasink, defined on first use so that importing this module needs no Ray."""
    from ray.data.datasource.file_datasink import BlockBasedFileDatasink

    class DelimitedDatasink(BlockBasedFileDatasink):
        """Rows -> files of framed protobuf records (one file per write task).

        ``plan``: a whole-message plan (encoded here, one compile per worker process); or
        None with ``column``: the records are already encoded in that binary column.
        ``framing``: "varint", "u32le", "u32be" or "tfrecord". Rows that cannot be
        encoded follow the plan's policy (``on_error`` overrides); dead letters go to
        ``dead_letters`` (default: ``_dead_letters/`` inside ``path``, which readers of
        the directory skip), one Parquet file per data file that has any.
        """

        def __init__(
            self,
            path: str,
            plan: Transcoder | None,
            framing: str = "varint",
            *,
            column: str | None = None,
            dead_letters: str | None = None,
            filesystem: pafs.FileSystem | None = None,
            **datasink_args: Any,
        ) -> None:
            check_framing(framing)
            if (plan is None) == (column is None):
                raise ValueError("write_delimited takes a plan (rows to encode) or column= "
                                 "(records already encoded), one of them")
            super().__init__(
                path, filesystem=filesystem, file_format=_EXTENSIONS.get(framing, "bin"),
                **datasink_args,
            )
            self._plan = plan
            self._framing = framing
            self._column = column
            self._dead_path = dead_letters or posixpath.join(path, "_dead_letters")
            self._dead_fs: pafs.FileSystem | None = None
            self._parts: list[WriteStats] = []
            self.result = WriteStats()

        def get_name(self) -> str:
            return f"WriteDelimited({self._framing})"

        def open_output_stream(self, path: str) -> pa.NativeFile:
            self._writing = path  # the file write_block_to_file writes
            return super().open_output_stream(path)

        # Returns what the task wrote (Ray hands the returns to on_write_complete), where
        # Ray's file datasinks return None.
        def write(self, blocks: Iterable[Any], ctx: Any) -> list[WriteStats]:  # type: ignore[override]
            self._parts = []
            super().write(blocks, ctx)
            return self._parts

        def write_block_to_file(self, block: Any, file: pa.NativeFile) -> None:
            table = block.to_arrow()
            dead_files: tuple[str, ...] = ()
            failed = dead = 0
            if self._plan is None:
                records = table.column(self._column).combine_chunks()
            else:
                encoder = self._encoder()
                records, failures, letters = encoder.encode_table(table)
                failed = len(failures)
                if letters is not None:
                    fs, root = self._dead_dir()
                    dead_files = (write_dead_letters(fs, root, letters, rows_key(table)),)
                    dead = letters.num_rows
            data = frame_records(records, self._framing)
            file.write(data)
            self._parts.append(
                WriteStats(
                    rows_in=table.num_rows, records_out=len(records), rows_failed=failed,
                    dead_letters=dead, bytes_out=len(data), files=(self._writing,),
                    dead_letter_files=dead_files,
                )
            )

        def _encoder(self) -> Encode:
            # One per datasink copy: the Transcoder arrived pickled and compiled on the
            # worker's parser cache (once per process, whatever the number of tasks).
            encoder = getattr(self, "_encoder_instance", None)
            if encoder is None:
                policy = self._plan.spec.on_error  # type: ignore[union-attr]
                encoder = Encode(
                    self._plan,  # type: ignore[arg-type]
                    dead_letters=None,
                    ledger=_NO_LEDGER if policy == "dead_letter" else None,
                )
                self._encoder_instance = encoder
            return encoder

        def _dead_dir(self) -> tuple[pafs.FileSystem, str]:
            fs, root = filesystem_of(self._dead_path, None if "://" in self._dead_path
                                     else self.filesystem)
            fs.create_dir(root, recursive=True)
            return fs, root

        def on_write_complete(self, write_result: Any) -> None:
            super().on_write_complete(write_result)
            self.result = WriteStats.combine(
                part for parts in write_result.write_returns for part in (parts or ())
            )

    DelimitedDatasink.__module__ = __name__
    DelimitedDatasink.__qualname__ = "DelimitedDatasink"
    return DelimitedDatasink


class _Discard(Ledger):
    """Where a sink's Encode reports: nowhere (the sink writes its dead letters itself)."""

    def report(self, stats: WorkerStats, batch: BatchResult, dead: Any, file: Any) -> None:
        return None


_NO_LEDGER = _Discard()


def __getattr__(name: str) -> Any:
    # PEP 562: `wirearrow.ray.DelimitedDatasink` builds the class (importing Ray) on first use.
    if name == "DelimitedDatasink":
        return _datasink_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def write_delimited(
    ds: Dataset,
    path: str | os.PathLike[str],
    plan: PlanLike | None = None,
    framing: str = "varint",
    *,
    column: str | None = None,
    on_error: str | None = None,
    dead_letters: str | os.PathLike[str] | None = None,
    filesystem: pafs.FileSystem | None = None,
    min_rows_per_file: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
    concurrency: int | None = None,
) -> WriteStats:
    """Write ``ds`` as files of framed protobuf records under ``path`` (a directory, local
    or any URI pyarrow supports): one file per write task, ``framing`` "varint"
    (protobuf's writeDelimitedTo), "u32le", "u32be" or "tfrecord" (TensorFlow's and
    Beam's ``ReadFromTFRecord``'s format).

    ``plan``: a whole-message plan; the rows are encoded in the write tasks (the plan
    compiled once per worker process). Or ``column=``: the name of a binary column already
    holding the records (an :class:`Encode` step's output), framed as they are.
    ``on_error`` overrides the plan's policy for rows that cannot be encoded ("raise",
    "skip", "dead_letter": written as Parquet to ``dead_letters``, default
    ``<path>/_dead_letters/``). Returns the :class:`WriteStats` of the write.
    :func:`wirearrow.ray.read_delimited` (and ``wirearrow.read_delimited``) read the files
    back.
    """
    ray = ray_module()
    if not ray.is_initialized():
        ray.init()
    tc = None
    if plan is not None:
        if is_object_ref(plan):
            plan = ray.get(plan)
        tc = _whole_message(_policy(_load(plan), on_error))
    elif on_error is not None:
        raise ValueError("on_error= is for rows to encode (a plan), not for column=")
    sink = _datasink_class()(
        os.fspath(path),
        tc,
        framing,
        column=column,
        dead_letters=os.fspath(dead_letters) if dead_letters is not None else None,
        filesystem=filesystem,
        min_rows_per_file=min_rows_per_file,
    )
    ds.write_datasink(sink, ray_remote_args=ray_remote_args, concurrency=concurrency)
    return cast(WriteStats, sink.result)
