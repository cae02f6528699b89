"""wirearrow.ray.read_delimited over compressed files on a local 2-CPU Ray: every codec
by suffix or option, one read task per compressed file, offsets in decompressed bytes,
and a cut compressed file failing with its name and where it broke."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from wirearrow.config import load_plan
from wirearrow.sources.framing import split_framed

ray = pytest.importorskip("ray")
war = pytest.importorskip("wirearrow.ray")
zstandard = pytest.importorskip("zstandard")

pytestmark = [
    pytest.mark.ray,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
]

FLAT = Path(__file__).resolve().parent.parent / "transforms" / "openrtb_flat.yaml"
CODECS = {
    ".gz": gzip.compress,
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
    ".zst": lambda data: zstandard.ZstdCompressor().compress(data),
}


def framed(messages: list[bytes]) -> bytes:
    return b"".join(corpus.frame(messages, "varint"))


def collect(ds) -> pa.Table:
    blocks = [b for b in (ray.get(ref) for ref in ds.to_arrow_refs()) if b.num_rows]
    return pa.concat_tables(blocks)


def test_every_codec_one_task_each(ray_local, tmp_path: Path) -> None:
    records = corpus.generate(400, seed=5)
    parts = {}
    for i, (suffix, compress) in enumerate(CODECS.items()):
        part = records[i * 100 : i * 100 + 100]
        (tmp_path / f"p{i}.varint{suffix}").write_bytes(compress(framed(part)))
        parts[str(tmp_path / f"p{i}.varint{suffix}")] = part
    source = war.DelimitedDatasource(tmp_path, include_location=True, bytes_per_task=1_000)
    # Far below the files' sizes, yet one task per compressed file: none can be split.
    assert len(source.get_read_tasks(1)) == len(CODECS)

    ds = war.read_delimited(tmp_path, include_location=True, bytes_per_task=1_000)
    got = collect(ds).sort_by([("file", "ascending"), ("offset", "ascending")])
    assert sorted(got.column("value").to_pylist()) == sorted(records)
    for path, part in parts.items():
        mine = got.filter(pa.compute.equal(got.column("file"), path))
        assert mine.column("value").to_pylist() == part
        # Offsets are where each frame starts in the decompressed stream.
        _, ends, _ = split_framed(framed(part), "varint")
        assert mine["offset"].to_pylist() == [0, *ends[:-1].tolist()]


def test_explicit_compression_and_the_job(ray_local, tmp_path: Path) -> None:
    records = corpus.generate(200, seed=6)
    (tmp_path / "events").write_bytes(gzip.compress(framed(records)))
    job = war.transcode(war.read_delimited(tmp_path / "events", compression="gzip"), FLAT)
    job.rows.write_parquet(str(tmp_path / "rows"))
    want = pa.Table.from_batches([load_plan(FLAT).transcoder().transcode(records)])
    assert pq.read_table(tmp_path / "rows").num_rows == want.num_rows
    assert job.job_stats().records_in == len(records)
    with pytest.raises(ValueError, match="compression must be one of"):
        war.read_delimited(tmp_path / "events", compression="rar")


def test_a_cut_compressed_file_names_the_break(ray_local, tmp_path: Path) -> None:
    data = zstandard.ZstdCompressor().compress(framed(corpus.generate(300, seed=7)))
    path = tmp_path / "cut.varint.zst"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(Exception, match=r"cut\.varint\.zst: truncated zstd stream: .*decompressed byte"):
        war.read_delimited(path).count()


# ---- a cut file as one accounted failure: truncated="dead_letter" ----------------------


def test_read_error_rows_are_failures_with_their_reason_in_process(tmp_path: Path) -> None:
    """Transcode (the map_batches callable) on a batch shaped like the reader's: the
    read_error row is one failure and a dead letter; the records around it decode."""
    from wirearrow.ray.datasource import READ_ERROR

    records = corpus.generate(10, seed=9)
    values = [*records[:4], b"\x07cut", *records[4:], bytes([0])]  # and a bad record
    batch = pa.table(
        {
            "value": pa.array(values, pa.binary()),
            "offset": pa.array(range(12), pa.int64()),
            READ_ERROR: pa.array([None] * 4 + ["f: truncated"] + [None] * 7, pa.string()),
        }
    )
    tc = load_plan(FLAT).with_options(on_error="dead_letter").transcoder()
    fn = war.Transcode(tc, carry=["offset"], dead_letters=tmp_path / "dead")
    rows = fn(batch)
    want = pa.Table.from_batches([tc.transcode(records)])
    assert rows.drop_columns(["offset"]).to_pylist() == want.to_pylist()
    assert READ_ERROR not in rows.column_names
    stats = fn.stats
    assert (stats.records_in, stats.records_failed, stats.dead_letters) == (12, 2, 2)
    dead = pq.read_table(tmp_path / "dead").sort_by("index").to_pylist()
    # Indexes and sources are the rows' own in the batch the reader gave.
    assert [(d["index"], d["source"]["offset"], d["raw"]) for d in dead] == [
        (4, 4, b"\x07cut"), (11, 11, bytes([0]))
    ]
    assert dead[0]["reason"] == "f: truncated"
    raise_fn = war.Transcode(load_plan(FLAT).transcoder())
    with pytest.raises(wa.DecodeError, match="record 4, byte 0: f: truncated"):
        raise_fn(batch.slice(0, 11))


def test_a_cut_file_is_one_dead_letter_in_the_job(ray_local, tmp_path: Path) -> None:
    records = corpus.generate(300, seed=8)
    plain = framed(records)
    (tmp_path / "cut.varint").write_bytes(plain[:-7])  # the last record cut
    data = gzip.compress(framed(records[:100]))
    (tmp_path / "cut.varint.gz").write_bytes(data[: len(data) // 2])
    head = zlib.decompressobj(31).decompress(data[: len(data) // 2])
    whole_gz = len(split_framed(head, "varint")[0])
    ds = war.read_delimited(
        tmp_path, include_location=True, bytes_per_task=60_000, truncated="dead_letter"
    )
    job = war.transcode(ds, FLAT, on_error="dead_letter", dead_letters=tmp_path / "dead")
    rows = collect(job.rows)
    stats = job.job_stats()
    assert stats.records_in == 299 + whole_gz + 2
    assert stats.records_failed == stats.dead_letters == 2
    good = records[:299] + records[:whole_gz]
    want = pa.Table.from_batches([load_plan(FLAT).transcoder().transcode(good)])
    assert rows.num_rows == want.num_rows == stats.rows_out
    dead = pa.concat_tables(pq.read_table(f) for f in stats.dead_letter_files).to_pylist()
    by_file = {d["source"]["file"]: d for d in dead}
    cut = by_file[str(tmp_path / "cut.varint")]
    assert cut["reason"].startswith(f"{tmp_path / 'cut.varint'}: truncated varint stream")
    assert cut["raw"] == plain[cut["source"]["offset"] : -7]
    gz = by_file[str(tmp_path / "cut.varint.gz")]
    assert "truncated gzip stream" in gz["reason"]
    with pytest.raises(ValueError, match="truncated must be one of"):
        war.read_delimited(tmp_path, truncated="skip")
