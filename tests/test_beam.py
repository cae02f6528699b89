"""wirearrow.beam on Beam's local runners.

Batch pipelines run on FnApiRunner (pinned: the default runner wants to download Prism),
in-process and with 2 worker processes. Streaming tests use TestStream, which FnApiRunner
does not run (Beam 2.77: NotImplementedError beam:transform:teststream:v1), so they use
the direct runner's streaming engine, BundleBasedDirectRunner, offline as well.
"""

from __future__ import annotations

import gzip
import itertools
import pickle
import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

beam = pytest.importorskip("apache_beam")

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from apache_beam.testing import test_stream  # noqa: E402
from apache_beam.testing.util import assert_that  # noqa: E402
from apache_beam.transforms import trigger, window  # noqa: E402

import wirearrow as wa  # noqa: E402
import wirearrow.beam as wab  # noqa: E402
from wirearrow.dead_letters import DEAD_LETTER_SCHEMA  # noqa: E402

pytestmark = [
    pytest.mark.beam,
    # Beam's own modules warn on import and while running (deprecations, pickling hints).
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning:apache_beam.*"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
PLAN = str(ROOT / "transforms" / "openrtb_flat.yaml")
SCHEMA_DIR = str(ROOT / "examples" / "schema")
ID_PLAN = {
    "proto": {
        "file": "bidrequest.proto",
        "message": "BidRequestEvent",
        "import_paths": [SCHEMA_DIR],
    },
    "denormalizer": {"columns": [{"name": "id", "path": "id"}]},
}
# Records every plan rejects: field number 0; a string whose length runs past the end.
BAD = [bytes([0x00]), bytes([0x0A, 0x05, 0x41])]


def in_process(**options) -> beam.Pipeline:
    return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(**options))


def two_workers() -> beam.Pipeline:
    options = PipelineOptions(direct_num_workers=2, direct_running_mode="multi_processing")
    return beam.Pipeline(runner=FnApiRunner(), options=options)


def rows_of(batches) -> list[str]:
    """Order-insensitive comparable form of the rows of some batches / tables."""
    out = []
    for b in batches:
        out.extend(repr(sorted(r.items())) for r in b.to_pylist())
    return sorted(out)


def expected_rows(plan, records) -> tuple[list[str], pa.Table]:
    """The in-process transcoder's rows and dead letters (under on_error="dead_letter")."""
    cfg = wa.load_plan(plan)
    tc = cfg.with_options(on_error="dead_letter").transcoder()
    batch = tc.transcode(records)
    return rows_of([batch]), tc.dead_letters()


def equal_to_rows(expected: list[str]):
    def check(actual) -> None:
        got = rows_of(actual)
        if got != expected:
            raise AssertionError(
                f"{len(got)} rows, expected {len(expected)}; first diff: "
                f"{next((a, b) for a, b in zip(got, expected, strict=False) if a != b) if got and expected else None}"
            )

    return check


def read_parquet_dir(path: Path) -> pa.Table:
    files = sorted(path.glob("*.parquet"))
    assert files, f"no Parquet file in {path}"
    return pa.concat_tables([pq.read_table(f) for f in files])


# ----------------------------------------------------------------------------- ToArrow


def test_to_arrow_equals_the_transcoder_with_dead_letters(bid_corpus) -> None:
    records = bid_corpus[:120] + BAD + bid_corpus[120:]
    want_rows, want_dead = expected_rows(PLAN, records)
    transform = wab.ToArrow(PLAN, batch_size=37, on_error="dead_letter")
    assert transform.schema == wa.load_plan(PLAN).transcoder().arrow_schema

    with in_process() as p:
        result = p | beam.Create(records) | transform
        assert_that(result.batches, equal_to_rows(want_rows), label="rows")
        assert_that(
            result.dead_letters | beam.Map(lambda d: (d.reason, d.path, d.raw, d.key)),
            lambda got: _same(
                sorted(got),
                sorted((r["reason"], r["path"], r["raw"], None) for r in want_dead.to_pylist()),
            ),
            label="dead",
        )
        assert_that(
            result.batches
            | beam.Map(lambda b: b.num_rows <= 37 * 50 and b.schema.equals(transform.schema)),
            lambda flags: _same(set(flags), {True}),
            label="schema",
        )
    metrics = p.result.metrics().query()["counters"]
    totals = {c.key.metric.name: c.committed for c in metrics}
    assert totals["records_in"] == len(records)
    assert totals["records_failed"] == len(BAD) == want_dead.num_rows
    assert totals["rows_transcoded"] == len(want_rows)


def test_one_default_policy_and_beam_yamls_error_handling(bid_corpus) -> None:
    """The on_error given, else the plan's own, else raise; error_handling= (Beam YAML's
    dead-letter output) means dead_letter unless on_error says otherwise."""

    def policy(plan, **options) -> str:
        return wab.ToArrow(plan, **options).transcoder.spec.on_error

    assert policy(ID_PLAN) == "raise"
    assert policy({**ID_PLAN, "errors": "skip"}) == "skip"
    assert policy(ID_PLAN, error_handling={"output": "bad"}) == "dead_letter"
    assert policy(ID_PLAN, error_handling={"output": "bad"}, on_error="skip") == "skip"
    assert policy(wa.load_plan(ID_PLAN).with_options(on_error="skip").transcoder()) == "skip"
    schema = wa.load_plan(ID_PLAN).schema()
    assert wab.FromArrow(schema).transcoder.spec.on_error == "raise"
    assert wab.FromRows(schema, error_handling={"output": "x"}).transcoder.spec.on_error == (
        "dead_letter"
    )
    with pytest.raises(ValueError, match="on_error"):
        wab.ToArrow(ID_PLAN, on_error="ignore")
    # raise: the bundle fails, naming the record
    with pytest.raises(Exception, match="record 1, byte 0"), in_process() as p:
        _ = p | beam.Create([bid_corpus[0], BAD[0]]) | wab.ToArrow(ID_PLAN)


