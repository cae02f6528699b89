"""Transcode in Ray Data: the map_batches building block and the one-call path."""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import os
import posixpath
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from wirearrow.cache import ParserCache, resolve_profile
from wirearrow.config import PlanConfig, load_plan
from wirearrow.dead_letters import DEAD_LETTER_SCHEMA
from wirearrow.errors import DecodeError
from wirearrow.options import ON_ERROR
from wirearrow.spec import TranscodeSpec
from wirearrow.transcoder import Transcoder

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.data import Dataset

    PlanLike = Transcoder | PlanConfig | str | os.PathLike[str] | bytes | Mapping[str, Any]
from wirearrow.ray.datasource import READ_ERROR, filesystem_of
from wirearrow.ray.ledger import (
    BatchResult,
    JobLedger,
    JobStats,
    Ledger,
    WorkerStats,
    forget_job,
    open_job_ledger,
)
from wirearrow.ray.runtime import cluster_cpus, is_object_ref, ray_module, whereami

# Records per map_batches call of transcode(): large enough that Ray's per-call overhead
# (~1 ms: scheduling, ledger report, block metadata) is a few % of the decode, small enough
# that two actors share a 50k-record job.
DEFAULT_BATCH_SIZE = 16_384

# transcode() turns Ray Data's per-operator resource reservation off on clusters this small.
SMALL_CLUSTER_CPUS = 4


# ---- plans ------------------------------------------------------------------------------

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
    if on_error is None:
        return tc
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, not {on_error!r}")
    return tc.replace(on_error=on_error)


def put_plan(plan: PlanLike | ObjectRef, *, on_error: str | None = None) -> ObjectRef[Transcoder]:
    """Compile ``plan`` here (errors show up now, not on a worker) and ``ray.put`` it.

    The object is small -- the schema's descriptor bytes and the column spec; every actor
    that resolves the ref compiles its own decoder tables once, in its ``__init__``. Pass
    the ref as ``Transcode``'s ``plan``. ``on_error`` overrides the plan's policy.
    """
    if is_object_ref(plan):
        plan = ray_module().get(plan)  # small; put again below, with any derivation applied
    return ray_module().put(_policy(_load(plan), on_error))


# ---- the map_batches building block -------------------------------------------------------

