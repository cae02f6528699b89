"""The ledger: counts and dead letters of every Transcode of a job, in one Ray actor."""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from wirearrow.config import PlanConfig
from wirearrow.transcoder import Transcoder

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    PlanLike = Transcoder | PlanConfig | str | os.PathLike[str] | bytes | Mapping[str, Any]
from wirearrow.ray.runtime import ray_module


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


@dataclass(frozen=True)
class BatchResult:
    """What one batch produced: its counts, under the batch's input identity ``key``.

    ``key`` names the batch by its input (:func:`batch_key`), not by the attempt that
    decoded it: a retried task, a restarted actor or a second execution of the Dataset
    decodes the same batch again and reports the same key, which replaces the first
    report instead of adding to it.
    """

    key: str
    records_in: int
    records_ok: int
    records_failed: int
    rows_out: int
    bytes_in: int
    dead_letters: int


# The JobStats fields that are sums over the job's batches (one result per batch key).
_BATCH_FIELDS = (
    "records_in",
    "records_ok",
    "records_failed",
    "rows_out",
    "bytes_in",
    "dead_letters",
)


@dataclass(frozen=True)
class JobStats:
    """The counts of one :func:`transcode` job, after execution.

    The record counts are sums over the job's batches, one :class:`BatchResult` per input
    batch however often it was decoded (retries, killed workers, ``schema()``/``take()``
    before the write): they describe one execution. ``records_in == records_ok +
    records_failed`` and, with ``on_error="dead_letter"``, ``dead_letters ==
    records_failed``: every input record is in the rows or in the dead letters.
    ``batches``: distinct input batches; ``attempts``: batch decodes reported (more than
    ``batches`` when Ray re-ran some). ``workers``, ``compiles``, ``transcode_seconds``,
    ``nodes`` and ``per_worker`` (each one's :class:`WorkerStats`: its node, PID and
    compiles) describe the work done, every attempt included: ``compiles == workers``
    when each worker process compiled the plan once.
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
    attempts: int = 0
    per_worker: tuple[WorkerStats, ...] = field(repr=False, default=())
    dead_letter_files: tuple[str, ...] = field(repr=False, default=())

    @classmethod
    def of(
        cls,
        workers: Iterable[WorkerStats],
        batches: Iterable[BatchResult] = (),
        files: Iterable[str] = (),
        attempts: int = 0,
    ) -> JobStats:
        per = tuple(sorted(workers, key=lambda w: w.worker))
        done = list(batches)
        total = {name: sum(getattr(b, name) for b in done) for name in _BATCH_FIELDS}
        return cls(
            **total,
            batches=len(done),
            workers=len(per),
            compiles=sum(w.compiles for w in per),
            transcode_seconds=sum(w.transcode_seconds for w in per),
            attempts=attempts,
            per_worker=per,
            dead_letter_files=tuple(sorted(files)),
        )

    @property
    def nodes(self) -> int:
        """Ray nodes the work ran on (of ``per_worker``)."""
        return len({w.node for w in self.per_worker})

    def counts(self) -> tuple[int, ...]:
        """The record counts alone (what two executions of one job agree on)."""
        return tuple(getattr(self, name) for name in (*_BATCH_FIELDS, "batches"))

    def __str__(self) -> str:
        return (
            f"records in {self.records_in:,}, ok {self.records_ok:,}, failed "
            f"{self.records_failed:,} ({self.dead_letters:,} dead letters); rows out "
            f"{self.rows_out:,}; {self.batches:,} batches on {self.workers} worker(s), "
            f"{self.transcode_seconds:.2f} s transcoding"
        )


class Ledger:
    """Where :class:`Transcode` reports, after every batch: its cumulative
    :class:`WorkerStats`, the batch's :class:`BatchResult`, and the batch's dead letters
    (or the file they were written to). :func:`transcode` passes a handle to its job in
    the session's ledger actor; implement ``report`` to collect them elsewhere -- keyed by
    ``batch.key``, so that a batch decoded twice counts once."""

    def report(
        self, stats: WorkerStats, batch: BatchResult, dead: pa.Table | None, file: str | None
    ) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class JobLedger(Ledger):
    """One job's entry in the session's ledger actor (picklable: it travels to the actors)."""

    actor: ActorHandle  # of _LedgerActor
    job: str
    session: tuple[str, str] = ("", "")  # (Ray job id, driver node id) it was opened in

    def report(
        self, stats: WorkerStats, batch: BatchResult, dead: pa.Table | None, file: str | None
    ) -> None:
        # Synchronous on purpose: a report still in flight when Ray tears the actor pool
        # down would be lost, and the counts must add up at the end of the job. It costs
        # one round trip per batch (~0.5 ms), a few % of a 16k-record batch.
        ray_module().get(self.actor.report.remote(self.job, stats, batch, dead, file))


@dataclass
class _Job:
    workers: dict[str, WorkerStats] = field(default_factory=dict)
    batches: dict[str, BatchResult] = field(default_factory=dict)
    dead: dict[str, Any] = field(default_factory=dict)  # batch key -> ObjectRef of a Table
    files: dict[str, str] = field(default_factory=dict)  # batch key -> dead-letter file
    attempts: int = 0


class _LedgerActor:
    """Counts and dead letters of every transcode() job of this driver (a Ray actor).

    One per Ray session, created by the first job and found by name by the next ones: an
    actor is a worker process, and starting one costs ~0.5-1 s, which a per-job ledger
    would add to every job. num_cpus=0: it must never wait for a CPU. Everything a batch
    produced is kept under the batch's key, so a batch reported again (a retry, a second
    execution) replaces its first report: the job's counts are those of one execution.
    Worker snapshots are cumulative per worker (diagnostics; the latest wins). Dead
    letters sent here are ``ray.put`` by the ledger, which then owns them: they outlive
    the Transcode actors (torn down when the job ends) and spill to disk like any object.
    A job's entry is dropped when its TranscodeResult is garbage collected.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, _Job] = {}

    def _job(self, job: str) -> _Job:
        return self._jobs.setdefault(job, _Job())

    def report(
        self,
        job: str,
        stats: WorkerStats,
        batch: BatchResult,
        dead: pa.Table | None,
        file: str | None,
    ) -> None:
        entry = self._job(job)
        entry.attempts += 1
        entry.workers[stats.worker] = stats
        entry.batches[batch.key] = batch
        if dead is not None and dead.num_rows:
            entry.dead[batch.key] = ray_module().put(dead)
        if file is not None:
            entry.files[batch.key] = file

    def summary(self, job: str) -> JobStats:
        entry = self._job(job)
        return JobStats.of(
            entry.workers.values(), entry.batches.values(), entry.files.values(), entry.attempts
        )

    def dead_letter_refs(self, job: str) -> list[Any]:
        entry = self._job(job)
        return [entry.dead[key] for key in sorted(entry.dead)]

    def forget(self, job: str) -> None:
        self._jobs.pop(job, None)