def test_the_plans_input_section_is_the_default_format(tmp_path, bid_corpus) -> None:
    """A YAML plan's input: is ToArrow's RecordFormat (keywords over it) and, given as
    input=, ReadFromDelimited's framing; a stream framing is the reader's, not ToArrow's."""
    from google.protobuf import json_format, message_factory

    import corpus

    plan = {**ID_PLAN, "input": {"format": "json"}}
    bid = message_factory.GetMessageClass(wa.load_plan(ID_PLAN).schema().descriptor)
    texts = [json_format.MessageToJson(bid.FromString(r), indent=None) for r in bid_corpus[:20]]
    want_rows, _ = expected_rows(ID_PLAN, bid_corpus[:20])
    assert wab.ToArrow(plan).input.format == "json"
    assert wab.ToArrow(plan, format="binary").input.format == "binary"
    assert wab.ToArrow(plan, wa.RecordFormat()).input.format == "binary"
    framed = {**ID_PLAN, "input": {"framing": "u32le", "compression": "gzip"}}
    assert wab.ToArrow(framed).input == wa.RecordFormat()  # the files' framing: the reader's
    with pytest.raises(ValueError, match="one by one"):
        wab.ToArrow(ID_PLAN, framing="u32le")
    with pytest.raises(TypeError, match="column="):
        wab.ToArrow(ID_PLAN, field="value")
    with gzip.open(tmp_path / "a.bin", "wb") as f:
        f.writelines(corpus.frame(bid_corpus[:20], "u32le"))
    read = wab.ReadFromDelimited(str(tmp_path / "a.bin"), input=wa.load_plan(framed).input)
    assert (read._framing, read._compression) == ("u32le", "gzip")
    with in_process() as p:
        rows = (p | "texts" >> beam.Create(texts) | wab.ToArrow(plan)).batches
        assert_that(rows, equal_to_rows(want_rows), label="json")
        files = (p | read | "files" >> wab.ToArrow(framed)).batches
        assert_that(files, equal_to_rows(want_rows), label="files")


def _same(got, want) -> None:
    if got != want:
        raise AssertionError(f"got {got!r:.500}\nwant {want!r:.500}")


def test_keyed_and_row_inputs_carry_keys_to_dead_letters(bid_corpus) -> None:
    records = bid_corpus[:40]
    want_rows, _ = expected_rows(ID_PLAN, records)
    keyed = [(f"k{i}", r) for i, r in enumerate(records)] + [("bad-0", BAD[0]), (b"bad-1", BAD[1])]
    rows = [beam.Row(value=r, n=i) for i, r in enumerate([*records, BAD[0]])]

    with in_process() as p:
        by_key = (
            p | "keyed" >> beam.Create(keyed) | "ToArrowKeyed"
            >> wab.ToArrow(ID_PLAN, batch_size=8, on_error="dead_letter")
        )
        assert_that(by_key.batches, equal_to_rows(want_rows), label="keyed rows")
        assert_that(
            by_key.dead_letters | "keys" >> beam.Map(lambda d: d.key),
            lambda got: _same(sorted(got), ["bad-0", "bad-1"]),
            label="keyed dead",
        )
        from_rows = (
            p | "rows" >> beam.Create(rows) | "ToArrowRows"
            >> wab.ToArrow(ID_PLAN, column="value", on_error="dead_letter")
        )
        assert_that(from_rows.batches, equal_to_rows(want_rows), label="row rows")
        assert_that(
            from_rows.dead_letters | "count" >> beam.combiners.Count.Globally(),
            lambda n: _same(n, [1]),
            label="row dead",
        )


