"""The framed-stream module: every reader of framed records (CLI, Ray, Beam) goes through
FrameReader and plan_pieces, so these are checked against splitting the whole buffer."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wirearrow as wa
from depth import examples
from wirearrow.sources.framing import FrameReader, plan_pieces, split_framed


def frame(records: list[bytes], framing: str) -> bytes:
    out = bytearray()
    for r in records:
        if framing == "varint":
            n = len(r)
            while n >= 0x80:
                out.append((n & 0x7F) | 0x80)
                n >>= 7
            out.append(n)
        else:
            out += len(r).to_bytes(4, "little" if framing == "u32le" else "big")
        out += r
    return bytes(out)


def read_all(reader: FrameReader) -> list[bytes]:
    return [r for frames in reader for r in frames.records().to_pylist()]


records_st = st.lists(st.binary(max_size=300), max_size=40)
framing_st = st.sampled_from(["varint", "u32le", "u32be"])


@settings(max_examples=examples(19), deadline=None)
@given(records_st, framing_st, st.integers(1, 64))
def test_reader_yields_every_record_whatever_the_block_size(records, framing, block) -> None:
    data = frame(records, framing)
    reader = FrameReader(io.BytesIO(data), framing, block_bytes=block)
    assert read_all(reader) == records
    assert reader.tail is None and reader.position == len(data)


@settings(max_examples=examples(13), deadline=None)
@given(records_st, framing_st, st.integers(1, 64), st.integers(1, 500))
def test_frames_name_their_stream_offsets(records, framing, block, cut) -> None:
    data = frame(records, framing)[:cut]
    cut = len(data)
    starts, ends, consumed = split_framed(data, framing)
    reader = FrameReader(io.BytesIO(data), framing, block_bytes=block, size=cut)
    got_starts, got_frames = [], []
    for frames in reader:
        got_starts += (frames.starts + frames.offset).tolist()
        got_frames += frames.frame_starts.tolist()
        assert bytes(frames.framed()) == data[frames.offset : frames.offset + int(frames.ends[-1])]
    assert got_starts == starts.tolist()
    assert got_frames == [0, *ends[:-1].tolist()][: len(starts)]
    if consumed == cut:
        assert reader.tail is None
    else:  # a truncated last record: the rest of the stream, named and kept
        tail = reader.tail
        assert tail is not None and tail.offset == consumed == reader.position
        assert tail.size == cut - consumed and tail.raw == data[consumed:cut]
        assert f"the record at byte {consumed} runs past the end" in tail.reason


@settings(max_examples=examples(13), deadline=None)
@given(records_st, framing_st, st.integers(1, 2000), st.integers(1, 64))
def test_pieces_cover_the_records_and_read_back_as_ranges(records, framing, size, block) -> None:
    data = frame(records, framing)
    pieces, tail = plan_pieces(io.BytesIO(data), framing, size, block_bytes=block)
    assert tail is None
    assert pieces[0].start == 0 and pieces[-1].end == len(data)
    assert all(a.end == b.start for a, b in itertools.pairwise(pieces))
    assert sum(p.records for p in pieces) == len(records)
    got = []
    for p in pieces:
        reader = FrameReader(io.BytesIO(data), framing, block_bytes=block, start=p.start, end=p.end)
        part = read_all(reader)
        assert len(part) == p.records and reader.tail is None
        got += part
    assert got == records


def test_a_record_larger_than_the_block_is_read_whole() -> None:
    records = [b"a" * 10, b"b" * 100_000, b"c"]
    reader = FrameReader(io.BytesIO(frame(records, "varint")), "varint", block_bytes=7)
    assert read_all(reader) == records and reader.tail is None


def test_a_prefix_that_cannot_be_a_length_ends_the_stream_as_a_tail() -> None:
    good = frame([b"x" * 5, b"y" * 3], "varint")
    data = good + b"\xff" * 11 + b"rest"
    reader = FrameReader(io.BytesIO(data), "varint", block_bytes=4, size=len(data))
    assert read_all(reader) == [b"x" * 5, b"y" * 3]
    tail = reader.tail
    assert tail is not None and tail.offset == len(good) and tail.raw == data[len(good) :]
    assert f"varint length prefix longer than 10 bytes at byte {len(good)}" in tail.reason
    pieces, tail = plan_pieces(io.BytesIO(data), "varint", 4)
    assert tail is not None and pieces[-1].end == len(good)
    assert sum(p.records for p in pieces) == 2


def test_a_range_the_stream_no_longer_holds_is_an_error() -> None:
    data = frame([b"x" * 50], "u32le")
    reader = FrameReader(io.BytesIO(data[:20]), "u32le", start=0, end=len(data), name="f.bin")
    with pytest.raises(ValueError, match=r"f\.bin: ends at byte 20, before the planned 54"):
        read_all(reader)


def test_unknown_framing() -> None:
    with pytest.raises(ValueError, match="framing must be one of"):
        FrameReader(io.BytesIO(b""), "u64")


def test_read_delimited_is_one_array_of_the_records() -> None:
    records = [b"", b"a", b"bc" * 200]
    arr = wa.read_delimited(frame(records, "u32be"), framing="u32be")
    assert arr.to_pylist() == records
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)
    assert offsets.tolist() == [0, 0, 1, 401]


def test_framing_mistakes_are_named() -> None:
    """A stream read with the wrong framing, or compressed, says what it looks like."""
    import gzip

    import corpus  # benchmarks/, put on sys.path by conftest.py

    records = corpus.generate(60, seed=3)
    u32le = b"".join(corpus.frame(records, "u32le"))
    varint = b"".join(corpus.frame(records, "varint"))
    cases = [
        (u32le, "varint", "the data looks like u32le framing (framing='u32le')"),
        (varint, "u32be", "the data looks like varint framing (framing='varint')"),
        (gzip.compress(varint), "varint", "the data looks compressed with gzip (.gz)"),
        # A part of a stream is enough: its records are well-formed protobuf.
        (u32le * 3, "varint", "the data looks like u32le framing (framing='u32le')"),
    ]
    for data, framing, hint in cases:
        reader = FrameReader(io.BytesIO(data), framing, size=len(data))
        list(reader)
        assert reader.tail is not None and hint in reader.tail.reason, reader.tail
    with pytest.raises(ValueError, match=r"looks like u32le framing"):
        wa.read_delimited(u32le, "varint")
    # A stream that is merely cut short gets no hint: no other framing reads it cleanly.
    reader = FrameReader(io.BytesIO(varint[:-3]), "varint", size=len(varint) - 3)
    list(reader)
    assert reader.tail is not None and "looks" not in reader.tail.reason
