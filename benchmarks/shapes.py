"""Records of four message shapes for ``bench_shapes.py``, seeded: same ``(n, seed)``, same
bytes on any machine. Does not depend on wirearrow.

* ``small``: ``Small`` (proto2), ~40 scalar fields with sparse numbers up to 300 and one
  sub-message, ~230 bytes a record (the shape of protobuf's own small benchmark message);
* ``medium``: the OpenRTB ``BidRequestEvent`` corpus of ``corpus.py`` (~1 KB);
* ``large``: ``Envelope`` (proto2), ~20 scalar fields and a repeated group of 100-300
  spans of ~15 fields each, mostly strings, a few repeated strings and a sub-message,
  ~85 KB a record (batches of spans, log bundles, feature bags);
* ``large-msg``: ``Batch``, the records of ``large`` with a repeated sub-message in
  place of the group (ptars 0.0.25 reads no groups: an empty list in every record);
* ``wide``: ``Wide`` (proto3), 146 fields of every kind, recursive (``child``,
  ``children``, ``named``), read whole at ``max_depth=3``.

``python benchmarks/shapes.py`` prints the size of each shape's records.
"""

from __future__ import annotations

import functools
import random
import string
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

import corpus

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"


@functools.cache
def _pool() -> descriptor_pool.DescriptorPool:
    """shapes2.proto and shapes3.proto compiled into a private pool (protoc runs once)."""
    with tempfile.TemporaryDirectory(prefix="wirearrow-shapes-") as tmp:
        out = Path(tmp) / "shapes.pb"
        cmd = [
            sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={SCHEMA_DIR}",
            f"--descriptor_set_out={out}", "--include_imports", "shapes2.proto", "shapes3.proto",
        ]  # fmt: skip
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"protoc failed ({result.returncode}): {result.stderr.strip()}")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file_proto in fds.file:
        pool.Add(file_proto)
    return pool


def message_class(name: str) -> type[Message]:
    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(name))


_WORDS = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
    "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
)  # fmt: skip
_SERVICES = ("checkout", "cart", "search", "auth", "payments", "inventory", "shipping")
_STATUSES = ("OK", "OK", "OK", "OK", "ERROR", "UNSET")
_KINDS = ("SERVER", "CLIENT", "INTERNAL", "PRODUCER", "CONSUMER")


def _hex(rng: random.Random, nbytes: int) -> str:
    return f"{rng.getrandbits(8 * nbytes):0{2 * nbytes}x}"


def _words(rng: random.Random, k: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(k))


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits + " ", k=rng.randint(lo, hi)))


# ---------------------------------------------------------------- small


def _small(cls: type[Message], rng: random.Random) -> Message:
    m = cls()
    m.name = _text(rng, 6, 10)
    m.kind = rng.randint(0, 1000)
    m.version = rng.randint(0, 1 << 20)
    m.label = _text(rng, 4, 8)
    m.checksums.extend(rng.getrandbits(64) for _ in range(rng.randint(0, 3)))
    m.owner = _text(rng, 4, 8)
    m.region = _text(rng, 3, 6)
    m.zone = _text(rng, 6, 14)
    m.created = rng.getrandbits(40)
    for name in ("priority", "retries", "width", "height", "depth", "slot", "shard",
                 "replica", "quota", "usage", "epoch", "span", "budget", "cost", "level",
                 "lower", "upper", "score"):  # fmt: skip
        if rng.random() < 0.5:
            setattr(m, name, rng.randint(-5, 5000))
    for name in ("active", "visible", "indexed", "cached", "compact", "sealed", "archived",
                 "pinned", "dirty", "locked"):  # fmt: skip
        if rng.random() < 0.7:
            setattr(m, name, rng.random() < 0.5)
    m.source = _text(rng, 8, 14)
    m.target = _text(rng, 8, 14)
    if rng.random() < 0.3:
        m.note = _text(rng, 6, 12)
    d = m.detail
    d.a, d.b, d.c = rng.randint(0, 100), rng.randint(0, 1 << 16), rng.randint(0, 10)
    d.first, d.last = rng.getrandbits(40), rng.getrandbits(40)
    d.text = _text(rng, 6, 10)
    d.count, d.mode, d.step = rng.randint(0, 100), rng.randint(0, 5), rng.randint(0, 50)
    d.hash, d.crc = rng.getrandbits(64), rng.getrandbits(32)
    d.slot = rng.randint(0, 1000)
    d.tag = _text(rng, 4, 8)
    d.bytes, d.items = rng.getrandbits(30), rng.getrandbits(20)
    d.on, d.ready, d.done = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.5
    return m


# ---------------------------------------------------------------- large


