"""Ray Data integration: protobuf records in a Dataset -> Arrow rows, on a laptop or a cluster.

    import wirearrow.ray as war

    ds = war.read_delimited("s3://bucket/events/", framing="varint")  # column "value"
    out = war.transcode(ds, "transforms/openrtb_flat.yaml", on_error="dead_letter")
    out.write_parquet("out/rows")      # out is a ray.data.Dataset (the rows)
    out.job_stats()                    # records in / ok / failed, rows out: one execution's
    out.dead_letters                   # a second Dataset: the bad records, with the reason

The pieces, for users who compose their own pipeline:

* :class:`Transcode` -- a callable class for ``Dataset.map_batches``: builds its transcoder
  once per actor (the plan arrives as an ``ObjectRef`` from :func:`put_plan`), takes and
  returns pyarrow Tables and never turns a record into a Python object.
* :func:`read_delimited` / :class:`DelimitedDatasource` -- files of length-delimited records
  on any filesystem pyarrow supports, large files split across read tasks at record
  boundaries.
* :class:`Encode` / :func:`encode` -- the write half: Arrow rows -> a column of protobuf
  records (plain or Confluent-framed, e.g. for Kafka), bad rows as dead letters;
  :func:`write_delimited` / :class:`DelimitedDatasink` -- rows -> files of framed records
  (varint, u32le/be, TFRecord).
* :func:`transcode` -- the one-call path: plan shipped once; Ray tasks (a Transcode per
  worker process) or an actor pool sized for the cluster; dead letters and counts gathered
  from every worker.

Modules: ``transcode`` (Transcode, transcode(), put_plan, actor pool sizing), ``ledger``
(counts and dead letters of a job), ``datasource`` (reading framed files), ``runtime``
(the lazy Ray import). Ray is imported lazily: ``import wirearrow.ray`` does not import
``ray`` until a function that needs it runs. docs/ray.md is the guide (resources, the
2-CPU note, dead letters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wirearrow.ray.datasource import read_delimited
from wirearrow.ray.encode import Encode, WriteStats, encode, write_delimited
from wirearrow.ray.ledger import BatchResult, JobStats, Ledger, WorkerStats
from wirearrow.ray.protojson import ToJson
from wirearrow.ray.transcode import (
    DEFAULT_BATCH_SIZE,
    PoolSize,
    Transcode,
    TranscodeResult,
    batch_key,
    pool_size,
    put_plan,
    transcode,
)

if TYPE_CHECKING:
    from wirearrow.ray.datasource import DelimitedDatasource
    from wirearrow.ray.encode import DelimitedDatasink

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "BatchResult",
    "DelimitedDatasink",
    "DelimitedDatasource",
    "Encode",
    "JobStats",
    "Ledger",
    "PoolSize",
    "ToJson",
    "Transcode",
    "TranscodeResult",
    "WorkerStats",
    "WriteStats",
    "batch_key",
    "encode",
    "pool_size",
    "put_plan",
    "read_delimited",
    "transcode",
    "write_delimited",
]


def __getattr__(name: str) -> Any:
    # PEP 562: the Datasource class is built (importing Ray) on first access.
    if name == "DelimitedDatasource":
        from wirearrow.ray import datasource

        return datasource.DelimitedDatasource
    if name == "DelimitedDatasink":
        from wirearrow.ray import encode as encode_module

        return encode_module.DelimitedDatasink
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
