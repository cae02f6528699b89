"""wirearrow: protobuf wire bytes -> Apache Arrow, without building a message per record.

import wirearrow as wa
schema = wa.Schema.from_proto("bidrequest.proto", "BidRequestEvent", import_paths=["schema"])
tc = wa.Transcoder(schema, columns=["id", wa.Column("imp[*].id", name="imp_id")])
batch = tc.transcode(records)          # pa.BinaryArray / list[bytes] -> pa.RecordBatch
"""

from wirearrow._core.buffers import buffer_pool
from wirearrow.cache import ParserCache
from wirearrow.config import PlanConfig, load_plan
from wirearrow.delimited import frame_records, read_delimited
from wirearrow.errors import (
    DecodeError,
    EncodeError,
    PathError,
    PlanError,
    SchemaError,
    WirearrowError,
)
from wirearrow.parquet import write_parquet
from wirearrow.plan.compiler import Column
from wirearrow.plan.expressions import lit, path
from wirearrow.plan.functions import abs_ as abs
from wirearrow.plan.functions import (
    add,
    age,
    and_,
    bucket,
    cast_float,
    cast_int,
    cast_string,
    ceil,
    coalesce,
    coerce,
    concat,
    cond,
    date_part,
    default,
    distinct,
    div,
    enum_name,
    epoch_to_date,
    eq,
    extract_day,
    extract_hour,
    extract_minute,
    extract_month,
    extract_second,
    extract_year,
    floor,
    ge,
    gt,
    has,
    le,
    list_concat,
    lower,
    lt,
    map_key,
    mask,
    mod,
    mul,
    ne,
    not_,
    or_,
    strptime,
    sub,
    to_duration,
    to_timestamp,
    trim,
    trim_prefix,
    trim_suffix,
    try_strptime,
    upper,
)
from wirearrow.plan.functions import hash_ as hash
from wirearrow.plan.functions import len_ as len
from wirearrow.plan.functions import max_ as max
from wirearrow.plan.functions import min_ as min
from wirearrow.plan.functions import round_ as round
from wirearrow.plan.functions import sum_ as sum
from wirearrow.protojson import read_ndjson
from wirearrow.schema import Schema
from wirearrow.spec import TranscodeSpec
from wirearrow.transcoder import Stats, Transcoder

__all__ = [
    "Column",
    "DecodeError",
    "EncodeError",
    "ParserCache",
    "PathError",
    "PlanConfig",
    "PlanError",
    "Schema",
    "SchemaError",
    "Stats",
    "TranscodeSpec",
    "Transcoder",
    "WirearrowError",
    "abs",
    "add",
    "age",
    "and_",
    "bucket",
    "buffer_pool",
    "cast_float",
    "cast_int",
    "cast_string",
    "ceil",
    "coalesce",
    "coerce",
    "concat",
    "cond",
    "date_part",
    "default",
    "distinct",
    "div",
    "enum_name",
    "epoch_to_date",
    "eq",
    "extract_day",
    "extract_hour",
    "extract_minute",
    "extract_month",
    "extract_second",
    "extract_year",
    "floor",
    "frame_records",
    "ge",
    "gt",
    "has",
    "hash",
    "le",
    "len",
    "list_concat",
    "lit",
    "load_plan",
    "lower",
    "lt",
    "map_key",
    "mask",
    "max",
    "min",
    "mod",
    "mul",
    "ne",
    "not_",
    "or_",
    "path",
    "read_delimited",
    "read_ndjson",
    "round",
    "strptime",
    "sub",
    "sum",
    "to_duration",
    "to_timestamp",
    "trim",
    "trim_prefix",
    "trim_suffix",
    "try_strptime",
    "upper",
    "write_parquet",
]
__version__ = "0.1.0"
