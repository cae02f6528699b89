"""Ray Data integration: protobuf records in a Dataset -> Arrow rows, on a laptop or a cluster.

    import wirearrow.ray as war

    ds = war.read_delimited("s3://bucket/events/", framing="varint")  # column "value"
    job = war.transcode(ds, "transforms/openrtb_flat.yaml", on_error="dead_letter")
    job.rows.write_parquet("out/rows")  # job.rows: a ray.data.Dataset; this runs the job
    job.job_stats()                     # records in / ok / failed, rows out: one execution's
    job.dead_letters                    # a Dataset of the bad records, with the reason

For pipelines of your own: the ``map_batches`` steps :class:`Transcode`, :class:`Encode`
and :class:`ToJson` (the plan shipped once by :func:`put_plan`), :class:`DelimitedDatasource`
and :class:`DelimitedDatasink`; :func:`write_table` lands rows and dead letters in an
Iceberg or Delta table, exactly once (docs/tables.md). This package imports Ray; ``import
wirearrow`` never does. The guide: docs/ray.md.
"""

from __future__ import annotations

from wirearrow.ray.datasource import DelimitedDatasource, read_delimited
from wirearrow.ray.encode import (
    DelimitedDatasink,
    Encode,
    ToJson,
    WriteStats,
    encode,
    write_delimited,
)
from wirearrow.ray.job import PoolSize, TranscodeResult, pool_size, put_plan
from wirearrow.ray.ledger import BatchResult, JobStats, Ledger, WorkerStats
from wirearrow.ray.profiles import pull_from_ray, share_with_ray
from wirearrow.ray.tables import TableWriteResult, write_table
from wirearrow.ray.transcode import Transcode, batch_key, transcode

__all__ = [
    "BatchResult", "DelimitedDatasink", "DelimitedDatasource", "Encode", "JobStats", "Ledger",
    "PoolSize", "TableWriteResult", "ToJson", "Transcode", "TranscodeResult", "WorkerStats",
    "WriteStats", "batch_key", "encode", "pool_size", "pull_from_ray", "put_plan",
    "read_delimited", "share_with_ray", "transcode", "write_delimited", "write_table",
]
