"""The write half in Ray: Encode / encode() (rows -> records, dead letters for rows that
cannot be encoded), write_delimited (rows -> framed files), TFRecord through the Ray
datasource, and decode -> filter/project -> encode -> Kafka on the real broker, every
record compared with the protobuf runtime's bytes."""

from __future__ import annotations

import io
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from wirearrow.sources.confluent import confluent_prefix

ray = pytest.importorskip("ray")
import wirearrow.ray as war  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")]

N = 200
BAD_EVERY = 9  # rows i % BAD_EVERY == 4 hold a null list element: they cannot be encoded


@pytest.fixture(scope="module")
def schema(bid_schema) -> wa.Schema:
    return bid_schema


@pytest.fixture(scope="module")
def rows(schema) -> tuple[pa.Table, list[bytes]]:
    """N decoded rows with a ``key`` column, and the runtime's bytes of each row."""
    records = corpus.generate(N, seed=5)
    table = pa.Table.from_batches([wa.Transcoder(schema).transcode(records)])
    table = table.append_column("key", pa.array([f"k{i}" for i in range(N)]))
    return table, [runtime_bytes(schema, r) for r in records]


def runtime_bytes(schema: wa.Schema, record: bytes, scrub: bool = False) -> bytes:
    from google.protobuf import message_factory

    msg = message_factory.GetMessageClass(schema.descriptor).FromString(record)
    if scrub:
        msg.ClearField("user")
    return msg.SerializeToString(deterministic=True)


def arrow(ds) -> pa.Table:
    return pa.concat_tables([ray.get(ref) for ref in ds.to_arrow_refs()])


def with_bad_rows(table: pa.Table) -> tuple[pa.Table, set[int]]:
    pylist = table.to_pylist()
    bad = {i for i in range(len(pylist)) if i % BAD_EVERY == 4}
    for i in bad:
        pylist[i]["imp"] = [None]
    return pa.Table.from_pylist(pylist, schema=table.schema), bad


# ---- Encode / encode() ---------------------------------------------------------------------


def test_encode_actor_step_gives_the_runtimes_bytes(ray_local, schema, rows) -> None:
    table, expected = rows
    ref = war.put_plan(wa.Transcoder(schema))
    out = arrow(
        ray.data.from_arrow(table)
        .repartition(3)
        .map_batches(
            war.Encode,
            fn_constructor_args=(ref,),
            fn_constructor_kwargs={"carry": ["key"]},
            batch_format="pyarrow",
            zero_copy_batch=True,
            compute=ray.data.ActorPoolStrategy(size=1),
            num_cpus=0.5,
        )
    )
    assert out.column_names == ["key", "record"]
    got = dict(zip(out.column("key").to_pylist(), out.column("record").to_pylist(), strict=True))
    assert got == {f"k{i}": b for i, b in enumerate(expected)}


def test_encode_dead_letters_and_job_stats(ray_local, schema, rows) -> None:
    table, expected = rows
    bad_table, bad = with_bad_rows(table)
    job = war.encode(
        ray.data.from_arrow(bad_table), wa.Transcoder(schema), carry=["key"],
        on_error="dead_letter", framing="confluent", schema_id=42,
    )
    out = arrow(job.rows)
    head = confluent_prefix(42)
    got = dict(zip(out.column("key").to_pylist(), out.column("record").to_pylist(), strict=True))
    assert got == {f"k{i}": head + b for i, b in enumerate(expected) if i not in bad}
    stats = job.job_stats()
    assert (stats.records_in, stats.records_ok, stats.records_failed) == (N, N - len(bad), len(bad))
    assert stats.dead_letters == len(bad)
    dead = arrow(job.dead_letters).to_pylist()
    assert sorted(d["source"]["key"] for d in dead) == sorted(f"k{i}" for i in bad)
    assert {d["path"] for d in dead} == {"imp[0]"}
    assert all("null element" in d["reason"] for d in dead)
    # back to the rows: the dead letter's source is the row as it was
    assert dead[0]["source"]["imp"] == [None]


