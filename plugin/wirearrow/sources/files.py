"""Files of framed records on any filesystem pyarrow reaches, for parallel readers: the
filesystem of a path or URI, the files that paths, directories and globs name, and the
record-aligned pieces of each file a reader reads on its own."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from wirearrow.sources.compression import compression_of, open_decompressed
from wirearrow.sources.framing import BLOCK_BYTES, FrameReader, Tail, plan_pieces

__all__ = ["FilePiece", "file_pieces", "filesystem_of", "list_files", "piece_reader"]

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


def list_files(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], filesystem: Any = None
) -> list[tuple[pafs.FileSystem, str, int]]:
    """[(filesystem, path, size)] of the files ``paths`` name: files, directories (recursive,
    without the files whose name starts with ``.`` or ``_``, as Ray's and Spark's readers
    skip them) and globs, each list sorted. FileNotFoundError when a path or all of them
    match nothing."""
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
            matched = [i for i in infos if i.type == pafs.FileType.File and fnmatch.fnmatch(i.path, path)]
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
                        part.startswith((".", "_")) for part in i.path[len(path) :].strip("/").split("/")
                    )
                ]
        found.extend((fs, i.path, int(i.size or 0)) for i in sorted(matched, key=lambda i: i.path))
    if not found:
        raise FileNotFoundError(f"no files match {paths!r}")
    return found


@dataclass(frozen=True)
class FilePiece:
    """Whole records of one file: its bytes ``[start, end)``, ``records`` of them (None: not
    counted). A compressed file is one piece, ``end`` its size: it cannot be read from an
    offset."""

    path: str
    start: int
    end: int
    records: int | None
    compression: str = "none"


def file_pieces(
    path: str,
    size: int,
    framing: str,
    compression: str,
    piece_bytes: int,
    open_file: Callable[[], Any],
    *,
    block_bytes: int = BLOCK_BYTES,
) -> tuple[list[FilePiece], Tail | None]:
    """One file of ``size`` bytes cut into record-aligned pieces of about ``piece_bytes``,
    and the tail its records leave (None: it ends on a record). A file no larger than a
    piece, or compressed (``compression``: "auto", by its suffix, or a codec), is one piece;
    a larger one is cut by one sequential pass over its frames (:func:`plan_pieces`) through
    ``open_file()``, which opens its raw bytes."""
    codec = compression_of(path, compression)
    if codec != "none" or size <= piece_bytes:
        return [FilePiece(path, 0, size, None, codec)], None
    with open_file() as f:
        pieces, tail = plan_pieces(f, framing, piece_bytes, block_bytes=block_bytes, name=path)
    return [FilePiece(path, p.start, p.end, p.records) for p in pieces], tail


def piece_reader(
    raw: Any, piece: FilePiece, framing: str, *, block_bytes: int = BLOCK_BYTES
) -> FrameReader:
    """The records of ``piece`` from ``raw``, its file opened as raw bytes (seekable unless
    compressed), a block at a time. A compressed file is decompressed as it is read: frame
    offsets are then in the decompressed bytes, and a break in it is the reader's tail."""
    if piece.compression == "none":
        return FrameReader(
            raw, framing, block_bytes=block_bytes, start=piece.start, end=piece.end, name=piece.path
        )
    stream = open_decompressed(raw, piece.compression, name="the file")
    return FrameReader(stream, framing, block_bytes=block_bytes, name=piece.path)
