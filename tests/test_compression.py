"""Compressed inputs: every codec reads back every record through FrameReader, a cut or
corrupt stream keeps the records before the break and is one tail naming where it broke,
and one read never holds more than a bounded amount of decompressed data."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import sys
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depth import examples
from wirearrow.sources.compression import (
    FEED_BYTES,
    compression_name,
    compression_of,
    open_decompressed,
    strip_suffix,
)
from wirearrow.sources.framing import FrameReader

try:  # an optional dependency (wirearrow[zstd]): the stdlib codecs are tested without it
    import zstandard
except ImportError:  # pragma: no cover - the test group installs it
    zstandard = None
needs_zstd = pytest.mark.skipif(zstandard is None, reason="zstandard is not installed")


def frame(records: list[bytes]) -> bytes:
    out = bytearray()
    for r in records:
        n = len(r)
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        out += r
    return bytes(out)


COMPRESS = {
    "gzip": gzip.compress,
    "bz2": bz2.compress,
    "xz": lzma.compress,
    "deflate": zlib.compress,
}
if zstandard is not None:
    COMPRESS["zstd"] = zstandard.ZstdCompressor().compress


def read_all(data: bytes, codec: str, block: int = 1 << 16) -> tuple[list[bytes], FrameReader]:
    stream = open_decompressed(io.BytesIO(data), codec, name="events.bin")
    reader = FrameReader(stream, "varint", block_bytes=block)
    return [r for frames in reader for r in frames.records().to_pylist()], reader


RECORDS = [b"record %d " % i * (i % 7 + 1) for i in range(3000)]


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_every_record_reads_back(codec: str) -> None:
    got, reader = read_all(COMPRESS[codec](frame(RECORDS)), codec, block=4096)
    assert got == RECORDS
    assert reader.tail is None
    assert reader.position == len(frame(RECORDS))


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_a_cut_stream_keeps_the_records_before_the_break(codec: str) -> None:
    data = COMPRESS[codec](frame(RECORDS))
    got, reader = read_all(data[: len(data) * 2 // 3], codec, block=4096)
    tail = reader.tail
    assert tail is not None
    assert tail.reason.startswith(f"truncated {codec} stream: events.bin ")
    assert "decompressed byte" in tail.reason
    # Whatever was decompressed before the cut is whole records, kept, in order; the
    # break starts right after the last of them.
    assert got == RECORDS[: len(got)]
    assert tail.offset == reader.position == len(frame(got))
    # A cut record's bytes are kept in the tail.
    assert frame(RECORDS)[tail.offset : tail.offset + tail.size] == tail.raw


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_corrupt_data_is_a_tail_not_an_exception(codec: str) -> None:
    data = bytearray(COMPRESS[codec](frame(RECORDS)))
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)  # zeros over the middle
    got, reader = read_all(bytes(data), codec, block=4096)
    # Bytes decoded before the codec notices (deflate's checksum is at the end) may be
    # wrong; what the reader promises is that the break is a tail, never an exception.
    assert len(got) < len(RECORDS)
    assert reader.tail is not None
    assert reader.tail.reason.split(" ")[1] == codec
    assert reader.tail.reason.startswith(("corrupt", "truncated"))


@needs_zstd
def test_several_zstd_frames_and_gzip_members_read_across() -> None:
    half = len(RECORDS) // 2
    a, b = frame(RECORDS[:half]), frame(RECORDS[half:])
    z = zstandard.ZstdCompressor()
    assert read_all(z.compress(a) + z.compress(b), "zstd")[0] == RECORDS
    assert read_all(gzip.compress(a) + gzip.compress(b), "gzip")[0] == RECORDS


def test_an_empty_stream_and_a_stream_of_nothing() -> None:
    for codec, compress in COMPRESS.items():
        got, reader = read_all(compress(b""), codec)
        assert got == [] and reader.tail is None
    if zstandard is not None:
        got, reader = read_all(b"", "zstd")
        assert got == [] and reader.tail is None


@needs_zstd
def test_a_zstd_bomb_is_read_in_bounded_steps() -> None:
    # 256 MiB of zeros compress to a few KiB; no single read may hold it all.
    bomb = zstandard.ZstdCompressor().compress(bytes(256 << 20))
    stream = open_decompressed(io.BytesIO(bomb), "zstd")
    decoder = stream._decoder
    first = stream.read(1 << 20)
    assert len(first) == 1 << 20
    # What the decoder holds back is what one small feed decodes to, not the file.
    assert len(decoder._output) <= FEED_BYTES * 32 * 1024
    assert len(decoder._output) < 256 << 20


@settings(max_examples=examples(5), deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=30), st.sampled_from(sorted(COMPRESS)),
       st.integers(1, 300), st.data())
def test_any_cut_keeps_a_prefix_of_the_records(records, codec, block, data) -> None:
    compressed = COMPRESS[codec](frame(records))
    cut = data.draw(st.integers(0, len(compressed)))
    got, reader = read_all(compressed[:cut], codec, block=block)
    assert got == records[: len(got)]
    if cut == len(compressed):
        assert got == records and reader.tail is None


def test_names_and_suffixes() -> None:
    assert compression_of("a/events.bin.gz") == "gzip"
    assert compression_of("events.ZST") == "zstd"
    assert compression_of("events.bin.bz2") == "bz2"
    assert compression_of("events.xz") == compression_of("events.lzma") == "xz"
    assert compression_of("events.bin") == "none"
    assert compression_of("events.bin", "gzip") == "gzip"
    assert compression_of("events.gz", "none") == "none"
    # Beam's CompressionTypes values name the same codecs.
    assert [compression_name(n) for n in ("uncompressed", "bzip2", "lzma", "zstd", "auto")] == [
        "none", "bz2", "xz", "zstd", "auto"
    ]
    assert strip_suffix("events.bin.gz") == "events.bin"
    assert strip_suffix("events.bin") == "events.bin"
    with pytest.raises(ValueError, match="compression must be one of"):
        compression_name("rar")
    with pytest.raises(ValueError, match="needs a codec"):
        open_decompressed(io.BytesIO(b""), "auto")


def test_zstd_without_zstandard_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "zstandard", None)
    with pytest.raises(ImportError, match=r"wirearrow\[zstd\]"):
        open_decompressed(io.BytesIO(b""), "zstd")
