"""Compressed input files: which codec a file is in, and a bounded-memory stream of its
decompressed bytes for :class:`~wirearrow.sources.framing.FrameReader`.

Every reader of framed files (the command line, the Ray datasource, Beam's
``ReadFromDelimited``) opens compressed files through :func:`open_decompressed`, so they all
agree on names, suffixes and what a broken stream is. A compressed file cannot be read
from a byte offset: it is always read whole, by one reader.

A stream that is cut short (no end-of-stream marker) or corrupt does not raise out of
``read``: the decompressed bytes before the break are returned, then ``read`` returns
``b""`` and :attr:`DecompressedStream.broken` says why and where, so that the records
before the break are kept and the break is one accounted failure (the reader's
:class:`~wirearrow.sources.framing.Tail`). gzip, bzip2, xz and deflate are the standard
library's; zstd needs the ``zstandard`` package (``pip install "wirearrow[zstd]"``).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import zlib
from typing import Any

__all__ = [
    "INPUT_COMPRESSIONS",
    "DecompressedStream",
    "compression_name",
    "compression_of",
    "decompress",
    "open_decompressed",
    "strip_suffix",
]

# "auto": by the file name's suffix. The names are also Beam's CompressionTypes values
# ("uncompressed", "bzip2", "lzma", "deflate" are accepted for them).
INPUT_COMPRESSIONS = ("auto", "none", "gzip", "bz2", "zstd", "xz", "deflate")
_ALIASES = {"uncompressed": "none", "bzip2": "bz2", "lzma": "xz", "gz": "gzip", "zst": "zstd"}
_SUFFIXES = {
    ".gz": "gzip",
    ".gzip": "gzip",
    ".bz2": "bz2",
    ".zst": "zstd",
    ".zstd": "zstd",
    ".xz": "xz",
    ".lzma": "xz",
    ".deflate": "deflate",
}
# zstd's streaming decoder returns everything one input chunk decodes to: feeding it
# this little at a time bounds one read's memory (a zstd block is at most 128 KiB out of
# at least 4 bytes in: 64 MiB at worst, a few times FEED_BYTES for real data).
FEED_BYTES = 2048
# Compressed bytes read from the file at once (by the stdlib codecs' own buffering too).
READ_BYTES = 1 << 20


def compression_name(compression: str | None) -> str:
    """The canonical name of a compression option (ValueError for an unknown one)."""
    name = "auto" if compression is None else str(compression).lower()
    name = _ALIASES.get(name, name)
    if name not in INPUT_COMPRESSIONS:
        raise ValueError(
            f"compression must be one of {', '.join(INPUT_COMPRESSIONS)}, not {compression!r}"
        )
    return name


def compression_of(path: str | os.PathLike[str], compression: str | None = "auto") -> str:
    """The codec of the file at ``path``: ``compression``, or with "auto" the one its
    suffix names ("none" without one)."""
    name = compression_name(compression)
    if name != "auto":
        return name
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    return _SUFFIXES.get(suffix, "none")


def strip_suffix(path: str) -> str:
    """``path`` without a compression suffix (``events.bin.gz`` -> ``events.bin``)."""
    stem, suffix = os.path.splitext(path)
    return stem if suffix.lower() in _SUFFIXES else path


class DecompressedStream:
    """The decompressed bytes of a compressed binary stream, ``read(n)`` at a time.

    ``raw``: anything with ``read(n)``. After ``read`` returns ``b""``, ``broken`` is None
    when the stream ended cleanly, else the reason it ended early (truncated or corrupt),
    naming ``name``, the codec and the decompressed byte offset of the break.
    """

    def __init__(self, raw: Any, compression: str, name: str = "the stream") -> None:
        self.compression = compression
        self.name = name
        self.broken: str | None = None
        self.position = 0  # decompressed bytes returned so far
        self._raw = raw
        self._decoder = _decoder(raw, compression)

    def read(self, n: int = -1) -> bytes:
        # read1 pieces, so that the bytes decoded before a break are returned, not lost
        # with the exception (a buffered read(n) drops what it gathered when it raises).
        want = n if n is not None and n >= 0 else 1 << 62
        parts: list[bytes] = []
        got = 0
        while got < want and self.broken is None:
            try:
                chunk = self._decoder.read1(min(want - got, READ_BYTES * 8))
            except EOFError:
                self._break("truncated", "ends before its end-of-stream marker")
                break
            except (OSError, zlib.error, lzma.LZMAError, _CorruptData) as err:
                if _is_read_error(err):
                    raise  # the file system's failure, not the data's
                self._break("corrupt", f"is not valid {self.compression} data ({err})")
                break
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
            self.position += len(chunk)
        return b"".join(parts)

    def _break(self, kind: str, why: str) -> None:
        self.broken = (
            f"{kind} {self.compression} stream: {self.name} {why}, at decompressed byte "
            f"{self.position:,} (the records before it are kept)"
        )

    def close(self) -> None:
        close = getattr(self._decoder, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> DecompressedStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_decompressed(raw: Any, compression: str, name: str = "the stream") -> DecompressedStream:
    """A :class:`DecompressedStream` over ``raw`` (its compressed bytes); ``compression``
    is a codec name (not "auto": resolve it with :func:`compression_of` first)."""
    name_ = compression_name(compression)
    if name_ in ("auto", "none"):
        raise ValueError(f"open_decompressed needs a codec, not {compression!r}")
    return DecompressedStream(raw, name_, name)


def decompress(buffer: object, compression: str, name: str = "the buffer") -> tuple[bytes, str | None]:
    """The decompressed bytes of a compressed buffer, and None or why it broke off (the
    bytes before a break are returned: their records are kept, as a file's would be)."""
    with open_decompressed(io.BytesIO(memoryview(buffer).cast("B")), compression, name) as stream:  # type: ignore[arg-type]
        data = stream.read()
        return data, stream.broken


# ---- codecs ---------------------------------------------------------------------------


class _CorruptData(Exception):
    """Bad compressed data, as :class:`_Incremental`'s decoders report it."""


def _decoder(raw: Any, compression: str) -> Any:
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if compression == "bz2":
        return bz2.BZ2File(raw, mode="rb")
    if compression == "xz":
        return lzma.LZMAFile(raw, mode="rb")
    if compression == "deflate":
        return _Incremental(raw, _zlib_frame)
    if compression == "zstd":
        return _Incremental(raw, _zstd_frame())
    raise AssertionError(compression)


def _is_read_error(err: BaseException) -> bool:
    # The stdlib codecs report bad data as OSError without an errno (BadGzipFile, "Invalid
    # data stream"); an OSError with one comes from reading the file itself.
    return isinstance(err, OSError) and err.errno is not None


def _zlib_frame() -> Any:
    return zlib.decompressobj(zlib.MAX_WBITS)


def _zstd_frame() -> Any:
    try:
        import zstandard
    except ImportError:
        raise ImportError(
            "reading .zst (zstd) files needs the zstandard package: "
            'pip install "wirearrow[zstd]" (or pip install zstandard)'
        ) from None
    decompressor = zstandard.ZstdDecompressor()
    return decompressor.decompressobj


class _Incremental:
    """``read(n)`` over a decompressobj-style decoder fed a little input at a time; a
    stream of several frames (``zstd -T``, concatenated files) is read across them."""

    def __init__(self, raw: Any, new_frame: Any) -> None:
        self._raw = raw
        self._new_frame = new_frame
        self._frame = new_frame()
        self._in_frame = False  # the current frame has been fed bytes and has not ended
        self._input = b""
        self._at = 0  # how much of _input has been fed
        self._output = bytearray()
        self._done = False
        self._error: Exception | None = None

    def read1(self, n: int = -1) -> bytes:
        """At most ``n`` bytes; an error after some output is raised on the next call."""
        want = n if n is not None and n >= 0 else 1 << 62
        if self._error is not None and not self._output:
            raise self._error
        while len(self._output) < want and not self._done and self._error is None:
            try:
                self._step()
            except (EOFError, _CorruptData) as err:
                if not self._output:
                    raise
                self._error = err
        take = bytes(self._output[:want])
        del self._output[:want]
        return take

    def _step(self) -> None:
        if self._at >= len(self._input):
            self._input, self._at = bytes(self._raw.read(READ_BYTES) or b""), 0
            if not self._input:
                self._done = True
                if self._in_frame:
                    raise EOFError("compressed stream ended before its end-of-stream marker")
                return
        # A view, not a slice: slicing the rest off each time copied the block quadratically.
        feed = memoryview(self._input)[self._at : self._at + FEED_BYTES]
        self._at += len(feed)
        try:
            self._output += self._frame.decompress(feed)
        except Exception as err:  # zlib.error, zstandard.ZstdError: the data is bad
            raise _CorruptData(str(err)) from err
        self._in_frame = True
        if self._frame.eof:
            # The frame ended: the rest of the input (if any) starts the next one.
            self._input = self._frame.unused_data + self._input[self._at :]
            self._at = 0
            self._frame = self._new_frame()
            self._in_frame = False
