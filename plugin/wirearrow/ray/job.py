"""What the Ray steps share: the plan shipped once, a step's accounting, the one-call job
and its result, the actor pool's size (docs/ray.md)."""

from __future__ import annotations

import gc
import os
import posixpath
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import ray
from ray.data import ActorPoolStrategy, Dataset, TaskPoolStrategy
from ray.data._internal.execution.execution_callback import ExecutionCallback

from wirearrow.counts import Counts
from wirearrow.dead_letters import DEAD_LETTER_SCHEMA, with_rows
from wirearrow.plans import PlanLike, Resolved, resolve_plan
from wirearrow.ray.ledger import (
    BatchResult,
    JobLedger,
    JobStats,
    Ledger,
    WorkerStats,
    forget_job,
    open_job_ledger,
)
from wirearrow.sources.files import filesystem_of
from wirearrow.transcoder import Transcoder

__all__ = ["PoolSize", "Step", "TranscodeResult", "pool_size", "put_plan", "resolve", "run_job"]

# transcode() turns Ray Data's per-operator resource reservation off on clusters this small.
SMALL_CLUSTER_CPUS = 4


def resolve(
    plan: PlanLike | Resolved | ray.ObjectRef, on_error: str | None = None, cache: Any = None
) -> Resolved:
    """``wirearrow.plans.resolve_plan``, also of an ``ObjectRef`` and of what
    :func:`put_plan` puts (a resolved plan: its transcoder and its records' format)."""
    if isinstance(plan, ray.ObjectRef):
        plan = ray.get(plan)
    if not isinstance(plan, Resolved):
        return resolve_plan(plan, on_error=on_error, cache=cache)
    return resolve_plan(plan.transcoder, on_error=on_error, cache=cache)._replace(input=plan.input)


def put_plan(plan: PlanLike | ray.ObjectRef, *, on_error: str | None = None) -> ray.ObjectRef:
    """Resolve ``plan`` here (its errors raise now, not on a worker) and ``ray.put`` it for
    ``Transcode``, ``Encode`` or ``ToJson``: each actor compiles it once (docs/ray.md)."""
    resolved = resolve(plan, on_error)
    return ray.put(Resolved(resolved.transcoder, resolved.input, None))


def whereami() -> tuple[str, str]:
    """(a key for this step: its actor id, else pid + a nonce; the node id), without
    starting Ray in a plain process."""
    key = f"pid{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if not ray.is_initialized():
        return key, "local"
    ctx = ray.get_runtime_context()
    actor = ctx.get_actor_id()
    return (actor[:16] if actor else key), ctx.get_node_id()[:12]


class Step:
    """A map_batches step (``Transcode``, ``Encode``): its transcoder, compiled once, where
    its dead letters go, its counts (reported to ``ledger`` after every batch)."""

    def __init__(
        self, plan: PlanLike | Resolved | ray.ObjectRef, on_error: str | None,
        dead_letters: str | os.PathLike[str] | None, filesystem: Any, ledger: Ledger | None,
    ) -> None:
        started = time.perf_counter()
        shipped = isinstance(plan, ray.ObjectRef)
        if isinstance(plan, ray.ObjectRef):
            plan = ray.get(plan)  # unpickling a transcoder compiles it: one compile
        given = plan.transcoder if isinstance(plan, Resolved) else plan
        self._resolved = resolve(plan, on_error)
        self._tc = self._resolved.transcoder
        compiles = int(shipped and isinstance(given, Transcoder)) + (self._tc is not given)
        self._policy = self._tc.spec.on_error
        self._ledger = ledger
        self._dead = dead_letters_dir(dead_letters, filesystem)
        if self._dead is not None:
            self._dead[0].create_dir(self._dead[1], recursive=True)
        if self._policy == "dead_letter" and self._dead is None and ledger is None:
            raise ValueError(
                'on_error="dead_letter" needs somewhere to put them: dead_letters=<directory>, '
                "or use the one-call wirearrow.ray.transcode() / encode(), which collect them"
            )
        worker, node = whereami()
        self._stats = WorkerStats(
            worker=worker, node=node, pid=os.getpid(), compiles=compiles,
            init_seconds=time.perf_counter() - started,
        )

    @property
    def stats(self) -> WorkerStats:
        """What this instance did so far."""
        return self._stats

    def _table(self, batch: Any) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            return pa.Table.from_batches([batch])
        if not isinstance(batch, pa.Table):
            raise TypeError(
                f"{type(self).__name__} takes pyarrow Tables (map_batches(..., "
                f"batch_format='pyarrow')), not {type(batch).__name__}"
            )
        return batch

    def _account(self, key: str, counts: Counts, dead: pa.Table | None, started: float) -> None:
        """Keep a batch's counts; its dead letters to ``dead_letters=`` or the ledger."""
        if dead is not None and not dead.num_rows:
            dead = None
        written = None
        if dead is not None and self._dead is not None:
            written = write_dead_letters(*self._dead, dead, key)
        self._stats = self._stats.after(counts, time.perf_counter() - started)
        if self._ledger is not None:
            result = BatchResult(*counts.values(), key=key)
            self._ledger.report(self._stats, result, dead if written is None else None, written)


