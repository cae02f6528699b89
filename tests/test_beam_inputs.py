"""Beam's ReadFromDelimited over compressed files (FnApiRunner, in process): every codec by
suffix or by option, one chunk per compressed file, and a cut compressed stream raising
(naming the file) or, with truncated="skip", keeping its records and counting the file."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

beam = pytest.importorskip("apache_beam")
zstandard = pytest.importorskip("zstandard")

from apache_beam.io.filesystem import CompressionTypes  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from apache_beam.testing.util import assert_that  # noqa: E402

import corpus  # noqa: E402  (benchmarks/, put on sys.path by conftest.py)
import wirearrow.beam as wab  # noqa: E402
from wirearrow.sources.framing import split_framed  # noqa: E402

pytestmark = [
    pytest.mark.beam,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning:apache_beam.*"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

CODECS = {
    ".gz": gzip.compress,
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
    ".zst": lambda data: zstandard.ZstdCompressor().compress(data),
}


def in_process() -> beam.Pipeline:
    return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions())


def framed(records: list[bytes]) -> bytes:
    return b"".join(corpus.frame(records, "u32le"))


def same(want: Counter):
    def check(got) -> None:
        if Counter(got) != want:
            raise AssertionError(f"got {len(got)} records, want {sum(want.values())}")

    return check


def counters(p: beam.Pipeline) -> dict[str, int]:
    return {c.key.metric.name: c.committed for c in p.result.metrics().query()["counters"]}


def test_every_codec_by_suffix_and_by_option(tmp_path: Path, bid_corpus) -> None:
    want: Counter = Counter()
    for i, (suffix, compress) in enumerate(CODECS.items()):
        records = [r + bytes([i]) for r in bid_corpus[i * 50 : i * 50 + 50]]
        (tmp_path / f"part{i}.bin{suffix}").write_bytes(compress(framed(records)))
        want.update(records)
    plain = [r + b"p" for r in bid_corpus[:30]]
    (tmp_path / "plain.bin").write_bytes(framed(plain))
    want.update(plain)
    with in_process() as p:
        # chunk_bytes far below the files' sizes: compressed files still read whole.
        records = p | wab.ReadFromDelimited(str(tmp_path / "*"), "u32le", chunk_bytes=500)
        assert_that(records, same(want))
    # An explicit codec (here Beam's own CompressionTypes name) for a file without suffix.
    (tmp_path / "nosuffix").write_bytes(gzip.compress(framed(bid_corpus[:20])))
    for compression in (CompressionTypes.GZIP, "gzip"):
        with in_process() as p:
            records = p | wab.ReadFromDelimited(
                str(tmp_path / "nosuffix"), "u32le", compression=compression
            )
            assert_that(records, same(Counter(bid_corpus[:20])))
    with pytest.raises(ValueError, match="compression must be one of"):
        wab.ReadFromDelimited(str(tmp_path / "nosuffix"), compression="rar")


def test_a_cut_compressed_file(tmp_path: Path, bid_corpus) -> None:
    data = gzip.compress(framed(bid_corpus))
    path = tmp_path / "cut.bin.gz"
    path.write_bytes(data[: len(data) // 2])
    with (
        pytest.raises(Exception, match=r"cut\.bin\.gz: truncated gzip stream: .* decompressed byte"),
        in_process() as p,
    ):
        _ = p | wab.ReadFromDelimited(str(path), "u32le")
    # The records before the cut: what the cut gzip decompresses to, in whole frames.
    head = zlib.decompressobj(31).decompress(data[: len(data) // 2])
    whole = len(split_framed(head, "u32le")[0])
    assert 0 < whole < len(bid_corpus)
    with in_process() as p:
        records = p | wab.ReadFromDelimited(str(path), "u32le", truncated="skip")
        assert_that(records, same(Counter(bid_corpus[:whole])))
    stats = counters(p)
    assert stats["truncated_files"] == 1
    assert stats["records_read"] == whole


# ---- dead letters carry the Kafka position ------------------------------------------------
# Beam's ReadFromKafka is a Java cross-language transform that cannot run here: these
# elements are built by hand in its output shapes (Beam 2.77, apache_beam/io/kafka.py).

BAD = b"\x00"  # field number 0: every plan rejects it
ID_PLAN = {
    "proto": {
        "file": "bidrequest.proto",
        "message": "BidRequestEvent",
        "import_paths": [str(Path(__file__).resolve().parent.parent / "examples" / "schema")],
    },
    "denormalizer": {"columns": [{"name": "id", "path": "id"}]},
}


def kafka_rows(values: list[bytes]) -> list:
    return [
        beam.Row(
            topic=f"events-{i % 2}",
            partition=i % 3,
            offset=1000 + i,
            key=f"k{i}".encode(),
            value=v,
            timestamp=1_700_000_000_000 + i,
            timestampTypeName="CreateTime",
            headers=[],
        )
        for i, v in enumerate(values)
    ]


def test_dead_letters_name_topic_partition_offset_and_timestamp(tmp_path, bid_corpus) -> None:
    values = list(bid_corpus[:40])
    bad_at = (5, 17, 33)
    for i in bad_at:
        values[i] = BAD
    want = sorted(
        (f"k{i}", f"events-{i % 2}", i % 3, 1000 + i, 1_700_000_000_000 + i) for i in bad_at
    )
    with in_process() as p:
        result = p | beam.Create(kafka_rows(values)) | wab.ToArrow(
            ID_PLAN, batch_size=8, on_error="dead_letter"
        )
        located = result.dead_letters | beam.Map(
            lambda d: (d.key, d.topic, d.partition, d.kafka_offset, d.timestamp)
        )
        assert_that(located, lambda got: _equal(sorted(got), want))
        _ = result.dead_letters | wab.WriteDeadLetters(str(tmp_path / "dead"))
        # (key, value) pairs (ReadFromKafka without metadata) have only the key.
        pairs = p | "pairs" >> beam.Create([(b"kv", BAD), (b"ok", bid_corpus[0])])
        kv = pairs | "kv ToArrow" >> wab.ToArrow(ID_PLAN, on_error="dead_letter")
        assert_that(
            kv.dead_letters | "kv fields" >> beam.Map(lambda d: (d.key, d.topic, d.kafka_offset)),
            lambda got: _equal(got, [("kv", None, None)]),
            label="kv",
        )
    dead = pq.read_table(tmp_path / "dead")
    assert dead.schema.names[-5:] == ["key", "topic", "partition", "kafka_offset", "timestamp"]
    got = sorted(
        (r["key"], r["topic"], r["partition"], r["kafka_offset"], r["timestamp"])
        for r in dead.to_pylist()
    )
    assert got == want
    assert dead.column("raw").to_pylist() == [BAD] * 3


def test_carry_puts_row_fields_on_their_records_rows(bid_corpus) -> None:
    """carry= repeats fields of the row elements on every row of their record, after the
    plan's columns: typed (then in .schema too) or by name (types inferred per batch),
    "key" a row's or a pair's key; a bad record carries nothing onto rows."""
    import pyarrow as pa

    from wirearrow.plans import resolve_plan

    values = list(bid_corpus[:20])
    values[4] = BAD
    good = [i for i in range(20) if i != 4]
    tc = resolve_plan(ID_PLAN).transcoder
    ids = {i: tc.decode([values[i]]).rows.column("id")[0].as_py() for i in good}
    want = sorted((ids[i], f"events-{i % 2}", i % 3, 1000 + i) for i in good)
    typed = {"topic": pa.utf8(), "partition": pa.int32(), "offset": pa.int64()}
    to_arrow = wab.ToArrow(ID_PLAN, on_error="dead_letter", carry=typed, batch_size=8)
    assert to_arrow.schema.names == ["id", "topic", "partition", "offset"]
    assert to_arrow.schema.field("partition").type == pa.int32()
    with in_process() as p:
        rows = p | beam.Create(kafka_rows(values))
        batches = (rows | to_arrow).batches
        got = batches | beam.FlatMap(
            lambda b: [(r["id"], r["topic"], r["partition"], r["offset"]) for r in b.to_pylist()]
        )
        assert_that(got, lambda g: _equal(sorted(g), want))
        named = rows | "named" >> wab.ToArrow(ID_PLAN, on_error="dead_letter", carry=["key"])
        keys = named.batches | "keys" >> beam.FlatMap(lambda b: b.column("key").to_pylist())
        want_keys = sorted(f"k{i}".encode() for i in good)
        assert_that(keys, lambda g: _equal(sorted(g), want_keys), label="keys")
    with pytest.raises(ValueError, match=r"clash with the plan's output: \['id'\]"):
        wab.ToArrow(ID_PLAN, carry=["id"])
    with pytest.raises(TypeError, match="pyarrow type"):
        wab.ToArrow(ID_PLAN, carry={"topic": str})
    with pytest.raises(TypeError, match="list of field names"):
        wab.ToArrow(ID_PLAN, carry="topic")
    with pytest.raises(TypeError, match="not bytes"), in_process() as p:
        _ = p | beam.Create([b"x"]) | wab.ToArrow(ID_PLAN, carry=["key"])


def _equal(got, want) -> None:
    if list(got) != list(want):
        raise AssertionError(f"got {got!r}, want {want!r}")


# ---- streaming: records later than the allowed lateness are counted, never dropped -------


def test_too_late_records_are_counted_dead_letters(
    tmp_path, bid_corpus, complete_direct_metrics
) -> None:
    """TestStream on the direct runner's streaming engine (FnApiRunner does not run
    TestStream): on time, late within the allowed lateness, and too late -- rows + dead
    letters + late == records in, each record once, and the metrics say the same (with
    the runner's metrics bug worked around: complete_direct_metrics in engine_fixtures.py)."""
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
    from apache_beam.testing import test_stream
    from apache_beam.transforms import trigger, window

    records = [r + b"\x0a\x7f" if i in (3, 25) else r for i, r in enumerate(bid_corpus[:60])]
    stream = (
        test_stream.TestStream()
        .add_elements([window.TimestampedValue(r, 10 + i) for i, r in enumerate(records[:20])])
        .add_elements([window.TimestampedValue(r, 70 + i) for i, r in enumerate(records[20:40])])
        .advance_watermark_to(125)
        .add_elements([window.TimestampedValue(r, 30) for r in records[40:45]])  # late, allowed
        .advance_watermark_to(1000)
        .add_elements([window.TimestampedValue(r, 40) for r in records[55:60]])  # too late
        .add_elements([window.TimestampedValue(r, 80) for r in records[50:52]])  # too late
        .advance_watermark_to_infinity()
    )
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    out, dead_dir, late_dir = tmp_path / "out", tmp_path / "dead", tmp_path / "late"
    p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
    windowed = p | stream | beam.WindowInto(
        window.FixedWindows(60),
        trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
        allowed_lateness=300,
        accumulation_mode=trigger.AccumulationMode.DISCARDING,
    )
    split = windowed | wab.SplitLate()
    result = split["on_time"] | wab.ToArrow(ID_PLAN, batch_size=8, on_error="dead_letter")
    _ = result.batches | wab.WriteToParquetFiles(str(out), schema=result.schema)
    _ = result.dead_letters | wab.WriteDeadLetters(str(dead_dir))
    _ = split["late"] | "WriteLate" >> wab.WriteDeadLetters(str(late_dir), file_prefix="late")
    run = p.run()
    run.wait_until_finish()
    rows = pq.read_table(out).column("id").to_pylist()
    dead = pq.read_table(dead_dir).column("raw").to_pylist()
    late = pq.read_table(late_dir).to_pylist()
    assert sorted(dead) == sorted([records[3], records[25]])
    assert sorted(r["raw"] for r in late) == sorted(records[55:60] + records[50:52])
    assert all(r["reason"].startswith("late: its window [") for r in late)
    assert len(rows) == len(set(rows)) == 43  # records 0-44 but the 2 bad ones
    sent = 45 + 5 + 2
    assert len(rows) + len(dead) + len(late) == sent
    counters = {
        c.key.metric.name: c.committed
        for c in run.metrics().query(MetricsFilter().with_namespace("wirearrow"))["counters"]
    }
    assert counters["records_late"] == len(late) == 7
    assert (counters["records_in"], counters["records_failed"]) == (45, 2)
    assert "rows_late" not in counters  # SplitLate took them all before the sink
