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


# ---- Confluent-framed records in files ------------------------------------------------


@pytest.fixture(scope="module")
def confluent_orders(tmp_path_factory):
    """Orders serialized by confluent-kafka (schema ids 1 and 2, two .proto versions),
    written u32be-delimited to a file, one record corrupt and one with an unmapped id."""
    pytest.importorskip("confluent_kafka.schema_registry.protobuf")
    import confluent_data

    v1, v2 = confluent_data.schemas()
    framed, payloads, ids = confluent_data.orders(v1, v2, n=30)
    records = list(framed)
    records[4] = b"\x01" + records[4][1:]  # a bad magic byte
    records[7] = b"\x00\x00\x00\x00\x09" + records[7][5:]  # schema id 9: not mapped
    root = tmp_path_factory.mktemp("confluent")
    (root / "orders.bin").write_bytes(b"".join(corpus.frame(records, "u32be")))
    return root, v1, v2, records, payloads, ids


def order_plan(v1_or_v2: str, extra: str = "") -> str:
    import confluent_data

    return f"""\
proto:
  file: shop_{v1_or_v2}.proto
  message: shop.Order
  import_paths: [{confluent_data.PROTOS}]
denormalizer:
  columns:
    - name: id
      path: id
    - name: sku
      path: lines[*].sku
{extra}"""


def test_confluent_from_the_plan_input(confluent_orders, capsys) -> None:
    import confluent_data

    root, _, _, records, payloads, ids = confluent_orders
    (root / "plan.yaml").write_text(order_plan("v2", f"""\
input:
  framing: confluent
  delimited_by: u32be
  schema_id: version
  schemas:
    1: {{file: shop_v1.proto, message: shop.Order, import_paths: [{confluent_data.PROTOS}]}}
    2:
"""))
    out, dead = root / "plan-out.parquet", root / "plan-dead.parquet"
    assert main(["transcode", str(root / "plan.yaml"), str(root / "orders.bin"), "-o", str(out),
                 "--dead-letters", str(dead), "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith("30 records in, ")
    good = [i for i in range(30) if i not in (4, 7)]
    tc = wa.load_plan(root / "plan.yaml").transcoder()
    want = tc.transcode([payloads[i] for i in good], record_index=True)
    got = pq.read_table(out)
    assert got.drop_columns(["version"]).to_pylist() == want.drop_columns(["_record_index"]).to_pylist()
    # The schema-id column: each row's record's id.
    row_record = [good[i] for i in want.column("_record_index").to_pylist()]
    assert got.column("version").to_pylist() == [ids[i] for i in row_record]
    letters = pq.read_table(dead).to_pylist()
    assert [(d["index"], d["raw"]) for d in letters] == [(4, records[4]), (7, records[7])]
    assert letters[0]["reason"] == "not Confluent framing: magic byte 0x01, not 0"
    assert "schema id 9" in letters[1]["reason"]
    offsets = [0]
    for r in records:
        offsets.append(offsets[-1] + 4 + len(r))
    assert [d["file_offset"] for d in letters] == [offsets[4], offsets[7]]


def test_confluent_from_the_command_line(confluent_orders, capsys) -> None:
    import confluent_data

    root, *_, ids = confluent_orders
    (root / "bare.yaml").write_text(order_plan("v2"))
    out = root / "cli-out.parquet"
    v1_file = confluent_data.PROTOS / "shop_v1.proto"
    args = ["transcode", str(root / "bare.yaml"), str(root / "orders.bin"), "-o", str(out),
            "--framing", "confluent", "--delimited-by", "u32be", "--schema-id", "2",
            "--schema-id", f"1={v1_file}:shop.Order", "--schema-id-column", "--on-error", "skip",
            "--no-progress"]
    assert main(args) == 0
    n_in, _, failed = (int(x.split()[0]) for x in capsys.readouterr().out.split(", ")[:3])
    assert (n_in, failed) == (30, 2)
    got = pq.read_table(out)
    assert got.schema.names[-1] == "_schema_id"
    assert set(got.column("_schema_id").to_pylist()) == {1, 2}
    # Only id 2 accepted: every v1 record is a failure too.
    assert main([*args[:-8], "--schema-id", "2", "--on-error", "skip", "--no-progress"]) == 0
    failed = int(capsys.readouterr().out.split(", ")[2].split()[0])
    assert failed == 2 + sum(1 for i in range(30) if ids[i] == 1 and i not in (4, 7))
    # Under raise the first bad record fails the run, naming it.
    assert main([*args[:-4], "--no-progress"]) == 1
    assert "record 4" in capsys.readouterr().err


def test_confluent_mistakes_are_named(confluent_orders, capsys) -> None:
    root = confluent_orders[0]
    (root / "bare.yaml").write_text(order_plan("v2"))
    base = ["transcode", str(root / "bare.yaml"), str(root / "orders.bin"), "-o",
            str(root / "x.parquet"), "--no-progress"]
    assert main([*base, "--framing", "confluent"]) == 2
    assert "needs the schema ids" in capsys.readouterr().err
    assert main([*base, "--schema-id", "2"]) == 2
    assert "--schema-id is for --framing confluent" in capsys.readouterr().err
    assert main([*base, "--framing", "confluent", "--schema-id", "x"]) == 2
    assert "the id is an integer" in capsys.readouterr().err
    assert main([*base, "--framing", "confluent", "--schema-id", "2", "--schema-id-column",
                 "id"]) == 2
    assert "already a column" in capsys.readouterr().err
    for extra, words in (
        ("input:\n  framing: confluent\n", "confluent needs input.schemas"),
        ("input:\n  schemas: {1: }\n", "input.schemas: is for framing: confluent"),
        ("input:\n  framing: confluent\n  schemas: {x: }\n", "a schema id is an integer"),
        ("input:\n  framing: confluent\n  schemas: {1: }\n  schema_id: 3\n", "input.schema_id"),
    ):
        (root / "bad.yaml").write_text(order_plan("v2", extra))
        assert main(["check", str(root / "bad.yaml")]) == 1
        assert words in capsys.readouterr().err, extra


def test_check_names_the_schema_ids(confluent_orders, capsys) -> None:
    root = confluent_orders[0]
    (root / "ids.yaml").write_text(order_plan("v2", "input:\n  framing: confluent\n  schemas: {1: , 2: }\n"))
    assert main(["check", str(root / "ids.yaml")]) == 0
    assert "framing=confluent, schema ids 1,2)" in capsys.readouterr().out.splitlines()[0]
