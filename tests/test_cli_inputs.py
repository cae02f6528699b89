"""The command line's inputs: compressed files (by suffix, --input-compression, the plan's
input.compression), with a cut compressed stream as one accounted failure."""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from wirearrow.cli import main

zstandard = pytest.importorskip("zstandard")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "schema"
N = 400
PLAN = f"""\
proto:
  file: {EXAMPLES / "bidrequest.proto"}
  message: BidRequestEvent
  import_paths: [{EXAMPLES}]
denormalizer:
  columns:
    - name: id
      path: id
    - name: imp_id
      path: imp[*].id
input:
  framing: u32le
"""
SUFFIX = {
    "gzip": (".gz", gzip.compress),
    "bz2": (".bz2", bz2.compress),
    "xz": (".xz", lzma.compress),
    "zstd": (".zst", lambda data: zstandard.ZstdCompressor().compress(data)),
}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli-inputs")
    (root / "plan.yaml").write_text(PLAN)
    corpus.write_corpus(root / "a.u32le", N, seed=3, framing="u32le")
    return root


def expected(work: Path, records: list[bytes] | None = None) -> pa.Table:
    tc = wa.load_plan(work / "plan.yaml").transcoder()
    batch = tc.transcode(corpus.read_corpus(work / "a.u32le") if records is None else records)
    return pa.Table.from_batches([batch])


def transcode(work: Path, *args: str) -> int:
    return main(["transcode", str(work / "plan.yaml"), *args, "--no-progress"])


@pytest.mark.parametrize("codec", sorted(SUFFIX))
def test_compressed_files_by_suffix(work, codec, capsys) -> None:
    suffix, compress = SUFFIX[codec]
    source = work / f"events{suffix}"
    source.write_bytes(compress((work / "a.u32le").read_bytes()))
    out = work / f"out-{codec}"
    assert transcode(work, str(source), "-o", str(out)) == 0
    assert capsys.readouterr().out.startswith(f"{N:,} records in, ")
    # The output is named after the file without its compression suffix.
    assert pq.read_table(out / "events.parquet").equals(expected(work))


def test_input_compression_option_and_plan_key(work, capsys) -> None:
    data = gzip.compress((work / "a.u32le").read_bytes())
    (work / "plain-name.bin").write_bytes(data)
    out = work / "opt.parquet"
    # Without a suffix the file is read as it is, and the error says what it looks like.
    assert transcode(work, str(work / "plain-name.bin"), "-o", str(out)) == 1
    assert "looks compressed with gzip" in capsys.readouterr().err
    assert transcode(
        work, str(work / "plain-name.bin"), "-o", str(out), "--input-compression", "gzip"
    ) == 0
    assert pq.read_table(out).equals(expected(work))
    # The plan's input.compression, when the command line does not say.
    (work / "gz-plan.yaml").write_text(PLAN + "  compression: gzip\n")
    assert main(
        ["transcode", str(work / "gz-plan.yaml"), str(work / "plain-name.bin"), "-o",
         str(work / "plan-opt.parquet"), "--no-progress"]
    ) == 0
    assert pq.read_table(work / "plan-opt.parquet").equals(expected(work))
    # "none" reads a .gz file as it is.
    capsys.readouterr()
    (work / "raw.gz").write_bytes((work / "a.u32le").read_bytes())
    assert transcode(work, str(work / "raw.gz"), "-o", str(work / "raw.parquet"),
                     "--input-compression", "none") == 0
    assert pq.read_table(work / "raw.parquet").equals(expected(work))


def test_a_bad_input_compression_is_a_plan_error(work, capsys) -> None:
    (work / "bad-plan.yaml").write_text(PLAN + "  compression: rar\n")
    assert main(["check", str(work / "bad-plan.yaml")]) == 1
    assert "input.compression" in capsys.readouterr().err


def test_a_cut_compressed_file_is_one_dead_letter(work, capsys) -> None:
    data = (work / "a.u32le").read_bytes()
    compressed = gzip.compress(data)
    (work / "cut.u32le.gz").write_bytes(compressed[: len(compressed) // 2])
    dead = work / "cut-dead.parquet"
    assert transcode(
        work, str(work / "cut.u32le.gz"), "-o", str(work / "cut.parquet"), "--dead-letters",
        str(dead),
    ) == 0
    line = capsys.readouterr().out
    n_in, n_out, failed = (int(x.split()[0].replace(",", "")) for x in line.split(", ")[:3])
    letters = pq.read_table(dead).to_pylist()
    assert failed == 1 and len(letters) == 1
    letter = letters[0]
    assert letter["file"] == str(work / "cut.u32le.gz")
    assert letter["reason"].startswith("truncated gzip stream: the file ends before its end-of-stream marker")
    at = letter["file_offset"]
    if letter["raw"]:  # the cut record's bytes, from its frame on
        assert f"{len(letter['raw'])} bytes of a cut record from byte {at:,}" in letter["reason"]
        assert data[at : at + len(letter["raw"])] == letter["raw"]
    else:
        assert f"at decompressed byte {at:,}" in letter["reason"]
    # Every whole record before the cut is a row; the cut is the one failure.
    kept = n_in - 1
    assert letter["index"] == kept
    records, pos = [], 0
    while len(records) < kept:
        (length,) = struct.unpack_from("<I", data, pos)
        records.append(data[pos + 4 : pos + 4 + length])
        pos += 4 + length
    assert letter["file_offset"] == pos
    assert 0 < kept < N
    assert pq.read_table(work / "cut.parquet").equals(expected(work, records))
    assert n_out == expected(work, records).num_rows
    # Under raise, the same file fails naming it and the break.
    assert transcode(work, str(work / "cut.u32le.gz"), "-o", str(work / "cut2.parquet"),
                     "--on-error", "raise") == 1
    err = capsys.readouterr().err
    assert "cut.u32le.gz: truncated gzip stream" in err
    assert not (work / "cut2.parquet").exists()


def test_compressed_ndjson_is_refused_clearly(work, capsys) -> None:
    (work / "e.ndjson.gz").write_bytes(gzip.compress(b"{}\n"))
    assert transcode(work, str(work / "e.ndjson.gz"), "-o", str(work / "j.parquet"),
                     "--format", "json") == 1
    assert "compressed (gzip) NDJSON input is not supported" in capsys.readouterr().err
