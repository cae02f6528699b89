"""wirearrow: protobuf wire bytes -> Apache Arrow, without building a message per record.

import wirearrow as wa
schema = wa.Schema.from_proto("bidrequest.proto", "BidRequestEvent", import_paths=["schema"])
tc = wa.Transcoder(schema, columns=["id", wa.Column("imp[*].id", name="imp_id")])
size = wa.Column(name="size", expr=wa.fn.concat("imp[*].banner.w", "imp[*].banner.h", sep="x"))
batch = tc.transcode(records)          # pa.BinaryArray / list[bytes] -> pa.RecordBatch
"""

from wirearrow import fn
from wirearrow._core.buffers import buffer_pool
from wirearrow.accelerator import accelerated, accelerator_status
from wirearrow.cache import ParserCache
from wirearrow.config import PlanConfig, load_plan
from wirearrow.counts import Counts
from wirearrow.encoder import Encoder
from wirearrow.errors import (
    DecodeError,
    EncodeError,
    PathError,
    PlanError,
    SchemaError,
    WirearrowError,
)
from wirearrow.output import Output
from wirearrow.parquet import write_parquet
from wirearrow.plan.compiler import Column
from wirearrow.plans import resolve_plan
from wirearrow.schema import Schema
from wirearrow.sources.format import RecordFormat
from wirearrow.sources.framing import frame_records, read_delimited
from wirearrow.sources.protojson import read_ndjson
from wirearrow.spec import TranscodeSpec
from wirearrow.transcoder import Decoded, Transcoder

__all__ = [
    "Column",
    "Counts",
    "DecodeError",
    "Decoded",
    "EncodeError",
    "Encoder",
    "Output",
    "ParserCache",
    "PathError",
    "PlanConfig",
    "PlanError",
    "RecordFormat",
    "Schema",
    "SchemaError",
    "TranscodeSpec",
    "Transcoder",
    "WirearrowError",
    "accelerated",
    "accelerator_status",
    "buffer_pool",
    "fn",
    "frame_records",
    "load_plan",
    "read_delimited",
    "read_ndjson",
    "resolve_plan",
    "write_parquet",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The expression builders lived here before wirearrow.fn: say where they went.
    if name in fn.__all__:
        raise AttributeError(f"wirearrow.{name} is now wirearrow.fn.{name} (import it from there)")
    raise AttributeError(f"module 'wirearrow' has no attribute {name!r}")
