"""The ledger: counts and dead letters of every step of a job, in one Ray actor that keeps a
journal (docs/ray.md, Exactly once)."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import pickle
import shutil
import struct
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyarrow as pa
import ray
from ray.actor import ActorHandle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from wirearrow.counts import Counts

# The counters are Counts' (with `+`); these add what a worker, a batch or a job is besides.
_COUNTS = tuple(f.name for f in dataclasses.fields(Counts))


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStats(Counts):
    """What one step (an actor, or a worker process of a task-mode job) did so far: the
    counts, ``worker`` (actor id or process key), node, pid, ``compiles``, ``batches``."""

    worker: str
    node: str
    pid: int
    compiles: int = 0
    batches: int = 0
    init_seconds: float = 0.0
    transcode_seconds: float = 0.0

    def after(self, batch: Counts, seconds: float) -> WorkerStats:
        """These stats after one more batch of ``batch`` counts, taking ``seconds``."""
        total: dict[str, Any] = dict(zip(_COUNTS, (self + batch).values(), strict=True))
        return dataclasses.replace(  # (self + batch: the counts alone)
            self, **total, batches=self.batches + 1,
            transcode_seconds=self.transcode_seconds + seconds,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchResult(Counts):
    """One batch's counts under its input's ``key`` (:func:`~wirearrow.ray.batch_key`): a
    retry or a second execution reports the same key, which replaces the first report."""

    key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStats(Counts):
    """The counts of one job: one :class:`BatchResult` per input batch however often Ray ran
    it (one execution's), plus the work done, every attempt included (docs/ray.md)."""

    batches: int = 0
    workers: int = 0
    compiles: int = 0
    transcode_seconds: float = 0.0
    attempts: int = 0
    per_worker: tuple[WorkerStats, ...] = field(repr=False, default=())
    dead_letter_files: tuple[str, ...] = field(repr=False, default=())

    @property
    def nodes(self) -> int:
        """Ray nodes the work ran on (of ``per_worker``)."""
        return len({w.node for w in self.per_worker})

    def counts(self) -> tuple[int, ...]:
        """The record counts and ``batches`` (what two executions of one job agree on)."""
        return (*self.values(), self.batches)

    def __str__(self) -> str:
        return (
            f"{Counts.__str__(self)}; {self.batches:,} batches on {self.workers} worker(s), "
            f"{self.transcode_seconds:.2f} s transcoding"
        )


class Ledger:
    """Where a step reports after every batch: its :class:`WorkerStats`, the batch's
    :class:`BatchResult` and dead letters (or their file). Keep them by ``batch.key``."""

    def report(
        self, stats: WorkerStats, batch: BatchResult, dead: pa.Table | None, file: str | None
    ) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class JobLedger(Ledger):
    """One job's entry in the session's ledger actor (picklable: it travels to the workers)."""

    actor: ActorHandle  # of _LedgerActor
    job: str
    session: tuple[str, str] = ("", "")  # (Ray job id, driver node id) it was opened in

    def report(
        self, stats: WorkerStats, batch: BatchResult, dead: pa.Table | None, file: str | None
    ) -> None:
        # Synchronous on purpose: a report still in flight when Ray tears the actor pool
        # down would be lost, and the counts must add up at the end of the job. It costs
        # one round trip per batch (~0.5 ms), a few % of a 16k-record batch.
        ray.get(self.actor.report.remote(self.job, stats, batch, dead, file))


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
    """Counts and dead letters of every job of this driver (one actor per session: one
    costs ~0.5-1 s to start); a batch's report replaces an earlier one of the same key.
    Each report is in the job's journal (a file on the driver's node) before it returns, and
    a restarted actor replays it: Ray sends again what it had not answered. Dead letters
    live in the journal only (docs/ray.md, The ledger's own death)."""

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
            while len(head := f.read(_LENGTH.size)) == _LENGTH.size:
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
        self, job: str, stats: WorkerStats, batch: BatchResult, dead: bool, file: str | None,
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
        self, job: str, stats: WorkerStats, batch: BatchResult, dead: pa.Table | None,
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
        per = tuple(sorted(entry.workers.values(), key=lambda w: w.worker))
        return JobStats(
            *Counts.total(entry.batches.values()).values(), batches=len(entry.batches),
            workers=len(per), compiles=sum(w.compiles for w in per),
            transcode_seconds=sum(w.transcode_seconds for w in per), attempts=entry.attempts,
            per_worker=per, dead_letter_files=tuple(sorted(entry.files.values())),
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


# Restarted as often as it dies, every call retried: it does no work but bookkeeping, and
# what it knows is in its journal.
_LEDGER = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(_LedgerActor)
_LEDGER_NAME = "wirearrow.ray.ledger"

# This driver's handle on its session's ledger actor, by (Ray job, driver node): a named
# actor that is not detached dies with its last handle, so one is kept here for the
# session; a new session (ray.shutdown(), ray.init()) has a new node id and gets its own.
_LEDGERS: dict[tuple[str, str], Any] = {}


def open_job_ledger() -> JobLedger:
    """A new job in this session's ledger actor (created on first use, pinned to the
    driver's node; its journal in a temporary directory removed when the driver exits)."""
    ctx = ray.get_runtime_context()
    key = (ctx.get_job_id(), ctx.get_node_id())
    actor: Any = _LEDGERS.get(key)
    if actor is None:
        _LEDGERS.clear()  # handles of an earlier session are dead anyway
        journal = tempfile.mkdtemp(prefix=f"wirearrow-ledger-{key[0]}-")
        atexit.register(shutil.rmtree, journal, ignore_errors=True)
        actor = _LEDGERS[key] = _LEDGER.options(
            name=_LEDGER_NAME,
            get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(key[1], soft=False),
        ).remote(journal)
    return JobLedger(actor, uuid.uuid4().hex, key)


def forget_job(ledger: JobLedger) -> None:
    """Drop the job from its ledger if its Ray session is the current one (after
    ``ray.shutdown()`` a call would start a new local Ray just to free a dead entry)."""
    if not ray.is_initialized():
        return
    with contextlib.suppress(Exception):
        ctx = ray.get_runtime_context()
        if (ctx.get_job_id(), ctx.get_node_id()) == ledger.session:
            ledger.actor.forget.remote(ledger.job)
