"""schemas= from a Confluent-compatible schema registry (wirearrow.sources.registry).

confluent-kafka's real SchemaRegistryClient talks HTTP to tests/registry_server.py, started
here on 127.0.0.1 (no registry server installs from the package registries), and its
MockSchemaRegistryClient works in process. Decoded values are checked against the protobuf
runtime (upb) through tests/oracle.py.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import pickle
from pathlib import Path

import pytest
from google.protobuf import message_factory

import wirearrow as wa
from wirearrow.plans import resolve_plan
from wirearrow.sources.confluent import confluent_prefix
from wirearrow.sources.registry import Registry

pytest.importorskip("confluent_kafka.schema_registry")

from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaReference, SchemaRegistryClient

import oracle
from registry_server import RegistryServer

PROTOS = Path(__file__).resolve().parent / "protos" / "confluent"
MONEY = 'syntax = "proto3";\npackage shop;\nmessage Money { int64 cents = 1; string currency = 2; }\n'
# shop_v1's Order with a price from another registered file and a Timestamp (a well-known
# import: no reference, as Confluent's serializers write it)
ORDER = """syntax = "proto3";
package shop;
import "shop/money.proto";
import "google/protobuf/timestamp.proto";

message Other { string x = 1; }

message Order {
  message Line {
    string sku = 1;
    int32 qty = 2;
    Money price = 3;
  }
  string id = 1;
  repeated Line lines = 2;
  google.protobuf.Timestamp at = 4;
}
"""
COLUMNS = ["id", "lines[*].sku", "lines[*].qty", "lines[*].price.cents", "lines[*].price.currency"]


@pytest.fixture(scope="module")
def server():
    registry = RegistryServer().start()
    yield registry
    registry.stop()


@pytest.fixture(scope="module")
def ids(server) -> dict[str, int]:
    """The schemas registered through the real client: money.proto, the order, shop_v1."""
    client = SchemaRegistryClient({"url": server.url})
    money = client.register_schema("shop/money.proto", RegistrySchema(MONEY, "PROTOBUF"))
    order = client.register_schema(
        "orders-value",
        RegistrySchema(ORDER, "PROTOBUF", [SchemaReference("shop/money.proto", "shop/money.proto", 1)]),
    )
    v1 = client.register_schema(
        "orders-v1-value", RegistrySchema((PROTOS / "shop_v1.proto").read_text(), "PROTOBUF")
    )
    avro = client.register_schema("avro-value", RegistrySchema('"string"', "AVRO"))
    broken = client.register_schema(
        "broken-value", RegistrySchema('syntax = "proto3";\nmessage B { int32 x = 1 }\n', "PROTOBUF")
    )
    return {"money": money, "order": order, "v1": v1, "avro": avro, "broken": broken}


def _order_class():
    schema = wa.Schema.from_sources({"o.proto": ORDER, "shop/money.proto": MONEY}, "o.proto", "shop.Order")
    return schema, message_factory.GetMessageClass(schema.descriptor)


def _payloads(n: int = 12) -> list[bytes]:
    _, Order = _order_class()
    out = []
    for i in range(n):
        m = Order(id=f"o{i}")
        for j in range(i % 3):
            line = m.lines.add(sku=f"s{j}", qty=i * j - 5)
            if j:
                line.price.cents = 100 * i + j
                line.price.currency = "EUR" if i % 2 else ""
        if i % 4 == 0:
            m.at.seconds = 1_700_000_000 + i
        out.append(m.SerializeToString())
    return out


def test_real_client_over_http_fetches_compiles_and_decodes(server, ids) -> None:
    schema, Order = _order_class()
    payloads = _payloads()
    framed = [confluent_prefix(ids["order"], (1,)) + p for p in payloads]  # Order: 2nd message
    tc = wa.Transcoder(schema, COLUMNS)
    before = server.requests.copy()
    rows = tc.transcode(framed, framing="confluent", schemas=server.url, schema_id=True)
    assert rows.column("_schema_id").to_pylist() == [ids["order"]] * len(rows)
    got = rows.drop_columns(["_schema_id"]).to_pylist()
    oracle.assert_rows_equal(tc.arrow_schema, got, oracle.expected_rows(Order, payloads, COLUMNS), "registry")
    fetched = server.requests - before
    # the schema and its reference, once each
    assert fetched == {
        f"GET /schemas/ids/{ids['order']}": 1,
        "GET /subjects/shop%2Fmoney.proto/versions/1": 1,  # the client quotes the subject
    }


def test_each_id_is_fetched_once_per_process(server, ids) -> None:
    _schema, _ = _order_class()
    framed = [confluent_prefix(ids["v1"], (1,)) + b"\x0a\x01x"]
    path = f"GET /schemas/ids/{ids['v1']}"
    for _ in range(3):  # new transcoders, new Registry objects, pickled copies: one fetch
        tc = wa.Transcoder(wa.Schema.from_proto(PROTOS / "shop_v1.proto", "shop.Order"))
        registry = pickle.loads(pickle.dumps(Registry(server.url)))
        assert tc.transcode(framed, framing="confluent", schemas=registry).column("id").to_pylist() == ["x"]
    assert server.requests[path] == 1
    # a fresh worker process fetches it once more, however many batches it decodes
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        got = pool.submit(_decode_in_worker, server.url, framed, 3).result(timeout=120)
    assert got == [["x"]] * 3
    assert server.requests[path] == 2


def _decode_in_worker(url: str, framed: list[bytes], times: int) -> list[list[str]]:
    schema = wa.Schema.from_proto(PROTOS / "shop_v1.proto", "shop.Order")
    return [
        wa.Transcoder(schema).transcode(framed, framing="confluent", schemas=url).column("id").to_pylist()
        for _ in range(times)
    ]


def test_ids_the_registry_cannot_give_are_bad_records_with_the_reason(server, ids) -> None:
    schema = wa.Schema.from_proto(PROTOS / "shop_v1.proto", "shop.Order")
    tc = wa.Transcoder(schema, on_error="dead_letter")
    good = confluent_prefix(ids["v1"], (1,)) + b"\x0a\x01x"
    records = [
        good,
        confluent_prefix(999) + b"\x0a\x01y",
        confluent_prefix(ids["avro"]) + b"\x0a\x01z",
        confluent_prefix(ids["broken"]) + b"",
        good,
    ]
    decoded = tc.decode(records, framing="confluent", schemas=server.url)
    assert decoded.rows.column("id").to_pylist() == ["x", "x"]
    reasons = dict(zip(decoded.dead_letters.column("index").to_pylist(), decoded.dead_letters.column("reason").to_pylist(), strict=True))
    assert reasons[1] == f"Confluent schema id 999: not registered at {server.url}"
    assert reasons[2] == f"Confluent schema id {ids['avro']}: a AVRO schema at {server.url}, not PROTOBUF"
    assert reasons[3].startswith(f"Confluent schema id {ids['broken']}: its .proto text at {server.url} does not compile")
    assert 'registry_schema.proto:2:25: Expected ";"' in reasons[3]
    assert decoded.counts.records_failed == 3 and decoded.counts.records_ok == 2


def test_a_registry_that_is_down_raises(ids) -> None:
    down = RegistryServer().start()
    down.fail = True
    try:
        tc = wa.Transcoder(wa.Schema.from_proto(PROTOS / "shop_v1.proto", "shop.Order"), on_error="dead_letter")
        with pytest.raises(Exception, match="registry down"):
            tc.decode([confluent_prefix(5) + b""], framing="confluent", schemas=Registry({"url": down.url, "max.retries": 0}))
    finally:
        down.stop()


def test_mock_client_with_confluents_own_serializer() -> None:
    import confluent_data

    v1, v2 = confluent_data.schemas()
    _, payloads, _ = confluent_data.orders(v1, v2)
    classes = [message_factory.GetMessageClass(s.descriptor) for s in (v1, v2)]
    producer = confluent_data.Producer()  # its own mock registry: v1 and v2 get ids there
    framed = [producer.serialize(classes[i % 2].FromString(p)) for i, p in enumerate(payloads)]
    columns = ["id", "lines[*].sku", "lines[*].qty", "lines[*].note.text"]
    tc = wa.Transcoder(v2, columns)
    rows = tc.transcode(framed, framing="confluent", schemas=producer.registry)
    want = oracle.expected_rows(classes[1], payloads, columns)
    oracle.assert_rows_equal(tc.arrow_schema, rows.to_pylist(), want, "mock")
    with pytest.raises(TypeError, match="lives in this process"):
        pickle.dumps(Registry(producer.registry))


def test_yaml_plan_names_the_registry(tmp_path, server, ids) -> None:
    (tmp_path / "shop_v1.proto").write_text((PROTOS / "shop_v1.proto").read_text())
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "proto: {file: shop_v1.proto, message: shop.Order}\n"
        f"input: {{framing: confluent, schemas: '{server.url}'}}\n"
    )
    resolved = resolve_plan(str(plan))
    assert isinstance(resolved.input.schemas, Registry) and resolved.input.schemas.url == server.url
    framed = [confluent_prefix(ids["v1"], (1,)) + b"\x0a\x02ab"]
    assert resolved.transcoder.transcode(framed, resolved.input).column("id").to_pylist() == ["ab"]


def test_from_sources_equals_from_proto_and_reports_protoc_errors(tmp_path) -> None:
    text = (PROTOS / "shop_v2.proto").read_text()
    a = wa.Schema.from_sources({"shop_v2.proto": text}, "shop_v2.proto", "shop.Order")
    b = wa.Schema.from_proto(PROTOS / "shop_v2.proto", "shop.Order")
    assert a.fingerprint == b.fingerprint
    assert wa.Schema.from_sources({"x/shop.proto": text}, "x/shop.proto").message_name == "shop.Other"
    with pytest.raises(wa.SchemaError, match=r'm.proto:2:13: "Nope" is not defined'):
        wa.Schema.from_sources({"m.proto": 'syntax = "proto3";\nmessage M { Nope n = 1; }'}, "m.proto")
    with pytest.raises(wa.SchemaError, match=r"not a relative \.proto import path"):
        wa.Schema.from_sources({"../m.proto": 'syntax = "proto3";'}, "../m.proto")


def test_the_cli_takes_a_registry(tmp_path, server, ids) -> None:
    import pyarrow.parquet as pq

    from wirearrow.cli import main

    (tmp_path / "shop_v1.proto").write_text((PROTOS / "shop_v1.proto").read_text())
    plan = tmp_path / "plan.yaml"
    plan.write_text("proto: {file: shop_v1.proto, message: shop.Order}\n")
    records = [confluent_prefix(ids["v1"], (1,)) + b"\x0a\x01" + c for c in (b"a", b"b")]
    data = tmp_path / "orders.bin"
    data.write_bytes(b"".join(bytes([len(r)]) + r for r in records))  # varint-delimited
    out = tmp_path / "out.parquet"
    argv = ["transcode", str(plan), str(data), "-o", str(out), "--framing", "confluent"]
    assert main([*argv, "--schema-registry", server.url]) == 0
    assert pq.read_table(out).column("id").to_pylist() == ["a", "b"]
    assert main([*argv, "--schema-registry", server.url, "--schema-id", "1"]) == 2
