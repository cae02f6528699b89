"""Schemas from .proto source, descriptor sets and generated classes (bufarrow-behaviour §4.3)."""

from __future__ import annotations

import importlib.resources
import os
import pickle
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor

import wirearrow.schema
from wirearrow.errors import SchemaError
from wirearrow.plan.types import is_packed, is_repeated, is_required
from wirearrow.schema import Schema

PROTO2 = """
syntax = "proto2";
package legacy;

message Order {
  required string id = 1;
  optional int32 quantity = 2 [default = 5];
  repeated int64 tags = 3 [packed = true];
  optional group Extra = 4 { optional string note = 5; }
  message Line { optional double price = 1; }
  repeated Line lines = 6;
  extensions 100 to 199;
}
"""

COMMON = """
syntax = "proto3";
package shop.common;

message Money { string currency = 1; int64 units = 2; }
message Item { string sku = 1; }
"""

ORDER = """
syntax = "proto3";
package shop;

import "common/money.proto";
import "google/protobuf/timestamp.proto";

message Order {
  string id = 1;
  shop.common.Money total = 2;
  google.protobuf.Timestamp created = 3;
  map<string, int32> counts = 4;
  optional int32 priority = 5;
  repeated Item items = 6;
  message Item { string sku = 1; int32 n = 2; }
}
message Refund { string order_id = 1; }
"""

EDITIONS = """
edition = "2023";
package ed;

option features.field_presence = IMPLICIT;

message Event {
  int32 implicit = 1;
  int32 explicit = 2 [features.field_presence = EXPLICIT];
  repeated int32 expanded = 3 [features.repeated_field_encoding = EXPANDED];
  Event child = 4;
}
"""


def write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def protos(tmp_path: Path) -> Path:
    root = tmp_path / "protos"
    write(root, "common/money.proto", COMMON)
    write(root, "shop/order.proto", ORDER)
    write(root, "legacy.proto", PROTO2)
    write(root, "events.proto", EDITIONS)
    return root


@pytest.fixture
def order(protos: Path) -> Schema:
    return Schema.from_proto("shop/order.proto", "Order", import_paths=[protos])


def file_names(schema: Schema) -> list[str]:
    data = descriptor_pb2.FileDescriptorSet.FromString(schema.file_descriptor_set)
    return [file.name for file in data.file]


# ------------------------------------------------------------------------------------------
# from_proto: syntaxes


def test_proto3_with_imports(order: Schema) -> None:
    assert order.message_name == "shop.Order"
    descriptor = order.descriptor
    assert descriptor.full_name == "shop.Order"
    fields = descriptor.fields_by_name
    assert fields["total"].message_type.full_name == "shop.common.Money"
    assert fields["created"].message_type.full_name == "google.protobuf.Timestamp"
    assert fields["counts"].message_type.GetOptions().map_entry
    assert fields["priority"].has_presence
    assert not fields["id"].has_presence
    # Dependencies first, the compiled file last: the order protoc --include_imports writes.
    assert file_names(order) == [
        "common/money.proto",
        "google/protobuf/timestamp.proto",
        "shop/order.proto",
    ]


def test_proto2(protos: Path) -> None:
    schema = Schema.from_proto("legacy.proto", "legacy.Order", import_paths=[protos])
    fields = schema.descriptor.fields_by_name
    assert fields["quantity"].default_value == 5
    assert fields["quantity"].has_presence
    assert is_required(fields["id"])
    assert not is_required(fields["quantity"])
    assert is_repeated(fields["tags"]) and is_packed(fields["tags"])
    assert is_repeated(fields["lines"]) and not is_packed(fields["lines"])
    assert fields["extra"].type == FieldDescriptor.TYPE_GROUP
    assert fields["extra"].message_type.full_name == "legacy.Order.Extra"
    assert schema.message("Line").message_name == "legacy.Order.Line"


def test_editions_2023(protos: Path) -> None:
    schema = Schema.from_proto(protos / "events.proto", "Event")
    fields = schema.descriptor.fields_by_name
    assert schema.message_name == "ed.Event"
    assert not fields["implicit"].has_presence
    assert fields["explicit"].has_presence
    assert fields["child"].has_presence
    assert is_repeated(fields["expanded"])
    assert not is_packed(fields["expanded"])
    assert not is_repeated(fields["explicit"])