def test_batches_keep_their_window_and_timestamp(tmp_path, bid_corpus) -> None:
    """Buffered per window; every batch in its records' window, at their latest timestamp."""
    records = bid_corpus[:60]
    ids = [r["id"] for r in wa.load_plan(ID_PLAN).transcoder().transcode(records).to_pylist()]
    stamp = {rid: 3 * i for i, rid in enumerate(ids)}  # 0..177 s: 18 windows of 10 s

    def describe(batch, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam):
        batch_ids = batch.column("id").to_pylist()
        return (w.start.micros // 10**6, ts.micros / 10**6, batch_ids)

    def check(got) -> None:
        seen = []
        for start, ts, batch_ids in got:
            assert all(start <= stamp[i] < start + 10 for i in batch_ids), (start, batch_ids)
            assert ts == max(stamp[i] for i in batch_ids), (ts, batch_ids)
            assert len(batch_ids) <= 2
            seen.extend(batch_ids)
        assert sorted(seen) == sorted(ids)

    out = tmp_path / "out"
    with in_process() as p:
        result = (
            p
            | beam.Create(list(enumerate(records)))
            | beam.Map(lambda e: window.TimestampedValue(e[1], 3 * e[0]))
            | beam.WindowInto(window.FixedWindows(10))
            | wab.ToArrow(ID_PLAN, batch_size=2)
        )
        assert_that(result.batches | beam.Map(describe), check)
        _ = result.batches | wab.WriteToParquetFiles(str(out), schema=result.schema)

    # Bounded and windowed: one file per window (one firing, one shard), that window's rows.
    files = sorted(out.glob("*.parquet"))
    assert len(files) == 18
    for f in files:
        start = re.fullmatch(r"part-19700101T(\d{6})\.000000Z-.*-0-00000-of-00001\.parquet", f.name)
        assert start, f.name
        seconds = int(start[1][:2]) * 3600 + int(start[1][2:4]) * 60 + int(start[1][4:])
        got = pq.read_table(f).column("id").to_pylist()
        assert got and all(seconds <= stamp[i] < seconds + 10 for i in got)
    assert sorted(i for f in files for i in pq.read_table(f).column("id").to_pylist()) == sorted(
        ids
    )


# ----------------------------------------------------------------------------- pickling


def test_threads_share_the_compiled_plan_not_the_dead_letters() -> None:
    """DoFn copies (a worker's threads each get one) share the compiled plan, and decode
    keeps nothing: one's bad records are in its own output only."""
    fn = wab.transcode._TranscodeBatchesFn(wab.ToArrow(ID_PLAN, on_error="dead_letter"))
    a, b = pickle.loads(pickle.dumps(fn)), pickle.loads(pickle.dumps(fn))
    a.setup()
    b.setup()
    assert a._tc is not b._tc and a._tc._plan is b._tc._plan
    rows, dead = a._decode(pa.array(BAD, pa.binary()), None)
    assert rows.num_rows == 0 and [d.raw for d in dead] == BAD
    assert b._decode(pa.array([], pa.binary()), None)[1] == []
    assert a._tc.stats == b._tc.stats == wa.Counts()


def test_dofns_and_rows_pickle_with_the_standard_pickler(bid_corpus) -> None:
    """What dill builds on: every DoFn and row round-trips through plain pickle too."""
    schema = wa.load_plan(PLAN).transcoder().arrow_schema
    rows_fn = pickle.loads(pickle.dumps(wab.rows._RowsFn(schema, "R")))
    rows_fn.setup()
    batch = wa.load_plan(PLAN).transcoder().transcode(bid_corpus[:3])
    rows = list(rows_fn.process(batch))
    back = pickle.loads(pickle.dumps(rows))
    assert back == rows and back[0].request_id == rows[0].request_id
    for fn in (
        wab.read._PlanChunksFn(wab.ReadFromDelimited("x", chunk_bytes=1 << 20)),
        wab.read._ReadChunkFn(wab.ReadFromDelimited("x", batch_size=100)),
        wab.parquet._AssignShardFn(2),
        wab.parquet._name_firing,
        wab.parquet.ParquetFileSink(schema, "zstd", 1000).per_file,
        wab.parquet._FileNaming("part"),
    ):
        pickle.loads(pickle.dumps(fn))


@pytest.mark.parametrize("library", ["cloudpickle", "dill"])
def test_pickles_with_cloudpickle_and_dill(library: str, bid_corpus) -> None:
    if library == "dill":
        pytest.importorskip("dill", reason="dill is not installed in this environment")
    from apache_beam.internal import pickler

    records = bid_corpus[:30]
    want_rows, _ = expected_rows(ID_PLAN, records)
    pickler.set_library(library)
    try:
        for fn in (
            wab.transcode._TranscodeBatchesFn(wab.ToArrow(ID_PLAN)),
            wab.rows._RowsFn(wa.load_plan(PLAN).transcoder().arrow_schema, "R"),
        ):
            restored = pickler.loads(pickler.dumps(fn))
            restored.setup()
        with in_process(pickle_library=library) as p:
            records_pc = p | beam.Create(records)
            assert_that((records_pc | wab.ToArrow(ID_PLAN)).batches, equal_to_rows(want_rows))
            rows = (records_pc | wab.ToRows(PLAN)).rows
            assert_that(rows | beam.combiners.Count.Globally(), lambda n: n[0] > 30, label="rows")
    finally:
        pickler.set_library(pickler.DEFAULT_PICKLE_LIB)


# ----------------------------------------------------------------------------- ToRows


def test_to_rows_schema_and_values(bid_schema, bid_corpus) -> None:
    from apache_beam.typehints.schemas import typing_to_runner_api

    nested = wa.Transcoder(bid_schema)  # whole messages: structs, lists, maps, uint32
    to_rows = wab.ToRows(nested, type_name="BidRow")
    schema = typing_to_runner_api(to_rows.row_type).row_type.schema
    fields = {f.name: f.type for f in schema.fields}
    assert fields["tmax"].atomic_type == 4  # uint32 -> INT64 (schema_pb2.INT64)
    assert fields["at"].atomic_type == 3  # enum -> INT32
    assert fields["timestamp"].logical_type.urn == "beam:logical_type:micros_instant:v1"
    imp = fields["imp"].array_type.element_type.row_type.schema
    banner = {f.name: f.type for f in imp.fields}["banner"].row_type.schema
    assert {f.name: f.type.atomic_type for f in banner.fields}["w"] == 4  # uint32 -> INT64
    assert fields["id"].nullable

    flat = wab.ToRows(PLAN)
    assert [n for n, _ in flat.row_type.__annotations__.items()] == flat._to_arrow.schema.names

    records = bid_corpus[:50]
    arrow = nested.transcode(records).to_pylist()
    expected = sorted(
        (r["id"], r["tmax"], len(r["imp"]), r["timestamp"].timestamp()) for r in arrow
    )
    coder = beam.coders.RowCoder.from_type_hint(to_rows.row_type, None)

    def check(rows) -> None:
        got = sorted((r.id, r.tmax, len(r.imp), r.timestamp.micros / 1e6) for r in rows)
        _same(got, expected)
        for r in rows[:5]:  # rows survive RowCoder (what crosses every fusion break)
            back = coder.decode(coder.encode(r))
            assert back.id == r.id and back.imp[0].banner == r.imp[0].banner

    with in_process() as p:
        rows = (p | beam.Create(records) | to_rows).rows | beam.Reshuffle()
        assert_that(rows, check)


def test_row_type_mapping_of_unusual_types() -> None:
    schema = pa.schema(
        [
            ("u8", pa.uint8()), ("u64", pa.uint64()), ("ns", pa.timestamp("ns", tz="UTC")),
            ("d", pa.duration("ms")), ("day", pa.date32()), ("imp[*].id", pa.list_(pa.string())),
            ("m", pa.map_(pa.string(), pa.int32())), ("e", pa.struct([])),
        ]
    )  # fmt: skip
    row = wab.rows._top_row(schema, "T")
    row_cls = row.cls
    assert row_cls._fields == ("u8", "u64", "ns", "d", "day", "imp_id", "m", "e")
    batch = pa.record_batch(
        [
            pa.array([255, None], pa.uint8()), pa.array([2**64 - 1, 5], pa.uint64()),
            pa.array([1_500, None], pa.timestamp("ns", tz="UTC")), pa.array([3, 4], pa.duration("ms")),
            pa.array([1, 2], pa.date32()), pa.array([["a", "b"], None], pa.list_(pa.string())),
            pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int32())),
            pa.array([{}, None], pa.struct([])),
        ],
        schema=schema,
    )  # fmt: skip
    first, second = row.to_rows(batch.slice(0, 2).columns)
    assert first.u8 == 255 and first.u64 == -1 and second.u64 == 5
    assert first.ns.micros == 1 and second.ns is None
    assert first.d == 3000 and first.imp_id == ["a", "b"] and second.imp_id is None
    assert first.m == {"k": 1} and second.m == {}
    assert first.e == () and first.e._fields == () and second.e is None  # an empty message


