"""Smoke test of an installed wirearrow wheel: .ci/wheel.sh and cibuildwheel's test-command.

Run it from outside the source tree (the caller cds to a temporary directory), in an
environment where wirearrow came from the wheel: it checks that, then transcodes, encodes,
and runs one Ray step and one Beam step, each compared with the protobuf runtime's answer.
Self-contained: the records are protobuf's own descriptors (FileDescriptorProto and its
FieldDescriptorProtos: nested, repeated, enums, options), so no file of the checkout is needed.

    python wheel_smoke.py [--no-ray] [--no-beam]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from google.protobuf import (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    duration_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
)

EXTENSIONS = ["buffers", "decoder", "encoder", "framing", "jsonwire", "rows"]


def check(condition: bool, what: str) -> None:
    if not condition:
        sys.exit(f"wheel smoke test FAILED: {what}")


def records() -> tuple[list[bytes], list[descriptor_pb2.FileDescriptorProto]]:
    messages = []
    for module in (descriptor_pb2, any_pb2, api_pb2, duration_pb2, struct_pb2, timestamp_pb2,
                   type_pb2):
        fdp = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fdp)
        messages.append(fdp)
    return [m.SerializeToString() for m in messages], messages


def check_installed_package() -> None:
    import wirearrow

    package = Path(wirearrow.__file__).resolve().parent
    check("site-packages" in package.parts, f"wirearrow imported from {package}, not a wheel")
    check(not (package.parent / "setup.py").exists(), f"{package} is a source tree")
    core = package / "_core"
    for name in EXTENSIONS:
        check(len(list(core.glob(f"{name}.*.so")) + list(core.glob(f"{name}.*.pyd"))) == 1,
              f"compiled _core.{name} missing")
        check((core / f"{name}.pyi").is_file(), f"stub _core/{name}.pyi missing")
    sources = sorted(p.name for p in core.iterdir() if p.suffix in (".c", ".pyx", ".pxd"))
    check(sources == [], f"Cython/C sources in the wheel: {sources}")
    check((package / "py.typed").is_file(), "py.typed missing")
    meta = metadata.metadata("wirearrow")
    check(meta.get("License-Expression") == "Apache-2.0", "License-Expression missing")
    check(bool(meta.get_all("Project-URL")), "project URLs missing")
    print(f"installed: wirearrow {meta['Version']} from {package}")


def check_transcode_and_encode(raw, messages):
    import pyarrow as pa

    import wirearrow as wa

    schema = wa.Schema.from_message(descriptor_pb2.FileDescriptorProto)
    flat = wa.Transcoder(schema, columns=[
        "name",
        wa.Column("message_type[*].name", name="message"),
        wa.Column("message_type[*].field[*].number", name="number"),
    ])
    batch = flat.transcode(pa.array(raw, pa.binary()))
    expected = [
        (m.name, d.name, f.number)
        for m in messages for d in m.message_type for f in (d.field or [None]) if f is not None
    ]
    got = list(zip(*(batch.column(c).to_pylist() for c in ("name", "message", "number")),
                   strict=True))
    # Left-joined fan-out: messages without fields give a null number row; drop those here.
    check([r for r in got if r[2] is not None] == expected, "flat transcode != protobuf runtime")

    # Whole messages and back: the fields (FileDescriptorProto itself is recursive).
    fields = [f for m in messages for d in m.message_type for f in d.field]
    full = wa.Transcoder(wa.Schema.from_message(descriptor_pb2.FieldDescriptorProto))
    encoded = full.encode(full.transcode([f.SerializeToString() for f in fields])).to_pylist()
    check(encoded == [f.SerializeToString(deterministic=True) for f in fields],
          "encode(transcode(x)) != the runtime's deterministic serialization")

    # A schema compiled from .proto text: grpcio-tools' protoc, in-process, from the wheel.
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "smoke.proto").write_text(
            'syntax = "proto3";\npackage smoke;\n'
            "message Event { string id = 1; repeated int64 values = 2; }\n"
        )
        event = wa.Schema.from_proto(Path(tmp, "smoke.proto"), "smoke.Event", import_paths=[tmp])
    record = b"\x0a\x02e1" + b"\x12\x03\x01\x02\x03"  # id "e1", packed values 1, 2, 3
    rows = wa.Transcoder(event, columns=["id", "values[*]"]).transcode([record]).to_pylist()
    check(rows == [{"id": "e1", "values[*]": v} for v in (1, 2, 3)], f"from_proto: {rows}")
    print(f"transcode: {batch.num_rows} rows from {len(raw)} records; "
          f"encode: {len(fields)} records byte-identical")
    return flat, expected


def check_ray(flat, raw, expected) -> None:
    import ray

    import wirearrow.ray as war

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        ds = ray.data.from_items([{"value": r} for r in raw])
        rows = war.transcode(ds, flat).rows.take_all()
    finally:
        ray.shutdown()
    got = sorted((r["name"], r["message"], r["number"]) for r in rows if r["number"] is not None)
    check(got == sorted(expected), "Ray transcode != protobuf runtime")
    print(f"ray: {len(rows)} rows")


def check_beam(flat, raw, expected) -> None:
    import apache_beam as beam
    import pyarrow.parquet as pq
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    import wirearrow.beam as wab

    with tempfile.TemporaryDirectory() as tmp:
        with beam.Pipeline(runner=FnApiRunner()) as p:
            result = p | beam.Create(raw) | wab.ToArrow(flat)
            _ = result.batches | wab.WriteToParquetFiles(f"{tmp}/rows", schema=result.schema)
        table = pq.read_table(f"{tmp}/rows")
    got = sorted(r for r in zip(*(table.column(c).to_pylist()
                                  for c in ("name", "message", "number")), strict=True)
                 if r[2] is not None)
    check(got == sorted(expected), "Beam transcode != protobuf runtime")
    print(f"beam: {table.num_rows} rows in Parquet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray step")
    parser.add_argument("--no-beam", action="store_true", help="skip the Beam step")
    args = parser.parse_args()
    check_installed_package()
    raw, messages = records()
    flat, expected = check_transcode_and_encode(raw, messages)
    if not args.no_ray:
        check_ray(flat, raw, expected)
    if not args.no_beam:
        check_beam(flat, raw, expected)
    print("wheel smoke test passed")


if __name__ == "__main__":
    main()
