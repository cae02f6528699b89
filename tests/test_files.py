"""sources/files.py: the files paths name on a pyarrow filesystem, and the record-aligned
pieces parallel readers (Ray's datasource) split them into, read back piece by piece."""

from __future__ import annotations

import functools
import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import wirearrow as wa
from wirearrow.sources.files import file_pieces, filesystem_of, list_files, piece_reader

RECORDS = [bytes([i % 251]) * (i % 37) for i in range(500)]


def framed(framing: str = "varint") -> bytes:
    return wa.frame_records(pa.array(RECORDS, pa.binary()), framing).to_pybytes()


def read_back(path: Path, framing: str, piece_bytes: int, compression: str = "auto"):
    fs = pafs.LocalFileSystem()
    size = path.stat().st_size
    opener = functools.partial(fs.open_input_stream, str(path), compression=None)
    pieces, tail = file_pieces(str(path), size, framing, compression, piece_bytes, opener, block_bytes=64)
    got = []
    for piece in pieces:
        with fs.open_input_file(str(path)) as raw:
            got += [r for f in piece_reader(raw, piece, framing, block_bytes=100) for r in f.records().to_pylist()]
    return pieces, tail, got


def test_listing_files_directories_and_globs(tmp_path: Path) -> None:
    for name in ("a/1.bin", "a/b/2.bin", "a/_SUCCESS", "a/.x.crc", "a/_tmp/3.bin", "c.bin"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"xy")
    names = lambda found: [p[len(str(tmp_path)) + 1 :] for _, p, _ in found]  # noqa: E731
    assert names(list_files(tmp_path / "a")) == ["a/1.bin", "a/b/2.bin"]
    assert names(list_files(str(tmp_path / "a" / "*" / "*.bin"))) == ["a/_tmp/3.bin", "a/b/2.bin"]
    assert names(list_files([tmp_path / "c.bin", tmp_path / "a" / "1.bin"])) == ["c.bin", "a/1.bin"]
    assert {size for _, _, size in list_files(tmp_path / "a")} == {2}
    with pytest.raises(FileNotFoundError):
        list_files(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no files match"):
        list_files(str(tmp_path / "*.none"))
    with pytest.raises(ValueError, match="no paths"):
        list_files([])


def test_filesystem_of_a_path_or_uri(tmp_path: Path) -> None:
    fs, path = filesystem_of(str(tmp_path / "x"))
    assert isinstance(fs, pafs.LocalFileSystem) and path == str(tmp_path / "x")
    fs, path = filesystem_of(f"file://{tmp_path}/x")
    assert isinstance(fs, pafs.LocalFileSystem) and path == f"{tmp_path}/x"
    mine = pafs.LocalFileSystem()
    assert filesystem_of("rel/x", mine) == (mine, "rel/x")


@pytest.mark.parametrize("framing", ["varint", "u32be", "tfrecord"])
@pytest.mark.parametrize("piece_bytes", [50, 1_000, 10**9])
def test_pieces_cover_the_file_and_read_back(tmp_path: Path, framing: str, piece_bytes: int) -> None:
    path = tmp_path / f"r.{framing}"
    path.write_bytes(framed(framing))
    pieces, tail, got = read_back(path, framing, piece_bytes)
    assert tail is None and got == RECORDS
    assert [p.start for p in pieces[1:]] == [p.end for p in pieces[:-1]]
    assert pieces[-1].end == path.stat().st_size
    if piece_bytes >= path.stat().st_size:  # a small file: one piece, not counted
        assert [(p.start, p.records) for p in pieces] == [(0, None)]
    else:
        assert len(pieces) > 1 and sum(p.records for p in pieces) == len(RECORDS)


def test_a_compressed_file_is_one_piece_read_as_a_stream(tmp_path: Path) -> None:
    path = tmp_path / "r.varint.gz"
    path.write_bytes(gzip.compress(framed()))
    pieces, tail, got = read_back(path, "varint", 50)
    assert [(p.start, p.end, p.compression) for p in pieces] == [(0, path.stat().st_size, "gzip")]
    assert tail is None and got == RECORDS
    plain = tmp_path / "r.varint"
    plain.write_bytes(gzip.compress(framed()))  # no suffix: compression= says it
    assert read_back(plain, "varint", 10**9, compression="gzip")[2] == RECORDS


def test_a_cut_file_leaves_its_tail(tmp_path: Path) -> None:
    path = tmp_path / "cut.varint"
    path.write_bytes(framed()[:-3])
    pieces, tail, got = read_back(path, "varint", 100)
    assert tail is not None and "truncated varint stream" in tail.reason
    assert got == RECORDS[:-1] and pieces[-1].end == tail.offset
