"""The Beam write half: Beam schemas from protobuf, FromRows / FromArrow, Beam-native batches.

Rows and records are compared with the protobuf runtime's
``SerializeToString(deterministic=True)``. Pipelines run on FnApiRunner (as
tests/test_beam.py's).
"""

# No `from __future__ import annotations`: Beam reads the batched DoFns' annotations.
import io
import pathlib
import types
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

beam = pytest.importorskip("apache_beam")

from apache_beam.testing.util import assert_that  # noqa: E402

import wirearrow as wa  # noqa: E402
import wirearrow.beam as wab  # noqa: E402
from schemagen import compile_source, messages, schema_specs  # noqa: E402
from test_beam import ID_PLAN, PLAN, ROOT, in_process, two_workers  # noqa: E402
from test_beam import pytestmark as beam_marks  # noqa: E402
from test_encode import _fill_special, _schema, truncated  # noqa: E402

pytestmark = [pytest.mark.beam, *beam_marks]  # (written out: the unit tier reads it unimported)

SCHEMAS = [
    ("rich.proto", "wirearrow.tests.rich.Root"),
    ("roundtrip.proto", "wirearrow.tests.roundtrip.Wkt"),
    ("roundtrip.proto", "wirearrow.tests.roundtrip.Maps"),
]


def _same(got: Any, want: Any) -> None:
    assert got == want, f"got {got!r:.400}\nwant {want!r:.400}"


def rows_round_trip(tc: wa.Transcoder, wire: list[bytes]) -> list[bytes]:
    """bytes -> ToRows' rows -> RowCoder bytes and back -> FromRows' Arrow -> encode."""
    row = wab.rows._top_row(tc.arrow_schema, "Row")
    coder = beam.coders.RowCoder.from_type_hint(row.cls, None)
    rows = [coder.decode(coder.encode(r)) for r in row.to_rows(tc.transcode(wire).columns)]
    return tc.encode(wab.RowsToArrow(tc.arrow_schema)(rows)).to_pylist()


# ----------------------------------------------------------------------------- schemas


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(which=st.sampled_from(SCHEMAS), enums=st.sampled_from(["number", "name"]), data=st.data())
def test_rows_round_trip_to_the_runtimes_bytes(which, enums, data) -> None:
    schema, cls = _schema(*which)
    values = data.draw(st.lists(messages(cls.DESCRIPTOR, max_depth=3), min_size=1, max_size=4))
    if "Wkt" in which[1]:
        for v in values:
            _fill_special(data, v)
    values = [truncated(v) for v in values]  # Beam instants hold microseconds
    tc = wa.Transcoder(schema, enums=enums)
    expected = [v.SerializeToString(deterministic=True) for v in values]
    _same(rows_round_trip(tc, [v.SerializeToString() for v in values]), expected)


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_rows_round_trip_random_schemas(data) -> None:
    spec = data.draw(schema_specs(), label="schema")
    note(spec.render())
    compiled = compile_source(spec.render())
    root = compiled.message_class(spec.root)
    values = data.draw(st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=4))
    values = [truncated(v) for v in values]
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    expected = [v.SerializeToString(deterministic=True) for v in values]
    _same(rows_round_trip(wa.Transcoder(schema), [v.SerializeToString() for v in values]), expected)


def test_message_row_type_of_a_message_class(bid_class) -> None:
    row_type = wab.message_row_type(bid_class)
    assert row_type.__name__ == "BidRequestEvent"
    assert isinstance(beam.coders.registry.get_coder(row_type), beam.coders.RowCoder)
    hints = row_type.__annotations__
    assert list(hints) == [f.name for f in bid_class.DESCRIPTOR.fields]
    imp = hints["imp"].__args__[0]  # Optional[Sequence[Optional[Imp row]]]
    assert "Sequence" in str(imp) and "banner" in imp.__args__[0].__args__[0]._fields
    assert "Mapping[str, typing.Optional[str]]" in str(hints["ext"])
    assert "Timestamp" in str(hints["timestamp"])
    named = wab.message_row_type(bid_class, enums="name")
    assert "str" in str(named.__annotations__["auction_type"])
    assert "int32" in str(row_type.__annotations__["auction_type"])
    with pytest.raises(ValueError, match="whole-message"):
        wab.message_row_type(wa.Transcoder(wa.Schema.from_message(bid_class), ["id"]))