def _large(cls: type[Message], rng: random.Random) -> Message:
    m = cls()
    m.trace_id = _hex(rng, 16)
    m.service = rng.choice(_SERVICES)
    m.host = f"{rng.choice(_SERVICES)}-{rng.randint(0, 99):02d}.prod.example.internal"
    m.region = rng.choice(("eu-west-1", "us-east-1", "ap-south-1"))
    m.start_ns = 1_717_200_000_000_000_000 + rng.getrandbits(40)
    m.end_ns = m.start_ns + rng.getrandbits(32)
    m.pid = rng.randint(1, 1 << 22)
    m.flags = rng.getrandbits(16)
    m.sampled = rng.random() < 0.5
    m.weight = rng.random()
    m.version = f"{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}"
    m.environment = rng.choice(("prod", "staging", "canary"))
    m.batch_id = rng.getrandbits(64)
    m.received_ns = m.end_ns + rng.getrandbits(20)
    m.collector = f"otel-collector-{rng.randint(0, 9)}"
    m.shard = rng.randint(-100, 100)
    m.tenant = _hex(rng, 8)
    m.compressed = rng.random() < 0.5
    m.drop_rate = rng.random()
    m.schema_url = "https://opentelemetry.io/schemas/1.21.0"
    parent = ""
    for _ in range(rng.randint(100, 300)):
        s = m.span.add()
        s.span_id = _hex(rng, 8)
        if parent:
            s.parent_id = parent
        parent = s.span_id if rng.random() < 0.3 else parent
        s.name = f"{rng.choice(_SERVICES)}.{_words(rng, 2).replace(' ', '_')}"
        s.kind = rng.choice(_KINDS)
        s.start_ns = m.start_ns + rng.getrandbits(30)
        s.duration_ns = rng.getrandbits(24)
        s.status = rng.choice(_STATUSES)
        if rng.random() < 0.6:
            s.message = _words(rng, rng.randint(10, 26))
        s.component = rng.choice(("http", "grpc", "db", "cache", "queue"))
        s.peer = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}:{rng.randint(1024, 65535)}"
        s.url = f"https://{rng.choice(_SERVICES)}.example.com/api/v{rng.randint(1, 3)}/{_words(rng, 2).replace(' ', '/')}?id={_hex(rng, 12)}"
        s.tags.extend(f"{rng.choice(_WORDS)}={rng.choice(_WORDS)}" for _ in range(rng.randint(0, 5)))
        s.events.extend(_words(rng, rng.randint(3, 8)) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.2:
            s.retries = rng.randint(1, 5)
        if rng.random() < 0.7:
            s.resource.key = rng.choice(("db.table", "cache.key", "queue.topic"))
            s.resource.value = _words(rng, 2)
            s.resource.size = rng.getrandbits(20)
    return m


# ---------------------------------------------------------------- wide

_KIND_VALUE: dict[str, Callable[[random.Random], Any]] = {
    "double": lambda r: r.uniform(-1e6, 1e6),
    "float": lambda r: float(r.randint(-1000, 1000)) / 4,
    "int32": lambda r: r.randint(-(1 << 31), (1 << 31) - 1),
    "int64": lambda r: r.randint(-(1 << 50), 1 << 50),
    "uint32": lambda r: r.getrandbits(32),
    "uint64": lambda r: r.getrandbits(64),
    "sint32": lambda r: r.randint(-(1 << 20), 1 << 20),
    "sint64": lambda r: r.randint(-(1 << 40), 1 << 40),
    "fixed32": lambda r: r.getrandbits(32),
    "fixed64": lambda r: r.getrandbits(64),
    "sfixed32": lambda r: r.randint(-(1 << 31), (1 << 31) - 1),
    "sfixed64": lambda r: r.randint(-(1 << 63), (1 << 63) - 1),
    "bool": lambda r: r.random() < 0.5,
    "string": lambda r: _text(r, 3, 24),
    "bytes": lambda r: bytes(r.getrandbits(8) for _ in range(r.randint(1, 16))),
}


def _leaf(leaf: Any, rng: random.Random) -> None:
    leaf.key = rng.choice(_WORDS)
    leaf.value = rng.getrandbits(30)
    leaf.score = rng.random()
    leaf.labels.extend(rng.choice(_WORDS) for _ in range(rng.randint(0, 3)))


def _as_batch(cls: type[Message], rng: random.Random) -> Message:
    """An Envelope's values with the spans as a repeated sub-message (group and message
    share their field numbers, so each span's bytes parse as the other type)."""
    envelope = _large(message_class("wirearrow.bench.shapes.Envelope"), rng)
    m = cls()
    for field, value in envelope.ListFields():
        if field.name != "span":
            setattr(m, field.name, value)
    for span in envelope.span:
        m.span.add().MergeFromString(span.SerializeToString())
    return m


def _wide_fill(m: Any, rng: random.Random, depth: int, share: float) -> None:
    """Fill about `share` of the fields of a Wide, `depth` recursion levels below it."""
    for k, value in _KIND_VALUE.items():
        if rng.random() < share:
            setattr(m, f"s_{k}", value(rng))
        if rng.random() < share:
            setattr(m, f"o_{k}", value(rng))
        if rng.random() < share:
            getattr(m, f"r_{k}").extend(value(rng) for _ in range(rng.randint(1, 4)))
    for k in ("int32", "int64", "string", "bool"):
        for i in range(10):
            if rng.random() < share:
                setattr(m, f"x_{k}_{i}", _KIND_VALUE[k](rng))
    if rng.random() < share:
        m.level = rng.randint(0, 3)
        m.o_level = rng.randint(0, 3)
        m.levels.extend(rng.randint(0, 3) for _ in range(rng.randint(1, 3)))
    for i in range(3):
        if rng.random() < share:
            ts = getattr(m, f"ts_{i}")
            ts.seconds, ts.nanos = 1_717_200_000 + rng.getrandbits(24), rng.randint(0, 999_999_999)
    for i in range(2):
        if rng.random() < share:
            getattr(m, f"dur_{i}").seconds = rng.randint(0, 86_400)
    if rng.random() < share:
        m.w_double.value, m.w_float.value = rng.random(), 0.5
        m.w_int64.value, m.w_uint64.value = rng.getrandbits(40), rng.getrandbits(40)
        m.w_int32.value, m.w_uint32.value = rng.randint(-100, 100), rng.getrandbits(20)
        m.w_bool.value, m.w_string.value = True, rng.choice(_WORDS)
        m.w_bytes.value = b"\x00\x01\x02"
    if rng.random() < share:
        for _ in range(rng.randint(1, 4)):
            m.attrs[rng.choice(_WORDS)] = _text(rng, 3, 20)
            m.counters[rng.choice(_WORDS)] = rng.getrandbits(30)
            m.names[rng.getrandbits(20)] = rng.choice(_WORDS)
            m.gauges[rng.choice(_WORDS)] = rng.random()
            _leaf(m.leaf_by_id[rng.getrandbits(10)], rng)
    for i in range(10):
        if rng.random() < share:
            _leaf(getattr(m, f"leaf_{i}"), rng)
    for i in range(3):
        if rng.random() < share:
            for _ in range(rng.randint(1, 3)):
                _leaf(getattr(m, f"leaves_{i}").add(), rng)
    for i in range(20):
        if rng.random() < share:
            e = getattr(m, f"extra_{i}")
            e.name, e.rank, e.flag = rng.choice(_WORDS), rng.randint(0, 100), True
            _leaf(e.leaf, rng)
    for i in range(3):
        if rng.random() < share:
            e = getattr(m, f"extras_{i}").add()
            e.name, e.rank = rng.choice(_WORDS), rng.randint(0, 100)
    if depth > 0:
        _wide_fill(m.child, rng, depth - 1, share / 2)
        for _ in range(rng.randint(0, 2)):
            _wide_fill(m.children.add(), rng, depth - 1, share / 3)
        if rng.random() < 0.5:
            _wide_fill(m.named[rng.choice(_WORDS)], rng, depth - 1, share / 3)


def _wide(cls: type[Message], rng: random.Random) -> Message:
    m = cls()
    _wide_fill(m, rng, 2, 0.6)
    return m


# ---------------------------------------------------------------- shapes


@dataclass(frozen=True)
class Shape:
    name: str
    message: str  # full name in the pool (medium: corpus.py's schema)
    what: str
    max_depth: int | None  # wirearrow's Transcoder(max_depth=...), None: its default

    def message_class(self) -> type[Message]:
        if self.name == "medium":
            return corpus.load_schema()[1]
        return message_class(self.message)

    def generate(self, n: int, seed: int = 0) -> list[bytes]:
        if self.name == "medium":
            return corpus.generate(n, seed)
        cls = self.message_class()
        build = {"small": _small, "large": _large, "large-msg": _as_batch, "wide": _wide}[self.name]
        # (large-msg: the records of large, from the same stream of numbers)
        rng = random.Random(f"{self.name.removesuffix('-msg')}:{seed}")
        return [build(cls, rng).SerializeToString() for _ in range(n)]


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("small", "wirearrow.bench.shapes.Small", "~230 B, 40 sparse scalars + 1 sub-message", None),
        Shape("medium", corpus.MESSAGE_NAME, "OpenRTB BidRequestEvent, ~1 KB", None),
        Shape("large", "wirearrow.bench.shapes.Envelope", "~85 KB, repeated group of 100-300 string-heavy spans", None),
        Shape("large-msg", "wirearrow.bench.shapes.Batch", "large's records, the group as a repeated sub-message", None),
        Shape("wide", "wirearrow.bench.shapes.Wide", "146 fields, recursive, read whole at max_depth=3", 3),
    )
}


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args(argv)
    for shape in SHAPES.values():
        records = shape.generate(args.n)
        sizes = sorted(map(len, records))
        print(f"{shape.name:7} {shape.what}: {len(records)} records, mean {sum(sizes) / len(sizes):,.0f} B "
              f"(min {sizes[0]:,}, median {sizes[len(sizes) // 2]:,}, max {sizes[-1]:,})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
