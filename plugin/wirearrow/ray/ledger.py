"""The ledger: counts and dead letters of every Transcode of a job, in one Ray actor."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import pickle
import shutil
import struct
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

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
    ``batches``: distinct input batches; ``attempts``: batch reports received (more
    than ``batches`` when Ray re-ran some, or sent one again to a restarted ledger). ``workers``, ``compiles``, ``transcode_seconds``,
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
    dead: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> journal extent
    files: dict[str, str] = field(default_factory=dict)  # batch key -> dead-letter file
    attempts: int = 0


# A journal record: its length (8 bytes, little-endian), then the pickled report.
_LENGTH = struct.Struct("<Q")


class _LedgerActor:
    """Counts and dead letters of every transcode() job of this driver (a Ray actor).

    One per Ray session, created by the first job and found by name by the next ones: an
    actor is a worker process, and starting one costs ~0.5-1 s, which a per-job ledger
    would add to every job. num_cpus=0: it must never wait for a CPU. Everything a batch
    produced is kept under the batch's key, so a batch reported again (a retry, a second
    execution) replaces its first report: the job's counts are those of one execution.
    Worker snapshots are cumulative per worker (diagnostics; the latest wins).

    It survives its own death: every report is appended to a journal (one file per job
    in ``journal``, a directory on the driver's node, where the actor is pinned) *before*
    the report returns, and a restarted actor (max_restarts) replays the journals in
    ``__init__``; a report in flight when it died is sent again by Ray
    (max_task_retries), and replaces its first copy like any re-report. The dead letters
    sent here live in the journal only (the ledger keeps where each batch's are), and go
    back to the driver as objects the driver owns. A job's entry and journal are dropped
    when its TranscodeResult is garbage collected.
    """

    def __init__(self, journal: str) -> None:
        self._jobs: dict[str, _Job] = {}
        self._dir = journal
        self._out: dict[str, BinaryIO] = {}
        os.makedirs(journal, exist_ok=True)
        for name in sorted(os.listdir(journal)):
            if name.endswith(".journal"):
                self._replay(name.removesuffix(".journal"))

    def _path(self, job: str) -> str:
        return os.path.join(self._dir, f"{job}.journal")

    def _replay(self, job: str) -> None:
        """Rebuild ``job`` from its journal; cut a record the death left half written (its
        report never returned, so Ray sends it again)."""
        path = self._path(job)
        good = 0
        with open(path, "rb") as f:
            while True:
                head = f.read(_LENGTH.size)
                if len(head) < _LENGTH.size:
                    break
                (size,) = _LENGTH.unpack(head)
                try:
                    stats, batch, dead, file = pickle.loads(f.read(size))
                except Exception:  # a record cut short: the end of what was written
                    break
                self._apply(job, stats, batch, dead is not None, file, (good, _LENGTH.size + size))
                good = f.tell()
        os.truncate(path, good)

    def _job(self, job: str) -> _Job:
        return self._jobs.setdefault(job, _Job())

    def _apply(
        self,
        job: str,
        stats: WorkerStats,
        batch: BatchResult,
        dead: bool,
        file: str | None,
        extent: tuple[int, int],
    ) -> None:
        entry = self._job(job)
        entry.attempts += 1
        seen = entry.workers.get(stats.worker)
        if seen is None or stats.batches >= seen.batches:  # a resent older snapshot loses
            entry.workers[stats.worker] = stats
        entry.batches[batch.key] = batch
        if dead:
            entry.dead[batch.key] = extent
        else:  # a re-report without dead letters (e.g. now written to a file) wins too
            entry.dead.pop(batch.key, None)
        if file is not None:
            entry.files[batch.key] = file

    def report(
        self,
        job: str,
        stats: WorkerStats,
        batch: BatchResult,
        dead: pa.Table | None,
        file: str | None,
    ) -> None:
        if dead is not None and not dead.num_rows:
            dead = None
        # Written (to the OS: a killed process loses nothing it flushed) before the report
        # returns: a report that returned is in the journal.
        out = self._out.get(job)
        if out is None:
            out = self._out[job] = open(self._path(job), "ab")  # noqa: SIM115
        data = pickle.dumps((stats, batch, dead, file), protocol=pickle.HIGHEST_PROTOCOL)
        extent = (out.tell(), _LENGTH.size + len(data))
        out.write(_LENGTH.pack(len(data)) + data)
        out.flush()
        self._apply(job, stats, batch, dead is not None, file, extent)

    def summary(self, job: str) -> JobStats:
        entry = self._job(job)
        return JobStats.of(
            entry.workers.values(), entry.batches.values(), entry.files.values(), entry.attempts
        )

    def dead_letter_keys(self, job: str) -> list[str]:
        return sorted(self._job(job).dead)

    def dead_letter_table(self, job: str, key: str) -> pa.Table:
        """The dead letters of one batch, read back from the journal. The caller owns the
        returned object (Ray's rule for return values), so it outlives this actor."""
        start, size = self._job(job).dead[key]
        with open(self._path(job), "rb") as f:
            f.seek(start + _LENGTH.size)
            return pickle.loads(f.read(size - _LENGTH.size))[2]

    def forget(self, job: str) -> None:
        self._jobs.pop(job, None)
        out = self._out.pop(job, None)
        if out is not None:
            out.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(job))


_LEDGER_NAME = "wirearrow.ray.ledger"


# This driver's handle on its session's ledger actor, by (Ray job, driver node): a named
# actor that is not detached dies with its last handle, so one is kept here for the
# session; a new session (ray.shutdown(), ray.init()) has a new node id and gets its own.
_LEDGERS: dict[tuple[str, str], Any] = {}


def open_job_ledger() -> JobLedger:
    """A new job in this session's ledger actor (created on first use).

    The actor is pinned to the driver's node (it dies only with the node, which takes the
    driver and its job with it) and keeps its journal in a temporary directory there,
    removed when the driver exits. Ray restarts it when its process dies (max_restarts)
    and sends again the calls it had not answered (max_task_retries): docs/ray.md,
    Exactly once.
    """
    ray = ray_module()
    ctx = ray.get_runtime_context()
    key = (ctx.get_job_id(), ctx.get_node_id())
    actor = _LEDGERS.get(key)
    if actor is None:
        _LEDGERS.clear()  # handles of an earlier session are dead anyway
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        journal = tempfile.mkdtemp(prefix=f"wirearrow-ledger-{key[0]}-")
        atexit.register(shutil.rmtree, journal, ignore_errors=True)
        actor = (
            _ledger_class()
            .options(
                name=_LEDGER_NAME,
                get_if_exists=True,
                scheduling_strategy=NodeAffinitySchedulingStrategy(key[1], soft=False),
            )
            .remote(journal)
        )
        _LEDGERS[key] = actor
    return JobLedger(actor, uuid.uuid4().hex, key)


@functools.cache
def _ledger_class() -> Any:
    # Restarted as often as it dies, every call retried: it does no work but bookkeeping,
    # and what it knows is in its journal.
    return ray_module().remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(_LedgerActor)


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