def test_syntax_error_carries_protoc_location(tmp_path: Path) -> None:
    write(tmp_path, "bad.proto", 'syntax = "proto3";\nmessage X {\n  int32 a = 1\n}\n')
    with pytest.raises(SchemaError) as info:
        Schema.from_proto(tmp_path / "bad.proto", "X")
    message = str(info.value)
    assert "bad.proto" in message
    assert re.search(r"bad\.proto:4:1: Expected \";\"", message), message


def test_missing_import(tmp_path: Path) -> None:
    write(tmp_path, "a.proto", 'syntax = "proto3";\nimport "nowhere/b.proto";\nmessage A {}\n')
    with pytest.raises(SchemaError, match=r"nowhere/b\.proto"):
        Schema.from_proto("a.proto", "A", import_paths=[tmp_path])


def test_missing_file_names_what_was_tried(protos: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(SchemaError) as info:
        Schema.from_proto("shop/nope.proto", "Order", import_paths=[protos, other])
    message = str(info.value)
    assert "'shop/nope.proto' not found" in message
    assert str(protos / "shop" / "nope.proto") in message
    assert str(other / "shop" / "nope.proto") in message


def test_missing_absolute_file(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="not found"):
        Schema.from_proto(tmp_path / "nope.proto", "X")


# ------------------------------------------------------------------------------------------
# from_proto: a compiled set is reused while its files hold the same bytes


def settled(*paths: Path) -> None:
    """Date the files a minute back: settled, not being edited while protoc runs."""
    past = time.time() - 60
    for path in paths:
        os.utime(path, (past, past))


def test_a_compile_is_reused_while_its_files_hold_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []
    run_protoc = wirearrow.schema._run_protoc

    def counted(name: str, include_dirs: list[str]) -> bytes:
        runs.append(name)
        return run_protoc(name, include_dirs)

    monkeypatch.setattr(wirearrow.schema, "_run_protoc", counted)
    first, second = tmp_path / "first", tmp_path / "second"

    def fields() -> list[str]:
        schema = Schema.from_proto("root.proto", "cache.Root", import_paths=[first, second])
        return [f.name for f in schema.descriptor.fields[0].message_type.fields]

    header = 'syntax = "proto3";\npackage cache;\n'
    root = write(second, "root.proto", header + 'import "dep.proto";\nmessage Root { Dep dep = 1; }\n')
    dep = write(second, "dep.proto", header + "message Dep { int32 a = 1; }\n")
    settled(root, dep)
    assert fields() == ["a"] and fields() == ["a"]
    assert len(runs) == 1
    # An import's bytes change: compiled again.
    dep.write_text(header + "message Dep { int32 b = 1; }\n")
    settled(dep)
    assert fields() == ["b"] and len(runs) == 2
    # A file now shadows the import from an earlier include directory: compiled again.
    shadow = write(first, "dep.proto", header + "message Dep { int32 c = 1; }\n")
    settled(shadow)
    assert fields() == ["c"] and len(runs) == 3
    # The same bytes elsewhere: no compile.
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in (root, shadow):
        (copy / path.name).write_bytes(path.read_bytes())
    copied = Schema.from_proto("root.proto", "cache.Root", import_paths=[copy])
    assert copied.descriptor.fields[0].message_type.fields[0].name == "c" and len(runs) == 3
    # A file written just now may be mid-edit while protoc reads it: its set is not kept.
    shadow.write_text(header + "message Dep { int32 d = 1; }\n")
    assert fields() == ["d"] and fields() == ["d"] and len(runs) == 5


# ------------------------------------------------------------------------------------------
# from_proto: the three ways to name a file


def test_file_relative_to_an_import_path(protos: Path, order: Schema) -> None:
    # str and PathLike import paths, a PathLike file name
    again = Schema.from_proto(Path("shop/order.proto"), "shop.Order", import_paths=[str(protos)])
    assert again == order


def test_file_relative_to_cwd(
    protos: Path, order: Schema, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # Under an import path: named relative to it, so identical to the -I spelling.
    assert Schema.from_proto("protos/shop/order.proto", "Order", import_paths=["protos"]) == order
    # Relative import paths are relative to the CWD too.
    assert Schema.from_proto("shop/order.proto", "Order", import_paths=["protos"]) == order
    # Not under an import path: its directory becomes one.
    schema = Schema.from_proto("protos/events.proto", "Event")
    assert file_names(schema) == ["events.proto"]


def test_absolute_file(protos: Path, order: Schema) -> None:
    # The reference fails on an absolute file plus import paths; we name it relative to them.
    absolute = protos / "shop" / "order.proto"
    assert absolute.is_absolute()
    assert Schema.from_proto(absolute, "Order", import_paths=[protos]) == order
    assert Schema.from_proto(str(absolute), "Order", import_paths=[protos]) == order


def test_file_outside_import_paths_gets_its_directory(tmp_path: Path, protos: Path) -> None:
    # ext/ext.proto imports through the user's import path and lives outside it.
    ext = write(
        tmp_path,
        "ext/ext.proto",
        'syntax = "proto3";\nimport "common/money.proto";\n'
        "message Ext { shop.common.Money m = 1; }\n",
    )
    schema = Schema.from_proto(ext, "Ext", import_paths=[protos])
    assert file_names(schema) == ["common/money.proto", "ext.proto"]
    assert schema.descriptor.fields_by_name["m"].message_type.full_name == "shop.common.Money"


def test_own_file_is_not_shadowed_by_an_import_path(tmp_path: Path) -> None:
    write(tmp_path / "lib", "x.proto", 'syntax = "proto3";\nmessage Lib {}\n')
    mine = write(tmp_path / "mine", "x.proto", 'syntax = "proto3";\nmessage Mine {}\n')
    schema = Schema.from_proto(mine, "Mine", import_paths=[tmp_path / "lib"])
    assert schema.message_name == "Mine"


# ------------------------------------------------------------------------------------------
# from_descriptor_set


def compile_set(protos: Path, name: str, out: Path) -> bytes:
    include = os.fspath(importlib.resources.files("grpc_tools") / "_proto")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{protos}",
            f"-I{include}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            name,
        ],
        check=True,
        cwd=protos,
    )
    return out.read_bytes()


