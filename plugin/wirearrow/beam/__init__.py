"""Apache Beam transforms: protobuf records to Arrow record batches, Beam rows and Parquet,
and back to protobuf records and files.

    import apache_beam as beam
    import wirearrow.beam as wab

    with beam.Pipeline(options=opts) as p:
        records = p | wab.ReadFromDelimited("gs://bucket/events/*.bin", framing="varint")
        result = records | wab.ToArrow("transforms/openrtb_flat.yaml", batch_size=8192)
        result.batches | wab.WriteToParquetFiles("gs://bucket/out/", schema=result.schema)
        result.dead_letters | wab.WriteDeadLetters("gs://bucket/dead/")  # Parquet

Modules: ``transcode`` (ToArrow, RecordArray batches, dead letters), ``rows`` (ToRows,
row_type), ``schemas`` (message_row_type: Beam schemas of protobuf messages, RowsToArrow),
``encode`` (FromArrow, FromRows: back to protobuf records), ``batches`` (Arrow batches for
batched DoFns), ``read`` (ReadFromDelimited), ``write`` (WriteToDelimited: framed files,
TFRecord included), ``parquet`` (WriteToParquetFiles, WriteDeadLetters), ``protojson``
(ToJson: rows back to protojson text), ``late`` (SplitLate: records later than
the allowed lateness as counted dead letters). ``ReadDelimited`` and ``WriteToParquet`` are the
deprecated old names (the latter is also Beam's own transform's). The public PTransforms
only wire the graph; the work happens in private DoFns whose heavy state (the compiled
plan) is built in ``setup()`` on the worker. docs/beam.md is the guide."""

import wirearrow.beam.batches  # noqa: F401 (registers the Arrow batch converter)
from wirearrow.beam.encode import EncodeDeadLetter, EncodeResult, FromArrow, FromRows
from wirearrow.beam.late import SplitLate
from wirearrow.beam.parquet import WriteDeadLetters, WriteToParquet, WriteToParquetFiles
from wirearrow.beam.protojson import ToJson
from wirearrow.beam.read import ReadDelimited, ReadFromDelimited
from wirearrow.beam.rows import RowsResult, ToRows, row_type
from wirearrow.beam.schemas import RowsToArrow, message_row_type
from wirearrow.beam.transcode import ArrowResult, DeadLetter, RecordArray, ToArrow
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
