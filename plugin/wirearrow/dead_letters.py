"""Dead letters: the records a decode could not turn into rows, kept whole with why.

One row per bad record (``DEAD_LETTER_SCHEMA``): its position in the batch (``index``),
the byte inside the record where decoding failed (``offset``), the field path, the reason
and the record's bytes (``raw``; null for a null record). Records decoded with ``carry=``
keep their carried values in a struct column ``carry``. The engines add where a record came
from (a file and offset, a Kafka partition and offset) beside these columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from wirearrow.errors import DecodeError
from wirearrow.field_ids import FIELD_ID, with_field_id

__all__ = ["CARRY", "DEAD_LETTER_SCHEMA", "concat_dead_letters", "dead_letter_table", "with_rows"]

# Field ids 1..5 (docs/evolution.md): a dead-letter table follows its columns by id too;
# the structs with_rows adds have the id of their name, as any named column.
DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field(name, t, nullable=nullable, metadata={FIELD_ID: str(i).encode()})
        for i, (name, t, nullable) in enumerate(
            [
                ("index", pa.int64(), False),
                ("offset", pa.int64(), False),
                ("path", pa.utf8(), False),
                ("reason", pa.utf8(), False),
                ("raw", pa.binary(), True),
            ],
            start=1,
        )
    ]
)
CARRY = "carry"  # the column of the values carried by each bad record
_EMPTY = DEAD_LETTER_SCHEMA.empty_table()


def dead_letter_table(
    failures: Sequence[tuple[DecodeError, bytes | None]], carried: pa.Table | None = None
) -> pa.Table:
    """The dead letters of ``failures`` in record order; with ``carried`` (one row per input
    record) each one's carried values as the struct column ``carry``."""
    if not failures:
        return _EMPTY
    rows = sorted(((e.index, e.offset, e.path, e.reason, raw) for e, raw in failures), key=_first)
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(DEAD_LETTER_SCHEMA)
    table = pa.table(
        [pa.array(c, type=f.type) for c, f in zip(columns, DEAD_LETTER_SCHEMA, strict=True)],
        schema=DEAD_LETTER_SCHEMA,
    )
    return table if carried is None else with_rows(table, CARRY, carried)


def with_rows(dead: pa.Table, name: str, rows: pa.Table) -> pa.Table:
    """``dead`` with the struct column ``name``: the row of ``rows`` at each dead letter's
    ``index`` (where a record came from, what it carried); ``dead`` as it is when ``rows``
    has no column. The struct has the field id of its name, as any named column."""
    if not rows.num_columns:
        return dead
    values = rows.take(dead.column("index"))
    columns = [c.combine_chunks() for c in values.columns]
    struct = pa.StructArray.from_arrays(columns, fields=list(values.schema))
    return dead.append_column(with_field_id(pa.field(name, struct.type), (name,)), struct)


def concat_dead_letters(tables: Sequence[pa.Table]) -> pa.Table:
    """Dead letters of several decodes as one table; those decoded without ``carry=`` have
    a null ``carry``, and calls that carried other columns share one struct (missing
    fields null)."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return _EMPTY
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive").combine_chunks()


def _first(row: tuple) -> int:
    return row[0]