def dead_letters_dir(
    path: str | os.PathLike[str] | None, filesystem: Any
) -> tuple[pafs.FileSystem, str] | None:
    """(filesystem, directory) of a ``dead_letters=`` path or URI, or None."""
    return None if path is None else filesystem_of(os.fspath(path), filesystem)


def write_dead_letters(fs: pafs.FileSystem, directory: str, dead: pa.Table, key: str) -> str:
    """Write a batch's dead letters to ``directory/dead-<key>.parquet`` (its input's name: a
    retry rewrites the same file), under a temporary name then moved (a killed worker
    leaves no half file); returns the path."""
    path = posixpath.join(directory, f"dead-{key}.parquet")
    tmp = posixpath.join(directory, f".{key}-{uuid.uuid4().hex[:8]}.tmp")
    pq.write_table(dead, tmp, filesystem=fs)
    fs.move(tmp, path)
    return path


def with_source(dead: pa.Table, batch: pa.Table, skip: str) -> pa.Table:
    """``dead`` with ``source``: the row of ``batch`` (its columns but ``skip``) of each dead
    letter (a file and offset, a Kafka partition and offset, a whole row)."""
    if not dead.num_rows:
        return dead
    return with_rows(dead, "source", batch.select([n for n in batch.column_names if n != skip]))


class TranscodeResult:
    """What :func:`~wirearrow.ray.transcode` and :func:`~wirearrow.ray.encode` return: the
    lazy ``rows`` (Ray's own Dataset: consuming it runs the job), then :meth:`job_stats`
    and :attr:`dead_letters` of one execution; ``compute`` and ``pool`` (docs/ray.md);
    ``on_error``: the job's error policy; ``schema``: the rows' schema, when known without
    running a block (else None)."""

    def __init__(
        self, rows: Dataset, ledger: JobLedger, dead: tuple[pafs.FileSystem, str] | None,
        compute: str, pool: PoolSize | None, on_error: str = "raise",
    ) -> None:
        self.rows, self.compute, self.pool, self.on_error = rows, compute, pool, on_error
        # The rows' schema when known without running the job (transcode sets it).
        self.schema: pa.Schema | None = None
        self._ledger, self._dead = ledger, dead
        # With the rows, which a caller may keep without this object; not at interpreter
        # exit: Ray may be gone by then (forget_job checks).
        weakref.finalize(rows, forget_job, ledger).atexit = False

    def job_stats(self) -> JobStats:
        """The counts so far: after the rows were consumed, those of one execution."""
        return cast(JobStats, ray.get(self._ledger.actor.summary.remote(self._ledger.job)))

    @property
    def dead_letters(self) -> Dataset:
        """The job's dead letters (after the rows were consumed): ``DEAD_LETTER_SCHEMA`` plus
        ``source``, read back from the files with ``dead_letters=<path>``."""
        if self._dead is not None:
            files = self.job_stats().dead_letter_files
            if files:
                return ray.data.read_parquet(list(files), filesystem=self._dead[0])
        else:
            # One object per batch, each the return value of a call this driver made, so
            # this driver owns them: the Dataset outlives a restart of the ledger.
            actor, job = self._ledger.actor, self._ledger.job
            keys: list[str] = ray.get(actor.dead_letter_keys.remote(job))
            if keys:
                return ray.data.from_arrow_refs([actor.dead_letter_table.remote(job, k) for k in keys])
        return ray.data.from_arrow(DEAD_LETTER_SCHEMA.empty_table())

    def __repr__(self) -> str:
        return f"TranscodeResult(compute={self.compute!r}, pool={self.pool!r}, rows={self.rows!r})"


class _CollectAfterExecution(ExecutionCallback):
    """Ray Data keeps the tasks an early-stopped execution (``take()``, ``schema()``) still
    had in flight, and their actor's CPUs, until the garbage collector breaks a cycle of its
    executor (StreamingExecutor <-> IssueDetectorManager): on a few CPUs the next job's
    actor waits for ever. On an actor job's ``DataContext`` this collects a few times after
    each execution ends, off the caller's thread (docs/ray.md, Resources)."""

    def after_execution_succeeds(self, executor: Any) -> None:
        _collect_soon()

    def after_execution_fails(self, executor: Any, error: Exception) -> None:
        _collect_soon()


# Ray's iterator threads may hold the executor's cycle for a moment after the execution
# ends, and longer under load (seen once in CI: one CPU still held 20 s after take() with
# automatic collection off): hence several collections, spread out.
_COLLECT_AFTER_S = (0.2, 1.0, 3.0, 8.0)


