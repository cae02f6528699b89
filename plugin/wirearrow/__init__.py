"""wirearrow: protobuf wire bytes -> Apache Arrow, without building a message per record.

import wirearrow as wa
schema = wa.Schema.from_proto("bidrequest.proto", "BidRequestEvent", import_paths=["schema"])
tc = wa.Transcoder(schema, columns=["id", wa.Column("imp[*].id", name="imp_id")])
batch = tc.transcode(records)          # pa.BinaryArray / list[bytes] -> pa.RecordBatch
"""

from wirearrow.delimited import read_delimited
from wirearrow.errors import DecodeError, PathError, PlanError, SchemaError, WirearrowError
from wirearrow.plan.compiler import Column
from wirearrow.plan.expressions import lit, path
from wirearrow.plan.functions import coalesce, concat, cond, has
from wirearrow.plan.functions import sum_ as sum
from wirearrow.schema import Schema
from wirearrow.transcoder import Stats, Transcoder

__all__ = [
    "Column",
    "DecodeError",
    "PathError",
    "PlanError",
    "Schema",
    "SchemaError",
    "Stats",
    "Transcoder",
    "WirearrowError",
    "coalesce",
    "concat",
    "cond",
    "has",
    "lit",
    "path",
    "read_delimited",
    "sum",
]
__version__ = "0.1.0"
