"""Files of length-delimited records as a Ray Dataset, split across read tasks at record
boundaries."""

from __future__ import annotations

import fnmatch
import functools
import math
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import ray
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from wirearrow.sources.compression import compression_name, compression_of, open_decompressed
from wirearrow.sources.framing import (
    FrameReader,
    Frames,
    check_framing,
    corrupt_reason,
    plan_pieces,
)

__all__ = ["READ_ERROR", "DelimitedDatasource", "filesystem_of", "read_delimited"]

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
_GLOB = ("*", "?", "[")


def filesystem_of(path: str, filesystem: Any | None = None) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path on it) of a local path or URI (s3://, gs://, file://...);
    ``filesystem``: a pyarrow or fsspec one, for paths without a scheme."""
    if filesystem is not None:
        if not isinstance(filesystem, pafs.FileSystem):
            filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
        return filesystem, path
    if "://" not in path:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))
    return pafs.FileSystem.from_uri(path)


def _expand(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], filesystem: Any
) -> list[tuple[pafs.FileSystem, str, int]]:
    """[(filesystem, path, size)] of the files named by paths, directories (recursive,
    without hidden and underscore files, as Ray's readers) and globs."""
    items = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    if not items:
        raise ValueError("no paths given")
    found: list[tuple[pafs.FileSystem, str, int]] = []
    for item in items:
        fs, path = filesystem_of(os.fspath(item), filesystem)
        if any(ch in path for ch in _GLOB):
            cut = min(path.index(ch) for ch in _GLOB if ch in path)
            base = path[:cut].rsplit("/", 1)[0] or "/"
            infos = fs.get_file_info(pafs.FileSelector(base, recursive=True))
            matched = [
                i for i in infos if i.type == pafs.FileType.File and fnmatch.fnmatch(i.path, path)
            ]
        else:
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.NotFound:
                raise FileNotFoundError(path)
            matched = [info]
            if info.type == pafs.FileType.Directory:
                matched = [
                    i
                    for i in fs.get_file_info(pafs.FileSelector(path, recursive=True))
                    if i.type == pafs.FileType.File
                    and not any(
                        part.startswith((".", "_"))
                        for part in i.path[len(path) :].strip("/").split("/")
                    )
                ]
        found.extend((fs, i.path, int(i.size or 0)) for i in sorted(matched, key=lambda i: i.path))
    if not found:
        raise FileNotFoundError(f"no files match {paths!r}")
    return found


@dataclass(frozen=True)
class _Piece:
    """Whole records of one file: bytes [start, end), ``records`` of them (None: not
    counted). A compressed file is one piece: it cannot be read from an offset."""

    path: str
    start: int
    end: int
    records: int | None
    compression: str = "none"


def _index(
    fs: pafs.FileSystem, path: str, size: int, framing: str, task_bytes: int, truncated: str = "raise"
) -> list[_Piece]:
    """Split a file into pieces of about ``task_bytes``, cut at record boundaries (one
    sequential pass: :func:`wirearrow.sources.framing.plan_pieces`)."""
    with fs.open_input_stream(path, compression=None) as f:
        pieces, tail = plan_pieces(f, framing, task_bytes, block_bytes=INDEX_CHUNK_BYTES, name=path)
    planned = [_Piece(path, p.start, p.end, p.records) for p in pieces]
    if tail is not None:
        if truncated == "raise":
            raise ValueError(f"{path}: {tail.reason}")
        # The last piece runs to the end of the file: its reader finds the tail again and
        # passes it on as a read_error row.
        planned[-1] = _Piece(path, planned[-1].start, size, None)
    return planned


def _read_pieces(
    fs: pafs.FileSystem, pieces: Sequence[_Piece], framing: str, located: bool, truncated: str
) -> Iterator[pa.Table]:
    """A read task: the records of its pieces, as tables of at most ~BLOCK_BYTES."""
    for piece in pieces:
        if piece.compression != "none":
            # A stream, decompressed as it is read (bounded memory); offsets are in the
            # decompressed bytes.
            with fs.open_input_stream(piece.path, compression=None) as f:
                stream = open_decompressed(f, piece.compression, name="the file")
                yield from _blocks(FrameReader(stream, framing, block_bytes=BLOCK_BYTES,
                                               name=piece.path), located, truncated)
        else:
            with fs.open_input_file(piece.path) as f:
                yield from _blocks(FrameReader(f, framing, block_bytes=BLOCK_BYTES,
                                               start=piece.start, end=piece.end,
                                               name=piece.path), located, truncated)


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
    reader of :func:`read_delimited`, which says what each argument does). Files larger
    than a task's share are split at record boundaries found by one indexing pass, at
    planning time; small files are grouped into one task."""

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
        self._files = _expand(paths, filesystem)
        self._total = sum(size for _, _, size in self._files)
        self._include_location = include_location
        self._bytes_per_task = bytes_per_task
        self._plans: dict[int, list[list[tuple[pafs.FileSystem, _Piece]]]] = {}

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
        cluster (reads stay ahead without tiny tasks), within [MIN_TASK_BYTES, MAX_TASK_BYTES]."""
        if self._bytes_per_task is not None:
            return max(int(self._bytes_per_task), 1)
        cpus = ray.cluster_resources().get("CPU", 1.0) if ray.is_initialized() else 1.0
        share = math.ceil(self._total / max(4 * cpus, 1))
        return min(max(share, MIN_TASK_BYTES), MAX_TASK_BYTES)

    def plan(self, share: int) -> list[list[tuple[pafs.FileSystem, _Piece]]]:
        """The read tasks for ``share`` bytes each: pieces (split parts of large files,
        small files) packed into groups of ~share. Cached: Ray asks more than once, and
        indexing reads the large files."""
        groups = self._plans.get(share)
        if groups is not None:
            return groups
        groups = []
        group: list[tuple[pafs.FileSystem, _Piece]] = []
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

    def _pieces(self, share: int) -> list[tuple[pafs.FileSystem, _Piece]]:
        def plan(item: tuple[pafs.FileSystem, str, int]) -> list[_Piece]:
            fs, path, size = item
            codec = compression_of(path, self._compression)
            if codec != "none":
                return [_Piece(path, 0, size, None, codec)]
            if size <= share:
                return [_Piece(path, 0, size, None)]
            return _index(fs, path, size, self._framing, share, self._truncated)

        big = sum(size > share for _, _, size in self._files)
        with ThreadPoolExecutor(max_workers=max(1, min(8, big))) as pool:
            planned = list(pool.map(plan, self._files))
        return [
            (fs, piece)
            for (fs, _, _), pieces in zip(self._files, planned, strict=True)
            for piece in pieces
        ]

    def _task(
        self, group: list[tuple[pafs.FileSystem, _Piece]], per_task_row_limit: int | None
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
    """A Dataset of the records of files of length-delimited records: column ``value``.

    ``paths``: files, directories (recursive) or globs, local or any URI pyarrow supports;
    ``filesystem``: a pyarrow or fsspec one for paths without a scheme. ``framing``
    ("varint", "u32le", "u32be", "tfrecord") and ``compression`` ("auto": by suffix,
    "none" or a codec) as ``wirearrow.read_delimited`` and a
    :class:`~wirearrow.RecordFormat` take them; a compressed file is one read task,
    streamed. ``include_location`` adds ``file`` and ``offset`` (of the length prefix;
    decompressed bytes) columns. ``bytes_per_task``: see
    :attr:`DelimitedDatasource.default_share`. Other keywords go to
    ``ray.data.read_datasource``. A file cut inside a record, a broken compressed file or a
    TFRecord whose CRC fails raises ValueError naming the file and byte; with
    ``truncated="dead_letter"`` each is a row whose ``read_error`` says why (null on
    records), one failure and a dead letter to ``transcode``. docs/ray.md has the details.
    """
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
