"""Framing writers (wirearrow.frame_records) and TFRecord: every framing written is read
back by our readers, TFRecord is checked against Beam's tfrecordio (TensorFlow's format)
in both directions, and CRC mismatches are bad records with their reason."""

from __future__ import annotations

import io
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wirearrow as wa
from depth import examples
from wirearrow._core.framing import crc32c
from wirearrow.sources.confluent import confluent_prefix
from wirearrow.sources.framing import FrameReader, plan_pieces, split_framed

STREAM_FRAMINGS = ["varint", "u32le", "u32be", "tfrecord"]
records_st = st.lists(st.binary(max_size=300), max_size=40)


@pytest.mark.parametrize("table", [False, True], ids=["dispatch", "table"])
def test_crc32c_known_vectors(table) -> None:
    # RFC 3720 B.4 (iSCSI) and the classic check value of CRC-32C.
    assert crc32c(b"123456789", table=table) == 0xE3069283
    assert crc32c(bytes(32), table=table) == 0x8A9136AA
    assert crc32c(b"\xff" * 32, table=table) == 0x62A8AB43
    assert crc32c(bytes(range(32)), table=table) == 0x46DD794E
    assert crc32c(b"", table=table) == 0


@settings(max_examples=examples(13), deadline=None)
@given(st.binary(max_size=100))
def test_crc32c_equals_google_crc32c(data) -> None:
    google_crc32c = pytest.importorskip("google_crc32c")
    assert crc32c(data) == crc32c(data, table=True) == google_crc32c.value(data)
    assert crc32c(data, masked=True) == crc32c(data, masked=True, table=True)


@settings(max_examples=examples(13), deadline=None)
@given(records_st, st.sampled_from(STREAM_FRAMINGS), st.integers(0, 3))
def test_every_framing_reads_back(records, framing, sliced) -> None:
    array = pa.array([b"skip"] * sliced + records, pa.binary())[sliced:]
    for kind in (pa.binary(), pa.large_binary()):
        data = wa.frame_records(array.cast(kind), framing)
        assert isinstance(data, pa.Buffer)
        assert wa.read_delimited(data, framing).to_pylist() == records
        reader = FrameReader(io.BytesIO(data.to_pybytes()), framing, block_bytes=7)
        got = [r for frames in reader for r in frames.records().to_pylist()]
        assert got == records and reader.tail is None and reader.position == len(data)


def test_varint_framing_is_protobufs_delimited_format() -> None:
    from google.protobuf.internal.encoder import _VarintBytes

    records = [b"", b"a" * 127, b"b" * 128, b"c" * 20000]
    expected = b"".join(_VarintBytes(len(r)) + r for r in records)
    assert wa.frame_records(pa.array(records), "varint").to_pybytes() == expected
    assert wa.frame_records(pa.array(records), "u32be").to_pybytes()[:4] == b"\0\0\0\0"
    assert wa.frame_records(pa.array(records), "u32le").to_pybytes()[4 + 0 : 8] == struct.pack(
        "<I", 127
    )


def test_frame_records_refuses_nulls_and_other_types() -> None:
    with pytest.raises(ValueError, match="record 1 is null"):
        wa.frame_records(pa.array([b"a", None]), "varint")
    with pytest.raises(TypeError, match="binary"):
        wa.frame_records(pa.array([1, 2]), "varint")
    with pytest.raises(ValueError, match="framing must be one of"):
        wa.frame_records(pa.array([b"a"]), "u16")
    with pytest.raises(ValueError, match="schema_id"):
        wa.frame_records(pa.array([b"a"]), "confluent")
    with pytest.raises(ValueError, match="schema_id= is for"):
        wa.frame_records(pa.array([b"a"]), "varint", schema_id=3)


def test_chunked_and_view_inputs() -> None:
    chunked = pa.chunked_array([[b"ab", b"c"], [b"", b"def"]], pa.binary())
    data = wa.frame_records(chunked, "u32le")
    assert wa.read_delimited(data, "u32le").to_pylist() == [b"ab", b"c", b"", b"def"]
    view = pa.array([b"x" * 20, b"y"], pa.binary_view())
    assert wa.read_delimited(wa.frame_records(view, "varint")).to_pylist() == [b"x" * 20, b"y"]
    assert len(wa.frame_records(pa.array([], pa.binary()), "tfrecord")) == 0


@pytest.mark.beam  # (the minimal install has no Beam)
def test_tfrecord_files_cross_check_with_beams_tfrecordio(tmp_path) -> None:
    pytest.importorskip("google_crc32c")
    pytest.importorskip("apache_beam")
    from apache_beam.io.tfrecordio import _TFRecordUtil

    records = [b"", b"hello", bytes(range(256)) * 40, b"\x00" * 7]
    # ours -> Beam's reader
    ours = io.BytesIO(wa.frame_records(pa.array(records), "tfrecord").to_pybytes())
    read = []
    while (r := _TFRecordUtil.read_record(ours)) is not None:
        read.append(r)
    assert read == records
    # Beam's writer -> ours, byte for byte the same stream
    theirs = io.BytesIO()
    for r in records:
        _TFRecordUtil.write_record(theirs, r)
    assert theirs.getvalue() == ours.getvalue()
    assert wa.read_delimited(theirs.getvalue(), "tfrecord").to_pylist() == records


