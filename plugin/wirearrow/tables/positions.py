"""Positions: how far a job's commits have gone in its sources, as one value a commit records.

A position is a source key and the next position in it not yet committed: for a Kafka
topic-partition the next offset (``kafka_key("bids", 3)`` -> 1_204), for a file the byte
after the last committed record (``file_key(path)``), for a job of numbered batches the
next batch (``batch_key(job)``). Every commit records the whole map of its ``app_id``
(the positions before it, advanced by what it holds), so the newest commit alone says
where a restarted job resumes and which of its records a retried job must skip.

Iceberg keeps the map in the snapshot summary (``wirearrow.positions.APP_ID``, JSON, as
Kafka Connect's Iceberg sink keeps its offsets); Delta in the commit's app transactions
(one ``Transaction(APP_ID/KEY, next)`` per key, Delta's own idempotent-write record) and in
the commit info; Parquet files in their footer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "COMMIT_ID_KEY",
    "FILE_COLUMNS",
    "KAFKA_COLUMNS",
    "POSITIONS_KEY",
    "Positions",
    "SourceColumns",
    "batch_key",
    "file_key",
    "kafka_key",
    "parse_kafka_key",
    "source_columns",
]

POSITIONS_KEY = "wirearrow.positions"  # + "." + app_id: the property of a commit
COMMIT_ID_KEY = "wirearrow.commit-id"  # + "." + app_id: a commit's id (TableSink.commit)


def kafka_key(topic: str, partition: int) -> str:
    """The key of a Kafka topic-partition: its next position is the next offset."""
    return f"kafka:{topic}:{int(partition)}"


def parse_kafka_key(key: str) -> tuple[str, int] | None:
    """``(topic, partition)`` of a :func:`kafka_key`, else None."""
    kind, _, rest = key.partition(":")
    topic, _, partition = rest.rpartition(":")
    if kind != "kafka" or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def file_key(path: str | os.PathLike[str]) -> str:
    """The key of an input file (its absolute path): its next position is a byte offset."""
    return "file:" + os.path.abspath(os.fspath(path))


def batch_key(job: str) -> str:
    """The key of a job of numbered batches: its next position is the next batch number."""
    return f"batch:{job}"


@dataclass(frozen=True)
class Positions:
    """For each source key, the next position not yet committed (0: nothing committed).

    Immutable; :meth:`advanced` gives the positions after a commit. ``commits``: how many
    commits of this app id the table held when these were read (for the reports)."""

    next: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        clean: dict[str, int] = {}
        for key, value in dict(self.next).items():
            if not isinstance(key, str) or not key:
                raise TypeError(f"a position's key is a non-empty string, not {key!r}")
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
                raise ValueError(f"position {key!r} must be an integer >= 0, not {value!r}")
            clean[key] = int(value)
        object.__setattr__(self, "next", dict(sorted(clean.items())))

    def __getitem__(self, key: str) -> int:
        return self.next.get(key, 0)

    def __bool__(self) -> bool:
        return bool(self.next)

    def __len__(self) -> int:
        return len(self.next)

    def advanced(self, other: Positions | Mapping[str, int]) -> Positions:
        """These positions moved forward to ``other``'s, key by key (never backwards: a
        commit cannot un-commit what an earlier one recorded)."""
        given = other.next if isinstance(other, Positions) else other
        merged = dict(self.next)
        for key, value in given.items():
            merged[key] = max(merged.get(key, 0), int(value))
        return Positions(merged)

    def covers(self, key: str, position: int) -> bool:
        """Is the record at ``position`` of ``key`` committed already?"""
        return position < self.next.get(key, 0)

    def to_json(self) -> str:
        return json.dumps(self.next, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> Positions:
        if not text:
            return cls()
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError(f"positions must be a JSON object, not {text[:80]!r}")
        return cls(value)

    # -- Kafka -------------------------------------------------------------------------------

    def kafka_offsets(self) -> dict[str, dict[int, int]]:
        """``{topic: {partition: next offset}}`` of the Kafka keys (the form of
        ``ray.data.read_kafka``'s ``start_offset``)."""
        out: dict[str, dict[int, int]] = {}
        for key, value in self.next.items():
            parsed = parse_kafka_key(key)
            if parsed is not None:
                out.setdefault(parsed[0], {})[parsed[1]] = value
        return out

    @classmethod
    def of_kafka(
        cls, topics: pa.Array | Iterable[str], partitions: Any, offsets: Any
    ) -> Positions:
        """The positions after records ``(topic, partition, offset)``: for each
        topic-partition one past its largest offset."""
        table = pa.table(
            {
                "topic": pa.array(topics, pa.utf8()) if not isinstance(topics, pa.Array | pa.ChunkedArray) else topics,
                "partition": partitions,
                "offset": offsets,
            }
        )
        if not table.num_rows:
            return cls()
        grouped = table.group_by(["topic", "partition"]).aggregate([("offset", "max")])
        return cls(
            {
                kafka_key(t, p): int(o) + 1
                for t, p, o in zip(
                    grouped.column("topic").to_pylist(),
                    grouped.column("partition").to_pylist(),
                    grouped.column("offset_max").to_pylist(),
                    strict=True,
                )
            }
        )

    def uncommitted_kafka(self, topics: Any, partitions: Any, offsets: Any) -> np.ndarray:
        """A boolean mask: which records ``(topic, partition, offset)`` are not committed
        yet (those a restarted or retried job must still write)."""
        topic_list = topics.to_pylist() if hasattr(topics, "to_pylist") else list(topics)
        part = np.asarray(partitions.to_numpy() if hasattr(partitions, "to_numpy") else partitions)
        off = np.asarray(offsets.to_numpy() if hasattr(offsets, "to_numpy") else offsets)
        start = np.fromiter(
            (self.next.get(kafka_key(t, int(p)), 0) for t, p in zip(topic_list, part, strict=True)),
            dtype=np.int64,
            count=len(topic_list),
        )
        return off.astype(np.int64) >= start


@dataclass(frozen=True)
class SourceColumns:
    """The columns of rows (or of dead letters' ``source`` struct) that say where each
    record came from: ``kind`` "kafka" (``topic``, ``partition``, ``offset`` by default: what
    ``ray.data.read_kafka`` gives and ``carry`` keeps) or "file" (``file``, ``offset``: what
    ``wirearrow.ray.read_delimited(include_location=True)`` gives)."""

    kind: str
    columns: tuple[str, ...]

    def __post_init__(self) -> None:
        want = {"kafka": 3, "file": 2}.get(self.kind)
        if want is None:
            raise ValueError(f"kind must be 'kafka' or 'file', not {self.kind!r}")
        if len(self.columns) != want:
            raise ValueError(f"{self.kind} sources take {want} columns, not {self.columns!r}")

    def check(self, names: list[str]) -> None:
        """KeyError unless every source column is among ``names``."""
        missing = [c for c in self.columns if c not in names]
        if missing:
            raise KeyError(
                f"no column {missing[0]!r} says where the records came from (columns: "
                f"{names}); carry it"
            )

    def keys(self, table: pa.Table) -> pa.Array:
        """Each row's source key (:func:`kafka_key` / :func:`file_key`'s text)."""
        import pyarrow.compute as pc

        self.check(table.column_names)
        if self.kind == "kafka":
            topic, partition = (table.column(c).cast(pa.utf8()).combine_chunks() for c in self.columns[:2])
            return pc.binary_join_element_wise("kafka", topic, partition, ":")
        # one file_key per distinct path, not per row
        paths = table.column(self.columns[0]).cast(pa.utf8()).combine_chunks()
        if not len(paths):
            return pa.array([], pa.utf8())
        encoded = paths.dictionary_encode()
        keys = pa.array([file_key(p) for p in encoded.dictionary.to_pylist()], pa.utf8())
        return keys.take(encoded.indices)

    def offsets(self, table: pa.Table) -> np.ndarray:
        return np.asarray(table.column(self.columns[-1]).to_numpy(zero_copy_only=False), np.int64)

    def positions(self, table: pa.Table) -> Positions:
        """The positions after the rows: for each key, one past its largest offset."""
        if not table.num_rows:
            return Positions()
        grouped = pa.table({"key": self.keys(table), "offset": self.offsets(table)}).group_by(
            "key"
        ).aggregate([("offset", "max")])  # fmt: skip
        return Positions(dict(zip(
            grouped.column("key").to_pylist(),
            (o + 1 for o in grouped.column("offset_max").to_pylist()), strict=True,
        )))  # fmt: skip

    def uncommitted(self, table: pa.Table, committed: Positions) -> np.ndarray:
        """Which rows ``committed`` does not cover (a boolean mask)."""
        if not table.num_rows:
            return np.zeros(0, dtype=bool)
        keys = self.keys(table).dictionary_encode()  # a lookup per source
        starts = np.array([committed[k] for k in keys.dictionary.to_pylist()], dtype=np.int64)
        start = starts[np.asarray(keys.indices.to_numpy(zero_copy_only=False), np.int64)]
        return self.offsets(table) >= start


KAFKA_COLUMNS = SourceColumns("kafka", ("topic", "partition", "offset"))
FILE_COLUMNS = SourceColumns("file", ("file", "offset"))


def source_columns(source: str | SourceColumns) -> SourceColumns:
    """``"kafka"``, ``"file"`` or a :class:`SourceColumns` as itself."""
    if isinstance(source, SourceColumns):
        return source
    found = {"kafka": KAFKA_COLUMNS, "file": FILE_COLUMNS}.get(source)
    if found is None:
        raise ValueError(f"source must be 'kafka', 'file' or a SourceColumns, not {source!r}")
    return found