# ----------------------------------------------------------------------------- ReadFromDelimited


def _write_framed(path: Path, records: list[bytes], framing: str, opener=open) -> None:
    import corpus

    with opener(path, "wb") as f:
        f.writelines(corpus.frame(records, framing))


@pytest.mark.parametrize("framing", ["varint", "u32be"])
def test_read_delimited_reads_every_record_once_across_splits(
    tmp_path, framing, bid_corpus
) -> None:
    big = [r + bytes([i % 7]) for i, r in enumerate(bid_corpus * 3)]  # 900 records, ~850 KB
    small, compressed = bid_corpus[:3], bid_corpus[3:40]
    _write_framed(tmp_path / "a.bin", big, framing)
    _write_framed(tmp_path / "b.bin", small, framing)
    _write_framed(tmp_path / "c.bin", [], framing)
    _write_framed(tmp_path / "d.bin.gz", compressed, framing, opener=gzip.open)
    chunks = list(
        wab.read._PlanChunksFn(wab.ReadFromDelimited("x", framing, chunk_bytes=20_000)).process(
            beam.io.filesystems.FileSystems.match([str(tmp_path / "a.bin")])[0].metadata_list[0]
        )
    )
    assert len(chunks) > 30  # many splits, each a whole number of records
    assert chunks[0].start == 0 and all(x.end == y.start for x, y in itertools.pairwise(chunks))
    want = Counter(big + small + compressed)

    with in_process() as p:
        records = p | wab.ReadFromDelimited(
            str(tmp_path / "*"), framing, chunk_bytes=20_000, batch_size=64
        )
        assert_that(records, lambda got: _same(Counter(got), want))


def test_to_arrow_takes_read_delimited_batches_whole(tmp_path, bid_corpus) -> None:
    """Fused after ReadFromDelimited, ToArrow gets its RecordArrays: no per-record call."""
    _write_framed(tmp_path / "a.bin", bid_corpus[:100], "u32le")
    want_rows, _ = expected_rows(ID_PLAN, bid_corpus[:100])
    with in_process() as p:
        records = p | wab.ReadFromDelimited(str(tmp_path / "a.bin"), "u32le", batch_size=30)
        result = records | wab.ToArrow(ID_PLAN, batch_size=20)
        assert_that(result.batches, equal_to_rows(want_rows))
    counters = {c.key.metric.name: c.committed for c in p.result.metrics().query()["counters"]}
    assert counters["record_arrays_in"] == 4  # 30 + 30 + 30 + 10 records
    assert counters["batches_out"] == 7  # each sliced to batch_size 20
    assert counters["records_in"] == counters["records_read"] == 100


def test_read_delimited_truncated_files(tmp_path, bid_corpus) -> None:
    path = tmp_path / "t.bin"
    _write_framed(path, bid_corpus[:20], "u32le")
    path.write_bytes(path.read_bytes()[:-10])
    with (
        pytest.raises(Exception, match=r"truncated u32le stream: the record at byte \d+"),
        in_process() as p,
    ):
        _ = p | wab.ReadFromDelimited(str(path), "u32le")
    for chunk_bytes in (1_000, 10**9):  # planned (scan) and unplanned (one chunk) paths
        with in_process() as p:
            records = p | wab.ReadFromDelimited(
                str(path), "u32le", chunk_bytes=chunk_bytes, truncated="skip"
            )
            assert_that(records, lambda got: _same(sorted(got), sorted(bid_corpus[:19])))


# ----------------------------------------------------------------------------- batch pipeline