def test_rows_to_arrow_names_and_missing_fields() -> None:
    schema = pa.schema([("u64", pa.uint64()), ("from", pa.int32()), ("p", pa.struct([("x", pa.int32())]))])
    back = wab.RowsToArrow(schema)
    row = beam.Row(u64=-1, from_=7, p=beam.Row(x=3))  # "from" is a keyword: from_
    batch = back([row, beam.Row(u64=5)])
    assert batch.to_pylist() == [
        {"u64": 2**64 - 1, "from": 7, "p": {"x": 3}},
        {"u64": 5, "from": None, "p": None},
    ]


# ----------------------------------------------------------------------------- pipelines


def test_to_rows_of_a_schema_and_from_rows_give_the_runtimes_bytes(
    bid_schema, bid_class, bid_corpus
) -> None:
    records = bid_corpus[:200]
    expected = sorted(bid_class.FromString(r).SerializeToString(deterministic=True) for r in records)
    to_rows = wab.ToRows(bid_schema, batch_size=64)
    assert to_rows.row_type._fields == wab.message_row_type(bid_schema)._fields
    with in_process() as p:
        rows = (p | beam.Create(records) | to_rows).rows | beam.Reshuffle()
        result = rows | wab.FromRows(bid_schema, batch_size=50)
        assert_that(result.records, lambda got: _same(sorted(got), expected))
        assert_that(result.dead_letters, lambda got: _same(list(got), []), label="no dead")


def test_schema_rows_work_with_select_group_by_and_dataframes(bid_schema, bid_corpus) -> None:
    """Beam SQL (SqlTransform) needs a Java expansion service; these are the Python
    schema-aware transforms over the same schema."""
    from apache_beam.dataframe.convert import to_dataframe, to_pcollection

    records = bid_corpus[:80]
    tc = wa.Transcoder(bid_schema)
    table = tc.transcode(records).to_pylist()
    by_tmax: dict = {}
    for r in table:
        by_tmax[r["tmax"]] = by_tmax.get(r["tmax"], 0) + len(r["imp"] or [])
    with in_process() as p:
        rows = (p | beam.Create(records) | wab.ToRows(bid_schema)).rows
        picked = rows | beam.Select("id", imps=lambda r: len(r.imp or []))
        assert_that(
            picked | beam.Map(lambda r: (r.id, r.imps)),
            lambda got: _same(sorted(got), sorted((r["id"], len(r["imp"] or [])) for r in table)),
            label="select",
        )
        grouped = (
            rows
            | beam.GroupBy("tmax").aggregate_field(lambda r: len(r.imp or []), sum, "imps")
            | beam.Map(lambda r: (r.tmax, r.imps))
        )
        assert_that(grouped, lambda got: _same(sorted(got), sorted(by_tmax.items())), label="gb")
        frame = to_dataframe(rows | beam.Select("id", "tmax"))
        big = to_pcollection(frame[frame.tmax > 100][["id"]], include_indexes=False)
        assert_that(
            big | beam.Map(lambda r: r.id),
            lambda got: _same(sorted(got), sorted(r["id"] for r in table if r["tmax"] > 100)),
            label="dataframe",
        )


def _ipc_rows(data: bytes) -> list:
    return pa.ipc.open_stream(io.BytesIO(data)).read_all().to_pylist()


