"""The OpenTelemetry recipe of docs/paths.md on records built with the installed OTel classes.

The schema comes from the generated modules of ``opentelemetry-proto`` (no .proto files).
Attribute lists carry duplicated and missing keys; the expected rows are worked out (in
otel_data.py) from the parsed messages, independently of wirearrow: one row per span, the
first (or last) match of a key, null when there is none.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pyarrow as pa
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # the test group has it
    ExportTraceServiceRequest as Request,
)

import wirearrow as wa
from otel_data import expected_rows, kv, random_request

SPAN = "resource_spans[*].scope_spans[*].spans[*]"
SERVICE = "resource_spans[*].resource.attributes[?(.key == 'service.name')][0].value.string_value"
START = wa.fn.to_timestamp(f"{SPAN}.start_time_unix_nano", unit="ns")
END = wa.fn.to_timestamp(f"{SPAN}.end_time_unix_nano", unit="ns")
COLUMNS = [
    wa.Column(SERVICE, name="service"),
    wa.Column(
        "resource_spans[*].resource.attributes[?(.key == 'service.name')][-1].value.string_value",
        name="service_last",
    ),
    wa.Column("resource_spans[*].scope_spans[*].scope.name", name="scope"),
    wa.Column(f"{SPAN}.name", name="span"),
    wa.Column(f"{SPAN}.attributes[?(.key == 'http.method')][0].value.string_value", name="method"),
    wa.Column(
        f"{SPAN}.attributes[?(.key == 'http.status_code')][-1].value.int_value", name="status"
    ),
    wa.Column(f"{SPAN}.attributes[?(.key == 'retry')][0].value.bool_value", name="retry"),
    wa.Column(name="start", expr=START),
    wa.Column(name="duration", expr=wa.fn.sub(END, START)),
]
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def traces() -> wa.Transcoder:
    return wa.Transcoder(wa.Schema.from_message(Request), columns=COLUMNS)


def _rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """Rows with times as integer nanoseconds (exact, whatever pandas is around)."""
    # (cast before any conversion: without pandas, ns times do not convert to Python at all)
    times = ("start", "duration")
    ints = [batch.column(n).cast(pa.int64()) if n in times else batch.column(n) for n in batch.schema.names]
    table = pa.RecordBatch.from_arrays(ints, names=batch.schema.names).to_pydict()
    return [dict(zip(table, values, strict=True)) for values in zip(*table.values(), strict=True)]


def test_types(traces: wa.Transcoder) -> None:
    schema = traces.arrow_schema
    assert schema.field("service").type == pa.utf8()
    assert schema.field("status").type == pa.int64()
    assert schema.field("start").type == pa.timestamp("ns", tz="UTC")
    assert schema.field("duration").type == pa.duration("ns")


def test_duplicated_keys_do_not_duplicate_rows(traces: wa.Transcoder) -> None:
    request = Request(
        resource_spans=[
            {
                "resource": {
                    "attributes": [
                        kv("service.name", string_value="a"),
                        kv("host.name", string_value="h"),
                        kv("service.name", string_value="b"),
                    ]
                },
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "name": "s1",
                                "start_time_unix_nano": 10**18,
                                "end_time_unix_nano": 10**18 + 1_500,
                                "attributes": [
                                    kv("http.status_code", int_value=500),
                                    kv("http.status_code", int_value=200),
                                ],
                            },
                            {"name": "s2"},
                        ]
                    }
                ],
            }
        ]
    )
    batch = traces.transcode([request.SerializeToString()])
    assert batch.num_rows == 2  # one per span, though service.name and status come twice
    assert batch.column("service").to_pylist() == ["a", "a"]
    assert batch.column("service_last").to_pylist() == ["b", "b"]
    assert batch.column("status").to_pylist() == [200, None]  # last match; none -> null
    assert batch.column("method").to_pylist() == [None, None]  # no match: null
    start = batch.column("start").cast(pa.timestamp("us", tz="UTC")).to_pylist()[0]
    assert start == EPOCH + dt.timedelta(seconds=10**9)
    assert batch.column("duration").cast(pa.int64()).to_pylist() == [1_500, 0]


def test_random_requests_match_the_runtime(traces: wa.Transcoder) -> None:
    rng = random.Random(18)
    requests = [random_request(rng) for _ in range(60)]
    batch = traces.transcode([r.SerializeToString() for r in requests])
    want = [
        row for r in requests for row in expected_rows(Request.FromString(r.SerializeToString()))
    ]
    assert _rows(batch) == want
    # the corpus has what the test is about
    assert any(r["service"] != r["service_last"] for r in want)
    assert any(r["service"] is None and r["span"] is not None for r in want)
    assert any(r["status"] is not None for r in want)


def test_the_yaml_plan_of_the_docs_is_the_shipped_one_and_runs() -> None:
    # docs/paths.md shows transforms/otel_traces.yaml (its console block runs it from the
    # CLI): the two must not drift apart. Loaded, the plan gives the Python recipe's rows.
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "paths.md").read_text()
    shown = re.search(r"<!-- file: otel_traces.yaml -->\n```yaml\n(.*?)^```$", page, re.S | re.M)
    shipped = (root / "transforms" / "otel_traces.yaml").read_text()
    assert shown is not None and shown.group(1) == shipped
    tc = wa.load_plan(root / "transforms" / "otel_traces.yaml").transcoder()
    records = [random_request(random.Random(seed)).SerializeToString() for seed in range(30)]
    got = tc.transcode(records).select(["service", "span", "http_method", "http_status"])
    want = [
        {k: row[k] for k in ("service", "span", "method", "status")}
        for r in records
        for row in expected_rows(Request.FromString(r))
    ]
    assert [list(r.values()) for r in got.to_pylist()] == [list(w.values()) for w in want]
