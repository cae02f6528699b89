"""Apache Beam transforms: protobuf records to Arrow record batches, Beam rows and Parquet,
and back to protobuf records and files.

    import apache_beam as beam
    import wirearrow.beam as wab

    with beam.Pipeline(options=opts) as p:
        records = p | wab.ReadFromDelimited("gs://bucket/events/*.bin", framing="varint")
        result = records | wab.ToArrow("transforms/openrtb_flat.yaml", on_error="dead_letter")
        result.batches | wab.WriteToParquetFiles("gs://bucket/out/", schema=result.schema)
        result.dead_letters | wab.WriteDeadLetters("gs://bucket/dead/")  # Parquet

Plans are resolved where the pipeline is built (``wirearrow.plans.resolve_plan``: one error
policy everywhere, docs/errors.md); the PTransforms wire the graph, and the work happens in
DoFns whose transcoder travels as its spec and is compiled once per worker process.
docs/beam.md is the guide. ``ReadDelimited`` and ``WriteToParquet`` are deprecated names."""

from wirearrow.beam.batches import RecordArray
from wirearrow.beam.encode import EncodeDeadLetter, EncodeResult, FromArrow, FromRows, ToJson
from wirearrow.beam.late import SplitLate
from wirearrow.beam.parquet import WriteDeadLetters, WriteToParquet, WriteToParquetFiles
from wirearrow.beam.read import ReadDelimited, ReadFromDelimited
from wirearrow.beam.rows import RowsResult, RowsToArrow, ToRows, message_row_type, row_type
from wirearrow.beam.transcode import ArrowResult, DeadLetter, ToArrow
from wirearrow.beam.write import WriteToDelimited

__all__ = [
    "ArrowResult",
    "DeadLetter",
    "EncodeDeadLetter",
    "EncodeResult",
    "FromArrow",
    "FromRows",
    "ReadDelimited",
    "ReadFromDelimited",
    "RecordArray",
    "RowsResult",
    "RowsToArrow",
    "SplitLate",
    "ToArrow",
    "ToJson",
    "ToRows",
    "WriteDeadLetters",
    "WriteToDelimited",
    "WriteToParquet",
    "WriteToParquetFiles",
    "message_row_type",
    "row_type",
]
