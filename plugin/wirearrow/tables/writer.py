"""TableWriter: decoded batches into a rows table and a dead-letter table, exactly once.

A job hands each decoded batch over with where each of its records came from (a source
key and a position: a Kafka topic-partition and offset, a file and byte offset). The
writer stages the batch's rows and dead letters as data files, and every
``commit_every`` batches commits each table once, recording the positions after the
batches. The two tables commit one after the other, never together (no format commits two
tables at once): a job killed between the two leaves the dead-letter table one commit
behind. So a restarted job resumes at the lower of the two tables' positions
(:meth:`TableWriter.resume`), and each table skips the records its own positions cover:
every record ends up in exactly one of the tables, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from wirearrow.carry import RECORD_INDEX
from wirearrow.counts import Counts
from wirearrow.output import Output
from wirearrow.tables.positions import Positions
from wirearrow.tables.sink import Commit, FileWriter, Staged, TableSink

if TYPE_CHECKING:
    from wirearrow.transcoder import Decoded

__all__ = ["TableWriter"]


class _Target:
    """One table of the writer: its sink, its writer for the current schema, what is
    staged and not yet committed, and the positions it has committed."""

    def __init__(self, sink: TableSink) -> None:
        self.sink = sink
        self.committed = sink.committed()
        self.schema: pa.Schema | None = None
        self.writer: FileWriter | None = None
        self.staged: list[Staged] = []
        self.counts = Counts()

    def stage(self, data: pa.Table) -> None:
        if self.writer is None or not data.schema.equals(self.schema):
            self.writer = self.sink.prepare(data.schema)
            self.schema = data.schema
        if data.num_rows:
            self.staged.append(self.writer.write(data))

    def commit(self, positions: Positions) -> Commit:
        done = self.sink.commit(self.staged, positions, counts=self.counts)
        self.staged = []
        self.counts = Counts()
        self.committed = done.positions
        return done


class TableWriter:
    """Rows and dead letters of decoded batches into two tables, committed together every
    ``commit_every`` batches with the positions after them.

    ``rows``: the rows' sink; ``dead_letters``: the dead letters' sink (None: the job keeps
    none, e.g. ``on_error="raise"`` or ``"skip"``)."""

    def __init__(
        self, rows: TableSink, dead_letters: TableSink | None = None, *, commit_every: int = 1
    ) -> None:
        if commit_every < 1:
            raise ValueError(f"commit_every must be at least 1, not {commit_every}")
        self.rows = _Target(rows)
        self.dead = _Target(dead_letters) if dead_letters is not None else None
        self.commit_every = commit_every
        self._pending = 0
        self._positions = Positions()  # after the batches handed over so far
        self.commits: list[Commit] = []
        self.skipped = 0  # records seen again that a table had committed already

    def resume(self) -> Positions:
        """Where the job resumes: each key's lower position of the two tables (records
        below it are in both tables already)."""
        rows = self.rows.committed
        if self.dead is None:
            return rows
        dead = self.dead.committed
        keys = set(rows.next) | set(dead.next)
        return Positions({k: min(rows[k], dead[k]) for k in keys})

    def committed(self, key: str) -> int:
        """The higher position of ``key`` the tables committed (records at or after the
        lower one are checked record by record)."""
        return max(self.rows.committed[key], self.dead.committed[key] if self.dead else 0)

    @classmethod
    def open(cls, output: Output, *, dead_letters: bool = True) -> TableWriter:
        """The writer of ``output``'s table and (``dead_letters``) its dead letters' table,
        committing every ``output.commit_every`` batches (default 1)."""
        from wirearrow.tables import open_sinks

        rows, dead = open_sinks(output, dead_letters)
        return cls(rows, dead, commit_every=output.commit_every or 1)

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        # What is staged is committed only when the block ended normally: after an error
        # the batches handed over may not be whole, and a restarted job writes them again.
        if kind is None:
            self.close()

    def write(
        self,
        decoded: Decoded | tuple[pa.Table | pa.RecordBatch, pa.Table | None, Counts],
        keys: str | Sequence[str] | np.ndarray,
        positions: Any,
        ends: Any = None,
    ) -> list[Commit]:
        """Hand over one decoded batch (what :meth:`~wirearrow.Transcoder.decode` returned
        with ``record_index=True``: its rows carry each row's record in the batch; the dead
        letters their ``index``); each record's source ``keys`` (one key for all, or one per
        record) and ``positions``; ``ends``: the position after each record (default:
        position + 1, as Kafka offsets). Returns the commits made (none until
        ``commit_every`` batches are in)."""
        rows, dead_letters, counts = decoded
        rows = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        n = counts.records_in
        pos = np.asarray(positions, dtype=np.int64)
        after = pos + 1 if ends is None else np.asarray(ends, dtype=np.int64)
        key_list = [keys] * n if isinstance(keys, str) else [str(k) for k in keys]
        if not (len(key_list) == len(pos) == len(after) == n):
            raise ValueError(
                f"the batch has {n} records: give one key, position (and end) per record"
            )
        advanced: dict[str, int] = {}
        for k, e in zip(key_list, after.tolist(), strict=True):
            if e > advanced.get(k, -1):
                advanced[k] = e
        self._positions = self._positions.advanced(advanced)
        if RECORD_INDEX not in rows.column_names:
            raise ValueError(f"the rows need the {RECORD_INDEX} column (decode(record_index=True))")
        row_new = self._new(self.rows.committed, key_list, pos)
        index = rows.column(RECORD_INDEX).to_numpy()
        kept_rows = rows.drop_columns([RECORD_INDEX])
        if row_new is not None:
            kept_rows = kept_rows.filter(pa.array(row_new[index]))
        self.rows.stage(kept_rows)
        if self.dead is not None and dead_letters is not None:
            dead_new = self._new(self.dead.committed, key_list, pos)
            kept_dead = dead_letters
            if dead_new is not None and dead_letters.num_rows:
                kept_dead = dead_letters.filter(pa.array(dead_new[dead_letters.column("index").to_numpy()]))
            if kept_dead.num_rows or self.dead.schema is None:
                self.dead.stage(kept_dead)
        skipped = int(n - (row_new.sum() if row_new is not None else n))
        self.skipped += skipped
        # What each commit's summary says: the batches' counts (records seen again included).
        self.rows.counts = self.rows.counts + counts
        if self.dead is not None:
            self.dead.counts = self.dead.counts + counts
        self._pending += 1
        if self._pending >= self.commit_every:
            return self.commit()
        return []

    @staticmethod
    def _new(committed: Positions, keys: list[str], positions: np.ndarray) -> np.ndarray | None:
        """Which records ``committed`` does not cover yet (None: all of them)."""
        if not committed:
            return None
        start = np.fromiter((committed[k] for k in keys), dtype=np.int64, count=len(keys))
        mask = positions >= start
        return None if mask.all() else mask

    def commit(self) -> list[Commit]:
        """Commit what is staged (the rows' table first, then the dead letters'), with the
        positions after every batch handed over."""
        self._pending = 0
        done = [self.rows.commit(self._positions)]
        if self.dead is not None:
            done.append(self.dead.commit(self._positions))
        self.commits += done
        return done

    def close(self) -> list[Commit]:
        """Commit what is left."""
        if self._pending or self.rows.staged or (self.dead is not None and self.dead.staged):
            return self.commit()
        return []