def test_batch_pipeline_on_two_worker_processes(tmp_path, bid_corpus) -> None:
    """Files -> ToArrow -> Parquet with 2 SDK worker processes: the transcoder's result."""
    import corpus

    corpus.write_corpus(tmp_path / "in" / "a.varint", 400, seed=11, framing="varint")
    corpus.write_corpus(tmp_path / "in" / "b.varint", 300, seed=12, framing="varint")
    records = corpus.generate(400, seed=11) + corpus.generate(300, seed=12)
    want_rows, _ = expected_rows(PLAN, records)
    out = tmp_path / "out"
    with two_workers() as p:
        result = (
            p
            | wab.ReadFromDelimited(str(tmp_path / "in" / "*.varint"), chunk_bytes=50_000)
            | wab.ToArrow(PLAN, batch_size=100)
        )
        # Nothing from this module in the graph: the worker processes cannot import it.
        _ = result.batches | wab.WriteToParquetFiles(str(out), schema=result.schema)
    names = sorted(f.name for f in out.glob("*.parquet"))
    assert all(re.fullmatch(r"part-\d{5}-of-\d{5}\.parquet", n) for n in names), names
    table = read_parquet_dir(out)
    assert rows_of([table.cast(result.schema)]) == want_rows
    assert [p.name for p in out.iterdir() if not p.name.endswith(".parquet")] == []  # temp dir gone


def test_write_to_parquet_refuses_accumulating_panes() -> None:
    p = beam.Pipeline(runner=FnApiRunner())
    batches = (
        p
        | beam.Create([pa.record_batch({"x": [1]})])
        | beam.WindowInto(
            window.FixedWindows(10),
            trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
            accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
        )
    )
    with pytest.raises(ValueError, match="accumulat"):
        _ = batches | wab.WriteToParquetFiles("/nonexistent")


def test_parquet_file_sink_footer_once(tmp_path) -> None:
    sink = wab.parquet.ParquetFileSink(None, "zstd", 2).per_file(None)
    path = tmp_path / "f.parquet"
    with open(path, "wb") as fh:
        sink.open(fh)
        for i in range(3):
            sink.write(("dest", pa.record_batch({"x": [i, i]})))
        sink.flush()
        sink.flush()  # idempotent
        with pytest.raises(ValueError, match="footer"):
            sink.write(pa.record_batch({"x": [9]}))
    assert pq.read_table(path).column("x").to_pylist() == [0, 0, 1, 1, 2, 2]
    assert pq.ParquetFile(path).metadata.num_row_groups == 3


# ----------------------------------------------------------------------------- streaming


def minute_windows_late_by_300s() -> beam.WindowInto:
    """One-minute windows, a late firing per late record, 300 s of allowed lateness."""
    return beam.WindowInto(
        window.FixedWindows(60),
        trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
        allowed_lateness=300,
        accumulation_mode=trigger.AccumulationMode.DISCARDING,
    )


def test_streaming_windows_late_data_one_file_per_window_firing_and_shard(
    tmp_path, bid_corpus
) -> None:
    records = bid_corpus[:60]
    ids = [r["id"] for r in wa.load_plan(ID_PLAN).transcoder().transcode(records).to_pylist()]
    stream = (
        test_stream.TestStream()
        .add_elements([window.TimestampedValue(r, 10 + i) for i, r in enumerate(records[:20])])
        .add_elements([window.TimestampedValue(r, 70 + i) for i, r in enumerate(records[20:40])])
        .advance_watermark_to(125)  # windows [0, 60) and [60, 120) fire
        .add_elements([window.TimestampedValue(r, 30) for r in records[40:45]])  # late, allowed
        .add_elements([window.TimestampedValue(r, 130 + i) for i, r in enumerate(records[45:55])])
        .advance_watermark_to(1000)
        .add_elements([window.TimestampedValue(r, 40) for r in records[55:60]])  # too late
        .advance_watermark_to_infinity()
    )
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    out = tmp_path / "out"
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
        result = (
            p
            | stream
            | minute_windows_late_by_300s()
            | wab.ToArrow(ID_PLAN, batch_size=8)
        )
        _ = result.batches | wab.WriteToParquetFiles(str(out), schema=result.schema, shards=2)

    files = sorted(out.glob("*.parquet"))
    by_window: dict[str, set] = {}
    pattern = re.compile(
        r"part-(\d{8}T\d{6}\.\d{6}Z)-\d{8}T\d{6}\.\d{6}Z-(\d+)-(\d{5})-of-00002\.parquet"
    )
    firings = Counter()
    for f in files:
        m = pattern.fullmatch(f.name)
        assert m, f.name
        pq.read_metadata(f)  # every file is complete: it has its footer
        firings[(m[1], m[2])] += 1
        got = pq.read_table(f).column("id").to_pylist()
        by_window.setdefault(m[1], set()).update(got)
        assert len(got) == len(set(got))
    assert by_window == {
        "19700101T000000.000000Z": set(ids[:20]) | set(ids[40:45]),
        "19700101T000100.000000Z": set(ids[20:40]),
        "19700101T000200.000000Z": set(ids[45:55]),
    }
    late = {k for k in firings if k[1] == "1"}
    assert late == {("19700101T000000.000000Z", "1")}  # the late firing has its own file
    total = sum(pq.read_metadata(f).num_rows for f in files)
    assert total == 55  # the 5 records past the allowed lateness are dropped


# ----------------------------------------------------------------------------- Beam YAML


YAML_PIPELINE = ROOT / "pipelines" / "beam_yaml_pipeline.yaml"


