"""Tables, not loose files: protobuf records into Iceberg and Delta tables, exactly once.

    import wirearrow as wa
    from wirearrow import tables

    out = wa.Output(format="iceberg", table="events.bids", warehouse="warehouse",
                    partition=("day(timestamp)",))
    with tables.TableWriter.open(out) as writer:   # the rows' table and the dead letters'
        start = writer.resume()                    # where the last commit got to: seek there
        for values, partition, offsets in batches:
            decoded = tc.decode(values, record_index=True)
            writer.write(decoded, tables.kafka_key("bids", partition), offsets)

The pieces:

* :class:`TableSink` (``IcebergSink``, ``DeltaSink``): one table, the commit protocol
  (``prepare`` -> a picklable :class:`FileWriter` that writes data files anywhere ->
  ``commit`` of the staged files with the job's :class:`Positions`, atomically).
* :class:`TableWriter`: decoded batches into a rows table and a dead-letter table, commit
  every N batches, records a restarted job sees again skipped table by table.
* :class:`Positions`, :func:`kafka_key`, :func:`file_key`, :func:`batch_key`: where a job
  is in its sources, as its commits record it; :class:`SourceColumns`: the columns of rows
  that say where each came from; :func:`resume`: where a job starts again.

pyiceberg and deltalake are imported when a sink of theirs is made. docs/tables.md is the
guide (Python, command line, YAML, Ray, Beam; readers; guarantees).
"""

from __future__ import annotations

from wirearrow.output import Output
from wirearrow.tables.delta import DeltaFileWriter, DeltaSink
from wirearrow.tables.iceberg import IcebergFileWriter, IcebergSink, open_catalog
from wirearrow.tables.positions import (
    Positions,
    SourceColumns,
    batch_key,
    file_key,
    kafka_key,
    source_columns,
)
from wirearrow.tables.sink import (
    Commit,
    CommitConflict,
    FileWriter,
    Staged,
    TableSchemaError,
    TableSink,
)
from wirearrow.tables.writer import TableWriter

__all__ = [
    "Commit",
    "CommitConflict",
    "DeltaFileWriter",
    "DeltaSink",
    "FileWriter",
    "IcebergFileWriter",
    "IcebergSink",
    "Positions",
    "SourceColumns",
    "Staged",
    "TableSchemaError",
    "TableSink",
    "TableWriter",
    "batch_key",
    "file_key",
    "kafka_key",
    "open_catalog",
    "open_sink",
    "open_sinks",
    "resume",
    "source_columns",
]


def open_sink(output: Output, table: str | None = None) -> TableSink:
    """The sink of ``output``'s table (or of ``table``, another table of the same catalog
    and settings: the dead letters')."""
    if not output.is_table:
        raise ValueError(f"an {output.format} output is files, not a table")
    name = table if table is not None else output.table
    if name is None:
        raise ValueError(f"an {output.format} output needs its table")
    if output.format == "iceberg":
        return IcebergSink(
            name,
            catalog=output.catalog,
            warehouse=output.warehouse,
            partition=output.partition if table is None else (),
            app_id=output.app_id,
            compression=output.compression,
            row_group_size=output.row_group_size,
        )
    return DeltaSink(
        name,
        partition=output.partition if table is None else (),
        app_id=output.app_id,
        compression=output.compression,
        row_group_size=output.row_group_size,
    )


def open_sinks(output: Output, dead_letters: bool = True) -> tuple[TableSink, TableSink | None]:
    """The rows' sink and the dead letters' (None when ``dead_letters`` is False)."""
    rows = open_sink(output)
    if not dead_letters:
        return rows, None
    if output.format == "iceberg" and isinstance(rows, IcebergSink):
        # the same catalog connection for both tables
        dead = IcebergSink(
            output.dead_letter_table or "",
            catalog=rows.catalog,
            app_id=output.app_id,
            compression=output.compression,
            row_group_size=output.row_group_size,
        )
        return rows, dead
    return rows, open_sink(output, output.dead_letter_table)


def resume(output: Output, dead_letters: bool = True) -> Positions:
    """Where a job writing ``output`` (and its dead letters, unless ``dead_letters`` is
    False) starts again: each source's lower position of the two tables (a Kafka job:
    ``resume(out).kafka_offsets()`` is ``read_kafka``'s ``start_offset``)."""
    rows, dead = open_sinks(output, dead_letters)
    return TableWriter(rows, dead).resume()
