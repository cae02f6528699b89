"""Apache Beam transforms: protobuf records to Arrow record batches, Beam rows and Parquet,
and back to protobuf records and files. Plans are resolved where the pipeline is built
(``wirearrow.plans.resolve_plan``), and compiled once per worker process. docs/beam.md is
the guide; ``WriteToTable`` lands batches in Iceberg and Delta tables (docs/tables.md).
``ReadDelimited`` and ``WriteToParquet`` are deprecated names."""

from wirearrow.beam.batches import RecordArray
from wirearrow.beam.encode import EncodeDeadLetter, EncodeResult, FromArrow, FromRows, ToJson
from wirearrow.beam.late import SplitLate
from wirearrow.beam.parquet import WriteDeadLetters, WriteToParquet, WriteToParquetFiles
from wirearrow.beam.read import ReadDelimited, ReadFromDelimited
from wirearrow.beam.rows import RowsResult, RowsToArrow, ToRows, message_row_type, row_type
from wirearrow.beam.tables import WriteToTable
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
    "WriteToTable",
    "message_row_type",
    "row_type",
]