def test_from_arrow_dead_letters_name_row_and_column(bid_schema, bid_class, bid_corpus) -> None:
    tc = wa.Transcoder(bid_schema)
    batch = tc.transcode(bid_corpus[:30])
    rows = batch.to_pylist()
    rows[4]["imp"] = [None]  # a null element of a repeated message: not a message
    rows[9]["imp"] = [*rows[9]["imp"][:1], None]
    bad = pa.RecordBatch.from_pylist(rows, schema=batch.schema)
    good = [i for i in range(30) if i not in (4, 9)]
    expected = sorted(
        bid_class.FromString(bid_corpus[i]).SerializeToString(deterministic=True) for i in good
    )
    with in_process() as p:
        result = (
            p
            | beam.Create([bad, pa.Table.from_batches([batch])])
            | wab.FromArrow(bid_schema, on_error="dead_letter")
        )
        want = sorted(expected + [bid_class.FromString(r).SerializeToString(deterministic=True) for r in bid_corpus[:30]])
        assert_that(result.records, lambda got: _same(sorted(got), want))

        def check(letters) -> None:
            letters = sorted(letters)
            _same([(d.index, d.path) for d in letters], [(4, "imp[0]"), (9, "imp[1]")])
            assert all(d.reason for d in letters)
            _same(_ipc_rows(letters[0].row)[0]["id"], rows[4]["id"])

        assert_that(result.dead_letters, check, label="dead")


def test_from_arrow_raise_and_skip(bid_schema, bid_corpus) -> None:
    tc = wa.Transcoder(bid_schema)
    rows = tc.transcode(bid_corpus[:5]).to_pylist()
    rows[2]["imp"] = [None]
    bad = pa.RecordBatch.from_pylist(rows, schema=tc.arrow_schema)
    with pytest.raises(Exception, match=r"row 2, column imp\[0\]"), in_process() as p:
        _ = p | beam.Create([bad]) | wab.FromArrow(bid_schema, on_error="raise")
    with in_process() as p:
        result = p | beam.Create([bad]) | wab.FromArrow(bid_schema, on_error="skip")
        assert_that(result.records | beam.combiners.Count.Globally(), lambda n: _same(n, [4]))
        assert_that(result.dead_letters, lambda got: _same(list(got), []), label="none")


def test_from_rows_wrong_value_is_a_dead_letter(bid_schema, bid_class, bid_corpus) -> None:
    # Plain objects with the fields (a row type's coder would refuse the bad row before
    # FromRows sees it).
    tc = wa.Transcoder(bid_schema)
    rows = wab.rows._top_row(tc.arrow_schema, "BidRequestEvent").to_rows(
        tc.transcode(bid_corpus[:6]).columns
    )
    rows = [types.SimpleNamespace(**r._asdict()) for r in rows]
    rows[3].tmax = "not a number"
    expected = sorted(
        bid_class.FromString(bid_corpus[i]).SerializeToString(deterministic=True)
        for i in range(6)
        if i != 3
    )
    with in_process() as p:
        result = p | beam.Create(rows) | wab.FromRows(bid_schema, batch_size=10, on_error="dead_letter")
        assert_that(result.records, lambda got: _same(sorted(got), expected))
        assert_that(
            result.dead_letters | beam.Map(lambda d: (d.row, "not a number" in d.reason, d.path)),
            lambda got: _same(list(got), [(None, True, "tmax")]),
            label="dead",
        )


def test_from_arrow_keys_for_kafka(bid_schema, bid_class, bid_corpus) -> None:
    tc = wa.Transcoder(bid_schema)
    batch = tc.transcode(bid_corpus[:10])
    keyed = batch.append_column("k", pa.array([f"key{i}".encode() for i in range(10)]))
    expected = sorted(
        (f"key{i}".encode(), bid_class.FromString(r).SerializeToString(deterministic=True))
        for i, r in enumerate(bid_corpus[:10])
    )
    with in_process() as p:
        result = p | beam.Create([keyed]) | wab.FromArrow(bid_schema, key_column="k")
        assert_that(result.records, lambda got: _same(sorted(got), expected))


def test_encode_arguments_are_checked_where_the_pipeline_is_built(bid_schema) -> None:
    with pytest.raises(ValueError, match="on_error"):
        wab.FromArrow(bid_schema, on_error="ignore")
    with pytest.raises(ValueError, match="whole-message"):
        wab.FromArrow(wa.Transcoder(bid_schema, ["id"]))
    with pytest.raises(ValueError, match="framing"):
        wab.FromArrow(bid_schema, framing="varint")
    with pytest.raises(ValueError, match="batch_size"):
        wab.FromRows(bid_schema, batch_size=0)


