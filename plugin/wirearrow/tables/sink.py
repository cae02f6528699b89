"""The commit protocol every table sink implements: data files first, then one atomic commit.

1. :meth:`TableSink.prepare` creates the table from the rows' Arrow schema (field ids
   kept) or evolves it (columns added, types widened) and returns a :class:`FileWriter`:
   a small picklable value that writes data files for that table anywhere (a Ray worker,
   a Beam bundle, this process) and returns what it wrote as :class:`Staged` values.
   Nothing a reader sees changes.
2. :meth:`TableSink.commit` makes every staged file of a commit visible at once, in one
   atomic commit (an Iceberg snapshot, a Delta log entry) that also records the job's
   :class:`~wirearrow.tables.positions.Positions`: where it is in its sources.

A job killed anywhere leaves the table at its last commit (staged files that were never
committed are invisible to readers). A restarted job reads :meth:`TableSink.committed`
and resumes there; records it sees again below those positions are skipped, so none is
written twice and none is lost. A commit checks that the table still holds the positions
this sink last read or committed (compare-and-set): a second job with the same ``app_id``
that committed in between makes it fail (:class:`CommitConflict`) instead of writing the
same records twice.

Jobs whose work comes in units rather than positions (a Beam window firing) give each
commit a ``commit_id`` instead: a commit whose id one of the app id's recent commits of the
table already has (:data:`COMMIT_ID_DEPTH`) commits nothing, so a unit retried after its
commit is committed once.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from wirearrow.counts import Counts
from wirearrow.tables.positions import Positions

__all__ = [
    "COMMIT_ID_DEPTH",
    "Commit",
    "CommitConflict",
    "FileWriter",
    "Staged",
    "TableSchemaError",
    "TableSink",
]

# How many of a table's newest commits a commit id is looked for in: a retry comes soon
# after the first attempt, within far fewer commits of the table than this.
COMMIT_ID_DEPTH = 1000


class CommitConflict(RuntimeError):
    """Another job of the same app id committed to the table since this sink read its
    positions: re-read them (:meth:`TableSink.committed`) and skip what they cover."""


class TableSchemaError(ValueError):
    """The rows cannot go into the table: a column's type changed in a way the table
    format cannot follow (only widening is allowed), or a partition field is invalid."""


@dataclass(frozen=True)
class Staged:
    """Data files written but not committed: what a worker hands to the committer
    (picklable). ``files``: the format's own file records; ``rows``: rows in them."""

    format: str
    files: tuple[Any, ...]
    rows: int
    nbytes: int = 0


@dataclass(frozen=True)
class Commit:
    """What one commit made visible: its ``version`` (Iceberg snapshot id, Delta table
    version; None when there was nothing to commit), ``rows`` and ``files`` added, and the
    ``positions`` recorded (the app id's whole map after the commit)."""

    table: str
    version: int | None
    rows: int
    files: int
    positions: Positions
    counts: Counts | None = None


class FileWriter(abc.ABC):
    """Writes data files for one table and schema version, wherever it runs (picklable)."""

    @abc.abstractmethod
    def write(self, data: pa.Table | pa.RecordBatch) -> Staged:
        """Write ``data`` (rows of the schema given to :meth:`TableSink.prepare`) as data
        files of the table, not committed."""


class TableSink(abc.ABC):
    """A table and one job's commits to it (``app_id``: the name its positions are
    recorded under). See the module's doc for the protocol."""

    format: str = ""  # "iceberg" / "delta" / "parquet"

    def __init__(self, app_id: str = "wirearrow") -> None:
        self.app_id = app_id
        self._expected: Positions | None = None

    # -- what the table holds --------------------------------------------------------------

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The table, as the user named it."""

    @abc.abstractmethod
    def exists(self) -> bool:
        """Is the table there (created by a commit)?"""

    @abc.abstractmethod
    def scan(self) -> pa.Table:
        """Every row the table holds now (its newest commit), read by its own library."""

    @abc.abstractmethod
    def _read_positions(self) -> Positions:
        """The app id's positions at the table's newest commit (empty: none)."""

    def committed(self) -> Positions:
        """Where this job's commits got to (the app id's positions at the table's newest
        commit; empty when it has none): resume there. Also what the next :meth:`commit`
        expects the table to still hold."""
        self._expected = self._read_positions()
        return self._expected

    # -- writing ---------------------------------------------------------------------------

    @abc.abstractmethod
    def prepare(self, schema: pa.Schema) -> FileWriter:
        """Create or evolve the table for rows of ``schema`` and return the writer of its
        data files. Creating an empty table, adding columns and widening types are commits
        of their own (metadata only, no data): harmless if the job dies after them."""

    @abc.abstractmethod
    def _commit(
        self, staged: Sequence[Staged], positions: Positions, counts: Counts | None,
        commit_id: str | None,
    ) -> Commit:  # fmt: skip
        """One atomic commit of ``staged`` recording ``positions`` (the whole map) and
        ``commit_id``, if the table still holds ``self._expected`` (else CommitConflict) and
        none of its recent commits has ``commit_id`` (else nothing: version None)."""

    def commit(
        self,
        staged: Iterable[Staged],
        positions: Positions | Mapping[str, int] | None = None,
        *,
        counts: Counts | None = None,
        commit_id: str | None = None,
    ) -> Commit:
        """Make ``staged`` visible in one atomic commit recording the job's positions
        advanced to ``positions``. ``counts``: the commit's records (kept in its summary).
        ``commit_id``: commit nothing if one of the app id's recent commits has this id
        (returns a Commit with version None): a unit of work retried is committed once."""
        staged = [s for s in staged if s.files]
        for s in staged:
            if s.format != self.format:
                raise ValueError(f"files staged for {s.format} cannot be committed to {self.format}")
        if self._expected is None:
            self.committed()
        assert self._expected is not None
        target = self._expected.advanced(positions or {})
        done = self._commit(staged, target, counts, commit_id)
        self._expected = done.positions
        return done

    def append(
        self,
        data: pa.Table | pa.RecordBatch,
        positions: Positions | Mapping[str, int] | None = None,
        *,
        counts: Counts | None = None,
    ) -> Commit:
        """Write ``data`` and commit it with ``positions``: :meth:`prepare`, write, commit."""
        writer = self.prepare(data.schema)
        staged = writer.write(data) if data.num_rows else None
        return self.commit([staged] if staged is not None else [], positions, counts=counts)

    def uncommitted(self, key: str, position: int) -> bool:
        """Is the record at ``position`` of source ``key`` still to be written?"""
        if self._expected is None:
            self.committed()
        assert self._expected is not None
        return not self._expected.covers(key, position)
