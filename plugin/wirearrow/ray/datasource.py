"""Files of length-delimited records as a Ray Dataset, split across read tasks at record
boundaries (docs/ray.md, Reading files)."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import ray
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from wirearrow.sources.compression import compression_name
from wirearrow.sources.files import FilePiece, file_pieces, list_files, piece_reader
from wirearrow.sources.framing import FrameReader, Frames, check_framing, corrupt_reason

__all__ = ["READ_ERROR", "DelimitedDatasource", "read_delimited"]

# Read tasks: never smaller than this (a task costs ~10 ms to schedule), nor larger than
# the max, whatever parallelism Ray asks for. Blocks inside a task are at most BLOCK_BYTES.
MIN_TASK_BYTES = 8 * 1024 * 1024
MAX_TASK_BYTES = 256 * 1024 * 1024
BLOCK_BYTES = 16 * 1024 * 1024
# The indexing pass reads files in chunks of this size (sequential, one open per file).
INDEX_CHUNK_BYTES = 16 * 1024 * 1024
# With truncated="dead_letter": the column that says why a row is not a record (null for
# records). Transcode turns such a row into one failure and a dead letter with that reason.
READ_ERROR = "read_error"
TRUNCATED = ("raise", "dead_letter")


def _read_pieces(
    fs: pafs.FileSystem, pieces: Sequence[FilePiece], framing: str, located: bool, truncated: str
) -> Iterator[pa.Table]:
    """A read task: the records of its pieces, as tables of at most ~BLOCK_BYTES."""
    for piece in pieces:
        # Raw bytes, streamed when compressed (the decompression is ours: a break is a tail).
        raw = (
            fs.open_input_file(piece.path)
            if piece.compression == "none"
            else fs.open_input_stream(piece.path, compression=None)
        )
        with raw:
            reader = piece_reader(raw, piece, framing, block_bytes=BLOCK_BYTES)
            yield from _blocks(reader, located, truncated)


def _blocks(reader: FrameReader, located: bool, truncated: str) -> Iterator[pa.Table]:
    path, errors = reader.name, truncated == "dead_letter"
    for frames in reader:
        yield _block(frames, path, located, errors, reader.framing)
    tail = reader.tail
    if tail is None:
        return
    if not errors:
        raise ValueError(f"{path}: {tail.reason}")
    columns: dict[str, pa.Array] = {"value": pa.array([tail.raw], pa.binary())}
    if located:
        columns["file"] = pa.array([path], pa.string())
        columns["offset"] = pa.array([tail.offset], pa.int64())
    columns[READ_ERROR] = pa.array([f"{path}: {tail.reason}"], pa.string())
    yield pa.table(columns)


def _block(frames: Frames, path: str, located: bool, errors: bool, framing: str) -> pa.Table:
    corrupt_at = frames.frame_starts[frames.corrupt] if len(frames.corrupt) else None
    if corrupt_at is not None and not errors:
        # A TFRecord whose data CRC fails: as strict as a truncated file (_blocks).
        raise ValueError(f"{path}: {corrupt_reason(framing, int(corrupt_at[0]))}")
    columns = {"value": frames.records()}  # one copy, prefixes dropped
    if located:
        columns["file"] = pa.array(np.full(len(frames), path, dtype=object), pa.string())
        columns["offset"] = pa.array(frames.frame_starts)
    if errors:
        reasons = pa.nulls(len(frames), pa.string())
        if corrupt_at is not None:
            # Each such record is a row of its bytes whose read_error says why, like a tail.
            texts = np.full(len(frames), None, dtype=object)
            texts[frames.corrupt] = [f"{path}: {corrupt_reason(framing, int(at))}" for at in corrupt_at]
            reasons = pa.array(texts, pa.string())
        columns[READ_ERROR] = reasons
    return pa.table(columns)


class DelimitedDatasource(Datasource):
    """Files of length-delimited protobuf records -> blocks with a ``value`` column (the
    reader of :func:`read_delimited`): files larger than a task's share are split at record
    boundaries found at planning time, small files grouped into one task."""

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        framing: str = "varint",
        *,
        compression: str = "auto",
        filesystem: Any | None = None,
        include_location: bool = False,
        bytes_per_task: int | None = None,
        truncated: str = "raise",
    ) -> None:
        super().__init__()
        self._framing = check_framing(framing)
        self._compression = compression_name(compression)
        if truncated not in TRUNCATED:
            raise ValueError(f"truncated must be one of {TRUNCATED}, not {truncated!r}")
        self._truncated = truncated
        self._files = list_files(paths, filesystem)
        self._total = sum(size for _, _, size in self._files)
        self._include_location = include_location
        self._bytes_per_task = bytes_per_task
        self._plans: dict[int, list[list[tuple[pafs.FileSystem, FilePiece]]]] = {}

    def get_name(self) -> str:
        return f"ReadDelimited({self._framing})"

    def estimate_inmemory_data_size(self) -> int | None:
        return self._total

    def schema(self) -> pa.Schema:
        fields = [pa.field("value", pa.binary())]
        if self._include_location:
            fields += [pa.field("file", pa.string()), pa.field("offset", pa.int64())]
        if self._truncated == "dead_letter":
            fields.append(pa.field(READ_ERROR, pa.string()))
        return pa.schema(fields)

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        share = self.default_share
        if self._bytes_per_task is None and parallelism != len(self.plan(share)):
            # Asked for another number of tasks (override_num_blocks=): honour it, within
            # the clamp.
            share = min(max(math.ceil(self._total / max(parallelism, 1)), MIN_TASK_BYTES), MAX_TASK_BYTES)
        return [self._task(group, per_task_row_limit) for group in self.plan(share)]

    @property
    def default_share(self) -> int:
        """Bytes per read task: ``bytes_per_task``, or the total over 4 tasks per CPU of the
        cluster, within [MIN_TASK_BYTES, MAX_TASK_BYTES]."""
        if self._bytes_per_task is not None:
            return max(int(self._bytes_per_task), 1)
        cpus = ray.cluster_resources().get("CPU", 1.0) if ray.is_initialized() else 1.0
        share = math.ceil(self._total / max(4 * cpus, 1))
        return min(max(share, MIN_TASK_BYTES), MAX_TASK_BYTES)

    def plan(self, share: int) -> list[list[tuple[pafs.FileSystem, FilePiece]]]:
        """The read tasks for ``share`` bytes each: pieces packed into groups of ~share.
        Cached: Ray asks more than once, and cutting large files reads them."""
        groups = self._plans.get(share)
        if groups is not None:
            return groups
        groups = []
        group: list[tuple[pafs.FileSystem, FilePiece]] = []
        group_bytes = 0
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

    def _pieces(self, share: int) -> list[tuple[pafs.FileSystem, FilePiece]]:
        def plan(item: tuple[pafs.FileSystem, str, int]) -> list[FilePiece]:
            fs, path, size = item
            pieces, tail = file_pieces(
                path, size, self._framing, self._compression, share,
                functools.partial(fs.open_input_stream, path, compression=None),
                block_bytes=INDEX_CHUNK_BYTES,
            )
            if tail is not None:
                if self._truncated == "raise":
                    raise ValueError(f"{path}: {tail.reason}")
                # The last piece runs to the end of the file: its reader finds the tail again
                # and passes it on as a read_error row.
                pieces[-1] = dataclasses.replace(pieces[-1], end=size, records=None)
            return pieces

        big = sum(size > share for _, _, size in self._files)
        with ThreadPoolExecutor(max_workers=max(1, min(8, big))) as pool:
            planned = list(pool.map(plan, self._files))
        return [
            (fs, piece)
            for (fs, _, _), pieces in zip(self._files, planned, strict=True)
            for piece in pieces
        ]

    def _task(
        self, group: list[tuple[pafs.FileSystem, FilePiece]], per_task_row_limit: int | None
    ) -> ReadTask:
        pieces = [piece for _, piece in group]
        counts = [p.records for p in pieces]
        metadata = BlockMetadata(
            num_rows=None if None in counts else sum(counts),  # type: ignore[arg-type]
            size_bytes=sum(p.end - p.start for p in pieces),
            exec_stats=None,
            input_files=tuple(dict.fromkeys(p.path for p in pieces)),
        )
        read = functools.partial(
            _read_pieces, group[0][0], pieces, self._framing, self._include_location,
            self._truncated,
        )
        return ReadTask(read, metadata, schema=self.schema(), per_task_row_limit=per_task_row_limit)


def read_delimited(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    framing: str = "varint",
    *,
    compression: str = "auto",
    filesystem: Any | None = None,
    include_location: bool = False,
    bytes_per_task: int | None = None,
    truncated: str = "raise",
    **read_args: Any,
) -> ray.data.Dataset:
    """A Dataset of the records of files of length-delimited records (column ``value``;
    ``file`` and ``offset`` with ``include_location``), from files, directories or globs,
    local or any URI pyarrow reaches. A cut file or a bad TFRecord raises ValueError naming
    the file and byte, or with ``truncated="dead_letter"`` is a row whose ``read_error``
    says why. Other keywords go to ``ray.data.read_datasource`` (docs/ray.md)."""
    if not ray.is_initialized():
        ray.init()  # the default share depends on the cluster's CPUs
    source = DelimitedDatasource(
        paths,
        framing,
        compression=compression,
        filesystem=filesystem,
        include_location=include_location,
        bytes_per_task=bytes_per_task,
        truncated=truncated,
    )
    if "override_num_blocks" not in read_args and "parallelism" not in read_args:
        # Ray would otherwise aim at ~1 MiB blocks (200 per dataset) and slice each task's
        # output into many small blocks: measured 2x slower reads here than one block per
        # ~8-50 MiB task. Planning now also indexes large files, once (cached).
        read_args["override_num_blocks"] = len(source.plan(source.default_share))
    return ray.data.read_datasource(source, **read_args)
