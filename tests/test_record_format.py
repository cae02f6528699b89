"""RecordFormat.one_by_one and record_framer: how the adapters (Ray's column, Beam's
PCollection) take a plan's input: for records that come one by one, and frame the records they
make one by one."""

from __future__ import annotations

import pyarrow as pa
import pytest

import wirearrow as wa
from wirearrow.sources.confluent import confluent_prefix, message_index
from wirearrow.sources.framing import record_framer

SCHEMAS = {1: None}  # any mapping: the format only checks that one is given


def test_a_plans_stream_framing_and_compression_are_the_readers() -> None:
    files = wa.RecordFormat(framing="u32le", compression="gzip", format="binary")
    assert wa.RecordFormat.one_by_one(files) == wa.RecordFormat()
    confluent = wa.RecordFormat(framing="confluent", schemas=SCHEMAS, delimited_by="u32be")
    assert wa.RecordFormat.one_by_one(confluent) == confluent.replace(delimited_by=None)
    json = wa.RecordFormat(format="json", ignore_unknown_fields=True, column="payload")
    assert wa.RecordFormat.one_by_one(json) == json


def test_input_and_keywords_go_over_the_plans() -> None:
    plan = wa.RecordFormat(format="json", column="payload")
    assert wa.RecordFormat.one_by_one(plan, format="binary").column == "payload"
    given = wa.RecordFormat(column="v")
    assert wa.RecordFormat.one_by_one(plan, given) == given
    assert wa.RecordFormat.one_by_one(plan, given, column="w").column == "w"
    with pytest.raises(TypeError, match="unknown input options: colum"):
        wa.RecordFormat.one_by_one(plan, colum="x")


@pytest.mark.parametrize(
    "given",
    [
        {"framing": "varint"},
        {"input": wa.RecordFormat(framing="tfrecord")},
        {"input": wa.RecordFormat(framing="confluent", schemas=SCHEMAS, delimited_by="varint")},
    ],
)
def test_a_framing_that_splits_a_buffer_is_refused(given: dict) -> None:
    with pytest.raises(ValueError, match=r"one by one .* not '(varint|tfrecord)'"):
        wa.RecordFormat.one_by_one(wa.RecordFormat(), **given)


def test_record_framer(bid_schema) -> None:
    records = pa.array([b"ab", b""], pa.binary())
    assert record_framer(bid_schema)(records) is records
    head = confluent_prefix(9, message_index(bid_schema))
    framed = record_framer(bid_schema, "confluent", schema_id=9)(records)
    assert framed.to_pylist() == [head + b"ab", head]
    other = record_framer(bid_schema, "confluent", schema_id=9, message_index=[2, 1])(records)
    assert other.to_pylist()[1] == confluent_prefix(9, [2, 1])
    for args, match in (
        ({"framing": "confluent"}, "needs schema_id"),
        ({"framing": "varint"}, "None or 'confluent'"),
        ({"schema_id": 3}, "are for framing='confluent'"),
        ({"message_index": [0]}, "are for framing='confluent'"),
        ({"framing": "confluent", "schema_id": -1}, "unsigned 32-bit"),
        ({"framing": "confluent", "schema_id": 1, "message_index": []}, "message index"),
    ):
        with pytest.raises(ValueError, match=match):
            record_framer(bid_schema, **args)