def _yaml_spec(tmp_path: Path) -> tuple[str, Path]:
    import corpus

    corpus.write_corpus(tmp_path / "in" / "a.varint", 200, seed=3, framing="varint")
    with open(tmp_path / "in" / "a.varint", "ab") as f:
        f.writelines(corpus.frame(BAD, "varint"))
    text = YAML_PIPELINE.read_text()
    values = {
        "input": str(tmp_path / "in" / "*.varint"),
        "plan": PLAN,
        "output": str(tmp_path / "out"),
    }
    for name, value in values.items():
        text = text.replace(f"{{{{ {name} }}}}", value)
    return text, tmp_path / "out"


def test_yaml_pipeline_file_wires_the_wirearrow_transforms(tmp_path) -> None:
    """Beam YAML's python provider, emulated: what it does with the example file.

    The provider imports each fully qualified name and calls it with the config as keyword
    arguments (InlineProvider.create_transform); outputs are referenced as Name.output.
    This runs even where apache_beam.yaml cannot be imported (it needs jinja2).
    """
    import importlib

    import yaml

    text, out = _yaml_spec(tmp_path)
    spec = yaml.safe_load(text)
    (provider,) = spec["providers"]
    assert provider["type"] == "python"
    factories = {}
    for name, qualified in provider["transforms"].items():
        module, _, attr = qualified.rpartition(".")
        factories[name] = getattr(importlib.import_module(module), attr)
    outputs: dict[str, object] = {}
    with in_process() as p:
        for t in spec["pipeline"]["transforms"]:
            name = t.get("name", t["type"])
            source = t.get("input")
            if source is None:
                pcoll = p
            else:
                step, _, tag = source.partition(".")
                pcoll = outputs[step][tag] if tag else outputs[step]
            if t["type"] in factories:
                outputs[name] = pcoll | name >> factories[t["type"]](**t.get("config", {}))
            else:  # a Beam built-in (MapToFields, WriteToJson): check its input is schema'd
                assert t["type"] in ("MapToFields", "WriteToJson")
                element = getattr(pcoll, "element_type", None)
                if element is not None and t["type"] == "MapToFields":
                    assert element is wab.DeadLetter
                    outputs[name] = pcoll | name >> beam.Map(lambda d: d.reason)
                    assert_that(
                        outputs[name] | "count" >> beam.combiners.Count.Globally(),
                        lambda n: _same(n, [2]),
                        label="dead letters",
                    )
    assert read_parquet_dir(out / "parquet").num_rows > 200


def test_yaml_pipeline_runs_with_beam_yaml(tmp_path) -> None:
    pytest.importorskip("jinja2", reason="Beam YAML needs jinja2, not installed here")
    pytest.importorskip("docstring_parser", reason="Beam YAML's python provider needs it")
    from apache_beam.yaml import yaml_transform

    text, out = _yaml_spec(tmp_path)
    with in_process() as p:
        yaml_transform.expand_pipeline(p, text)
    assert read_parquet_dir(out / "parquet").num_rows > 200
    assert list((out / "dead_letters").glob("dead*"))


def test_yaml_pipeline_validates_against_beams_schema(tmp_path) -> None:
    """The example against apache_beam/yaml/pipeline.schema.yaml (read without jinja2)."""
    import jsonschema
    import yaml

    schema_path = Path(beam.__file__).parent / "yaml" / "pipeline.schema.yaml"
    schema = yaml.safe_load(schema_path.read_text())
    text, _ = _yaml_spec(tmp_path)
    jsonschema.validate(yaml.safe_load(text), schema)


def test_every_option_survives_the_dofn_setup() -> None:
    options = {
        "on_error": "skip",
        "validate": "full",
        "timestamp_unit": "ns",
        "max_nesting": 17,
        "max_depth": 2,
        "enums": "name",
        "keep_unknown": True,
    }
    tc = wa.Transcoder(wa.load_plan(ID_PLAN).schema(), **options)
    fn = pickle.loads(pickle.dumps(wab.transcode._TranscodeBatchesFn(wab.ToArrow(tc))))
    fn.setup()
    assert fn._tc.spec == tc.spec
    assert {name: fn._tc.spec.options[name] for name in options} == options


def test_confluent_records_in_read_from_kafka_shapes() -> None:
    """ReadFromKafka's outputs -- KV(key, value) and with_metadata=True rows -- of values
    written by Confluent's ProtobufSerializer, in one pipeline."""
    pytest.importorskip("confluent_kafka.schema_registry.protobuf")
    import confluent_data

    v1, v2 = confluent_data.schemas()
    framed, payloads, ids = confluent_data.orders(v1, v2, n=24)
    values = [*framed, b"\x01not-confluent"]
    tc = wa.Transcoder(v2, ["id", "total"], on_error="dead_letter")
    want = tc.transcode(payloads)
    # v1 has no total: null for its records, each version read as itself (docs/evolution.md)
    total = [None if sid == 1 else t for t, sid in zip(want.column("total").to_pylist(), ids, strict=True)]
    want = want.set_column(1, want.schema.field("total"), pa.array(total, pa.float64()))
    want = want.append_column(
        pa.field("_schema_id", pa.int64(), nullable=False), pa.array(ids, pa.int64())
    )
    kv = [(f"k{i}".encode(), v) for i, v in enumerate(values)]
    # The fields of ReadFromKafka(with_metadata=True)'s rows (Beam 2.77, kafka.py).
    meta = [
        beam.Row(
            topic="orders",
            partition=i % 3,
            offset=i // 3,
            key=f"k{i}".encode(),
            value=v,
            timestamp=1_700_000_000_000 + i,
            timestampTypeName="CreateTime",
        )
        for i, v in enumerate(values)
    ]
    confluent = {"framing": "confluent", "schemas": {1: v1, 2: v2}, "schema_id": True}
    with in_process() as p:
        for label, elements in (("kv", kv), ("meta", meta)):
            out = (
                p
                | f"{label} create" >> beam.Create(elements)
                | f"{label} ToArrow" >> wab.ToArrow(tc, batch_size=7, **confluent)
            )
            assert out.schema == want.schema
            assert_that(out.batches, equal_to_rows(rows_of([want])), label=f"{label} rows")
            assert_that(
                out.dead_letters | f"{label} dead" >> beam.Map(lambda d: (d.key, d.reason)),
                lambda got: _same(
                    got, [("k24", "not Confluent framing: magic byte 0x01, not 0")]
                ),
                label=f"{label} dead letters",
            )