def _collect_soon() -> None:
    def collect() -> None:
        for delay in _COLLECT_AFTER_S:
            time.sleep(delay)
            gc.collect()

    threading.Thread(target=collect, name="wirearrow-collect-after-execution", daemon=True).start()


def cluster_cpus() -> float:
    """Logical CPUs of the cluster (Ray started if it was not)."""
    if not ray.is_initialized():
        ray.init()
    return float(ray.cluster_resources().get("CPU", 1.0))


# The step of each recent job in this worker process (task mode): a worker process runs many
# tasks, one after the other, so each builds its step once per job, on its first batch. A
# few jobs are kept (jobs may interleave on a worker); older ones are dropped.
_TASK_STEPS: OrderedDict[str, Step] = OrderedDict()
_TASK_STEPS_KEPT = 8


def _task(batch: pa.Table, *, job: str, step: type[Step], **args: Any) -> pa.Table:
    """The ``map_batches`` function of a task-mode job: this process's step of ``job``."""
    fn = _TASK_STEPS.get(job)
    if fn is None:
        fn = _TASK_STEPS[job] = step(**args)
        while len(_TASK_STEPS) > _TASK_STEPS_KEPT:
            _TASK_STEPS.popitem(last=False)
    else:
        _TASK_STEPS.move_to_end(job)
    return cast(Any, fn)(batch)


def run_job(
    ds: Dataset, step: type[Step], plan: Resolved, args: dict[str, Any],
    dead_letters: str | os.PathLike[str] | None, filesystem: Any, compute: str,
    concurrency: int | tuple[int, int] | None, num_cpus: float | None, batch_size: int | None,
    resource_reservation: bool | None, map_batches_args: dict[str, Any],
) -> TranscodeResult:
    """``transcode`` and ``encode``: ``ds.map_batches`` of ``step(plan, **args)`` on tasks
    (one step per worker process and job) or an actor pool, reporting to a new job."""
    if compute not in ("tasks", "actors"):
        raise ValueError(f'compute must be "tasks" or "actors", not {compute!r}')
    cpus = cluster_cpus()
    ledger = open_job_ledger()
    dead = dead_letters_dir(dead_letters, filesystem)
    if resource_reservation is None and cpus <= SMALL_CLUSTER_CPUS:
        resource_reservation = False
    if resource_reservation is not None:
        ds.context.op_resource_reservation_enabled = resource_reservation
    # The plan travels once, through the object store: each step compiles it once.
    args = {**args, "plan": ray.put(plan), "ledger": ledger}
    if dead is not None:
        args |= {"filesystem": dead[0], "dead_letters": dead[1]}
    common: dict[str, Any] = {"batch_format": "pyarrow", "zero_copy_batch": True, "batch_size": batch_size}
    pool = None
    if compute == "tasks":
        if isinstance(concurrency, tuple):
            raise ValueError('concurrency=(min, max) is for compute="actors"; tasks take n')
        if concurrency is not None:
            map_batches_args.setdefault("compute", TaskPoolStrategy(size=concurrency))
        if num_cpus is not None:
            map_batches_args["num_cpus"] = num_cpus
        rows = ds.map_batches(
            cast(Any, _task),  # Ray's stub wants a one-argument function
            fn_kwargs={"job": ledger.job, "step": step, **args},
            **common, **map_batches_args,
        )
    else:
        pool = pool_size(cpus, concurrency, num_cpus)
        callbacks = ds.context.custom_execution_callback_classes
        if _CollectAfterExecution not in callbacks:  # (a new list: never the global's)
            ds.context.custom_execution_callback_classes = [*callbacks, _CollectAfterExecution]
        rows = ds.map_batches(
            step,
            fn_constructor_kwargs=args,
            compute=map_batches_args.pop("compute", None) or pool.compute(),
            num_cpus=pool.num_cpus,
            **common, **map_batches_args,
        )
    return TranscodeResult(rows, ledger, dead, compute, pool, plan.transcoder.spec.on_error)


@dataclass(frozen=True)
class PoolSize:
    """The actor pool: ``min``..``max`` actors of ``num_cpus`` logical CPUs each."""

    min: int
    max: int
    num_cpus: float

    def compute(self) -> ActorPoolStrategy:
        """The ``ray.data.ActorPoolStrategy`` of this pool."""
        if self.min == self.max:
            return ActorPoolStrategy(size=self.min)
        return ActorPoolStrategy(min_size=self.min, max_size=self.max)


def pool_size(
    cpus: float | None = None,
    concurrency: int | tuple[int, int] | None = None,
    num_cpus: float | None = None,
) -> PoolSize:
    """The actor pool :func:`~wirearrow.ray.transcode` uses on ``cpus`` logical CPUs: at
    most ``cpus - 1`` of them, one always left to the read and write tasks (a pool holding
    every CPU starves them: the 2-core deadlock); ``num_cpus`` given: as is, which may hang
    (docs/ray.md, Resources)."""
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

