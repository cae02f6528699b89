"""Values carried from each record onto its rows: ``decode(records, carry=...)`` (a Kafka
offset, an ingestion time, a source file), and the extra columns a decode can add
(``record_index``, ``schema_id``).

The values are taken once per batch with one Arrow ``take`` on the rows' record positions;
a bad record's carried values go to its dead letter's ``carry`` struct instead.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pyarrow as pa

from wirearrow.field_ids import field_id_of, with_field_id, with_unique_ids

__all__ = [
    "RECORD_INDEX",
    "SCHEMA_ID",
    "carry_table",
    "check_carried",
    "extra_column_name",
    "extra_fields",
    "with_row_columns",
]

RECORD_INDEX = "_record_index"  # record_index=True: each row's record position
SCHEMA_ID = "_schema_id"  # schema_id=True: each row's Confluent schema id


def carry_table(carry: object, messages: object) -> pa.Table:
    """``transcode(carry=)`` as a Table: given as one, a RecordBatch, a mapping of name ->
    array, or the names of columns of ``messages`` (a table)."""
    if isinstance(carry, pa.Table):
        return carry
    if isinstance(carry, pa.RecordBatch):
        return pa.Table.from_batches([carry])
    if isinstance(carry, list | tuple) and all(isinstance(name, str) for name in carry):
        if not isinstance(messages, pa.Table | pa.RecordBatch):
            raise TypeError(
                "carry= as column names takes them from a table of records; with other "
                "records give the values (a pa.Table or a mapping of name -> array)"
            )
        missing = [name for name in carry if name not in messages.schema.names]
        if missing:
            raise KeyError(f"carry= names columns the records do not have: {missing}")
        table = messages.select(list(carry))
        return table if isinstance(table, pa.Table) else pa.Table.from_batches([table])
    if isinstance(carry, dict) or hasattr(carry, "keys"):
        try:
            return pa.table(carry)
        except (TypeError, ValueError, pa.ArrowException) as err:
            raise TypeError(f"carry= values are not Arrow columns of one length: {err}") from None
    if hasattr(carry, "__arrow_c_stream__") or hasattr(carry, "__arrow_c_array__"):
        return pa.table(carry)  # a Polars / DuckDB / nanoarrow table
    raise TypeError(
        "carry= takes a pa.Table, a RecordBatch, a mapping of name -> array or a list of "
        f"column names, not {type(carry).__name__}"
    )


def extra_column_name(
    option: str, value: bool | str, default: str, taken: Collection[str]
) -> str | None:
    """The name of an extra column (``record_index=True`` -> ``_record_index``; a string:
    that name; False: None), which must not be one of ``taken``."""
    name = default if value is True else value
    if name is False:
        return None
    if not isinstance(name, str):
        raise ValueError(f"{option} must be True or a column name, not {value!r}")
    if name in taken:
        raise ValueError(f"{option} column {name!r} is already a column of the plan: give another name")
    return name


def check_carried(carried: pa.Table, taken: set[str | None]) -> None:
    """carry= columns need names of their own."""
    clash = sorted(name for name in carried.column_names if name in taken)
    if clash or len(set(carried.column_names)) != carried.num_columns:
        raise ValueError(
            f"carry= columns must have names of their own, not in the output: {clash}"
            if clash
            else f"carry= has duplicate column names: {carried.column_names}"
        )


def extra_fields(
    schema: pa.Schema, index_name: str | None, id_name: str | None, carried: pa.Schema | None
) -> list[pa.Field]:
    """The fields of the extra columns after ``schema``'s: each row's record position, its
    schema id, then the carried columns. When ``schema`` carries field ids, so do they:
    each the id of its name (wirearrow.field_ids), checked against the plan's."""
    fields = []
    if index_name is not None:
        fields.append(pa.field(index_name, pa.int64(), nullable=False))
    if id_name is not None:
        fields.append(pa.field(id_name, pa.int64(), nullable=False))
    if carried is not None:
        fields.extend(carried)
    if fields and len(schema) and field_id_of(schema.field(0)) is not None:
        fields = [with_field_id(f, (f.name,)) for f in fields]
        both = with_unique_ids(pa.schema([*schema, *fields]), movable={f.name for f in fields})
        fields = list(both)[len(schema) :]
    return fields


def with_row_columns(
    rows: pa.RecordBatch,
    fields: list[pa.Field],
    records: np.ndarray,
    index_name: str | None,
    schema_ids: np.ndarray | None,
    id_name: str | None,
    carried: pa.Table | None,
) -> pa.RecordBatch:
    """``rows`` with the extra columns of ``fields`` (:func:`extra_fields`) after the
    plan's: each row's record position, its schema id, then the carried values;
    ``records``: each row's record (input position)."""
    columns = []
    if index_name is not None:
        columns.append(pa.array(records))
    if id_name is not None:
        columns.append(pa.array(schema_ids))
    if carried is not None:
        values = carried.take(pa.array(records))
        columns.extend(c.combine_chunks() for c in values.columns)
    return pa.RecordBatch.from_arrays(
        [*rows.columns, *columns], schema=pa.schema([*rows.schema, *fields])
    )