# ----------------------------------------------------------------------------- exactly once


def _broken(record: bytes) -> bytes:
    return record + b"\x0a\x7f"  # a field whose length runs past the record's end


def _too_late_stream(records: list[bytes]) -> test_stream.TestStream:
    """On time (0-39, two one-minute windows), late within the 300 s of allowed lateness
    (40-44), then too late for windows the sink has seen (50-51, 55-59)."""
    return (
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


def _counters(result) -> dict[str, int]:
    """The committed wirearrow counters of a finished pipeline, summed over steps."""
    from apache_beam.metrics.metric import MetricsFilter

    got: Counter = Counter()
    for c in result.metrics().query(MetricsFilter().with_namespace("wirearrow"))["counters"]:
        got[c.key.metric.name] += c.committed
    return dict(got)


def _read_dir(directory: Path) -> pa.Table | None:
    files = sorted(directory.glob("*.parquet"))
    return pa.concat_tables(pq.read_table(f) for f in files) if files else None


@pytest.mark.parametrize("late_dir", ["_late", None])
def test_streaming_too_late_data_exactly_once(
    tmp_path, bid_corpus, late_dir, complete_direct_metrics
) -> None:
    """Streaming with on-time, late and too-late data (some corrupt): rows + dead letters
    == records in, each record once, and the counts equal a clean run's (the in-process
    transcoder over the same records) -- counted from the outputs, and in the committed
    metrics (with the direct runner's metrics bug worked around: complete_direct_metrics).
    Dead letters are Parquet with plain names. With ``late_dir=None`` (Beam's own
    behaviour) the too-late records vanish: the test says how many."""
    broken = {3, 25, 42, 57}
    records = [_broken(r) if i in broken else r for i, r in enumerate(bid_corpus[:60])]
    sent = [records[i] for i in (*range(45), *range(50, 52), *range(55, 60))]
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    out, dead_dir = tmp_path / "out", tmp_path / "dead"
    p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
    result = (
        p
        | _too_late_stream(records)
        | minute_windows_late_by_300s()
        | wab.ToArrow(ID_PLAN, batch_size=8, on_error="dead_letter")
    )
    _ = result.batches | wab.WriteToParquetFiles(str(out), schema=result.schema, late_dir=late_dir)
    _ = result.dead_letters | wab.WriteDeadLetters(str(dead_dir), late_dir=late_dir)
    run = p.run()
    run.wait_until_finish()
    metrics = _counters(run)

    pattern = re.compile(r"dead-\d{8}T\d{6}\.\d{6}Z-\d{8}T\d{6}\.\d{6}Z-\d+-00000-of-00001\.parquet")
    files = sorted(dead_dir.glob("*.parquet"))
    assert files and all(pattern.fullmatch(f.name) for f in files), [f.name for f in files]
    dead = _read_dir(dead_dir)
    assert dead is not None
    assert dead.schema.names == [
        "index", "offset", "path", "reason", "raw", "key", "topic", "partition", "kafka_offset",
        "timestamp",
    ]
    assert dead.schema.names[:5] == DEAD_LETTER_SCHEMA.names
    rows = _read_dir(out)
    assert rows is not None
    on_time = rows.column("id").to_pylist()
    assert sorted(dead.column("raw").to_pylist()) == sorted(records[i] for i in (3, 25, 42))
    too_late_rows = _read_dir(out / "_late") if late_dir else None
    too_late_dead = _read_dir(dead_dir / "_late") if late_dir else None
    if late_dir is None:  # Beam's own behaviour: dropped at the windows' grouping, uncounted
        assert len(on_time) + dead.num_rows == 45  # 7 of 52 records came too late: gone
        assert metrics["records_in"] == 52 and "rows_late" not in metrics
        # rows_out is what the files hold, not what the transcoder made (which the
        # grouping then dropped in part)
        assert metrics["rows_out"] == len(on_time) < metrics["rows_transcoded"] == 48
        return
    assert too_late_rows is not None and too_late_dead is not None
    late_ids = too_late_rows.column("id").to_pylist()
    assert too_late_dead.column("raw").to_pylist() == [records[57]]
    assert too_late_dead.schema == dead.schema
    ids = on_time + late_ids
    assert len(ids) == len(set(ids))  # none twice
    letters = dead.num_rows + too_late_dead.num_rows
    assert len(ids) + letters == len(sent)  # none lost
    clean = wa.load_plan(ID_PLAN).with_options(on_error="skip").transcoder()
    expected = clean.transcode(sent).column("id").to_pylist()
    assert sorted(ids) == sorted(expected)
    counts = (len(ids) + letters, len(ids), letters, len(ids))  # in, ok, failed, rows out
    assert counts == (
        clean.stats.records_in, clean.stats.records_ok, clean.stats.records_failed,
        clean.stats.rows_out,
    )
    in_, _, failed, rows_out = counts
    assert (metrics["records_in"], metrics["records_failed"], metrics["rows_transcoded"]) == (
        in_, failed, rows_out,
    )
    # The sinks count what their files hold: the window files' rows, the late files'.
    assert metrics["rows_out"] == len(on_time) and metrics["rows_late"] == len(late_ids) == 6
    assert metrics["rows_out"] + metrics["rows_late"] == rows_out
    assert metrics["dead_letters_out"] == dead.num_rows
    assert metrics["dead_letters_late"] == too_late_dead.num_rows == 1
    assert sorted(late_ids) == sorted(
        expected_id for i in (50, 51, 55, 56, 58, 59)
        for expected_id in clean.transcode([records[i]]).column("id").to_pylist()
    )


def test_batch_dead_letters_as_parquet_on_two_workers(tmp_path, bid_corpus) -> None:
    records = [_broken(r) if i % 10 == 4 else r for i, r in enumerate(bid_corpus[:200])]
    with two_workers() as p:
        result = (
            p
            | beam.Create(records, reshuffle=False)
            | wab.ToArrow(ID_PLAN, batch_size=16, on_error="dead_letter")
        )
        _ = result.dead_letters | wab.WriteDeadLetters(str(tmp_path / "dead"))
    dead = pq.read_table(tmp_path / "dead")
    assert sorted(dead.column("raw").to_pylist()) == sorted(records[4::10])
    assert all(re.fullmatch(r"dead-\d{5}-of-\d{5}\.parquet", f.name)
               for f in (tmp_path / "dead").glob("*.parquet"))


def _faulty_job(records, out: Path, marker: Path):
    from apache_beam.metrics.metric import MetricsFilter

    flag = str(marker)

    def fail_once(batch):
        """The transient failure of one bundle: the first batch any process sees while
        ``marker`` does not exist. (Nested, so that it travels by value to the workers.)"""
        import os

        if not os.path.exists(flag):
            open(flag, "w").close()
            raise RuntimeError("transient failure of one bundle")
        yield batch

    p = two_workers()
    result = (
        p
        | beam.Create(records, reshuffle=False)
        | wab.ToArrow(ID_PLAN, batch_size=16, on_error="dead_letter")
    )
    batches = result.batches | beam.FlatMap(fail_once)
    _ = batches | wab.WriteToParquetFiles(str(out / "rows"), schema=result.schema)
    _ = result.dead_letters | wab.WriteDeadLetters(str(out / "dead"))
    run = p.run()
    run.wait_until_finish()
    counters = run.metrics().query(MetricsFilter().with_namespace("wirearrow"))["counters"]
    return {c.key.metric.name: c.committed for c in counters}


def test_a_failed_bundle_leaves_nothing_behind_and_the_rerun_counts_once(
    tmp_path, bid_corpus
) -> None:
    """FnApiRunner does not retry a failed bundle (the job fails; docs/beam.md): the
    attempt must leave no row file, no dead-letter file; the re-run then has every record
    exactly once and the metrics of a clean run."""
    records = [_broken(r) if i % 25 == 3 else r for i, r in enumerate(bid_corpus[:300])]
    records = [r + b"\x0a" + bytes([len(f"rec-{i}")]) + f"rec-{i}".encode() if i % 25 != 3 else r
               for i, r in enumerate(records)]
    marker = tmp_path / "failed-once"
    with pytest.raises(Exception, match="transient failure"):
        _faulty_job(records, tmp_path / "out", marker)
    assert not list((tmp_path / "out").rglob("*.parquet"))  # only temporary files, if any

    metrics = _faulty_job(records, tmp_path / "out", marker)  # the marker exists: no failure
    clean = _faulty_job(records, tmp_path / "clean", marker)
    assert metrics == clean and metrics["records_in"] == len(records)
    rows = pq.read_table(tmp_path / "out" / "rows").column("id").to_pylist()
    dead = pq.read_table(tmp_path / "out" / "dead").column("raw").to_pylist()
    assert len(rows) == len(set(rows)) == metrics["rows_out"]
    assert sorted(dead) == sorted(records[3::25]) and len(dead) == metrics["records_failed"]
    assert len(rows) + len(dead) == len(records)


def test_workers_log_their_totals_while_the_job_runs(bid_corpus, caplog, monkeypatch) -> None:
    # The progress lines (wirearrow.beam.progress) of the worker in this process: each
    # decode adds to the totals, a line at most every `every` seconds; with every=0 the
    # last line holds the job's totals.
    import logging

    from wirearrow.beam import progress

    totals = progress.WorkerTotals(every=0.0)
    monkeypatch.setattr(progress, "TOTALS", totals)
    records = bid_corpus[:90] + BAD
    want_rows, _ = expected_rows(PLAN, records)
    with caplog.at_level(logging.INFO, logger=progress.LOGGER.name), in_process() as p:
        _ = p | beam.Create(records) | wab.ToArrow(PLAN, batch_size=25, on_error="dead_letter")
    lines = [r.getMessage() for r in caplog.records if r.name == progress.LOGGER.name]
    assert len(lines) >= 3, lines  # 92 records in batches of at most 25
    numbers = [int(x.replace(",", "")) for x in re.findall(r"([\d,]+) (?:records in|rows|dead)", lines[-1])]
    assert numbers == [len(records), len(want_rows), len(BAD)], lines[-1]
    assert totals.counts.records_in == len(records)

    # Not enabled for INFO: nothing formatted, the totals still kept; and at most one line
    # per `every` seconds when it is.
    quiet = progress.WorkerTotals(every=3600.0)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=progress.LOGGER.name):
        for _ in range(5):
            quiet.add(wa.Counts(records_in=2, records_ok=2, rows_out=3))
    assert quiet.counts.records_in == 10 and caplog.records == []
