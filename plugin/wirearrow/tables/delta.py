"""The Delta sink, on deltalake (delta-rs): data files written by pyarrow (anywhere: a Ray
worker, a Beam bundle), committed by delta-rs as one log entry whose app transactions
record the job's positions.

Each source key is a Delta app transaction ``APP_ID/KEY`` whose version is the key's next
position (``DeltaTable.transaction_version``): Delta's own record for idempotent writes,
kept in checkpoints; delta-rs refuses two concurrent commits of the same app id. The whole
map is also in the commit info (``wirearrow.positions.APP_ID``), to list the keys.

Where Delta differs from Iceberg: columns are matched by name (no field ids in Delta
without column mapping, which delta-rs does not write), and the data files carry no
``PARQUET:field_id`` either: DuckDB's delta reader takes the ids of a table without column
mapping for ids of its own and reads every such column as null; a new schema version adds columns (nested ones too) but cannot widen one
(delta-rs has no type widening): such rows are refused with the column named; partitions
are columns (identity), not transforms.
"""

from __future__ import annotations

import datetime
import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from wirearrow.counts import Counts
from wirearrow.field_ids import without_field_ids
from wirearrow.output import parse_partition
from wirearrow.tables.positions import COMMIT_ID_KEY, POSITIONS_KEY, Positions
from wirearrow.tables.sink import (
    COMMIT_ID_DEPTH,
    Commit,
    CommitConflict,
    FileWriter,
    Staged,
    TableSchemaError,
    TableSink,
)
from wirearrow.tables.types import storable, storable_schema

__all__ = ["DeltaFileWriter", "DeltaSink"]

_HISTORY_LIMITS = (16, 256, 4096, None)  # commits read back, more each time, to find the positions


def _import_deltalake() -> Any:
    try:
        import deltalake
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError("the Delta sink needs deltalake: pip install 'wirearrow[delta]'") from err
    return deltalake


def _uri(table: str) -> str:
    return table if "://" in table else os.path.abspath(os.path.expanduser(table))


class DeltaFileWriter(FileWriter):
    """Writes Parquet data files into a Delta table's directory (picklable)."""

    def __init__(
        self,
        uri: str,
        source: pa.Schema,
        target: pa.Schema,
        partition_by: Sequence[str],
        compression: str,
        row_group_size: int | None,
        storage_options: Mapping[str, str] | None,
    ) -> None:
        self.uri = uri
        self.source = source
        self.target = target
        self.partition_by = tuple(partition_by)
        self.compression = compression
        self.row_group_size = row_group_size
        self.storage_options = dict(storage_options or {})

    def write(self, data: pa.Table | pa.RecordBatch) -> Staged:
        from deltalake.transaction import AddAction

        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        table = storable(table.select(self.source.names).cast(self.source), self.target)
        if not table.num_rows:
            return Staged("delta", (), 0)
        fs, root = _filesystem(self.uri)
        actions = []
        nbytes = 0
        for values, part in _partitions(table, self.partition_by):
            folder = "/".join(f"{quote(c, safe='')}={quote(_path_value(v), safe='')}" for c, v in values.items())
            name = f"part-{uuid.uuid4().hex}-c000.{self.compression}.parquet"
            relative = f"{folder}/{name}" if folder else name
            path = f"{root}/{relative}"
            if folder:
                fs.create_dir(f"{root}/{folder}", recursive=True)
            # Delta keeps partition values in the log and the paths, not in the files.
            body = part.drop_columns(list(self.partition_by)) if self.partition_by else part
            with fs.open_output_stream(path) as out:
                pq.write_table(
                    body, out, compression=self.compression,
                    row_group_size=self.row_group_size or None,
                )  # fmt: skip
            size = fs.get_file_info(path).size
            nbytes += size
            actions.append(
                AddAction(
                    relative, size,
                    {c: _log_value(v) for c, v in values.items()},
                    int(time.time() * 1000), True,
                    json.dumps(_stats(body)),
                )
            )
        return Staged("delta", tuple(actions), table.num_rows, nbytes)


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in uri:
        os.makedirs(uri, exist_ok=True)
        return pafs.LocalFileSystem(), uri
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/")