def test_encode_raises_naming_row_and_column(ray_local, schema, rows) -> None:
    bad_table, _ = with_bad_rows(rows[0].slice(0, 10))
    with pytest.raises(Exception, match=r"row 4, column imp\[0\]: null element"):
        arrow(war.encode(ray.data.from_arrow(bad_table), wa.Transcoder(schema), carry=["key"]).rows)
    with pytest.raises(ValueError, match="whole-message"):
        war.Encode(wa.Transcoder(schema, columns=["id"]))
    with pytest.raises(ValueError, match="schema_id"):
        war.Encode(wa.Transcoder(schema), framing="confluent")


# ---- write_delimited -----------------------------------------------------------------------


@pytest.mark.parametrize("framing", ["varint", "u32be", "tfrecord"])
def test_write_delimited_round_trip(ray_local, schema, rows, tmp_path, framing) -> None:
    table, expected = rows
    bad_table, bad = with_bad_rows(table.drop_columns(["key"]))
    out = tmp_path / "out"
    stats = war.write_delimited(
        ray.data.from_arrow(bad_table).repartition(2), out, wa.Transcoder(schema), framing,
        on_error="dead_letter",
    )
    good = [b for i, b in enumerate(expected) if i not in bad]
    assert (stats.records_in, stats.records_ok, stats.records_failed) == (N, len(good), len(bad))
    assert stats.dead_letters == len(bad) and len(stats.files) == 2
    assert stats.bytes_out == sum(Path(f).stat().st_size for f in stats.files)
    # read back: the Ray datasource (which skips _dead_letters/) and the in-process reader
    back = arrow(war.read_delimited(str(out), framing)).column("value").to_pylist()
    assert Counter(back) == Counter(good)
    in_process = [r for f in stats.files for r in wa.read_delimited(f, framing).to_pylist()]
    assert Counter(in_process) == Counter(good)
    dead = pq.read_table(out / "_dead_letters").to_pylist()
    assert len(dead) == len(bad) and {d["path"] for d in dead} == {"imp[0]"}
    if framing == "tfrecord":  # what TensorFlow and Beam read
        pytest.importorskip("google_crc32c")
        from apache_beam.io.tfrecordio import _TFRecordUtil

        stream = io.BytesIO(Path(stats.files[0]).read_bytes())
        first = []
        while (r := _TFRecordUtil.read_record(stream)) is not None:
            first.append(r)
        assert first == wa.read_delimited(stats.files[0], "tfrecord").to_pylist()


def test_write_delimited_of_encoded_records(ray_local, schema, rows, tmp_path) -> None:
    table, expected = rows
    encoded = war.encode(ray.data.from_arrow(table), wa.Transcoder(schema), carry=["key"]).rows
    stats = war.write_delimited(encoded, tmp_path / "enc", framing="u32le", column="record")
    assert stats.records_ok == N and stats.records_failed == 0
    back = arrow(war.read_delimited(str(tmp_path / "enc"), "u32le")).column("value")
    assert Counter(back.to_pylist()) == Counter(expected)
    with pytest.raises(ValueError, match="one of them"):
        war.write_delimited(encoded, tmp_path / "x", wa.Transcoder(schema), column="record")


def test_ray_datasource_reads_tfrecord_and_refuses_a_bad_crc(ray_local, tmp_path) -> None:
    records = corpus.generate(50, seed=3)
    data = wa.frame_records(pa.array(records), "tfrecord").to_pybytes()
    (tmp_path / "a.tfrecord").write_bytes(data)
    ds = war.read_delimited(str(tmp_path / "a.tfrecord"), "tfrecord", include_location=True)
    got = arrow(ds)
    assert got.column("value").to_pylist() == records
    frame_at = [sum(16 + len(r) for r in records[:i]) for i in range(len(records))]
    assert got.column("offset").to_pylist() == frame_at
    bad = bytearray(data)
    bad[frame_at[9] + 14] ^= 1
    (tmp_path / "b.tfrecord").write_bytes(bad)
    with pytest.raises(Exception, match=f"CRC32C does not match at byte {frame_at[9]}"):
        arrow(war.read_delimited(str(tmp_path / "b.tfrecord"), "tfrecord"))
    # truncated="dead_letter": the bad record is one accounted failure, with its reason
    ds = war.read_delimited(str(tmp_path / "b.tfrecord"), "tfrecord", truncated="dead_letter",
                            include_location=True)
    schema = wa.Schema.from_proto(corpus.PROTO_FILE, corpus.MESSAGE_NAME,
                                  import_paths=[corpus.SCHEMA_DIR])
    job = war.transcode(ds, wa.Transcoder(schema, ["id"]), on_error="dead_letter")
    assert arrow(job.rows).num_rows == 49
    stats = job.job_stats()
    assert (stats.records_in, stats.records_failed) == (50, 1)
    dead = arrow(job.dead_letters).to_pylist()
    assert len(dead) == 1 and f"CRC32C does not match at byte {frame_at[9]}" in dead[0]["reason"]
    assert dead[0]["source"]["offset"] == frame_at[9]