_LEDGER_NAME = "wirearrow.ray.ledger"


# This driver's handle on its session's ledger actor, by (Ray job, driver node): a named
# actor that is not detached dies with its last handle, so one is kept here for the
# session; a new session (ray.shutdown(), ray.init()) has a new node id and gets its own.
_LEDGERS: dict[tuple[str, str], Any] = {}


def open_job_ledger() -> JobLedger:
    """A new job in this session's ledger actor (created on first use)."""
    ctx = ray_module().get_runtime_context()
    key = (ctx.get_job_id(), ctx.get_node_id())
    actor = _LEDGERS.get(key)
    if actor is None:
        _LEDGERS.clear()  # handles of an earlier session are dead anyway
        actor = _ledger_class().options(name=_LEDGER_NAME, get_if_exists=True).remote()
        _LEDGERS[key] = actor
    return JobLedger(actor, uuid.uuid4().hex, key)


@functools.cache
def _ledger_class() -> Any:
    return ray_module().remote(num_cpus=0)(_LedgerActor)


def forget_job(ledger: JobLedger) -> None:
    """Drop the job from its ledger, if its Ray session is still the current one.

    Only then: calling the actor after ``ray.shutdown()`` would start a new local Ray
    instance just to free an entry that died with the old one (seconds, and a confusing
    "Started a local Ray instance" line at the end of every job).
    """
    ray = ray_module()
    if not ray.is_initialized():
        return
    with contextlib.suppress(Exception):
        ctx = ray.get_runtime_context()
        if (ctx.get_job_id(), ctx.get_node_id()) == ledger.session:
            ledger.actor.forget.remote(ledger.job)