def _partitions(table: pa.Table, columns: Sequence[str]) -> list[tuple[dict[str, Any], pa.Table]]:
    if not columns:
        return [({}, table)]
    keys = table.select(list(columns))
    groups = keys.group_by(list(columns), use_threads=False).aggregate([])
    out = []
    for row in groups.to_pylist():
        mask = None
        for c in columns:
            v = row[c]
            cond = pc.is_null(table.column(c)) if v is None else pc.equal(table.column(c), pa.scalar(v, table.schema.field(c).type))
            cond = pc.fill_null(cond, False)
            mask = cond if mask is None else pc.and_(mask, cond)
        out.append(({c: row[c] for c in columns}, table.filter(mask)))
    return out


def _log_value(v: Any) -> str | None:
    """A partition value as Delta's log writes it."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return v.isoformat(sep=" ", timespec="microseconds")
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.decode("latin-1")
    return str(v)


def _path_value(v: Any) -> str:
    return "__HIVE_DEFAULT_PARTITION__" if v is None else (_log_value(v) or "")


def _stats(table: pa.Table) -> dict[str, Any]:
    """The file's Delta statistics: row and null counts (no min/max: never a wrong skip)."""
    nulls = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        if not pa.types.is_nested(column.type):
            nulls[name] = column.null_count
    return {"numRecords": table.num_rows, "nullCount": nulls}