# ----------------------------------------------------------------------------- files


def _encoded(bid_class, records: list[bytes]) -> list[bytes]:
    return [bid_class.FromString(r).SerializeToString(deterministic=True) for r in records]


def test_tfrecord_files_are_read_by_beams_read_from_tfrecord(
    tmp_path, bid_schema, bid_class, bid_corpus
) -> None:
    tc = wa.Transcoder(bid_schema)
    batches = [tc.transcode(bid_corpus[i : i + 40]) for i in range(0, 120, 40)]
    prefix = str(tmp_path / "out" / "part")
    with in_process() as p:
        records = (p | beam.Create(batches) | wab.FromArrow(bid_schema)).records
        _ = records | wab.WriteToDelimited(
            prefix, framing="tfrecord", file_name_suffix=".tfrecord", num_shards=2
        )
    files = sorted((tmp_path / "out").iterdir())
    assert [f.name for f in files] == [
        "part-00000-of-00002.tfrecord",
        "part-00001-of-00002.tfrecord",
    ]
    expected = sorted(_encoded(bid_class, bid_corpus[:120]))
    with in_process() as p:
        back = p | beam.io.ReadFromTFRecord(prefix + "*")
        assert_that(back, lambda got: _same(sorted(got), expected))
    # and our own reader, file by file
    ours = [r for f in files for r in wa.read_delimited(f.read_bytes(), "tfrecord").to_pylist()]
    _same(sorted(ours), expected)


def test_beams_tfrecord_files_are_read_by_read_from_delimited(
    tmp_path, bid_schema, bid_corpus
) -> None:
    records = bid_corpus[:90]
    prefix = str(tmp_path / "beam")
    with in_process() as p:
        _ = p | beam.Create(records) | beam.io.WriteToTFRecord(prefix, num_shards=2)
    want_rows = wa.Transcoder(bid_schema).transcode(records).to_pylist()
    with in_process() as p:
        read = p | wab.ReadFromDelimited(prefix + "*", framing="tfrecord")
        batches = (read | wab.ToArrow(wa.Transcoder(bid_schema))).batches
        assert_that(
            batches | beam.FlatMap(lambda b: [r["id"] for r in b.to_pylist()]),
            lambda got: _same(sorted(got), sorted(r["id"] for r in want_rows)),
        )


@pytest.mark.parametrize("framing", ["varint", "u32le", "u32be"])
def test_delimited_files_round_trip(tmp_path, framing, bid_corpus) -> None:
    records = [*bid_corpus[:50], b""]
    prefix = str(tmp_path / "d")
    with in_process() as p:
        _ = p | beam.Create(records) | wab.WriteToDelimited(prefix, framing=framing, num_shards=1)
    (only,) = tmp_path.iterdir()
    assert only.name == "d-00000-of-00001"
    _same(sorted(wa.read_delimited(only.read_bytes(), framing).to_pylist()), sorted(records))
    with pytest.raises(ValueError, match="framing"):
        wab.WriteToDelimited(prefix, framing="confluent")


def test_from_arrow_confluent_framing(bid_schema, bid_class, bid_corpus) -> None:
    tc = wa.Transcoder(bid_schema)
    batch = tc.transcode(bid_corpus[:20])
    # Confluent's wire format: magic 0, the schema id (4 bytes, big-endian), then the
    # message index ([0], the file's first message, as the single byte 0).
    head = b"\x00" + (42).to_bytes(4, "big") + b"\x00"
    expected = sorted(head + r for r in _encoded(bid_class, bid_corpus[:20]))
    with in_process() as p:
        encode = wab.FromArrow(bid_schema, framing="confluent", schema_id=42)
        result = p | beam.Create([batch]) | encode
        assert_that(result.records, lambda got: _same(sorted(got), expected))
    back = tc.transcode(expected, framing="confluent", schemas={42: bid_schema})
    assert back.num_rows == 20
    with pytest.raises(ValueError, match="schema_id"):
        wab.FromArrow(bid_schema, framing="confluent")


# ----------------------------------------------------------------------------- batches