def test_from_descriptor_set(protos: Path, order: Schema, tmp_path: Path) -> None:
    out = tmp_path / "order.binpb"
    data = compile_set(protos, "shop/order.proto", out)
    # Our compilation matches the protoc command line byte for byte.
    assert data == order.file_descriptor_set
    assert Schema.from_descriptor_set(data, "shop.Order") == order
    assert Schema.from_descriptor_set(bytearray(data), "Order") == order
    assert Schema.from_descriptor_set(memoryview(data), "Order") == order
    assert Schema.from_descriptor_set(out, "Order") == order
    assert Schema.from_descriptor_set(str(out), "Order") == order


def test_descriptor_set_in_any_order(order: Schema) -> None:
    data = descriptor_pb2.FileDescriptorSet.FromString(order.file_descriptor_set)
    reordered = descriptor_pb2.FileDescriptorSet(file=list(reversed(data.file)))
    schema = Schema.from_descriptor_set(reordered.SerializeToString(), "Order")
    assert schema == order
    doubled = descriptor_pb2.FileDescriptorSet(file=[*data.file, *data.file])
    assert Schema.from_descriptor_set(doubled.SerializeToString(), "Order") == order


def test_descriptor_set_without_well_known_imports(order: Schema) -> None:
    data = descriptor_pb2.FileDescriptorSet.FromString(order.file_descriptor_set)
    stripped = descriptor_pb2.FileDescriptorSet(
        file=[f for f in data.file if not f.name.startswith("google/")]
    )
    schema = Schema.from_descriptor_set(stripped.SerializeToString(), "Order")
    assert "google/protobuf/timestamp.proto" in file_names(schema)
    created = schema.descriptor.fields_by_name["created"]
    assert created.message_type.full_name == "google.protobuf.Timestamp"


def test_descriptor_set_missing_an_import(order: Schema) -> None:
    data = descriptor_pb2.FileDescriptorSet.FromString(order.file_descriptor_set)
    stripped = descriptor_pb2.FileDescriptorSet(
        file=[f for f in data.file if f.name != "common/money.proto"]
    )
    with pytest.raises(SchemaError, match=r"lacks 'common/money\.proto'.*--include_imports"):
        Schema.from_descriptor_set(stripped.SerializeToString(), "Order")


def test_descriptor_set_with_conflicting_files(order: Schema) -> None:
    data = descriptor_pb2.FileDescriptorSet.FromString(order.file_descriptor_set)
    other = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="other")
    conflicting = descriptor_pb2.FileDescriptorSet(file=[*data.file, other])
    with pytest.raises(SchemaError, match=r"two different files named 'shop/order\.proto'"):
        Schema.from_descriptor_set(conflicting.SerializeToString(), "Order")