class Transcode:
    """A callable class for ``Dataset.map_batches``: a batch of records -> a batch of rows.

    ``plan``: a :class:`~wirearrow.Transcoder`, a :class:`~wirearrow.PlanConfig`, a YAML
    path, YAML text or mapping -- or, best, an ``ObjectRef`` to one from :func:`put_plan`:
    the plan then travels once through the object store and each actor compiles it once,
    here. ``column``: the binary column holding the records (``"value"``: the column of
    :func:`read_delimited` and of ``ray.data.read_kafka``).

    ``keep``: input columns to carry onto every row of the record they belong to (e.g.
    ``["partition", "offset"]`` of a Kafka topic); they come after the plan's columns.

    ``framing="confluent"``: each record is in the Confluent Schema Registry wire format
    (``schemas``: the schema of each schema id, a mapping or a look-up function;
    ``schema_id``: True or a name adds each row's schema id as a column), as in
    :meth:`Transcoder.transcode <wirearrow.Transcoder.transcode>`.

    ``on_error`` overrides the plan's policy. With ``"dead_letter"`` the bad records go to
    ``dead_letters`` (a directory path or URI: one Parquet file per batch that has any)
    and/or to ``ledger`` (the collector of :func:`transcode`); with neither, construction
    fails rather than losing them. Dead letters are ``DEAD_LETTER_SCHEMA`` (``index`` is
    the position in the batch) plus ``source``: a struct of the record's other input
    columns (file and offset, or topic, partition and offset), to find it again.

    A ``read_error`` column (``read_delimited(truncated="dead_letter")``) marks rows that
    are not records (a cut file's tail): each is one failure with that reason, not decoded.

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
        framing: str | None = None,
        schemas: Any = None,
        schema_id: bool | str = False,
    ) -> None:
        started = time.perf_counter()
        compiles = 0
        if is_object_ref(plan):
            # Unpickling a Transcoder compiles it: this is the actor's one compile.
            plan = ray_module().get(plan)
            compiles += isinstance(plan, Transcoder)
        if not isinstance(plan, Transcoder):
            compiles += 1
        tc = _load(plan)
        derived = _policy(tc, on_error)
        compiles += derived is not tc
        self._keep = tuple(keep)
        clash = set(self._keep) & set(derived.arrow_schema.names)
        if clash:
            raise ValueError(f"keep columns clash with the plan's output: {sorted(clash)}")
        self._tc = derived
        self._column = column
        # How each record is encoded (format="json": protojson text, docs/json.md) and
        # framed: passed to every transcode call as is.
        self._input: dict[str, Any] = {}
        if format != "binary" or ignore_unknown_fields:
            self._input = {"format": format, "ignore_unknown_fields": ignore_unknown_fields}
        if framing is not None:
            self._input |= {"framing": framing, "schemas": schemas, "schema_id": schema_id}
            if framing != "confluent":
                raise ValueError(f'a record column\'s framing is "confluent", not {framing!r}')
        elif schemas is not None or schema_id is not False:
            raise ValueError('schemas= and schema_id= are for framing="confluent"')
        self._policy = derived.spec.on_error
        self._ledger = ledger
        self._dead_dir: str | None = None
        self._fs: pafs.FileSystem | None = None
        if dead_letters is not None:
            self._fs, self._dead_dir = filesystem_of(os.fspath(dead_letters), filesystem)
            self._fs.create_dir(self._dead_dir, recursive=True)
        if self._policy == "dead_letter" and self._dead_dir is None and ledger is None:
            raise ValueError(
                'on_error="dead_letter" needs somewhere to put them: dead_letters=<directory>, '
                "or use wirearrow.ray.transcode(), which collects them"
            )
        self._schema: pa.Schema = derived.arrow_schema
        worker, node = whereami()
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
    def spec(self) -> TranscodeSpec:
        """The spec this instance transcodes with (the plan's, ``on_error`` applied)."""
        return self._tc.spec

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
        read_failed = None
        key = None
        if READ_ERROR in batch.column_names:
            # read_delimited(truncated="dead_letter"): rows that are not records (a cut
            # file's tail) are failures with their reason, never decoded. The key is the
            # whole batch's, as for any batch.
            key = batch_key(batch, self._column, _records_column(batch, self._column))
            batch, read_failed = _split_read_errors(batch, self._column)
        values = _records_column(batch, self._column)
        before = self._tc.stats
        try:
            carry = batch.select(self._keep) if self._keep else None
            rows = pa.Table.from_batches(
                [self._tc.transcode(values, carry=carry, **self._input)]
            )
        except DecodeError as err:
            _locate(err, batch, self._column)
            raise err from None
        after = self._tc.stats
        failed = after.records_failed - before.records_failed
        dead = None
        if failed and self._policy == "dead_letter":
            dead = self._dead_letters(batch, values)
        unread = 0
        if read_failed is not None:
            positions, letters = read_failed
            unread = letters.num_rows
            if self._policy == "raise":
                first = letters.slice(0, 1).to_pylist()[0]
                raise DecodeError(first["reason"], index=first["index"], offset=0, path="")
            if dead is not None:  # indexes: the records' positions in the whole batch
                index = positions[dead.column("index").to_numpy()]
                dead = dead.set_column(0, dead.schema.field(0), pa.array(index, pa.int64()))
            if self._policy == "dead_letter":
                dead = letters if dead is None else pa.concat_tables([dead, letters])
            failed += unread
        result = BatchResult(
            key=key or batch_key(batch, self._column, values),
            records_in=after.records_in - before.records_in + unread,
            records_ok=after.records_ok - before.records_ok,
            records_failed=failed,
            rows_out=after.rows_out - before.rows_out,
            bytes_in=after.bytes_in - before.bytes_in,
            dead_letters=dead.num_rows if dead is not None else 0,
        )
        written = self._write_dead(dead, result.key) if dead is not None and self._dead_dir else None
        s = self._stats
        self._stats = dataclasses.replace(
            s,
            batches=s.batches + 1,
            records_in=s.records_in + result.records_in,
            records_ok=s.records_ok + result.records_ok,
            records_failed=s.records_failed + failed,
            rows_out=s.rows_out + result.rows_out,
            bytes_in=s.bytes_in + result.bytes_in,
            dead_letters=s.dead_letters + result.dead_letters,
            transcode_seconds=s.transcode_seconds + time.perf_counter() - started,
        )
        if self._ledger is not None:
            self._ledger.report(
                self._stats, result, dead if self._dead_dir is None else None, written
            )
        return rows

    def _dead_letters(self, batch: pa.Table, values: pa.Array) -> pa.Table:
        """The dead letters of this batch, with the ``source`` row of each."""
        dead = self._tc.dead_letters()
        if "carry" in dead.column_names:  # the keep= columns: also in source, below
            dead = dead.drop_columns(["carry"])
        others = [name for name in batch.column_names if name != self._column]
        if others:
            source = batch.select(others).take(dead.column("index"))
            struct = pa.StructArray.from_arrays(
                [c.combine_chunks() for c in source.columns], fields=list(source.schema)
            )
            dead = dead.append_column("source", struct)
        return dead

    def _write_dead(self, dead: pa.Table, key: str) -> str:
        assert self._fs is not None and self._dead_dir is not None
        return write_dead_letters(self._fs, self._dead_dir, dead, key)


def write_dead_letters(fs: pafs.FileSystem, directory: str, dead: pa.Table, key: str) -> str:
    """Write a batch's dead letters to ``directory/dead-<key>.parquet``; returns the path.

    Named by the batch's input, not by who processed it: a retry or a second execution
    rewrites the same file with the same rows instead of adding a copy. Written to a
    temporary name first and moved, so a worker killed mid-write leaves no half file under
    the final name.
    """
    path = posixpath.join(directory, f"dead-{key}.parquet")
    tmp = posixpath.join(directory, f".{key}-{uuid.uuid4().hex[:8]}.tmp")
    pq.write_table(dead, tmp, filesystem=fs)
    fs.move(tmp, path)
    return path


def _split_read_errors(batch: pa.Table, column: str) -> tuple[pa.Table, tuple | None]:
    """(the records of ``batch`` without its READ_ERROR column, None or (the position of
    each record in ``batch``, the dead letters of the rows that are not records))."""
    import numpy as np

    errors = batch.column(READ_ERROR)
    records = batch.drop_columns([READ_ERROR])
    if not errors.null_count < len(errors):
        return records, None
    bad = pc.is_valid(errors).to_numpy(zero_copy_only=False)
    failed = np.flatnonzero(bad)
    rows = records.take(failed)
    letters = {
        "index": pa.array(failed, pa.int64()),
        "offset": pa.array(np.zeros(len(failed), np.int64)),
        "path": pa.array([""] * len(failed), pa.string()),
        "reason": errors.take(failed).combine_chunks(),
        "raw": _records_column(rows, column).cast(pa.binary()),
    }
    table = pa.table(letters, schema=DEAD_LETTER_SCHEMA)
    others = [name for name in rows.column_names if name != column]
    if others:
        source = rows.select(others)
        table = table.append_column(
            "source",
            pa.StructArray.from_arrays(
                [c.combine_chunks() for c in source.columns], fields=list(source.schema)
            ),
        )
    return records.filter(pa.array(~bad)), (np.flatnonzero(~bad), table)


def batch_key(batch: pa.Table, column: str, values: pa.Array) -> str:
    """A name of ``batch`` by its input: the same records in the same order give the same
    key on any worker, in any attempt or execution.

    What it covers: the record count, every record's length, the bytes of the first,
    middle and last records, and the first and last rows of the batch's other columns
    (positions such as file + offset or partition + offset, which make it exact).
    Hashing every byte would add 15-70% to the decode (measured here: crc32 ~1 GB/s,
    blake2b ~0.2 GB/s, the openrtb_flat decode ~140 MB/s); this is one pass over the
    lengths: 0.18 ms for a 16k-record batch whose decode takes 116 ms (0.15%). Two
    batches share a key only when they hold the same lengths and the same end records
    and no position column tells them apart: a dataset that repeats itself
    (docs/ray.md: read it with ``include_location=True``).
    """
    n = len(values)
    h = hashlib.blake2b(digest_size=12)
    h.update(n.to_bytes(8, "little"))
    if n:
        lengths = pc.fill_null(pc.binary_length(values), -1).cast(pa.int64())
        h.update(memoryview(lengths.buffers()[1]))
        for i in sorted({0, n // 2, n - 1}):
            h.update(values[i].as_buffer() or b"")
        others = [name for name in batch.column_names if name != column]
        if others:
            ends = batch.select(others).take([0, n - 1]).to_pylist()
            h.update(repr(ends).encode())
    return h.hexdigest()


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


# ---- resources ---------------------------------------------------------------------------

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
        cpus = cluster_cpus()
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
    return job_step(_TASK_TRANSCODERS, job, functools.partial(Transcode, **transcode_args))(batch)


def job_step(steps: OrderedDict[str, Any], job: str, build: Any) -> Any:
    """This worker process's step of ``job`` in ``steps`` (built by ``build()`` on the job's
    first batch here), keeping the _TASK_TRANSCODERS_KEPT most recent jobs."""
    fn = steps.get(job)
    if fn is None:
        fn = steps[job] = build()
        while len(steps) > _TASK_TRANSCODERS_KEPT:
            steps.popitem(last=False)
    else:
        steps.move_to_end(job)
    return fn


# ---- the one-call path -------------------------------------------------------------------


class TranscodeResult:
    """What :func:`transcode` returns: the rows, as a ``ray.data.Dataset``, with the
    job's dead letters and counts.

    The object *is* a Dataset (``isinstance(job, ray.data.Dataset)`` holds: its class
    derives from this one and from Ray's ``Dataset``), so it goes wherever Ray users pass
    one; ``job.stats()`` is Ray's execution report, as on any Dataset. Executing it runs
    the job; afterwards :meth:`job_stats` and :attr:`dead_letters` hold what one
    execution counted and rejected -- running it again (``schema()``, ``take()`` and then
    ``write_parquet``), retried tasks and restarted workers replace their batches'
    reports instead of adding to them. ``compute`` is "tasks" or "actors"; ``pool`` the
    actor pool (None in task mode). Datasets derived from it (``job.filter(...)``) are
    plain Datasets, and a pickled one arrives as a plain Dataset: the accounting stays
    with the driver's object.
    """

    compute: str
    pool: PoolSize | None
    _wa_job: _JobHandle
    _wa_ledger: JobLedger
    _wa_dead_dir: str | None
    _wa_fs: Any | None

    @property
    def rows(self) -> Dataset:
        """The rows (this very Dataset; kept for code written before it was one)."""
        return cast("Dataset", self)

    def job_stats(self) -> JobStats:
        """The counts so far: after the rows were consumed, those of the whole job."""
        ledger = self._wa_ledger
        return cast(JobStats, ray_module().get(ledger.actor.summary.remote(ledger.job)))

    # Ray Data keeps the tasks an early-stopped execution still had in flight -- and the
    # actor they run on, with its CPUs -- alive until Python's garbage collector breaks a
    # reference cycle of its executor (StreamingExecutor <-> IssueDetectorManager). On a
    # few CPUs the next job's actor then waits for those CPUs, forever if the driver
    # allocates nothing meanwhile. The partial executions of an actor job collect at
    # once (docs/ray.md, Resources); a full execution ends its tasks itself.
    def take(self, *args: Any, **kwargs: Any) -> Any:
        return self._collect_after("take", args, kwargs)

    def take_batch(self, *args: Any, **kwargs: Any) -> Any:
        return self._collect_after("take_batch", args, kwargs)

    def show(self, *args: Any, **kwargs: Any) -> Any:
        return self._collect_after("show", args, kwargs)

    def schema(self, *args: Any, **kwargs: Any) -> Any:
        return self._collect_after("schema", args, kwargs)

    def _collect_after(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return getattr(super(), name)(*args, **kwargs)
        finally:
            if self.compute == "actors":
                gc.collect()
                _collect_again_soon()

    def materialize(self) -> Any:
        """Run the job once and keep the rows in the object store: a
        ``MaterializedDataset`` that is still this job's result (counts, dead letters)."""
        done = super().materialize()  # type: ignore[misc]
        return _result(done, self._wa_job, self._wa_dead_dir, self._wa_fs, self.compute, self.pool)

    @property
    def dead_letters(self) -> Dataset:
        """The dead letters of the job, as a Dataset (read after the rows were consumed).

        ``DEAD_LETTER_SCHEMA`` plus ``source`` (the record's other input columns). With
        ``dead_letters=<path>`` they are read back from the Parquet files written there.
        """
        ray = ray_module()
        ledger = self._wa_ledger
        if self._wa_dead_dir is not None:
            files = self.job_stats().dead_letter_files
            if files:
                return ray.data.read_parquet(list(files), filesystem=self._wa_fs)
        else:
            # One object per batch, each the return value of a call this driver made, so
            # this driver owns them: the Dataset outlives a restart of the ledger.
            keys = ray.get(ledger.actor.dead_letter_keys.remote(ledger.job))
            if keys:
                return ray.data.from_arrow_refs(
                    [ledger.actor.dead_letter_table.remote(ledger.job, key) for key in keys]
                )
        return ray.data.from_arrow(DEAD_LETTER_SCHEMA.empty_table())

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Ray's own state only (the ledger handle belongs to this driver's job).
        base = _ray_class(self)
        return (_plain, (base.copy(self, _as=base),))


# Under load the first collection can come too early: Ray's iterator threads may still hold
# the executor's cycle for a moment after take() returns, and a driver that then only waits
# on Ray allocates nothing that would trigger the collector again (seen once in CI: one CPU
# still held 20 s after take() with automatic collection off). A few more collections over
# the next seconds, off the caller's thread, free it whenever those threads let go.
_COLLECT_AGAIN_AFTER_S = (0.2, 1.0, 3.0, 8.0)


def _collect_again_soon() -> None:
    def collect() -> None:
        for delay in _COLLECT_AGAIN_AFTER_S:
            time.sleep(delay)
            gc.collect()

    threading.Thread(target=collect, name="wirearrow-collect-after-take", daemon=True).start()


def _plain(ds: Any) -> Any:
    return ds


def _ray_class(ds: Any) -> Any:
    """Ray's Dataset class of ``ds`` (Dataset, MaterializedDataset), under any result class."""
    return next(c for c in type(ds).__mro__ if c.__module__.startswith("ray."))


class _JobHandle:
    """The job's entry in the ledger, shared by the results of one job (``materialize``
    gives a second one): dropped from the ledger when the last of them is collected --
    not at interpreter exit, Ray may be gone by then (forget_job checks)."""

    def __init__(self, ledger: JobLedger) -> None:
        self.ledger = ledger
        weakref.finalize(self, forget_job, ledger).atexit = False


@functools.cache
def _result_class(base: Any) -> type:
    """TranscodeResult over Ray's ``base`` (Dataset, MaterializedDataset): built on first
    use, as Ray is imported lazily."""
    name = f"TranscodeResult[{base.__name__}]"
    return type(name, (TranscodeResult, base), {"__module__": __name__, "__qualname__": name})


def _result(
    rows: Any,
    job: _JobHandle,
    dead_dir: str | None,
    fs: Any | None,
    compute: str,
    pool: PoolSize | None,
) -> Any:
    base = _ray_class(rows)
    # Dataset.copy(ds, _as=cls) is how Ray itself makes a MaterializedDataset of a Dataset:
    # the same plan and context, under another class.
    out = base.copy(rows, _as=_result_class(base))
    out.compute, out.pool = compute, pool
    out._wa_job, out._wa_ledger = job, job.ledger
    out._wa_dead_dir, out._wa_fs = dead_dir, fs
    return out


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
    batch_size: int | None = None,
    resource_reservation: bool | None = None,
    profile: str | os.PathLike[str] | ParserCache | None = None,
    format: str = "binary",
    ignore_unknown_fields: bool = False,
    framing: str | None = None,
    schemas: Any = None,
    schema_id: bool | str = False,
    **map_batches_args: Any,
) -> TranscodeResult:
    """Transcode the records in ``ds[column]`` with ``plan``: the one-call path.

    ``format="json"``: the column holds protojson text (``ignore_unknown_fields`` as in
    ``json_format.Parse``); see docs/json.md.

    The plan is compiled here (plan errors are raised now) and shipped once through the
    object store; :class:`Transcode` decodes batches of ``batch_size`` records (None,
    the default: one batch per input block, see below). ``keep``:
    input columns repeated on each row of their record. ``on_error`` overrides the plan's
    policy; with ``"dead_letter"`` the bad records come back as
    :attr:`TranscodeResult.dead_letters`, and are also written as Parquet under
    ``dead_letters`` when given (a directory or URI; ``filesystem`` overrides the one
    inferred). ``framing="confluent"`` (with ``schemas`` and ``schema_id``): records in
    the Confluent Schema Registry wire format, as for :class:`Transcode`. Other keyword
    arguments go to ``map_batches``.

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
    process) and learns the buffer sizes; every process merges its sums with the others'
    through a named actor every ``share_every`` records (``ParserCache.share_with_ray``),
    and a new worker starts from the job-wide sizes. ``ParserCache.pull_from_ray`` on the
    driver fetches the merged profile (to ``save`` it for the next job). See docs/cache.md.

    ``batch_size=None`` keeps the counts exact when Ray runs the job again: a block is what
    Ray re-reads identically on a retry or a second execution, while batches of n records
    are cut across the blocks of a task's input, whose grouping depends on timing; a batch
    cut differently has another key and would be counted again (docs/ray.md, Exactly
    once). Pass ``batch_size=n`` for smaller batches when the job runs once.

    Returns a :class:`TranscodeResult`: lazy rows (a Dataset), then dead letters and counts.
    """
    ray = ray_module()
    if compute not in ("tasks", "actors"):
        raise ValueError(f'compute must be "tasks" or "actors", not {compute!r}')
    if not ray.is_initialized():
        ray.init()
    if profile is not None:
        cache = resolve_profile(profile)
        if cache.hub is None:
            cache.share_with_ray()
        if is_object_ref(plan):
            plan = ray.get(plan)
        plan = Transcoder(_load(plan).spec, cache=cache)
    ref = put_plan(plan, on_error=on_error)
    ledger = open_job_ledger()
    fs = dead_dir = None
    if dead_letters is not None:
        fs, dead_dir = filesystem_of(os.fspath(dead_letters), filesystem)
    cpus = cluster_cpus()
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
        "framing": framing,
        "schemas": schemas,
        "schema_id": schema_id,
    }
    common: dict[str, Any] = {
        "batch_format": "pyarrow",
        "zero_copy_batch": True,
        "batch_size": batch_size,
    }
    pool = None
    if compute == "tasks":
        if isinstance(concurrency, tuple):
            raise ValueError('concurrency=(min, max) is for compute="actors"; tasks take n')
        if concurrency is not None:
            map_batches_args.setdefault("compute", ray.data.TaskPoolStrategy(size=concurrency))
        if num_cpus is not None:
            map_batches_args["num_cpus"] = num_cpus
        rows = ds.map_batches(
            cast(Any, _transcode_task),  # Ray's stub wants a one-argument function
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
    return cast(TranscodeResult, _result(rows, _JobHandle(ledger), dead_dir, fs, compute, pool))