class DeltaSink(TableSink):
    """A Delta table (its directory or URI) and one job's commits to it.

    ``partition``: partition columns (top-level, identity), used when the table is created.
    ``storage_options``: passed to delta-rs (object-store credentials)."""

    format = "delta"

    def __init__(
        self,
        table: str,
        *,
        partition: Sequence[str] = (),
        app_id: str = "wirearrow",
        compression: str = "zstd",
        row_group_size: int | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(app_id)
        _import_deltalake()
        self.uri = _uri(table)
        self.given = table
        self.partition = tuple(parse_partition(p)[2] for p in partition)
        self.compression = compression
        self.row_group_size = row_group_size
        self.storage_options = dict(storage_options) if storage_options else None

    @property
    def name(self) -> str:
        return self.given

    def table(self) -> Any:
        """The deltalake DeltaTable, at its newest version."""
        from deltalake import DeltaTable

        return DeltaTable(self.uri, storage_options=self.storage_options)

    def exists(self) -> bool:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(self.uri, storage_options=self.storage_options)

    def scan(self) -> pa.Table:
        table = self.table()
        if "://" not in self.uri:
            # A local table's files through pyarrow's own file system: through deltalake's
            # (Python callbacks) a process aborted at exit about once in 40 runs, after its
            # work was done ("terminate called without an active exception"; deltalake 1.6,
            # pyarrow 25): 0 in 80 reads this way.
            files = pafs.SubTreeFileSystem(os.path.abspath(self.uri), pafs.LocalFileSystem())
            return table.to_pyarrow_dataset(filesystem=files).to_table()
        return pa.table(table.to_pyarrow_table())

    # -- positions -------------------------------------------------------------------------

    def _read_positions(self) -> Positions:
        if not self.exists():
            return Positions()
        return self._positions(self.table())

    def _positions(self, dt: Any) -> Positions:
        key = f"{POSITIONS_KEY}.{self.app_id}"
        found: Positions | None = None
        for limit in _HISTORY_LIMITS:
            history = dt.history(limit)
            for entry in history:
                if key in entry:
                    found = Positions.from_json(entry[key])
                    break
            if found is not None or limit is None or len(history) < limit:
                break
        if found is None:
            return Positions()
        # The app transactions are the log's own record (kept in checkpoints): they decide.
        exact = {}
        for k in found.next:
            version = dt.transaction_version(f"{self.app_id}/{k}")
            exact[k] = version if version is not None else 0
        return Positions(exact)

    # -- schema ----------------------------------------------------------------------------

    def prepare(self, schema: pa.Schema) -> DeltaFileWriter:
        from deltalake import DeltaTable, write_deltalake
        from deltalake import Schema as DeltaSchema

        # No field ids anywhere: not in the table's schema (delta-rs keeps field metadata
        # there), not in the files (see the module's doc).
        target = without_field_ids(storable_schema(schema, "delta")[0])
        for column in self.partition:
            if column not in target.names:
                raise TableSchemaError(f"partition column {column!r} is not a column of the rows")
            if pa.types.is_nested(target.field(column).type):
                raise TableSchemaError(f"partition column {column!r} is not a scalar column")
        if not self.exists():
            DeltaTable.create(
                self.uri, DeltaSchema.from_arrow(target), mode="ignore",
                partition_by=list(self.partition) or None, storage_options=self.storage_options,
            )  # fmt: skip
        dt = self.table()
        table_schema = pa.schema(dt.schema().to_arrow())
        merged, added = _merge(table_schema, target)
        if added:
            # A commit of the schema alone (no files): delta-rs merges nested fields too.
            write_deltalake(
                self.uri, merged.empty_table(), mode="append", schema_mode="merge",
                storage_options=self.storage_options,
            )  # fmt: skip
            dt = self.table()
            table_schema = pa.schema(dt.schema().to_arrow())
        file_schema = _conformed(target, table_schema)
        partition_by = list(dt.metadata().partition_columns)
        return DeltaFileWriter(
            self.uri, _source(schema, target), file_schema, partition_by, self.compression,
            self.row_group_size, self.storage_options,
        )  # fmt: skip

    # -- commits ---------------------------------------------------------------------------

    def _commit(
        self, staged: Sequence[Staged], positions: Positions, counts: Counts | None,
        commit_id: str | None,
    ) -> Commit:  # fmt: skip
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import CommitProperties, Transaction

        expected = self._expected or Positions()
        actions = [a for s in staged for a in s.files]
        rows = sum(s.rows for s in staged)
        if not actions and positions == expected and commit_id is None:
            return Commit(self.name, None, 0, 0, positions, counts)
        if not self.exists():
            raise ValueError(f"{self.name}: prepare() creates the table before a commit")
        dt = self.table()
        id_key = f"{COMMIT_ID_KEY}.{self.app_id}"
        if commit_id is not None and any(
            entry.get(id_key) == commit_id for entry in dt.history(COMMIT_ID_DEPTH)
        ):
            return Commit(self.name, None, 0, 0, positions, counts)  # committed before
        now = self._positions(dt)
        if now != expected:
            raise CommitConflict(
                f"{self.name}: another job of app id {self.app_id!r} committed since this one "
                f"read its positions ({expected.to_json()} -> {now.to_json()}); read them again "
                "and skip what they cover"
            )
        metadata: dict[str, Any] = {f"{POSITIONS_KEY}.{self.app_id}": positions.to_json()}
        if commit_id is not None:
            metadata[id_key] = commit_id
        if counts is not None:
            metadata["wirearrow.counts"] = json.dumps(dict(zip(
                ("records_in", "records_ok", "records_failed", "rows_out", "dead_letters"),
                (counts.records_in, counts.records_ok, counts.records_failed, counts.rows_out,
                 counts.dead_letters), strict=True)))  # fmt: skip
        transactions = [
            Transaction(f"{self.app_id}/{k}", v)
            for k, v in positions.next.items()
            if v != expected[k] or k not in expected.next
        ]
        properties = CommitProperties(custom_metadata=metadata, app_transactions=transactions)
        schema = pa.schema(dt.schema().to_arrow())
        try:
            dt.create_write_transaction(
                actions, "append", schema, list(dt.metadata().partition_columns) or None,
                commit_properties=properties,
            )  # fmt: skip
        except CommitFailedError as err:
            # delta-rs retried appends itself; a conflict left is another commit of this
            # app id (its transaction) in between.
            raise CommitConflict(f"{self.name}: {err}") from err
        return Commit(self.name, self.table().version(), rows, len(actions), positions, counts)


def _source(schema: pa.Schema, target: pa.Schema) -> pa.Schema:
    keep = set(target.names)
    return pa.schema([f for f in schema if f.name in keep], metadata=schema.metadata)


def _merge(table: pa.Schema, rows: pa.Schema) -> tuple[pa.Schema, bool]:
    """The table's schema with the rows' new fields (nested ones too): (merged, added?).
    A type that differs other than a narrower integer or float into a wider column is an
    error (delta-rs cannot widen)."""
    added = False

    def merge_type(old: pa.DataType, new: pa.DataType, where: str) -> pa.DataType:
        nonlocal added
        if pa.types.is_struct(old) and pa.types.is_struct(new):
            fields = {old.field(i).name: old.field(i) for i in range(old.num_fields)}
            out = []
            for i in range(old.num_fields):
                f = old.field(i)
                j = new.get_field_index(f.name)
                if j >= 0:
                    f = f.with_type(merge_type(f.type, new.field(j).type, f"{where}.{f.name}"))
                out.append(f)
            for i in range(new.num_fields):
                g = new.field(i)
                if g.name not in fields:
                    added = True
                    out.append(g.with_nullable(True))
            return pa.struct(out)
        if (pa.types.is_list(old) or pa.types.is_large_list(old)) and (
            pa.types.is_list(new) or pa.types.is_large_list(new)
        ):
            item = merge_type(old.value_type, new.value_type, f"{where}.element")
            return pa.large_list(old.value_field.with_type(item)) if pa.types.is_large_list(old) else pa.list_(old.value_field.with_type(item))
        if pa.types.is_map(old) and pa.types.is_map(new):
            key = merge_type(old.key_type, new.key_type, f"{where}.key")
            value = merge_type(old.item_type, new.item_type, f"{where}.value")
            return pa.map_(old.key_field.with_type(key), old.item_field.with_type(value))
        if _same(old, new) or _narrower(new, old):
            return old
        raise TableSchemaError(
            f"column {where.lstrip('.')}: the Delta table holds {old}, the rows have {new}; "
            "delta-rs cannot widen a column's type (write a new table, or an Iceberg one)"
        )

    struct = merge_type(pa.struct(list(table)), pa.struct(list(rows)), "")
    return pa.schema([struct.field(i) for i in range(struct.num_fields)]), added


def _same(a: pa.DataType, b: pa.DataType) -> bool:
    if a.equals(b):
        return True
    # delta-rs reads strings and binaries back as their large or view forms
    families = (
        (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view),
        (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view),
    )
    for family in families:
        if any(f(a) for f in family) and any(f(b) for f in family):
            return True
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return a.unit == b.unit and (a.tz is None) == (b.tz is None)
    return False


def _narrower(small: pa.DataType, big: pa.DataType) -> bool:
    ints = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
    if small in ints and big in ints:
        return ints.index(small) <= ints.index(big)
    return small == pa.float32() and big == pa.float64()


def _conformed(rows: pa.Schema, table: pa.Schema) -> pa.Schema:
    """The rows' schema with each column typed as the table's column (the data files are
    written in the table's types; field metadata, ids included, kept)."""

    def conform(f: pa.Field, t: pa.DataType) -> pa.Field:
        if pa.types.is_struct(f.type) and pa.types.is_struct(t):
            children = []
            for i in range(f.type.num_fields):
                c = f.type.field(i)
                j = t.get_field_index(c.name)
                children.append(conform(c, t.field(j).type) if j >= 0 else c)
            return f.with_type(pa.struct(children))
        if _same(f.type, t) and not f.type.equals(t) and not pa.types.is_timestamp(t):
            return f  # the rows' string / binary form: the files are the same
        return f.with_type(t) if not pa.types.is_nested(t) else _nested(f, t)

    def _nested(f: pa.Field, t: pa.DataType) -> pa.Field:
        if pa.types.is_list(f.type) or pa.types.is_large_list(f.type):
            item = conform(f.type.value_field, t.value_type)
            return f.with_type(pa.large_list(item) if pa.types.is_large_list(f.type) else pa.list_(item))
        if pa.types.is_map(f.type):
            key = conform(f.type.key_field, t.key_type)
            value = conform(f.type.item_field, t.item_type)
            return f.with_type(pa.map_(key, value))
        return f

    return pa.schema([conform(f, table.field(f.name).type) for f in rows], metadata=rows.metadata)
