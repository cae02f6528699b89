"""Schemas from anywhere (issue 18 item 3): a .proto file, a FileDescriptorSet file, a
generated class or module -- in Python, in YAML plans and on the command line -- and one
fingerprint for one message however it was reached."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import wirearrow as wa
from wirearrow.cli import main
from wirearrow.config import load_plan
from wirearrow.errors import PlanError, SchemaError

SHOP = """\
syntax = "proto3";
package shop_h18;
import "google/protobuf/timestamp.proto";
// Comments and layout go to source info, which the fingerprint ignores.
message Item { string sku_id = 1; double price = 2; }
message Order {
  string id = 1;
  repeated Item items = 2;
  google.protobuf.Timestamp at = 3;
  map<string, int64> tags = 4;
}
"""
OTHER = 'syntax = "proto3";\npackage other;\nmessage Unrelated { int32 x = 1; }\n'


def protoc(cwd: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", *args], cwd=cwd, check=True)


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> Path:
    """shop.proto, its generated module shop_h18_pb2 on sys.path, and descriptor sets:
    plain, with source info, and a buf-image-like set holding an unrelated file too."""
    root = tmp_path_factory.mktemp("shop")
    (root / "shop_h18.proto").write_text(SHOP)
    (root / "other.proto").write_text(OTHER)
    protoc(root, "--python_out=.", "shop_h18.proto")
    protoc(root, "--include_imports", "--descriptor_set_out=shop.binpb", "shop_h18.proto")
    protoc(
        root,
        "--include_imports",
        "--include_source_info",
        "--descriptor_set_out=shop_src.binpb",
        "shop_h18.proto",
    )
    protoc(
        root,
        "--include_imports",
        "--descriptor_set_out=image.binpb",
        "other.proto",
        "shop_h18.proto",
    )
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("shop_h18_pb2", None)


def all_ways(shop: Path, message: str) -> dict[str, wa.Schema]:
    module = importlib.import_module("shop_h18_pb2")
    short = message.rsplit(".", 1)[-1]
    return {
        "proto": wa.Schema.from_proto(shop / "shop_h18.proto", short),
        "descriptor set": wa.Schema.from_descriptor_set(str(shop / "shop.binpb"), message),
        "set with source info": wa.Schema.from_descriptor_set(shop / "shop_src.binpb", short),
        "image with other files": wa.Schema.from_descriptor_set(shop / "image.binpb", message),
        "class": wa.Schema.from_message(getattr(module, short)),
        "instance": wa.Schema.from_message(getattr(module, short)()),
        "module name": wa.Schema.from_module("shop_h18_pb2", short),
        "module": wa.Schema.from_module(module, message),
        "load .proto": wa.Schema.load(str(shop / "shop_h18.proto"), short),
        "load set": wa.Schema.load(str(shop / "shop.binpb"), short),
        "load module": wa.Schema.load("shop_h18_pb2", short),
    }


@pytest.mark.parametrize("message", ["shop_h18.Order", "shop_h18.Item"])
def test_one_message_one_fingerprint_however_built(shop: Path, message: str) -> None:
    ways = all_ways(shop, message)
    assert {s.message_name for s in ways.values()} == {message}
    fingerprints = {name: s.fingerprint for name, s in ways.items()}
    assert len(set(fingerprints.values())) == 1, fingerprints
    assert len(set(ways.values())) == 1  # equal, same hash
    # and so one compiled plan serves them all
    keys = {
        wa.Transcoder(s, ["id" if "Order" in message else "sku_id"]).spec.plan_key
        for s in ways.values()
    }
    assert len(keys) == 1


def test_different_messages_and_files_differ(shop: Path, tmp_path: Path) -> None:
    order = wa.Schema.from_proto(shop / "shop_h18.proto", "Order")
    assert order.fingerprint != order.message("Item").fingerprint
    # One field renumbered, one json_name set by hand: other schemas.
    renumbered = tmp_path / "a" / "shop_h18.proto"
    renumbered.parent.mkdir()
    renumbered.write_text(SHOP.replace("double price = 2;", "double price = 5;"))
    json_named = tmp_path / "b" / "shop_h18.proto"
    json_named.parent.mkdir()
    json_named.write_text(
        SHOP.replace("double price = 2;", 'double price = 2 [json_name = "cost"];')
    )
    others = {wa.Schema.from_proto(p, "Order").fingerprint for p in (renumbered, json_named)}
    assert len(others) == 2 and order.fingerprint not in others


def test_a_descriptor_set_given_as_a_proto_file_says_what_to_do(shop: Path) -> None:
    with pytest.raises(
        SchemaError, match=r"is a serialized FileDescriptorSet, not \.proto source.*descriptor_set"
    ):
        wa.Schema.from_proto(shop / "shop.binpb", "Order")


def test_module_errors(shop: Path) -> None:
    with pytest.raises(SchemaError, match=r"cannot import module 'no_such_pkg_h18\.x_pb2'"):
        wa.Schema.from_module("no_such_pkg_h18.x_pb2", "Order")
    with pytest.raises(SchemaError, match=r"'json' is not a generated protobuf module"):
        wa.Schema.from_module("json", "Order")
    with pytest.raises(SchemaError, match=r"is not a Python module name"):
        wa.Schema.from_module("../evil.py", "Order")
    with pytest.raises(SchemaError, match=r"message 'Ordr' not found.*did you mean shop_h18.Order"):
        wa.Schema.from_module("shop_h18_pb2", "Ordr")


def order_record() -> bytes:
    module = importlib.import_module("shop_h18_pb2")
    order = module.Order(id="o1")
    order.items.add(sku_id="a", price=1.0)
    order.items.add(sku_id="b", price=2.0)
    return order.SerializeToString()


@pytest.mark.parametrize(
    "proto",
    [
        "{file: shop_h18.proto, message: Order}",
        "{descriptor_set: shop.binpb, message: shop_h18.Order}",
        "{descriptor_set: image.binpb, message: Order}",
        "{module: shop_h18_pb2, message: Order}",
    ],
)
def test_yaml_plans_take_every_source(shop: Path, proto: str) -> None:
    columns = '[{path: id}, {path: "items[*].sku_id"}]'
    plan = load_plan(f"proto: {proto}\ndenormalizer: {{columns: {columns}}}\n", base_dir=shop)
    tc = plan.transcoder()
    assert tc.schema == wa.Schema.from_proto(shop / "shop_h18.proto", "Order")
    assert tc.transcode([order_record()]).to_pylist() == [
        {"id": "o1", "items[*].sku_id": "a"},
        {"id": "o1", "items[*].sku_id": "b"},
    ]


@pytest.mark.parametrize(
    ("proto", "expected"),
    [
        (
            "{file: shop_h18.proto, module: shop_h18_pb2, message: Order}",
            r"1: proto: needs exactly one of file .*got file, module",
        ),
        (
            "{message: Order}",
            r"1: proto.file: required key is missing \(or give descriptor_set.*module",
        ),
        (
            "{descriptor_set: shop.binpb, message: Order, import_paths: [.]}",
            r"1: proto.import_paths: is for file \(.proto source\); a descriptor set needs none",
        ),
        (
            "{descriptor_set: nowhere.binpb, message: Order}",
            r"1: proto.descriptor_set: 'nowhere.binpb' not found",
        ),
        (
            "{module: shop-h18.pb2, message: Order}",
            r"1: proto.module: 'shop-h18.pb2' is not a Python module name",
        ),
    ],
)
def test_yaml_source_errors(shop: Path, proto: str, expected: str) -> None:
    with pytest.raises(PlanError) as info:
        load_plan(f"proto: {proto}\n", base_dir=shop)
    assert any(re.search(expected, p) for p in info.value.problems), info.value.problems


def test_yaml_schema_errors_name_the_source_key(shop: Path) -> None:
    (shop / "plan_bad_module.yaml").write_text(
        "proto:\n  module: no_such_pkg_h18_pb2\n  message: Order\n"
    )
    with pytest.raises(
        SchemaError, match=r"plan_bad_module.yaml:2: proto.module: cannot import module"
    ):
        load_plan(shop / "plan_bad_module.yaml").schema()
    (shop / "plan_set_as_file.yaml").write_text("proto:\n  file: shop.binpb\n  message: Order\n")
    with pytest.raises(
        SchemaError,
        match=r"plan_set_as_file.yaml:2: proto.file: .*FileDescriptorSet.*descriptor_set",
    ):
        load_plan(shop / "plan_set_as_file.yaml").schema()


def test_cli_schema_from_each_source(shop: Path, capsys: pytest.CaptureFixture) -> None:
    outputs = []
    for source in ("shop_h18.proto", "shop.binpb", "shop_h18_pb2"):
        assert (
            main(
                [
                    "schema",
                    str(shop / source) if source.endswith(("proto", "binpb")) else source,
                    "Order",
                ]
            )
            == 0
        )
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] == outputs[2]
    assert "items" in outputs[0] and "tags" in outputs[0]


def test_an_installed_schema_package_by_module_name() -> None:
    """opentelemetry-proto ships generated modules only (no .proto files)."""
    pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    name = "opentelemetry.proto.collector.trace.v1.trace_service_pb2"
    schema = wa.Schema.from_module(name, "ExportTraceServiceRequest")
    assert schema == wa.Schema.from_message(trace_service_pb2.ExportTraceServiceRequest)
    assert schema.message("Span") == wa.Schema.from_message(trace_pb2.Span)
    plan = load_plan(
        f"proto: {{module: {name}, message: ExportTraceServiceRequest}}\n"
        "denormalizer: {columns: [{name: span, path: 'resource_spans[*].scope_spans[*].spans[*].name'}]}\n"
    )
    request = trace_service_pb2.ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    spans.add(name="a")
    spans.add(name="b")
    rows = plan.transcoder().transcode([request.SerializeToString()])
    assert rows.column("span").to_pylist() == ["a", "b"]