@pytest.mark.beam  # (the minimal install has no Beam)
def test_tfrecord_through_beams_read_from_tfrecord(tmp_path) -> None:
    pytest.importorskip("google_crc32c")
    beam = pytest.importorskip("apache_beam")
    from apache_beam.testing.util import assert_that, equal_to

    records = [f"record {i}".encode() * (i % 5) for i in range(50)]
    path = tmp_path / "ours.tfrecord"
    path.write_bytes(wa.frame_records(pa.array(records), "tfrecord").to_pybytes())
    with beam.Pipeline() as p:
        got = p | beam.io.ReadFromTFRecord(str(path))
        assert_that(got, equal_to(records))
    with beam.Pipeline() as p:
        _ = p | beam.Create(records) | beam.io.WriteToTFRecord(
            str(tmp_path / "beam"), shard_name_template=""
        )
    assert wa.read_delimited(tmp_path / "beam", "tfrecord").to_pylist() == records


def _corrupt(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x40
    return bytes(out)


def test_tfrecord_data_crc_mismatch_is_a_bad_record_with_its_reason() -> None:
    schema = wa.Schema.from_message(_message())
    tc = wa.Transcoder(schema, on_error="dead_letter")
    records = [_message()(x=i).SerializeToString() for i in range(1, 5)]
    data = wa.frame_records(pa.array(records), "tfrecord").to_pybytes()
    second = 16 + len(records[0])  # frame of record 1
    bad = _corrupt(data, second + 12)  # a byte of record 1's data
    batch = tc.transcode(bad, framing="tfrecord")
    assert batch.column("x").to_pylist() == [1, 3, 4]
    dead = tc.dead_letters().to_pylist()
    assert [d["index"] for d in dead] == [1]
    assert "CRC32C does not match" in dead[0]["reason"] and f"byte {second}" in dead[0]["reason"]
    assert dead[0]["raw"] == bad[second + 12 : second + 12 + len(records[1])]
    assert tc.stats.records_in == 4 and tc.stats.records_failed == 1
    # the data's own CRC bytes corrupted: the same
    crc_at = second + 12 + len(records[1])
    batch = tc.transcode(_corrupt(data, crc_at), framing="tfrecord")
    assert batch.column("x").to_pylist() == [1, 3, 4]
    with pytest.raises(ValueError, match=f"byte {second}: tfrecord record whose data CRC32C"):
        split_framed(bad, "tfrecord")
    with pytest.raises(ValueError, match="CRC32C does not match"):
        wa.read_delimited(bad, "tfrecord")
    with pytest.raises(wa.DecodeError, match="CRC32C"):
        wa.Transcoder(schema).transcode(bad, framing="tfrecord")


def test_tfrecord_length_crc_mismatch_makes_the_rest_the_tail() -> None:
    schema = wa.Schema.from_message(_message())
    tc = wa.Transcoder(schema, on_error="dead_letter")
    records = [_message()(x=i).SerializeToString() for i in range(1, 5)]
    data = wa.frame_records(pa.array(records), "tfrecord").to_pybytes()
    third = 2 * 16 + len(records[0]) + len(records[1])
    bad = _corrupt(data, third + 2)  # a byte of record 2's length
    batch = tc.transcode(bad, framing="tfrecord")
    assert batch.column("x").to_pylist() == [1, 2]
    dead = tc.dead_letters().to_pylist()
    assert len(dead) == 1 and dead[0]["index"] == 2
    assert f"length whose CRC32C does not match at byte {third}" in dead[0]["reason"]
    assert dead[0]["raw"] == bad[third:]
    reader = FrameReader(io.BytesIO(bad), "tfrecord", block_bytes=5, size=len(bad))
    assert sum(len(f) for f in reader) == 2
    assert reader.tail is not None and reader.tail.offset == third
    assert "CRC32C" in reader.tail.reason


def test_a_framing_mistake_names_the_framing_the_data_has() -> None:
    records = pa.array([b"x" * n for n in range(1, 40)])
    data = wa.frame_records(records, "tfrecord")
    for wrong in ("varint", "u32le"):
        with pytest.raises(ValueError, match="looks like tfrecord framing"):
            wa.read_delimited(data, wrong)
    with pytest.raises(ValueError, match=r"byte 0: TFRecord length.*looks like varint framing"):
        wa.read_delimited(wa.frame_records(records, "varint"), "tfrecord")


def test_tfrecord_frames_know_the_trailer() -> None:
    records = [b"a" * n for n in range(0, 60, 7)]
    data = wa.frame_records(pa.array(records), "tfrecord").to_pybytes()
    frame_at = [sum(16 + len(r) for r in records[:i]) for i in range(len(records))]
    reader = FrameReader(io.BytesIO(data), "tfrecord", block_bytes=9)
    starts = [s for frames in reader for s in frames.frame_starts.tolist()]
    assert starts == frame_at
    frames = next(iter(FrameReader(io.BytesIO(data), "tfrecord")))
    assert bytes(frames.framed(1, 3)) == data[frame_at[1] : frame_at[3]]
    pieces, tail = plan_pieces(io.BytesIO(data), "tfrecord", 40, block_bytes=11)
    assert tail is None and sum(p.records for p in pieces) == len(records)
    assert [p.start for p in pieces[1:]] == [p.end for p in pieces[:-1]]
    assert all(p.start in frame_at for p in pieces[1:])
    got = []
    for p in pieces:
        r = FrameReader(io.BytesIO(data), "tfrecord", start=p.start, end=p.end)
        got += [x for f in r for x in f.records().to_pylist()]
    assert got == records


def test_confluent_framing_matches_confluents_serializer() -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    assert confluent_prefix(7) == b"\0\0\0\0\x07\0"
    assert confluent_prefix(2**32 - 1, [1, 2]).startswith(b"\0\xff\xff\xff\xff")
    records = pa.array([b"abc", b""])
    for index in ([0], [1, 0, 3], [70]):
        buf = io.BytesIO()
        ProtobufSerializer._encode_varints(buf, index)  # what Confluent's serializer writes
        head = b"\0" + (258).to_bytes(4, "big") + buf.getvalue()
        out = wa.frame_records(records, "confluent", schema_id=258, message_index=index)
        assert out.to_pylist() == [head + b"abc", head]
    with pytest.raises(ValueError, match="unsigned 32-bit"):
        confluent_prefix(-1)
    with pytest.raises(ValueError, match="message index"):
        confluent_prefix(1, [])


def _message():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    global _MESSAGE
    try:
        return _MESSAGE
    except NameError:
        pass
    fdp = descriptor_pb2.FileDescriptorProto(name="framing_write_test.proto", package="fw")
    msg = fdp.message_type.add(name="M")
    msg.field.add(name="x", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    _MESSAGE = message_factory.GetMessageClass(pool.FindMessageTypeByName("fw.M"))
    return _MESSAGE


# ------------------------------------------------------------- TFRecord in every reader


def _tfrecord_file(tmp_path, n: int = 30, corrupt_record: int | None = None):
    M = _message()
    records = [M(x=i).SerializeToString() for i in range(n)]
    data = wa.frame_records(pa.array(records), "tfrecord").to_pybytes()
    frame_at = [sum(16 + len(r) for r in records[:i]) for i in range(n)]
    if corrupt_record is not None:
        data = _corrupt(data, frame_at[corrupt_record] + 12)
    path = tmp_path / "events.tfrecord"
    path.write_bytes(data)
    return path, records, frame_at


def test_cli_reads_tfrecord_and_dead_letters_a_crc_mismatch(tmp_path) -> None:
    import pyarrow.parquet as pq

    from wirearrow.cli import main

    path, _, frame_at = _tfrecord_file(tmp_path, corrupt_record=7)
    proto = tmp_path / "fw.proto"
    proto.write_text('syntax = "proto2";\npackage fw;\nmessage M { optional int64 x = 1; }\n')
    (tmp_path / "plan.yaml").write_text(
        f"proto:\n  file: {proto}\n  message: M\n  import_paths: [{tmp_path}]\n"
        "errors:\n  policy: dead_letter\ninput:\n  framing: tfrecord\n"
    )
    out, dead = tmp_path / "out", tmp_path / "dead.parquet"
    argv = ["transcode", str(tmp_path / "plan.yaml"), str(path), "-o", str(out)]
    assert main([*argv, "--dead-letters", str(dead), "--batch-size", "4"]) == 0
    got = pq.read_table(out).column("x").to_pylist()
    assert got == [i for i in range(30) if i != 7]
    letters = pq.read_table(dead).to_pylist()
    assert [(d["index"], d["file_offset"]) for d in letters] == [(7, frame_at[7])]
    assert "CRC32C does not match" in letters[0]["reason"]


@pytest.mark.beam  # (the minimal install has no Beam)
def test_beam_read_delimited_reads_tfrecord(tmp_path) -> None:
    beam = pytest.importorskip("apache_beam")
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    import wirearrow.beam as wab

    path, records, _ = _tfrecord_file(tmp_path)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        got = p | wab.ReadFromDelimited(str(path), "tfrecord", chunk_bytes=100)
        assert_that(got, equal_to(records))
    path, records, _ = _tfrecord_file(tmp_path, corrupt_record=3)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        got = p | wab.ReadFromDelimited(str(path), "tfrecord", truncated="skip")
        assert_that(got, equal_to(records[:3] + records[4:]))
    with pytest.raises(Exception, match="CRC32C does not match"), beam.Pipeline(
        runner=FnApiRunner()
    ) as p:
        _ = p | wab.ReadFromDelimited(str(path), "tfrecord")
