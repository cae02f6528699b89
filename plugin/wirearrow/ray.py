"""Ray Data integration: protobuf records in a Dataset -> Arrow rows, on a laptop or a cluster.

    import wirearrow.ray as war

    ds = war.read_delimited("s3://bucket/events/", framing="varint")  # column "value"
    out = war.transcode(ds, "transforms/openrtb_flat.yaml", on_error="dead_letter")
    out.write_parquet("out/rows")      # out delegates to out.rows, a ray.data.Dataset
    out.stats()                        # records in / ok / failed, rows out, per actor
    out.dead_letters                   # a second Dataset: the bad records, with the reason

The pieces, for users who compose their own pipeline:

* :class:`Transcode` -- a callable class for ``Dataset.map_batches``: builds its transcoder
  once per actor (the plan arrives as an ``ObjectRef`` from :func:`put_plan`), takes and
  returns pyarrow Tables and never turns a record into a Python object.
* :func:`read_delimited` / :class:`DelimitedDatasource` -- files of length-delimited records
  on any filesystem pyarrow supports, large files split across read tasks at record
  boundaries.
* :func:`transcode` -- the one-call path: plan shipped once; Ray tasks (a Transcode per
  worker process) or an actor pool sized for the cluster; dead letters and counts gathered
  from every worker.

Ray is imported lazily: ``import wirearrow.ray`` does not import ``ray`` until a function
that needs it runs. docs/ray.md is the guide (resources, the 2-CPU note, dead letters).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import math
import os
import posixpath
import sys
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from wirearrow._core.framing import compact
from wirearrow.cache import ParserCache, default_cache, resolve_profile, with_cache
from wirearrow.config import PlanConfig, load_plan
from wirearrow.delimited import FRAMINGS, split_framed
from wirearrow.errors import DecodeError
from wirearrow.plan.compiler import Column
from wirearrow.schema import Schema
from wirearrow.transcoder import DEAD_LETTER_SCHEMA, ON_ERROR, Transcoder

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle
    from ray.data import Dataset
    from ray.data.datasource import Datasource, ReadTask

    PlanLike = Transcoder | PlanConfig | str | os.PathLike[str] | bytes | Mapping[str, Any]

__all__ = [
    "DelimitedDatasource",
    "JobStats",
    "Ledger",
    "PoolSize",
    "Transcode",
    "TranscodeResult",
    "WorkerStats",
    "pool_size",
    "put_plan",
    "read_delimited",
    "transcode",
]

# Records per map_batches call of transcode(): large enough that Ray's per-call overhead
# (~1 ms: scheduling, ledger report, block metadata) is a few % of the decode, small enough
# that two actors share a 50k-record job.
DEFAULT_BATCH_SIZE = 16_384
# Read tasks: never smaller than this (a task costs ~10 ms to schedule), nor larger than
# the max, whatever parallelism Ray asks for. Blocks inside a task are at most BLOCK_BYTES.
MIN_TASK_BYTES = 8 * 1024 * 1024
MAX_TASK_BYTES = 256 * 1024 * 1024
BLOCK_BYTES = 16 * 1024 * 1024
# The indexing pass reads files in chunks of this size (sequential, one open per file).
INDEX_CHUNK_BYTES = 16 * 1024 * 1024

# transcode() turns Ray Data's per-operator resource reservation off on clusters this small.
SMALL_CLUSTER_CPUS = 4

# keep=: the record's index rides in an extra field of the root message, prefixed to
# each record's bytes (see _Keyed).
RECORD_FIELD = "wirearrow_record_index__"
MAX_FIELD_NUMBER = 536_870_911


def _ray() -> Any:
    """``import ray``, with an install hint (the import is lazy: see the module docstring)."""
    try:
        import ray
    except ImportError as err:  # pragma: no cover - ray is an optional dependency
        raise ImportError(
            "wirearrow.ray needs Ray Data: pip install 'wirearrow[ray]' (ray[data])"
        ) from err
    return ray


# ---- plans ------------------------------------------------------------------------------


def _is_object_ref(value: object) -> bool:
    # Checked by name so that a plain (non-Ray) call never imports ray.
    return type(value).__name__ == "ObjectRef" and type(value).__module__.startswith("ray")


def _spec(tc: Transcoder) -> dict[str, Any]:
    """The constructor arguments of a Transcoder (what it pickles), to derive a variant."""
    # Same package: the Transcoder keeps its spec in private attributes and has no public
    # "replace" yet; this is the one place that reads them.
    return {
        "schema": tc.schema,
        "columns": tc._columns,
        "on_error": tc._on_error,
        "validate": tc._options.validate,
        "timestamp_unit": tc._options.timestamp_unit,
        "max_depth": tc._options.max_depth,
        "cache": tc._cache if tc._cache is not default_cache() else None,
    }


def _build(spec: Mapping[str, Any]) -> Transcoder:
    kwargs = dict(spec)
    return Transcoder(kwargs.pop("schema"), kwargs.pop("columns"), **kwargs)


def _load(plan: object) -> Transcoder:
    """A Transcoder from anything a plan can be (no ObjectRef here)."""
    if isinstance(plan, Transcoder):
        return plan
    if isinstance(plan, PlanConfig):
        return plan.transcoder()
    if isinstance(plan, str | bytes | bytearray | os.PathLike | Mapping):
        return load_plan(plan).transcoder()  # type: ignore[arg-type]
    raise TypeError(
        "plan must be a wirearrow.Transcoder, a PlanConfig, a YAML path, YAML text, a "
        f"mapping, or an ObjectRef to one of those; not {type(plan).__name__}"
    )


def _policy(tc: Transcoder, on_error: str | None) -> Transcoder:
    """``tc`` with another error policy (compiled again), or ``tc`` itself."""
    if on_error is None or on_error == tc._on_error:
        return tc
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, not {on_error!r}")
    return _build({**_spec(tc), "on_error": on_error})


def put_plan(
    plan: PlanLike | ObjectRef, *, on_error: str | None = None, keep: bool = False
) -> ObjectRef[Transcoder]:
    """Compile ``plan`` here (errors show up now, not on a worker) and ``ray.put`` it.

    The object is small -- the schema's descriptor bytes and the column spec; every actor
    that resolves the ref compiles its own decoder tables once, in its ``__init__``. Pass
    the ref as ``Transcode``'s ``plan``. ``on_error`` overrides the plan's policy;
    ``keep=True`` prepares the plan for ``Transcode(keep=[...])`` so that actors do not
    derive (and compile) it themselves.
    """
    if _is_object_ref(plan):
        plan = _ray().get(plan)  # small; put again below, with any derivation applied
    tc = _policy(_load(plan), on_error)
    if keep and not _Keyed.is_keyed(tc):
        tc = _Keyed.derive(tc)
    return _ray().put(tc)


# ---- keep=: carrying input columns onto the rows ------------------------------------------


class _Keyed:
    """Rows -> the input record each came from, so that ``keep`` columns can follow.

    The Transcoder does not report which record a row came from (a record fans out into
    any number of rows). So the plan is derived once: the root message gets one extra
    ``fixed64`` field (the highest free field number) and the plan one extra column
    reading it; each batch is fed with every record *prefixed* by that field holding the
    record's position. A complete field in front of a record changes nothing about how
    the rest parses -- a bad record stays bad for the same reason, at the same path -- so
    only byte offsets in errors shift, by the prefix length, and are shifted back. (A
    suffix would not do: a record whose last field runs past its end would swallow it.)
    The cost is one copy of the batch's bytes (~0.5 ns/byte); without ``keep`` the input
    is decoded in place.
    """

    def __init__(self, tc: Transcoder) -> None:
        field_ = tc.schema.descriptor.fields_by_name[RECORD_FIELD]
        tag = _varint((field_.number << 3) | 1)  # wire type 1: fixed64
        self.tag = np.frombuffer(tag, dtype=np.uint8)
        self.width = len(tag) + 8

    @staticmethod
    def is_keyed(tc: Transcoder) -> bool:
        return RECORD_FIELD in tc.arrow_schema.names

    @staticmethod
    def derive(tc: Transcoder) -> Transcoder:
        """``tc``'s plan over the extended schema, with the record index as last column."""
        spec = _spec(tc)
        schema: Schema = spec["schema"]
        columns = spec["columns"]
        if columns is None:  # whole-message mode: the same columns, spelled out
            columns = [Column(f.name) for f in schema.descriptor.fields]
        return _build(
            {**spec, "schema": _extended(schema), "columns": [*columns, Column(RECORD_FIELD)]}
        )

    def unshift(self, err: DecodeError) -> DecodeError:
        """``err`` with the offset it has in the record as given (without the prefix)."""
        offset = max(err.offset - self.width, 0)
        return DecodeError(err.reason, index=err.index, offset=offset, path=err.path)

    def prefixed(self, values: pa.Array) -> pa.Array:
        """``values`` with the record-index field in front of every record (one copy)."""
        n = len(values)
        large = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
        _, off_buf, data_buf = values.buffers()
        offsets = np.frombuffer(off_buf, dtype=np.int64 if large else np.int32)
        offsets = offsets[values.offset : values.offset + n + 1].astype(np.int64)
        data = np.frombuffer(data_buf if data_buf is not None else b"", dtype=np.uint8)
        body = data[offsets[0] : offsets[-1]]
        k = self.width
        new_offsets = offsets - offsets[0] + k * np.arange(n + 1, dtype=np.int64)
        out = np.empty(int(new_offsets[-1]), dtype=np.uint8)
        head = np.empty((n, k), dtype=np.uint8)
        head[:, : len(self.tag)] = self.tag
        head[:, len(self.tag) :] = np.arange(n, dtype="<u8").view(np.uint8).reshape(n, 8)
        # Scatter the prefixes, then fill every other byte with the records, in order.
        where = (new_offsets[:-1, None] + np.arange(k)).ravel()
        body_mask = np.ones(len(out), dtype=bool)
        body_mask[where] = False
        out[where] = head.ravel()
        out[body_mask] = body
        validity = None
        if values.null_count:
            validity = values.is_valid().buffers()[1]
        large_out = new_offsets[-1] > np.iinfo(np.int32).max
        return pa.Array.from_buffers(
            pa.large_binary() if large_out else pa.binary(),
            n,
            [
                validity,
                pa.py_buffer(new_offsets if large_out else new_offsets.astype(np.int32)),
                pa.py_buffer(out),
            ],
        )


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _extended(schema: Schema) -> Schema:
    """``schema`` whose root message has one more field: ``fixed64 RECORD_FIELD``."""
    from google.protobuf import descriptor_pb2

    fds = descriptor_pb2.FileDescriptorSet.FromString(schema.file_descriptor_set)
    desc = schema.descriptor
    names = []
    d = desc
    while d is not None:
        names.insert(0, d.name)
        d = d.containing_type
    file_proto = next(f for f in fds.file if f.name == desc.file.name)
    messages = file_proto.message_type
    for name in names:
        message = next(m for m in messages if m.name == name)
        messages = message.nested_type
    taken = {f.number for f in message.field}
    ranges = [(r.start, r.end) for r in (*message.reserved_range, *message.extension_range)]
    ranges.append((19000, 20000))  # reserved for the protobuf implementation
    number = MAX_FIELD_NUMBER
    while number in taken or any(a <= number < b for a, b in ranges):
        number -= 1
    message.field.add(
        name=RECORD_FIELD,
        number=number,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_FIXED64,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    return Schema.from_descriptor_set(fds.SerializeToString(), desc.full_name)


# ---- the map_batches building block -------------------------------------------------------


@dataclass(frozen=True)
class WorkerStats:
    """What one :class:`Transcode` instance did -- one actor, or one worker process of a
    task-mode job; cumulative.

    ``worker``: the actor id, or a key of the worker process (task mode). ``compiles``:
    transcoders it compiled (1 when the plan came from :func:`put_plan`: the ref is
    resolved once in ``__init__``, never per batch). ``records_in == records_ok +
    records_failed``; ``dead_letters``: failed records delivered to the dead-letter sink
    (all of them with ``on_error="dead_letter"``).
    """

    worker: str
    node: str
    pid: int
    compiles: int
    batches: int = 0
    records_in: int = 0
    records_ok: int = 0
    records_failed: int = 0
    rows_out: int = 0
    bytes_in: int = 0
    dead_letters: int = 0
    init_seconds: float = 0.0
    transcode_seconds: float = 0.0


class Transcode:
    """A callable class for ``Dataset.map_batches``: a batch of records -> a batch of rows.

    ``plan``: a :class:`~wirearrow.Transcoder`, a :class:`~wirearrow.PlanConfig`, a YAML
    path, YAML text or mapping -- or, best, an ``ObjectRef`` to one from :func:`put_plan`:
    the plan then travels once through the object store and each actor compiles it once,
    here. ``column``: the binary column holding the records (``"value"``: the column of
    :func:`read_delimited` and of ``ray.data.read_kafka``).

    ``keep``: input columns to carry onto every row of the record they belong to (e.g.
    ``["partition", "offset"]`` of a Kafka topic); they come after the plan's columns.

    ``on_error`` overrides the plan's policy. With ``"dead_letter"`` the bad records go to
    ``dead_letters`` (a directory path or URI: one Parquet file per batch that has any)
    and/or to ``ledger`` (the collector of :func:`transcode`); with neither, construction
    fails rather than losing them. Dead letters are ``DEAD_LETTER_SCHEMA`` (``index`` is
    the position in the batch) plus ``source``: a struct of the record's other input
    columns (file and offset, or topic, partition and offset), to find it again.

    Use with ``batch_format="pyarrow"``; ``zero_copy_batch=True`` is safe (the input is
    only read). The batch's binary column is decoded as Arrow, in place.
    """

    def __init__(
        self,
        plan: PlanLike | ObjectRef,
        column: str = "value",
        *,
        keep: Sequence[str] = (),
        on_error: str | None = None,
        dead_letters: str | os.PathLike[str] | None = None,
        filesystem: pafs.FileSystem | None = None,
        ledger: Ledger | None = None,
        format: str = "binary",
        ignore_unknown_fields: bool = False,
    ) -> None:
        started = time.perf_counter()
        compiles = 0
        # format="json": the column holds protojson text (docs/json.md)
        self._format = {"format": format, "ignore_unknown_fields": ignore_unknown_fields}
        if format == "json" and keep:
            raise ValueError('keep= is not supported with format="json" yet')
        if _is_object_ref(plan):
            # Unpickling a Transcoder compiles it: this is the actor's one compile.
            plan = _ray().get(plan)
            compiles += isinstance(plan, Transcoder)
        if not isinstance(plan, Transcoder):
            compiles += 1
        tc = _load(plan)
        derived = _policy(tc, on_error)
        compiles += derived is not tc
        self._keep = tuple(keep)
        self._keyed: _Keyed | None = None
        if self._keep:
            if not _Keyed.is_keyed(derived):
                derived = _Keyed.derive(derived)
                compiles += 1
            self._keyed = _Keyed(derived)
            clash = set(self._keep) & set(derived.arrow_schema.names)
            if clash:
                raise ValueError(f"keep columns clash with the plan's output: {sorted(clash)}")
        elif _Keyed.is_keyed(derived):
            self._keyed = _Keyed(derived)  # a keyed plan without keep: drop the index column
        self._tc = derived
        self._column = column
        self._policy = derived._on_error
        self._ledger = ledger
        self._dead_dir: str | None = None
        self._fs: pafs.FileSystem | None = None
        if dead_letters is not None:
            self._fs, self._dead_dir = _filesystem(os.fspath(dead_letters), filesystem)
            self._fs.create_dir(self._dead_dir, recursive=True)
        if self._policy == "dead_letter" and self._dead_dir is None and ledger is None:
            raise ValueError(
                'on_error="dead_letter" needs somewhere to put them: dead_letters=<directory>, '
                "or use wirearrow.ray.transcode(), which collects them"
            )
        self._schema: pa.Schema = derived.arrow_schema
        if self._keyed is not None:
            self._schema = self._schema.remove(self._schema.get_field_index(RECORD_FIELD))
        self._seq = 0
        worker, node = _whereami()
        self._stats = WorkerStats(
            worker=worker,
            node=node,
            pid=os.getpid(),
            compiles=compiles,
            init_seconds=time.perf_counter() - started,
        )

    @property
    def stats(self) -> WorkerStats:
        return self._stats

    @property
    def arrow_schema(self) -> pa.Schema:
        """The schema of the rows (without ``keep`` columns, whose types come with the data)."""
        return self._schema

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        if not isinstance(batch, pa.Table):
            raise TypeError(
                f"Transcode takes pyarrow Tables (map_batches(..., batch_format='pyarrow')), "
                f"not {type(batch).__name__}"
            )
        values = _records_column(batch, self._column)
        before = self._tc.stats
        try:
            if self._keyed is None:
                rows = pa.Table.from_batches([self._tc.transcode(values, **self._format)])
            else:
                rows = self._transcode_keyed(batch, values)
        except DecodeError as err:
            if self._keyed is not None:
                err = self._keyed.unshift(err)
            _locate(err, batch, self._column)
            raise err from None
        after = self._tc.stats
        failed = after.records_failed - before.records_failed
        dead = None
        if failed and self._policy == "dead_letter":
            dead = self._dead_letters(batch, values)
        written = self._write_dead(dead) if dead is not None and self._dead_dir else None
        bytes_in = after.bytes_in - before.bytes_in
        if self._keyed is not None:  # the prefixes are not input
            bytes_in -= self._keyed.width * (len(values) - values.null_count)
        s = self._stats
        self._stats = dataclasses.replace(
            s,
            batches=s.batches + 1,
            records_in=s.records_in + after.records_in - before.records_in,
            records_ok=s.records_ok + after.records_ok - before.records_ok,
            records_failed=s.records_failed + failed,
            rows_out=s.rows_out + after.rows_out - before.rows_out,
            bytes_in=s.bytes_in + bytes_in,
            dead_letters=s.dead_letters + (dead.num_rows if dead is not None else 0),
            transcode_seconds=s.transcode_seconds + time.perf_counter() - started,
        )
        if self._ledger is not None:
            self._ledger.report(self._stats, dead if self._dead_dir is None else None, written)
        return rows

    def _transcode_keyed(self, batch: pa.Table, values: pa.Array) -> pa.Table:
        assert self._keyed is not None
        out = self._tc.transcode(self._keyed.prefixed(values))
        index = out.column(out.num_columns - 1)
        rows = pa.Table.from_batches([out]).drop_columns([RECORD_FIELD])
        for name in self._keep:
            rows = rows.append_column(batch.field(name), batch.column(name).take(index))
        return rows

    def _dead_letters(self, batch: pa.Table, values: pa.Array) -> pa.Table:
        """The dead letters of this batch, with the raw input bytes and the ``source`` row."""
        dead = self._tc.dead_letters()
        index = dead.column("index")
        if self._keyed is not None:
            # The transcoder saw prefixed records: give back the input's bytes and offsets.
            offset = np.maximum(dead.column("offset").to_numpy() - self._keyed.width, 0)
            dead = dead.set_column(1, DEAD_LETTER_SCHEMA.field("offset"), pa.array(offset))
            raw = values.take(index).cast(pa.binary())
            dead = dead.set_column(4, DEAD_LETTER_SCHEMA.field("raw"), raw)
        others = [name for name in batch.column_names if name != self._column]
        if others:
            source = batch.select(others).take(index)
            struct = pa.StructArray.from_arrays(
                [c.combine_chunks() for c in source.columns], fields=list(source.schema)
            )
            dead = dead.append_column("source", struct)
        return dead

    def _write_dead(self, dead: pa.Table) -> str:
        assert self._fs is not None and self._dead_dir is not None
        self._seq += 1
        # Unique without coordination: actor id (or pid) + a per-actor sequence number.
        name = f"{self._stats.worker}-{self._seq:06d}.parquet"
        path = posixpath.join(self._dead_dir, name)
        pq.write_table(dead, path, filesystem=self._fs)
        return path


def _records_column(batch: pa.Table, column: str) -> pa.Array:
    if column not in batch.column_names:
        raise KeyError(f"no column {column!r} in the batch (columns: {batch.column_names})")
    chunked = batch.column(column)
    t = chunked.type
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            chunked = chunked.cast(
                pa.large_binary() if pa.types.is_large_string(t) else pa.binary()
            )
        else:
            raise TypeError(f"column {column!r} must hold binary records, not {t}")
    # One chunk: a zero-copy view; several (a batch spanning blocks): one copy.
    if chunked.num_chunks == 1:
        return chunked.chunk(0)
    if chunked.num_chunks == 0:
        return pa.array([], chunked.type)
    return chunked.combine_chunks()


def _locate(err: DecodeError, batch: pa.Table, column: str) -> None:
    """Name the input row of a record that made the job fail (on_error="raise")."""
    others = [name for name in batch.column_names if name != column]
    if others and hasattr(err, "add_note") and 0 <= err.index < batch.num_rows:
        row = batch.select(others).slice(err.index, 1).to_pylist()[0]
        err.add_note(f"input row: {row}")


def _whereami() -> tuple[str, str]:
    """(a key for this Transcode: its actor id, else pid + a nonce; the node id), without
    starting Ray in a plain process."""
    key = f"pid{os.getpid()}-{uuid.uuid4().hex[:8]}"
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ctx = ray.get_runtime_context()
        actor = ctx.get_actor_id()
        return (actor[:16] if actor else key), ctx.get_node_id()[:12]
    return key, "local"


# ---- the ledger: counts and dead letters of every actor ------------------------------------


@dataclass(frozen=True)
class JobStats:
    """The counts of one :func:`transcode` job, summed over its actors, after execution.

    ``records_in == records_ok + records_failed`` and, with ``on_error="dead_letter"``,
    ``dead_letters == records_failed``: every input record is in the rows or in the dead
    letters. ``workers``: actors (actor mode) or worker processes (task mode) that
    transcoded; ``per_worker`` holds each one's :class:`WorkerStats`.
    """

    records_in: int
    records_ok: int
    records_failed: int
    rows_out: int
    bytes_in: int
    dead_letters: int
    batches: int
    workers: int
    compiles: int
    transcode_seconds: float
    per_worker: tuple[WorkerStats, ...] = field(repr=False, default=())
    dead_letter_files: tuple[str, ...] = field(repr=False, default=())

    @classmethod
    def of(cls, workers: Iterable[WorkerStats], files: Iterable[str] = ()) -> JobStats:
        per = tuple(sorted(workers, key=lambda w: w.worker))
        total = {
            name: sum(getattr(a, name) for a in per)
            for name in (
                "records_in",
                "records_ok",
                "records_failed",
                "rows_out",
                "bytes_in",
                "dead_letters",
                "batches",
                "compiles",
                "transcode_seconds",
            )
        }
        return cls(**total, workers=len(per), per_worker=per, dead_letter_files=tuple(files))

    def __str__(self) -> str:
        return (
            f"records in {self.records_in:,}, ok {self.records_ok:,}, failed "
            f"{self.records_failed:,} ({self.dead_letters:,} dead letters); rows out "
            f"{self.rows_out:,}; {self.batches:,} batches on {self.workers} worker(s), "
            f"{self.transcode_seconds:.2f} s transcoding"
        )


class Ledger:
    """Where :class:`Transcode` reports: its :class:`WorkerStats` after every batch, and the
    batch's dead letters (or the file they were written to). :func:`transcode` passes a
    handle to its job in the session's ledger actor; implement ``report`` to collect them
    elsewhere."""

    def report(self, stats: WorkerStats, dead: pa.Table | None, file: str | None) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class _JobLedger(Ledger):
    """One job's entry in the session's ledger actor (picklable: it travels to the actors)."""

    actor: ActorHandle  # of _LedgerActor
    job: str

    def report(self, stats: WorkerStats, dead: pa.Table | None, file: str | None) -> None:
        # Synchronous on purpose: a report still in flight when Ray tears the actor pool
        # down would be lost, and the counts must add up at the end of the job. It costs
        # one round trip per batch (~0.5 ms), a few % of a 16k-record batch.
        _ray().get(self.actor.report.remote(self.job, stats, dead, file))


class _LedgerActor:
    """Counts and dead letters of every transcode() job of this driver (a Ray actor).

    One per Ray session, created by the first job and found by name by the next ones: an
    actor is a worker process, and starting one costs ~0.5-1 s, which a per-job ledger
    would add to every job. num_cpus=0: it must never wait for a CPU. Snapshots are
    cumulative per actor, so the latest wins and nothing is counted twice. Dead letters
    sent here are ``ray.put`` by the ledger, which then owns them: they outlive the
    Transcode actors (torn down when the job ends) and spill to disk like any object.
    A job's entry is dropped when its TranscodeResult is garbage collected.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, tuple[dict[str, WorkerStats], list[Any], list[str]]] = {}

    def _job(self, job: str) -> tuple[dict[str, WorkerStats], list[Any], list[str]]:
        return self._jobs.setdefault(job, ({}, [], []))

    def report(self, job: str, stats: WorkerStats, dead: pa.Table | None, file: str | None) -> None:
        workers, refs, files = self._job(job)
        workers[stats.worker] = stats
        if dead is not None and dead.num_rows:
            refs.append(_ray().put(dead))
        if file is not None:
            files.append(file)

    def summary(self, job: str) -> JobStats:
        workers, _, files = self._job(job)
        return JobStats.of(workers.values(), files)

    def dead_letter_refs(self, job: str) -> list[Any]:
        return list(self._job(job)[1])

    def forget(self, job: str) -> None:
        self._jobs.pop(job, None)


_LEDGER_NAME = "wirearrow.ray.ledger"


# This driver's handle on its session's ledger actor, by (Ray job, driver node): a named
# actor that is not detached dies with its last handle, so one is kept here for the
# session; a new session (ray.shutdown(), ray.init()) has a new node id and gets its own.
_LEDGERS: dict[tuple[str, str], Any] = {}


def _job_ledger() -> _JobLedger:
    """A new job in this session's ledger actor (created on first use)."""
    ctx = _ray().get_runtime_context()
    key = (ctx.get_job_id(), ctx.get_node_id())
    actor = _LEDGERS.get(key)
    if actor is None:
        _LEDGERS.clear()  # handles of an earlier session are dead anyway
        actor = _ledger_class().options(name=_LEDGER_NAME, get_if_exists=True).remote()
        _LEDGERS[key] = actor
    return _JobLedger(actor, uuid.uuid4().hex)


@functools.cache
def _ledger_class() -> Any:
    return _ray().remote(num_cpus=0)(_LedgerActor)


def _forget(ledger: _JobLedger) -> None:
    with contextlib.suppress(Exception):  # Ray already shut down: nothing left to free
        ledger.actor.forget.remote(ledger.job)


# ---- resources ---------------------------------------------------------------------------


def _cluster_cpus() -> float:
    ray = _ray()
    if not ray.is_initialized():
        ray.init()
    return float(ray.cluster_resources().get("CPU", 1.0))


@dataclass(frozen=True)
class PoolSize:
    """The Transcode actor pool: ``min``..``max`` actors of ``num_cpus`` logical CPUs each."""

    min: int
    max: int
    num_cpus: float

    def compute(self) -> Any:
        """The ``ray.data.ActorPoolStrategy`` of this pool."""
        from ray.data import ActorPoolStrategy

        if self.min == self.max:
            return ActorPoolStrategy(size=self.min)
        return ActorPoolStrategy(min_size=self.min, max_size=self.max)


def pool_size(
    cpus: float | None = None,
    concurrency: int | tuple[int, int] | None = None,
    num_cpus: float | None = None,
) -> PoolSize:
    """The actor pool :func:`transcode` uses on a cluster of ``cpus`` logical CPUs.

    The rule: the pool may hold at most ``cpus - 1`` CPUs, so that one CPU is always left
    to the read and write tasks that feed and drain it. A pool holding every CPU starves
    them and the job stops making progress (measured: a fixed pool of 2 one-CPU actors on
    2 CPUs hangs) -- the 2-core deadlock.

    * default: 1 to ``cpus - 1`` actors (at least 1) of one CPU each, autoscaling. On a
      2-CPU laptop that is one actor, which measured fastest there: a second one only
      competes with reading and writing for the same two cores (docs/ray.md).
    * ``concurrency`` (``n`` or ``(min, max)``) without ``num_cpus``: each actor gets
      ``(cpus - 1) / max`` CPUs when one CPU each would not fit (e.g. 2 actors on 2 CPUs:
      0.5 each).
    * on a single CPU, actors ask for no CPU at all (they share it with the tasks).
    * ``num_cpus`` given: used as is (your call; a pool that can take every CPU may hang).
    """
    if cpus is None:
        cpus = _cluster_cpus()
    spare = max(float(cpus) - 1.0, 0.0)  # CPUs the pool may hold
    if concurrency is None:
        low, high = 1, max(1, int(spare))
    elif isinstance(concurrency, int):
        low = high = concurrency
    else:
        low, high = concurrency
    if not 1 <= low <= high:
        raise ValueError(
            f"concurrency must be n >= 1 or (min, max) with 1 <= min <= max: {concurrency!r}"
        )
    if num_cpus is None:
        num_cpus = min(1.0, spare / high)
    return PoolSize(low, high, num_cpus)


# ---- the one-call path -------------------------------------------------------------------


# ---- task mode ---------------------------------------------------------------------------

# The Transcode of each recent job in this worker process (task mode): a worker process runs
# many tasks, one after the other, so each builds its transcoder once per job, on its first
# batch. A few jobs are kept (jobs may interleave on a worker); older ones are dropped.
_TASK_TRANSCODERS: OrderedDict[str, Transcode] = OrderedDict()
_TASK_TRANSCODERS_KEPT = 8


def _transcode_task(batch: pa.Table, *, job: str, **transcode_args: Any) -> pa.Table:
    """``map_batches`` function of ``transcode(compute="tasks")``."""
    fn = _TASK_TRANSCODERS.get(job)
    if fn is None:
        fn = _TASK_TRANSCODERS[job] = Transcode(**transcode_args)
        while len(_TASK_TRANSCODERS) > _TASK_TRANSCODERS_KEPT:
            _TASK_TRANSCODERS.popitem(last=False)
    else:
        _TASK_TRANSCODERS.move_to_end(job)
    return fn(batch)


# ---- the one-call path -------------------------------------------------------------------


class TranscodeResult:
    """What :func:`transcode` returns: the rows, the dead letters and the job's counts.

    ``rows`` is a lazy ``ray.data.Dataset``; any other attribute is looked up on it, so
    ``result.write_parquet(path)``, ``result.take(5)`` or ``result.schema()`` work as on a
    Dataset. Executing ``rows`` runs the job; afterwards :meth:`stats` and
    :attr:`dead_letters` hold what every worker counted and rejected. ``compute`` is
    "tasks" or "actors"; ``pool`` the actor pool (None in task mode).

    Each execution of ``rows`` runs the whole job again and adds to the counts: consume it
    once (write it), or call :meth:`materialize` first.
    """

    def __init__(
        self,
        rows: Dataset,
        ledger: _JobLedger,
        dead_dir: str | None,
        fs: Any | None,
        compute: str,
        pool: PoolSize | None,
    ) -> None:
        self.rows = rows
        self.compute = compute
        self.pool = pool
        self._ledger = ledger
        # Drop the job's counts and dead letters from the ledger with this result (not at
        # interpreter exit: Ray may be gone by then).
        weakref.finalize(self, _forget, ledger).atexit = False
        self._dead_dir = dead_dir
        self._fs = fs

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("rows", "compute", "pool"):
            raise AttributeError(name)
        return getattr(self.rows, name)

    def __repr__(self) -> str:
        return f"TranscodeResult(compute={self.compute!r}, rows={self.rows!r})"

    def stats(self) -> JobStats:
        """The counts so far: after the rows were consumed, those of the whole job."""
        return _ray().get(self._ledger.actor.summary.remote(self._ledger.job))

    def materialize(self) -> TranscodeResult:
        """Run the job once and keep the rows in the object store; returns ``self``."""
        self.rows = self.rows.materialize()
        return self

    @property
    def dead_letters(self) -> Dataset:
        """The dead letters of the job, as a Dataset (read after the rows were consumed).

        ``DEAD_LETTER_SCHEMA`` plus ``source`` (the record's other input columns). With
        ``dead_letters=<path>`` they are read back from the Parquet files written there.
        """
        ray = _ray()
        if self._dead_dir is not None:
            files = self.stats().dead_letter_files
            if files:
                return ray.data.read_parquet(list(files), filesystem=self._fs)
        else:
            refs = ray.get(self._ledger.actor.dead_letter_refs.remote(self._ledger.job))
            if refs:
                return ray.data.from_arrow_refs(refs)
        return ray.data.from_arrow(DEAD_LETTER_SCHEMA.empty_table())


def transcode(
    ds: Dataset,
    plan: PlanLike | ObjectRef,
    column: str = "value",
    *,
    keep: Sequence[str] = (),
    on_error: str | None = None,
    dead_letters: str | os.PathLike[str] | None = None,
    filesystem: pafs.FileSystem | None = None,
    compute: str = "tasks",
    concurrency: int | tuple[int, int] | None = None,
    num_cpus: float | None = None,
    batch_size: int | None = DEFAULT_BATCH_SIZE,
    resource_reservation: bool | None = None,
    profile: str | os.PathLike[str] | ParserCache | None = None,
    format: str = "binary",
    ignore_unknown_fields: bool = False,
    **map_batches_args: Any,
) -> TranscodeResult:
    """Transcode the records in ``ds[column]`` with ``plan``: the one-call path.

    ``format="json"``: the column holds protojson text (``ignore_unknown_fields`` as in
    ``json_format.Parse``); see docs/json.md.

    The plan is compiled here (plan errors are raised now) and shipped once through the
    object store; :class:`Transcode` decodes batches of ``batch_size`` records. ``keep``:
    input columns repeated on each row of their record. ``on_error`` overrides the plan's
    policy; with ``"dead_letter"`` the bad records come back as
    :attr:`TranscodeResult.dead_letters`, and are also written as Parquet under
    ``dead_letters`` when given (a directory or URI; ``filesystem`` overrides the one
    inferred). Other keyword arguments go to ``map_batches``.

    ``compute``:

    * ``"tasks"`` (default): Ray tasks, as many as Ray schedules (``concurrency=n`` caps
      them, ``num_cpus`` per task, default 1). Each worker process builds its Transcode
      once per job, on its first batch, and Ray fuses the step with the write that
      follows (no hop through the object store, no process to start): measured 2.2x faster
      than an actor on 2 CPUs (docs/ray.md). Tasks end, so they cannot starve the reads.
    * ``"actors"``: an autoscaling pool of Transcode actors sized by :func:`pool_size`
      (``concurrency``: ``n`` or ``(min, max)``; ``num_cpus`` each) that never takes every
      CPU (the 2-core deadlock): the transcoding in its own bounded set of long-lived
      processes, apart from the task pool.

    ``resource_reservation``: Ray Data's ``op_resource_reservation_enabled`` for this job
    (set on ``ds.context``, which the datasets derived from ``ds`` share; the global
    ``DataContext`` is untouched). None: turned off on a cluster of at most
    SMALL_CLUSTER_CPUS CPUs, left alone on larger ones. On 2 CPUs the reservation runs the
    map tasks one at a time, and holds an actor pool's writes back until the actors are
    done (docs/ray.md measures both). Nothing can starve without it: tasks end, and the
    actor pool leaves a CPU to the tasks.

    ``profile``: a saved profile (path, read here) or a :class:`~wirearrow.ParserCache`:
    the plan is compiled on that cache, which travels with it (one instance per worker
    process) and profiles the traffic; every process merges its profile with the others'
    through a named actor at each retune (``ParserCache.share_with_ray``), so new and
    running workers start from the job-wide profile. ``ParserCache.pull_from_ray`` on the
    driver fetches the merged profile (to ``save`` it for the next job). See docs/cache.md.

    Returns a :class:`TranscodeResult`: lazy rows (a Dataset), then dead letters and counts.
    """
    ray = _ray()
    if compute not in ("tasks", "actors"):
        raise ValueError(f'compute must be "tasks" or "actors", not {compute!r}')
    if not ray.is_initialized():
        ray.init()
    if profile is not None:
        cache = resolve_profile(profile)
        if cache.hub is None:
            cache.share_with_ray()
        if _is_object_ref(plan):
            plan = ray.get(plan)
        plan = with_cache(_load(plan), cache)
    ref = put_plan(plan, on_error=on_error, keep=bool(keep))
    ledger = _job_ledger()
    fs = dead_dir = None
    if dead_letters is not None:
        fs, dead_dir = _filesystem(os.fspath(dead_letters), filesystem)
    cpus = _cluster_cpus()
    if resource_reservation is None and cpus <= SMALL_CLUSTER_CPUS:
        resource_reservation = False
    if resource_reservation is not None:
        ds.context.op_resource_reservation_enabled = resource_reservation
    transcode_args = {
        "plan": ref,
        "column": column,
        "keep": tuple(keep),
        "on_error": None,  # already applied by put_plan
        "dead_letters": dead_dir,
        "filesystem": fs,
        "ledger": ledger,
        "format": format,
        "ignore_unknown_fields": ignore_unknown_fields,
    }
    common = {"batch_format": "pyarrow", "zero_copy_batch": True, "batch_size": batch_size}
    pool = None
    if compute == "tasks":
        if isinstance(concurrency, tuple):
            raise ValueError('concurrency=(min, max) is for compute="actors"; tasks take n')
        if concurrency is not None:
            map_batches_args.setdefault("compute", ray.data.TaskPoolStrategy(size=concurrency))
        if num_cpus is not None:
            map_batches_args["num_cpus"] = num_cpus
        rows = ds.map_batches(
            _transcode_task,
            fn_kwargs={"job": ledger.job, **transcode_args},
            **common,
            **map_batches_args,
        )
    else:
        pool = pool_size(cpus, concurrency, num_cpus)
        rows = ds.map_batches(
            Transcode,
            fn_constructor_kwargs=transcode_args,
            compute=map_batches_args.pop("compute", None) or pool.compute(),
            num_cpus=pool.num_cpus,
            **common,
            **map_batches_args,
        )
    return TranscodeResult(rows, ledger, dead_dir, fs, compute, pool)


# ---- reading files of length-delimited records ---------------------------------------------


def _filesystem(path: str, filesystem: Any | None = None) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path on it) of a local path or URI (s3://, gs://, file://...).

    ``filesystem``: a pyarrow FileSystem, or an fsspec one (wrapped), for paths without a
    scheme on it.
    """
    if filesystem is not None:
        if not isinstance(filesystem, pafs.FileSystem):
            filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
        return filesystem, path
    if "://" not in path:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))
    return pafs.FileSystem.from_uri(path)


_GLOB = ("*", "?", "[")


def _expand(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], filesystem: Any):
    """[(filesystem, path, size)] of the files named by paths, directories and globs.

    Directories are listed recursively, skipping hidden and underscore files (``_SUCCESS``,
    ``.crc``), as Ray's file readers do; a glob matches within its directory tree.
    """
    items = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    if not items:
        raise ValueError("no paths given")
    found: list[tuple[pafs.FileSystem, str, int]] = []
    for item in items:
        fs, path = _filesystem(os.fspath(item), filesystem)
        if any(ch in path for ch in _GLOB):
            cut = min(path.index(ch) for ch in _GLOB if ch in path)
            base = path[:cut].rsplit("/", 1)[0] or "/"
            infos = fs.get_file_info(pafs.FileSelector(base, recursive=True))
            matched = [
                i for i in infos if i.type == pafs.FileType.File and fnmatch.fnmatch(i.path, path)
            ]
        else:
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.NotFound:
                raise FileNotFoundError(path)
            if info.type == pafs.FileType.Directory:
                infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
                matched = [
                    i
                    for i in infos
                    if i.type == pafs.FileType.File
                    and not any(
                        part.startswith((".", "_"))
                        for part in i.path[len(path) :].strip("/").split("/")
                    )
                ]
            else:
                matched = [info]
        found.extend((fs, i.path, int(i.size or 0)) for i in sorted(matched, key=lambda i: i.path))
    if not found:
        raise FileNotFoundError(f"no files match {paths!r}")
    return found


@dataclass(frozen=True)
class _Piece:
    """Whole records of one file: bytes [start, end), ``records`` of them (None: not counted)."""

    path: str
    start: int
    end: int
    records: int | None


def _index(fs: pafs.FileSystem, path: str, size: int, framing: str, task_bytes: int):
    """Split a file into pieces of about ``task_bytes``, cut at record boundaries.

    One sequential pass over the file (chunks of INDEX_CHUNK_BYTES through the same C
    splitter the readers use, so ~memory speed once the bytes are in): a length-delimited
    stream has no sync marker, so a reader starting mid-file could not find the next
    record by itself. Only the cut points are kept, never the records.
    """
    pieces: list[_Piece] = []
    first_record = 0  # index of the first record of the current piece
    piece_start = 0
    seen = 0  # records fully read so far
    base = 0  # file offset of buf[0]
    carry = b""
    with fs.open_input_stream(path) as f:
        while True:
            chunk = f.read(INDEX_CHUNK_BYTES)
            buf = carry + chunk if carry else chunk
            if not buf:
                break
            _, ends, consumed = split_framed(buf, framing)
            frame_ends = base + ends  # file offset just past each whole record
            while True:
                k = int(np.searchsorted(frame_ends, piece_start + task_bytes, side="left"))
                if k >= len(frame_ends):
                    break
                cut = int(frame_ends[k])
                count = seen + k + 1 - first_record
                pieces.append(_Piece(path, piece_start, cut, count))
                piece_start, first_record = cut, seen + k + 1
            seen += len(ends)
            base += consumed
            carry = bytes(memoryview(buf)[consumed:])
            if not chunk:
                if carry:
                    raise ValueError(
                        f"{path}: truncated {framing} stream: the record at byte {base} runs "
                        f"past the end ({len(carry)} bytes left)"
                    )
                break
    if base > piece_start or not pieces:
        pieces.append(_Piece(path, piece_start, base, seen - first_record))
    return pieces


def _read_pieces(
    fs: pafs.FileSystem, pieces: Sequence[_Piece], framing: str, include_location: bool
) -> Iterator[pa.Table]:
    """A read task: the records of its pieces, as tables of at most ~BLOCK_BYTES."""
    for piece in pieces:
        with fs.open_input_file(piece.path) as f:
            end = piece.end
            pos = piece.start
            want = BLOCK_BYTES
            while pos < end:
                n = min(want, end - pos)
                buf = f.read_at(n, pos)
                view = memoryview(buf).cast("B")
                starts, ends, consumed = split_framed(view, framing)
                if consumed == 0:
                    if pos + n >= end:
                        raise ValueError(
                            f"{piece.path}: truncated {framing} stream: the record at byte "
                            f"{pos} runs past the end ({end - pos} bytes left)"
                        )
                    want *= 2  # one record larger than a block: read more at once
                    continue
                yield _block(view, starts, ends, piece.path, pos, include_location)
                pos += consumed
                want = BLOCK_BYTES


def _block(
    view: memoryview,
    starts: np.ndarray,
    ends: np.ndarray,
    path: str,
    pos: int,
    include_location: bool,
) -> pa.Table:
    offsets, values, large = compact(view, starts, ends)  # one copy, prefixes dropped
    n = len(starts)
    array = pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(),
        n,
        [None, pa.py_buffer(offsets), pa.py_buffer(values)],
    )
    if not include_location:
        return pa.table({"value": array})
    frame_starts = np.empty(n, dtype=np.int64)
    if n:
        frame_starts[0] = 0
        frame_starts[1:] = ends[:-1]
    return pa.table(
        {
            "value": array,
            "file": pa.array(np.full(n, path, dtype=object), pa.string()),
            "offset": pa.array(frame_starts + pos),
        }
    )


@functools.cache
def _datasource_class() -> type:
    """DelimitedDatasource, defined on first use so that importing this module needs no Ray."""
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class DelimitedDatasource(Datasource):
        """Files of length-delimited protobuf records -> blocks with a ``value`` column.

        ``framing``: "varint" (protobuf's writeDelimitedTo), "u32le" or "u32be".
        ``include_location`` adds ``file`` (its path) and ``offset`` (byte offset of the
        record's length prefix) columns, which dead letters then carry in ``source``.
        Files larger than a read task's share are split at record boundaries found by
        one indexing pass (at planning time, files read in parallel threads).
        ``bytes_per_task``: the share, default total / Ray's parallelism, clamped to
        [MIN_TASK_BYTES, MAX_TASK_BYTES]. Small files are grouped into one task.
        """

        def __init__(
            self,
            paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
            framing: str = "varint",
            *,
            filesystem: Any | None = None,
            include_location: bool = False,
            bytes_per_task: int | None = None,
        ) -> None:
            super().__init__()
            if framing not in FRAMINGS:
                raise ValueError(f"framing must be one of {sorted(FRAMINGS)}, not {framing!r}")
            self._files = _expand(paths, filesystem)
            self._total = sum(size for _, _, size in self._files)
            self._framing = framing
            self._include_location = include_location
            self._bytes_per_task = bytes_per_task
            self._plans: dict[int, list[list[tuple[pafs.FileSystem, _Piece]]]] = {}

        def get_name(self) -> str:
            return f"ReadDelimited({self._framing})"

        def estimate_inmemory_data_size(self) -> int | None:
            return self._total

        def schema(self) -> pa.Schema:
            fields = [pa.field("value", pa.binary())]
            if self._include_location:
                fields += [pa.field("file", pa.string()), pa.field("offset", pa.int64())]
            return pa.schema(fields)

        def get_read_tasks(
            self,
            parallelism: int,
            per_task_row_limit: int | None = None,
            data_context: Any = None,
        ) -> list[ReadTask]:
            share = self.default_share
            if self._bytes_per_task is None and parallelism != len(self._plan(share)):
                # Asked for another number of tasks (override_num_blocks=): honour it,
                # within the clamp.
                share = math.ceil(self._total / max(parallelism, 1))
                share = min(max(share, MIN_TASK_BYTES), MAX_TASK_BYTES)
            return [self._task(group, per_task_row_limit) for group in self._plan(share)]

        @property
        def default_share(self) -> int:
            """Bytes per read task unless told: ``bytes_per_task``, or the total over 4
            tasks per CPU of the cluster (reading stays ahead of the actors without
            tiny tasks), clamped to [MIN_TASK_BYTES, MAX_TASK_BYTES]."""
            if self._bytes_per_task is not None:
                return max(int(self._bytes_per_task), 1)
            cpus = 1.0
            ray = _ray()
            if ray.is_initialized():
                cpus = ray.cluster_resources().get("CPU", 1.0)
            share = math.ceil(self._total / max(4 * cpus, 1))
            return min(max(share, MIN_TASK_BYTES), MAX_TASK_BYTES)

        def _plan(self, share: int) -> list[list[tuple[pafs.FileSystem, _Piece]]]:
            """The read tasks for ``share`` bytes each (cached: Ray asks more than once,
            and indexing reads the large files)."""
            groups = self._plans.get(share)
            if groups is not None:
                return groups
            groups = []
            group: list[tuple[pafs.FileSystem, _Piece]] = []
            group_bytes = 0
            # Pack pieces (split parts of large files, small files) into tasks of ~share.
            for fs, piece in self._pieces(share):
                size = piece.end - piece.start
                if group and (group_bytes + size > share or not group[0][0].equals(fs)):
                    groups.append(group)
                    group, group_bytes = [], 0
                group.append((fs, piece))
                group_bytes += size
            if group:
                groups.append(group)
            self._plans[share] = groups
            return groups

        def _pieces(self, share: int) -> list[tuple[pafs.FileSystem, _Piece]]:
            from concurrent.futures import ThreadPoolExecutor

            def plan(item: tuple[pafs.FileSystem, str, int]) -> list[_Piece]:
                fs, path, size = item
                if size <= share:
                    return [_Piece(path, 0, size, None)]
                return _index(fs, path, size, self._framing, share)

            big = sum(size > share for _, _, size in self._files)
            with ThreadPoolExecutor(max_workers=max(1, min(8, big))) as pool:
                planned = list(pool.map(plan, self._files))
            return [
                (fs, piece)
                for (fs, _, _), file_pieces in zip(self._files, planned, strict=True)
                for piece in file_pieces
            ]

        def _task(
            self, group: list[tuple[pafs.FileSystem, _Piece]], per_task_row_limit: int | None
        ) -> ReadTask:
            fs = group[0][0]
            pieces = [piece for _, piece in group]
            counts = [p.records for p in pieces]
            size = sum(p.end - p.start for p in pieces)
            metadata = BlockMetadata(
                num_rows=None if None in counts else sum(counts),  # type: ignore[arg-type]
                size_bytes=size,
                exec_stats=None,
                input_files=tuple(dict.fromkeys(p.path for p in pieces)),
            )
            read = functools.partial(
                _read_pieces, fs, pieces, self._framing, self._include_location
            )
            return ReadTask(
                read, metadata, schema=self.schema(), per_task_row_limit=per_task_row_limit
            )

    DelimitedDatasource.__module__ = __name__
    DelimitedDatasource.__qualname__ = "DelimitedDatasource"
    return DelimitedDatasource


def __getattr__(name: str) -> Any:
    # PEP 562: `wirearrow.ray.DelimitedDatasource` builds the class (importing Ray) on first
    # access; pickle finds it by this name too, so read tasks unpickle on any worker.
    if name == "DelimitedDatasource":
        return _datasource_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    DelimitedDatasource = Datasource


def read_delimited(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    framing: str = "varint",
    *,
    filesystem: Any | None = None,
    include_location: bool = False,
    bytes_per_task: int | None = None,
    **read_args: Any,
) -> Dataset:
    """A Dataset of the records in files of length-delimited records: column ``value``.

    ``paths``: files, directories (recursive) or globs, local or any URI pyarrow supports
    (``s3://``, ``gs://``, ``hdfs://``, ``file://``); ``filesystem``: a pyarrow or fsspec
    filesystem for paths without a scheme. ``framing``: "varint" (protobuf's
    writeDelimitedTo), "u32le" or "u32be". ``include_location`` adds ``file`` and
    ``offset`` columns. Large files are split across read tasks at record boundaries
    (``bytes_per_task``, see :class:`DelimitedDatasource`). Other keyword arguments go to
    ``ray.data.read_datasource`` (``override_num_blocks``, ``num_cpus``, ...).

    A file that ends inside a record raises ValueError naming the file and byte offset.
    """
    ray = _ray()
    if not ray.is_initialized():
        ray.init()  # the default share depends on the cluster's CPUs
    source = _datasource_class()(
        paths,
        framing,
        filesystem=filesystem,
        include_location=include_location,
        bytes_per_task=bytes_per_task,
    )
    if "override_num_blocks" not in read_args and "parallelism" not in read_args:
        # Ray would otherwise aim at ~1 MiB blocks (200 per dataset) and slice each task's
        # output into many small blocks: measured 2x slower reads here than one block per
        # ~8-50 MiB task. Planning now also indexes large files, once (cached).
        read_args["override_num_blocks"] = len(source._plan(source.default_share))
    return ray.data.read_datasource(source, **read_args)