def test_descriptor_set_with_broken_descriptor() -> None:
    file = descriptor_pb2.FileDescriptorProto(name="broken.proto", package="b", syntax="proto3")
    message = file.message_type.add(name="M")
    message.field.add(
        name="x",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".b.Nope",
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    data = descriptor_pb2.FileDescriptorSet(file=[file]).SerializeToString()
    with pytest.raises(SchemaError, match=r"invalid descriptor for 'broken\.proto'"):
        Schema.from_descriptor_set(data, "M")


@pytest.mark.parametrize("data", [b"\xff\xff\xff", b"\x0a\x05abc"])
def test_descriptor_set_garbage(data: bytes) -> None:
    with pytest.raises(SchemaError, match=r"not a serialized google\.protobuf\.FileDescriptorSet"):
        Schema.from_descriptor_set(data, "M")


def test_descriptor_set_empty() -> None:
    with pytest.raises(SchemaError, match="holds no files"):
        Schema.from_descriptor_set(b"", "M")


def test_descriptor_set_unreadable(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="cannot read descriptor set"):
        Schema.from_descriptor_set(tmp_path / "missing.binpb", "M")


# ------------------------------------------------------------------------------------------
# from_message


def test_from_generated_class(order: Schema) -> None:
    # A class generated from a pool of the user's: a different pool from ours.
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(order.file_descriptor_set).file:
        pool.Add(file)
    order_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))

    for source in (order_class, order_class(id="x"), order_class.DESCRIPTOR):
        schema = Schema.from_message(source)
        assert schema == order
        assert schema.message_name == "shop.Order"
        # Our descriptor lives in our own pool, not the class's.
        assert schema.descriptor is not order_class.DESCRIPTOR
        assert (
            schema.descriptor.fields_by_name.keys() == order_class.DESCRIPTOR.fields_by_name.keys()
        )

    item_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order.Item"))
    assert Schema.from_message(item_class) == order.message("Order.Item")


def test_from_well_known_class() -> None:
    schema = Schema.from_message(timestamp_pb2.Timestamp)
    assert schema.message_name == "google.protobuf.Timestamp"
    assert file_names(schema) == ["google/protobuf/timestamp.proto"]
    assert schema.descriptor is not timestamp_pb2.Timestamp.DESCRIPTOR
    assert [f.name for f in schema.descriptor.fields] == ["seconds", "nanos"]


def test_from_message_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match="expected a protobuf message class"):
        Schema.from_message(42)


def test_default_pool_is_left_alone(order: Schema) -> None:
    assert order.descriptor.full_name == "shop.Order"
    with pytest.raises(KeyError):
        descriptor_pool.Default().FindMessageTypeByName("shop.Order")


# ------------------------------------------------------------------------------------------
# message lookup


@pytest.mark.parametrize(
    ("name", "full_name"),
    [
        ("shop.Order", "shop.Order"),
        (".shop.Order", "shop.Order"),
        ("Order", "shop.Order"),
        ("Refund", "shop.Refund"),
        ("Money", "shop.common.Money"),
        ("common.Money", "shop.common.Money"),
        ("Order.Item", "shop.Order.Item"),
        ("shop.Order.Item", "shop.Order.Item"),
        ("Timestamp", "google.protobuf.Timestamp"),
        ("shop.Order.CountsEntry", "shop.Order.CountsEntry"),  # full names reach map entries
    ],
)
def test_message_lookup(order: Schema, name: str, full_name: str) -> None:
    assert order.message(name).message_name == full_name


def test_message_shares_descriptors(order: Schema) -> None:
    item = order.message("Order.Item")
    assert order.descriptor.fields_by_name["items"].message_type is item.descriptor
    assert item.file_descriptor_set == order.file_descriptor_set
    assert item != order


def test_declared_in_lists_the_file_s_own_messages(protos: Path, order: Schema) -> None:
    schemas = Schema.declared_in("shop/order.proto", import_paths=[protos])
    # nested messages too; map entries and imported messages not
    assert [s.message_name for s in schemas] == ["shop.Order", "shop.Order.Item", "shop.Refund"]
    assert schemas[0] == order  # the same set as from_proto's: same fingerprint
    first, item = schemas[0], schemas[1]
    assert first.descriptor.fields_by_name["items"].message_type is item.descriptor
    with pytest.raises(SchemaError):
        Schema.declared_in("shop/missing.proto", import_paths=[protos])


