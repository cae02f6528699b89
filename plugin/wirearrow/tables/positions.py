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

__all__ = ["POSITIONS_KEY", "Positions", "batch_key", "file_key", "kafka_key", "parse_kafka_key"]

POSITIONS_KEY = "wirearrow.positions"  # + "." + app_id: the property of a commit


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
