"""Wide recursive records: ``wide.Wide`` (~150 fields), for the fixed cost of a call.

The schema (``benchmarks/schema/wide/wide.proto``) has every scalar type singular, optional
and repeated, maps of several key and value types, the well-known types, nested messages, a
oneof and recursive fields; read whole with ``max_depth=3`` its Arrow schema repeats the
message at every level, thousands of arrays. The records are request-sized and sparse
(about a third of the fields set, children a level or two deep): what a streaming bundle or
a request batch holds, where a call's cost should follow the records, not the plan's width.
Same ``(n, seed)``, same bytes; it does not depend on wirearrow.

    python benchmarks/corpus_wide.py --n 16
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus

__all__ = ["MESSAGE_NAME", "PROTO_FILE", "SCHEMA_DIR", "generate", "load_schema"]

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
PROTO_FILE = SCHEMA_DIR / "wide" / "wide.proto"
MESSAGE_NAME = "wide.Wide"
RECURSIVE = ("child", "children")

_T = FieldDescriptor
_WORDS = ("alpha", "beta", "gamma", "delta", "edge", "north", "south", "cache", "batch", "ray")


@functools.lru_cache(maxsize=1)
def load_schema() -> tuple[descriptor_pool.DescriptorPool, type[Message]]:
    """``(private pool, Wide class)``, compiled once."""
    return corpus.compile_schema(PROTO_FILE, SCHEMA_DIR, MESSAGE_NAME)


def _scalar(fd: FieldDescriptor, rng: random.Random) -> Any:
    t = fd.type
    if t in (_T.TYPE_DOUBLE, _T.TYPE_FLOAT):
        return round(rng.uniform(-1000, 1000), 2)
    if t in (_T.TYPE_INT32, _T.TYPE_SINT32, _T.TYPE_SFIXED32):
        return rng.randint(-50_000, 50_000)
    if t in (_T.TYPE_INT64, _T.TYPE_SINT64, _T.TYPE_SFIXED64):
        return rng.randint(-(2**40), 2**40)
    if t in (_T.TYPE_UINT32, _T.TYPE_FIXED32):
        return rng.randint(0, 2**31)
    if t in (_T.TYPE_UINT64, _T.TYPE_FIXED64):
        return rng.getrandbits(63)
    if t == _T.TYPE_BOOL:
        return rng.random() < 0.5
    if t == _T.TYPE_ENUM:
        return rng.randint(0, 3)
    if t == _T.TYPE_STRING:
        return "-".join(rng.sample(_WORDS, rng.randint(1, 3)))
    return rng.getrandbits(64).to_bytes(8, "little")


def _message(msg: Any, rng: random.Random, depth: int) -> None:
    """Set about a third of the fields of `msg` (recursive ones while depth lasts)."""
    name = msg.DESCRIPTOR.full_name
    if name == "google.protobuf.Timestamp":
        msg.seconds = 1_717_200_000 + rng.randrange(86_400)
        msg.nanos = rng.randrange(1000) * 1_000_000
        return
    if name == "google.protobuf.Duration":
        msg.seconds = rng.randrange(3600)
        return
    if name in ("google.protobuf.Struct",):
        msg.update({"k": rng.choice(_WORDS), "n": rng.randint(0, 9)})
        return
    if name == "google.protobuf.Value":
        msg.string_value = rng.choice(_WORDS)
        return
    if name == "google.protobuf.ListValue":
        msg.extend([rng.choice(_WORDS), rng.randint(0, 9)])
        return
    if name == "google.protobuf.FieldMask":
        msg.paths.extend(rng.sample(_WORDS, 2))
        return
    if name == "google.protobuf.Any":
        msg.type_url = "type.googleapis.com/wide.Point"
        msg.value = b"\x09" + bytes(8)
        return
    chosen_oneof = False
    for fd in msg.DESCRIPTOR.fields:
        recursive = fd.name in RECURSIVE or (
            fd.message_type is not None and fd.message_type.full_name == MESSAGE_NAME
        )
        if recursive:
            if depth <= 0 or rng.random() < 0.5:
                continue
        elif rng.random() < 0.65:
            continue
        if fd.containing_oneof is not None and not fd.containing_oneof.name.startswith("_"):
            if chosen_oneof:
                continue
            chosen_oneof = True
        value = getattr(msg, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            key_fd, value_fd = fd.message_type.fields
            for _ in range(rng.randint(1, 3) if not recursive else 1):
                key = _scalar(key_fd, rng)
                if value_fd.message_type is not None:
                    _message(value[key], rng, depth - 1)
                else:
                    value[key] = _scalar(value_fd, rng)
        elif fd.is_repeated:
            for _ in range(rng.randint(1, 3) if not recursive else rng.randint(1, 2)):
                if fd.message_type is not None:
                    _message(value.add(), rng, depth - 1)
                else:
                    value.append(_scalar(fd, rng))
        elif fd.message_type is not None:
            if fd.message_type.full_name == "google.protobuf.Empty":
                value.SetInParent()
            elif fd.message_type.full_name.startswith("google.protobuf.") and hasattr(
                value, "value"
            ) and fd.message_type.name.endswith("Value") and fd.message_type.name != "Value":
                value.value = _scalar(fd.message_type.fields_by_name["value"], rng)
            else:
                _message(value, rng, depth - 1)
        else:
            setattr(msg, fd.name, _scalar(fd, rng))


def generate(n: int, seed: int = 0, depth: int = 2) -> list[bytes]:
    """``n`` serialized ``wide.Wide`` records, recursive fields up to ``depth`` levels below."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    _, cls = load_schema()
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        msg: Any = cls()
        _message(msg, rng, depth)
        out.append(msg.SerializeToString(deterministic=True))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    messages = generate(args.n, args.seed)
    sizes = sorted(map(len, messages))
    print(f"{len(messages)} records, {sum(sizes) / max(len(sizes), 1):,.0f} bytes on average "
          f"({sizes[0]:,} to {sizes[-1]:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