class _RowsPerBatch(beam.DoFn):
    """A batched DoFn as users write them: pyarrow tables in, one number per batch out."""

    @beam.DoFn.yields_elements
    def process_batch(self, batch: pa.Table) -> Iterator[tuple[str, int]]:
        assert isinstance(batch, pa.Table)
        yield type(batch).__name__, batch.num_rows


class _ProjectIds(beam.DoFn):
    """A batched DoFn from RecordBatches to RecordBatches."""

    @beam.DoFn.yields_batches
    def process_batch(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        assert isinstance(batch, pa.RecordBatch)
        yield batch.select(["id"])

    def infer_output_type(self, input_type):
        return pa.RecordBatch


@pytest.mark.parametrize("batch_type", [pa.RecordBatch, pa.Table])
def test_to_arrow_output_goes_to_batched_dofns(batch_type, bid_corpus) -> None:
    records = bid_corpus[:100]
    want = sorted(wa.load_plan(ID_PLAN).transcoder().transcode(records).column("id").to_pylist())
    with in_process() as p:
        result = p | beam.Create(records) | wab.ToArrow(ID_PLAN, batch_size=30, batch_type=batch_type)
        counts = result.batches | beam.ParDo(_RowsPerBatch())
        assert_that(
            counts,
            lambda got: _same((sum(n for _, n in got), {k for k, _ in got}), (100, {"Table"})),
            label="tables",
        )
        ids = result.batches | beam.ParDo(_ProjectIds()) | beam.FlatMap(lambda b: b.column(0).to_pylist())
        assert_that(ids, lambda got: _same(sorted(got), want), label="ids")


def test_to_arrow_tables_go_to_beams_write_to_parquet_batched(tmp_path, bid_corpus) -> None:
    import pyarrow.parquet as pq

    records = bid_corpus[:100]
    transform = wab.ToArrow(PLAN, batch_size=40, batch_type=pa.Table)
    with in_process() as p:
        result = p | beam.Create(records) | transform
        _ = result.batches | beam.io.WriteToParquetBatched(
            str(tmp_path / "rows"), schema=transform.schema, file_name_suffix=".parquet"
        )
    got = pa.concat_tables([pq.read_table(f) for f in sorted(tmp_path.glob("rows*.parquet"))])
    want = wa.load_plan(PLAN).with_options(on_error="dead_letter").transcoder().transcode(records)
    assert got.schema == transform.schema
    _same(sorted(map(repr, got.to_pylist())), sorted(map(repr, want.to_pylist())))


# ----------------------------------------------------------------------------- names


def _beam_yaml_builtin_names() -> set[str]:
    """Every transform name Beam YAML's standard providers define (read as YAML: no jinja2)."""
    import yaml

    names: set[str] = set()

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "transforms" and isinstance(value, dict):
                    names.update(value)
                collect(value)
        elif isinstance(node, list):
            for item in node:
                collect(item)

    root = pathlib.Path(beam.__file__).parent / "yaml"
    for file in ("standard_io.yaml", "standard_providers.yaml"):
        collect(yaml.safe_load((root / file).read_text()))
    return names


def test_yaml_provider_names_do_not_shadow_beams_transforms() -> None:
    import yaml

    builtin = _beam_yaml_builtin_names()
    assert {"WriteToParquet", "ReadFromParquet", "WriteToTFRecord"} <= builtin  # it reads them
    for path in (ROOT / "pipelines" / "beam_yaml_pipeline.yaml", ROOT / "docs" / "beam.md"):
        text = path.read_text()
        if path.suffix == ".md":  # the provider block of the guide's YAML example
            text = text.split("```yaml", 1)[1].split("```", 1)[0]
        (provider,) = yaml.safe_load(text)["providers"]
        ours = set(provider["transforms"])
        assert not ours & builtin, f"{path.name}: {sorted(ours & builtin)} shadow Beam's own"
        for name, qualified in provider["transforms"].items():
            assert qualified == f"wirearrow.beam.{name}" and hasattr(wab, name)
    # every public PTransform of wirearrow.beam but the deprecated names is clash-free
    public = {n for n in wab.__all__ if isinstance(getattr(wab, n), type)
              and issubclass(getattr(wab, n), beam.PTransform)}
    assert public & builtin == {"WriteToParquet"}  # the deprecated alias, below


def test_old_names_warn_and_still_work(tmp_path, bid_corpus) -> None:
    path = tmp_path / "a.varint"
    path.write_bytes(wa.frame_records(pa.array(bid_corpus[:10], pa.binary()), "varint").to_pybytes())
    with pytest.warns(DeprecationWarning, match="ReadFromDelimited"):
        read = wab.ReadDelimited(str(path))
    with pytest.warns(DeprecationWarning, match="WriteToParquetFiles"):
        write = wab.WriteToParquet(str(tmp_path / "out"))
    assert isinstance(read, wab.ReadFromDelimited) and isinstance(write, wab.WriteToParquetFiles)
    with in_process() as p:
        result = p | read | wab.ToArrow(PLAN)
        _ = result.batches | write
    import pyarrow.parquet as pq

    rows = sum(pq.read_table(f).num_rows for f in (tmp_path / "out").glob("*.parquet"))
    assert rows == wa.load_plan(PLAN).transcoder().transcode(bid_corpus[:10]).num_rows


def test_round_trip_on_two_worker_processes(tmp_path, bid_schema, bid_class, bid_corpus) -> None:
    """Rows and plans cross process boundaries (the row types are rebuilt, not imported);
    nothing from this module is in the graph, so the workers need not import it."""
    records = bid_corpus[:150]
    prefix = str(tmp_path / "rt")
    with two_workers() as p:
        rows = (p | beam.Create(records) | wab.ToRows(bid_schema, batch_size=40)).rows
        result = rows | beam.Reshuffle() | wab.FromRows(bid_schema, batch_size=25)
        _ = result.records | wab.WriteToDelimited(prefix, framing="varint", num_shards=2)
    files = sorted(tmp_path.glob("rt-*"))
    assert len(files) == 2
    got = sorted(r for f in files for r in wa.read_delimited(f.read_bytes(), "varint").to_pylist())
    _same(got, sorted(_encoded(bid_class, records)))


def test_beam_yaml_write_to_parquet_is_beams_own(tmp_path, bid_corpus, monkeypatch) -> None:
    """With our provider in the pipeline, `type: WriteToParquet` is Beam's transform (its
    prefix-and-shard naming), not ours (a directory of part-*.parquet files)."""
    pytest.importorskip("jinja2", reason="Beam YAML needs jinja2, not installed here")
    pytest.importorskip("docstring_parser", reason="Beam YAML's python provider needs it")
    import pyarrow.parquet as pq
    from apache_beam.yaml import yaml_transform

    monkeypatch.chdir(tmp_path)
    pathlib.Path("in.varint").write_bytes(
        wa.frame_records(pa.array(bid_corpus[:50], pa.binary()), "varint").to_pybytes()
    )
    spec = f"""
pipeline:
  transforms:
    - {{type: ReadFromDelimited, name: Read, config: {{file_pattern: in.varint}}}}
    - type: ToRows
      name: Rows
      input: Read
      config:
        plan:
          proto: {{file: bidrequest.proto, message: BidRequestEvent, import_paths: [{ROOT / "examples" / "schema"}]}}
          denormalizer: {{columns: [{{name: id, path: id}}]}}
    - {{type: WriteToParquet, input: Rows.rows, config: {{path: beam-parquet/out}}}}
providers:
  - type: python
    config: {{}}
    transforms:
      ReadFromDelimited: wirearrow.beam.ReadFromDelimited
      ToRows: wirearrow.beam.ToRows
      WriteToParquetFiles: wirearrow.beam.WriteToParquetFiles
"""
    with in_process() as p:
        yaml_transform.expand_pipeline(p, spec)
    (only,) = pathlib.Path("beam-parquet").iterdir()
    assert only.name == "out-00000-of-00001"  # Beam's naming
    want = wa.load_plan(ID_PLAN).transcoder().transcode(bid_corpus[:50]).column("id")
    _same(sorted(pq.read_table(only).column("id").to_pylist()), sorted(want.to_pylist()))