def test_short_name_ties_prefer_the_compiled_file(protos: Path) -> None:
    # "Item" is shop.common.Item (imported) and shop.Order.Item (in the file itself).
    schema = Schema.from_proto("shop/order.proto", "Item", import_paths=[protos])
    assert schema.message_name == "shop.Order.Item"
    # ... and message() prefers the file of the current root.
    money = schema.message("shop.common.Money")
    assert money.message("Item").message_name == "shop.common.Item"


def test_ambiguous_short_name(order: Schema) -> None:
    data = order.file_descriptor_set
    with pytest.raises(SchemaError) as info:
        Schema.from_descriptor_set(data, "Item")
    message = str(info.value)
    assert "'Item' is ambiguous" in message
    assert "shop.Order.Item" in message
    assert "shop.common.Item" in message


@pytest.mark.parametrize("name", ["Ordr", "shop.Ordr", "order", "Nope.Order", "CountsEntry", ""])
def test_unknown_message(order: Schema, name: str) -> None:
    with pytest.raises(SchemaError, match="not found in the descriptor set"):
        order.message(name)


def test_unknown_message_suggests(order: Schema, protos: Path) -> None:
    with pytest.raises(SchemaError, match=r"did you mean shop\.Order"):
        order.message("Ordr")
    with pytest.raises(SchemaError) as info:
        Schema.from_proto("shop/order.proto", "Xyzzy", import_paths=[protos])
    message = str(info.value)
    assert "'Xyzzy' not found in shop/order.proto and its imports" in message
    assert "messages defined: " in message
    assert "shop.Refund" in message
    assert "CountsEntry" not in message


def test_listing_is_capped(tmp_path: Path) -> None:
    body = "\n".join(f"message M{i:02d} {{}}" for i in range(30))
    write(tmp_path, "many.proto", f'syntax = "proto3";\npackage many;\n{body}\n')
    with pytest.raises(SchemaError) as info:
        Schema.from_proto(tmp_path / "many.proto", "Zzz")
    message = str(info.value)
    assert "many.M19" in message
    assert "many.M20" not in message
    assert "… and 10 more" in message


# ------------------------------------------------------------------------------------------
# identity, pickling, fingerprint


def test_pickle_round_trip(order: Schema) -> None:
    payload = pickle.dumps(order)
    assert len(payload) < len(order.file_descriptor_set) + 200
    restored = pickle.loads(payload)
    assert restored == order
    assert hash(restored) == hash(order)
    assert restored.message_name == "shop.Order"
    assert restored.file_descriptor_set == order.file_descriptor_set
    assert restored.descriptor.fields_by_name.keys() == order.descriptor.fields_by_name.keys()
    assert restored.message("Refund") == order.message("Refund")


def test_fingerprint(order: Schema, protos: Path) -> None:
    assert re.fullmatch(r"[0-9a-f]{64}", order.fingerprint)
    assert order.fingerprint != order.message("Refund").fingerprint
    legacy = Schema.from_proto("legacy.proto", "Order", import_paths=[protos])
    assert legacy.fingerprint != order.fingerprint
    assert len({order, order.message("Order"), legacy}) == 2


def test_fingerprint_is_stable_across_processes(order: Schema, tmp_path: Path) -> None:
    pickled = tmp_path / "schema.pickle"
    pickled.write_bytes(pickle.dumps(order))
    script = textwrap.dedent(
        f"""
        import pickle
        from wirearrow.schema import Schema
        schema = pickle.loads(open({str(pickled)!r}, "rb").read())
        fresh = Schema.from_descriptor_set(schema.file_descriptor_set, schema.message_name)
        print(schema.fingerprint, fresh.fingerprint, schema.descriptor.full_name)
        """
    )
    source_root = Path(wirearrow.schema.__file__).parent.parent
    env = {**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": str(source_root)}
    output = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert output == [order.fingerprint, order.fingerprint, "shop.Order"]


def test_equality_and_repr(order: Schema) -> None:
    assert order != "shop.Order"
    assert order == order.message("shop.Order")
    text = repr(order)
    assert text.startswith("Schema('shop.Order', file='shop/order.proto', fingerprint='")
    assert order.fingerprint[:12] in text


def test_constructor_is_not_public() -> None:
    with pytest.raises(TypeError, match=r"Schema\.from_proto"):
        Schema()