# ---- end to end on the real broker ---------------------------------------------------------


@pytest.mark.kafka
def test_kafka_decode_filter_project_encode_produce(ray_local, kafka_broker, schema) -> None:
    pytest.importorskip("confluent_kafka.schema_registry.protobuf")
    from confluent_kafka import Consumer, Producer, TopicPartition

    sys.path.insert(0, str(ROOT / "pipelines"))
    import kafka_pipeline

    n, partitions = 150, 3
    produced, _ = kafka_pipeline.produce(kafka_broker, "bids", n, partitions, corrupt_every=0)
    assert len(produced["bids-plain"]) == n
    source = ray.data.read_kafka(topics=["bids-plain"], bootstrap_servers=kafka_broker)
    decoded = war.transcode(source, wa.Transcoder(schema), carry=["key"]).rows

    def keep_and_scrub(batch: pa.Table) -> pa.Table:
        # filter: bids with two impressions or more; project: drop the user (PII)
        batch = batch.filter(pc.greater_equal(pc.list_value_length(batch["imp"]), 2))
        i = batch.schema.get_field_index("user")
        return batch.set_column(i, batch.field(i), pa.nulls(batch.num_rows, batch.field(i).type))

    scrubbed = decoded.map_batches(keep_and_scrub, batch_format="pyarrow")
    encoded = war.encode(scrubbed, wa.Transcoder(schema), carry=["key"], framing="confluent",
                         schema_id=7).rows
    producer = Producer({"bootstrap.servers": kafka_broker, "linger.ms": 5})
    sent = 0
    for batch in encoded.iter_batches(batch_format="pyarrow"):
        for key, value in zip(batch["key"].to_pylist(), batch["record"].to_pylist(), strict=True):
            producer.produce("bids-scrubbed", key=key, value=value)
            sent += 1
        producer.poll(0)
    assert producer.flush(60) == 0

    consumer = Consumer({"bootstrap.servers": kafka_broker, "group.id": "write-half",
                         "enable.auto.commit": False})
    got: dict[bytes, bytes] = {}
    source_values: dict[bytes, bytes] = {}
    for topic, into in (("bids-scrubbed", got), ("bids-plain", source_values)):
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        want = sent if topic == "bids-scrubbed" else n
        while len(into) < want:
            msg = consumer.poll(10)
            assert msg is not None, f"{topic}: {len(into)} of {want} consumed"
            assert msg.error() is None
            into[msg.key()] = msg.value()
    consumer.close()
    cls_bytes = {
        key: runtime_bytes(schema, value, scrub=True)
        for key, value in source_values.items()
        if len(_imps(schema, value)) >= 2
    }
    head = confluent_prefix(7)
    assert got == {key: head + value for key, value in cls_bytes.items()}
    assert 0 < len(got) < n
    # and the Confluent-framed output decodes again, to the same rows
    tc = wa.Transcoder(schema)
    again = tc.transcode(list(got.values()), framing="confluent", schemas={7: schema})
    assert again.num_rows == len(got) and again.column("user").null_count == len(got)


def _imps(schema: wa.Schema, value: bytes) -> list:
    from google.protobuf import message_factory

    return list(message_factory.GetMessageClass(schema.descriptor).FromString(value).imp)
