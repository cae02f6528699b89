"""Apache Beam transforms: protobuf records to Arrow record batches, Beam rows and Parquet.

    import apache_beam as beam
    import wirearrow.beam as wab

    with beam.Pipeline(options=opts) as p:
        records = p | wab.ReadDelimited("gs://bucket/events/*.bin", framing="varint")
        result = records | wab.ToArrow("transforms/openrtb_flat.yaml", batch_size=8192)
        result.batches | wab.WriteToParquet("gs://bucket/out/", schema=result.schema)
        result.dead_letters | wab.WriteDeadLetters("gs://bucket/dead/")  # Parquet

Modules: ``transcode`` (ToArrow, RecordArray batches, dead letters), ``rows`` (ToRows,
row_type), ``read`` (ReadDelimited), ``parquet`` (WriteToParquet, WriteDeadLetters),
``protojson`` (ToJson: rows back to protojson text), ``late`` (SplitLate: records later
than the allowed lateness as counted dead letters). The public PTransforms
only wire the graph; the work happens in private DoFns whose heavy state (the compiled
plan) is built in ``setup()`` on the worker. docs/beam.md is the guide.
"""

from wirearrow.beam.late import SplitLate
from wirearrow.beam.parquet import WriteDeadLetters, WriteToParquet
from wirearrow.beam.protojson import ToJson
from wirearrow.beam.read import ReadDelimited
from wirearrow.beam.rows import RowsResult, ToRows, row_type
from wirearrow.beam.transcode import ArrowResult, DeadLetter, RecordArray, ToArrow

__all__ = [
    "ArrowResult",
    "DeadLetter",
    "ReadDelimited",
    "RecordArray",
    "RowsResult",
    "SplitLate",
    "ToArrow",
    "ToJson",
    "ToRows",
    "WriteDeadLetters",
    "WriteToParquet",
    "row_type",
]
