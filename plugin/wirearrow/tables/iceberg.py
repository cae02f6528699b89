"""The Iceberg sink, on pyiceberg: SQL catalogs (SQLite, Postgres) or any catalog's
properties, the plan's field ids as the table's, a partition spec from the plan, one
snapshot per commit with the job's positions in its summary.

The table is created empty and given the plan's schema with its own ids (Iceberg's create
would renumber them; the schema update keeps them), so a protobuf field keeps its column
through renames, and a new schema version's fields are added under their ids. Data files
are written by pyiceberg's own writer for the table's schema (field ids, statistics,
partition splitting), anywhere; the commit is a fast append of those files with
``wirearrow.positions.APP_ID`` in the snapshot summary, after checking that the table's
newest snapshot of this app id still records what this sink expects.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

import pyarrow as pa

from wirearrow.counts import Counts
from wirearrow.errors import PlanError
from wirearrow.field_ids import (
    FIELD_ID,
    field_id_of,
    with_children,
    with_field_id,
    with_unique_ids,
)
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

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema as IcebergSchema
    from pyiceberg.table import Table

__all__ = ["IcebergFileWriter", "IcebergSink", "open_catalog"]

DEFAULT_CATALOG_NAME = "default"  # pyiceberg's examples' name: a catalog opened as they show finds the tables
COMMIT_ATTEMPTS = 10  # a commit that lost the race to another writer is tried again on the new base
_SQL_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "mssql", "oracle")


def _import_pyiceberg() -> None:
    try:
        import pyiceberg  # noqa: F401
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "the Iceberg sink needs pyiceberg: pip install 'wirearrow[iceberg]' "
            "(pyiceberg[sql-sqlite,pyarrow,pyiceberg-core])"
        ) from err


def _warehouse_uri(warehouse: str) -> str:
    if "://" in warehouse:
        return warehouse
    path = os.path.abspath(os.path.expanduser(warehouse))
    os.makedirs(path, exist_ok=True)
    return "file://" + path


def open_catalog(catalog: str | Mapping[str, str] | None, warehouse: str | None = None) -> Catalog:
    """The pyiceberg catalog of ``catalog`` (see ``wirearrow.Output.catalog``).

    None: a SQL catalog in ``WAREHOUSE/catalog.db`` (SQLite); a database URL: a SQL catalog
    there; ``http(s)://``: a REST catalog; a mapping: those properties, as they are, to
    ``pyiceberg.catalog.load_catalog`` (``name`` picks the catalog's name); another string:
    a catalog of that name configured in .pyiceberg.yaml or the environment."""
    _import_pyiceberg()
    from pyiceberg.catalog import load_catalog

    extra = {"warehouse": _warehouse_uri(warehouse)} if warehouse else {}
    if catalog is None:
        if warehouse is None:
            raise ValueError("an Iceberg output needs a catalog or a warehouse (for a SQLite catalog)")
        path = os.path.abspath(os.path.expanduser(warehouse))
        if "://" in warehouse:
            raise ValueError(
                f"warehouse {warehouse!r} is not a local directory: give the catalog (its URL "
                "or properties) too"
            )
        return _sql_catalog(f"sqlite:///{path}/catalog.db", extra)
    if isinstance(catalog, Mapping):
        props = {str(k): str(v) for k, v in catalog.items()}
        name = props.pop("name", DEFAULT_CATALOG_NAME)
        if props.get("type") == "sql" or (
            "type" not in props and urlparse(props.get("uri", "")).scheme.split("+")[0] in _SQL_SCHEMES
        ):
            props.setdefault("type", "sql")
        return load_catalog(name, **{**props, **extra})
    scheme = urlparse(catalog).scheme.split("+")[0]
    if scheme in _SQL_SCHEMES:
        return _sql_catalog(catalog, extra)
    if scheme in ("http", "https"):
        return load_catalog(DEFAULT_CATALOG_NAME, type="rest", uri=catalog, **extra)
    return load_catalog(catalog, **extra)


def _sql_catalog(uri: str, extra: Mapping[str, str]) -> Catalog:
    from pyiceberg.catalog.sql import SqlCatalog

    if uri.startswith("sqlite:///"):
        folder = os.path.dirname(uri[len("sqlite:///") :])
        if folder:
            os.makedirs(folder, exist_ok=True)
    if "warehouse" not in extra:
        raise ValueError(f"a SQL catalog ({uri}) needs a warehouse: where the tables' files go")
    return SqlCatalog(DEFAULT_CATALOG_NAME, uri=uri, **extra)


# ---- schemas ----------------------------------------------------------------------------


def _children(t: pa.DataType) -> list[tuple[str, pa.Field]]:
    """A nested type's fields under Iceberg's names for them (element, key, value)."""
    if pa.types.is_struct(t):
        return [(t.field(i).name, t.field(i)) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [("key", t.key_field), ("value", t.item_field)]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [("element", t.value_field)]
    return []


def with_table_ids(schema: pa.Schema, by_name: Mapping[str, int]) -> pa.Schema:
    """``schema`` with a field id on every field: its own (``PARQUET:field_id``: wirearrow's
    rows carry one everywhere), else the id of the table's column of the same path
    (``by_name``: rows of another producer, matched by name), else the id wirearrow gives a
    named column of that path (wirearrow.field_ids)."""

    def visit(f: pa.Field, scheme: pa.Field, path: str) -> pa.Field:
        children = [
            visit(child, theirs, f"{path}.{name}")
            for (name, child), (_, theirs) in zip(_children(f.type), _children(scheme.type), strict=True)
        ]
        t = with_children(f.type, children) if children else f.type
        fid = field_id_of(f) or by_name.get(path) or field_id_of(scheme)
        metadata = {**(f.metadata or {}), FIELD_ID: str(fid).encode()}
        return pa.field(f.name, t, nullable=f.nullable, metadata=metadata)

    fields = [visit(f, with_field_id(f, (f.name,)), f.name) for f in schema]
    out = pa.schema(fields, metadata=schema.metadata)
    # The ids wirearrow gave the rows are unique already; a column numbered here (no id of
    # its own, none in the table) is the one moved off a hashed id it shares, as the
    # compiler moves a deeper field (wirearrow.field_ids.with_unique_ids).
    numbered = {
        f.name for f in schema
        if field_id_of(f) is None and f.name not in by_name
    }  # fmt: skip
    try:
        return with_unique_ids(out, movable=numbered)
    except PlanError as err:
        raise TableSchemaError(str(err)) from None


def _widens(old: Any, new: Any) -> bool:
    """Does Iceberg allow promoting ``old`` to ``new``?"""
    from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType

    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    return (
        isinstance(old, DecimalType) and isinstance(new, DecimalType)
        and old.scale == new.scale and new.precision > old.precision
    )  # fmt: skip


def merge_schemas(table: IcebergSchema | None, incoming: IcebergSchema) -> tuple[Any, bool]:
    """The table's schema grown to hold ``incoming`` (matched by field id): new fields
    added (nested ones too), types widened as Iceberg allows; a narrower incoming type is
    written into the wider column. Columns only the table has stay. Returns (the merged
    StructType's fields, changed?). Raises TableSchemaError for a type change Iceberg cannot
    follow."""
    from pyiceberg.types import ListType, MapType, NestedField, StructType

    changed = False

    def merge_type(old: Any, new: Any, where: str) -> Any:
        nonlocal changed
        if isinstance(old, StructType) and isinstance(new, StructType):
            return StructType(*merge_fields(list(old.fields), list(new.fields), where))
        if isinstance(old, ListType) and isinstance(new, ListType):
            return ListType(
                old.element_id, merge_type(old.element_type, new.element_type, f"{where}.element"),
                element_required=old.element_required,
            )  # fmt: skip
        if isinstance(old, MapType) and isinstance(new, MapType):
            return MapType(
                old.key_id, merge_type(old.key_type, new.key_type, f"{where}.key"),
                old.value_id, merge_type(old.value_type, new.value_type, f"{where}.value"),
                value_required=old.value_required,
            )  # fmt: skip
        if old == new or _widens(new, old):
            return old
        if _widens(old, new):
            changed = True
            return new
        raise TableSchemaError(
            f"column {where}: the table holds {old}, the rows have {new}; Iceberg widens only "
            "int to long, float to double and decimal precision"
        )

    def merge_fields(old: list[Any], new: list[Any], where: str) -> list[Any]:
        nonlocal changed
        by_id = {f.field_id: f for f in new}
        out = []
        for f in old:
            g = by_id.pop(f.field_id, None)
            if g is None:
                out.append(f)
                continue
            out.append(
                NestedField(
                    f.field_id, f.name, merge_type(f.field_type, g.field_type, _join(where, f.name)),
                    required=f.required and g.required, doc=f.doc or g.doc,
                )
            )
            if f.required and not g.required:
                changed = True
        names = {f.name for f in old}
        for g in by_id.values():  # fields the table has not seen
            if g.name in names:
                raise TableSchemaError(
                    f"column {_join(where, g.name)}: the rows' field id {g.field_id} is not the "
                    "table's column of that name; a name taken by another field cannot come back "
                    "under a new id"
                )
            changed = True
            out.append(NestedField(g.field_id, g.name, g.field_type, required=False, doc=g.doc))
        return out

    if table is None:
        return list(incoming.fields), True
    return merge_fields(list(table.fields), list(incoming.fields), ""), changed


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


# ---- the sink ----------------------------------------------------------------------------


class IcebergFileWriter(FileWriter):
    """Writes data files of one Iceberg table at one schema (picklable: the table's
    metadata and file IO travel, no catalog connection)."""

    def __init__(self, metadata: Any, io: Any, source: pa.Schema, target: pa.Schema) -> None:
        self.metadata = metadata
        self.io = io
        self.source = source  # the rows' schema, as given
        self.target = target  # the storable schema, with the table's field ids

    def write(self, data: pa.Table | pa.RecordBatch) -> Staged:
        from pyiceberg.io.pyarrow import _dataframe_to_data_files

        table = storable(_select(data, self.source), self.target)
        if not table.num_rows:
            return Staged("iceberg", (), 0)
        # pyiceberg's own writer, as its Table.append and Ray's write_iceberg use it: the
        # table's schema and field ids, statistics, one file per partition and target size.
        files = tuple(
            _dataframe_to_data_files(
                table_metadata=self.metadata, df=table, io=self.io, write_uuid=uuid.uuid4()
            )
        )
        return Staged(
            "iceberg",
            files,
            sum(f.record_count for f in files),
            sum(f.file_size_in_bytes for f in files),
        )


def _select(data: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    if not table.schema.equals(schema):
        missing = [n for n in schema.names if n not in table.schema.names]
        if missing:
            raise ValueError(f"the rows lack columns of the prepared schema: {', '.join(missing)}")
        table = table.select(schema.names).cast(schema)
    return table


class IcebergSink(TableSink):
    """An Iceberg table ``NAMESPACE.NAME`` and one job's commits to it.

    ``catalog`` / ``warehouse``: see :func:`open_catalog` (or pass an opened pyiceberg
    catalog). ``partition``: the partition spec's fields (``day(event_time)``,
    ``bucket(16, id)``, ``truncate(4, name)``, a column: identity), applied when the table
    is created, or as a new spec when it differs from the table's. ``properties``: table
    properties at creation (the Parquet codec and row group size are set from
    ``compression`` and ``row_group_size``)."""

    format = "iceberg"

    def __init__(
        self,
        table: str,
        *,
        catalog: Catalog | str | Mapping[str, str] | None = None,
        warehouse: str | None = None,
        partition: Sequence[str] = (),
        app_id: str = "wirearrow",
        compression: str = "zstd",
        row_group_size: int | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(app_id)
        _import_pyiceberg()
        if "." not in table.strip("."):
            raise ValueError(f"an Iceberg table is NAMESPACE.NAME, not {table!r}")
        self.identifier = table
        # an opened catalog (anything with load_table), else what open_catalog makes of it
        self.catalog: Catalog = (
            cast("Catalog", catalog)
            if hasattr(catalog, "load_table")
            else open_catalog(catalog, warehouse)
        )
        self.partition = tuple(partition)
        self.properties = {
            "write.parquet.compression-codec": "uncompressed" if compression == "none" else compression,
            **({"write.parquet.row-group-limit": str(row_group_size)} if row_group_size else {}),
            **dict(properties or {}),
        }
        self._table: Table | None = None

    @property
    def name(self) -> str:
        return self.identifier

    def table(self, refresh: bool = True) -> Table:
        """The pyiceberg Table (reloaded from the catalog unless ``refresh`` is False)."""
        if self._table is None or refresh:
            self._table = self.catalog.load_table(self.identifier)
        return self._table

    def exists(self) -> bool:
        return self.catalog.table_exists(self.identifier)

    def scan(self) -> pa.Table:
        return self.table().scan().to_arrow()

    # -- positions -------------------------------------------------------------------------

    def _read_positions(self) -> Positions:
        if not self.exists():
            return Positions()
        return _positions_of(self.table(), self.app_id)

    # -- schema ----------------------------------------------------------------------------

    def _create(self) -> Table:
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError
        from pyiceberg.schema import Schema

        namespace = self.identifier.rsplit(".", 1)[0]
        with contextlib.suppress(NamespaceAlreadyExistsError):  # another job's, meanwhile
            self.catalog.create_namespace_if_not_exists(namespace)
        try:
            # Empty: Iceberg's create would renumber the plan's ids; the schema comes as an
            # update (prepare), which keeps them.
            return self.catalog.create_table(self.identifier, schema=Schema(), properties=self.properties)
        except TableAlreadyExistsError:
            return self.catalog.load_table(self.identifier)

    def prepare(self, schema: pa.Schema) -> IcebergFileWriter:
        from pyiceberg.exceptions import CommitFailedException

        target, _ = storable_schema(schema, "iceberg")
        for _attempt in range(COMMIT_ATTEMPTS):
            table = self.table() if self.exists() else self._create()
            target_ids, updated = self._evolve(table, target)
            if not updated:
                self._table = table
                return IcebergFileWriter(table.metadata, table.io, _source(schema, target), target_ids)
            try:
                self.catalog.commit_table(table, *updated)
            except CommitFailedException:
                continue  # another writer changed the table: merge again on its new schema
        raise CommitConflict(f"{self.identifier}: the schema could not be committed")

    def _evolve(self, table: Table, target: pa.Schema) -> tuple[pa.Schema, tuple | None]:
        """The rows' schema with the table's ids, and the (requirements, updates) that make
        the table hold it (None: it does already)."""
        from pyiceberg.io.pyarrow import pyarrow_to_schema
        from pyiceberg.schema import Schema, index_by_name
        from pyiceberg.table.update import (
            AddPartitionSpecUpdate,
            AddSchemaUpdate,
            AssertCurrentSchemaId,
            AssertDefaultSpecId,
            AssertLastAssignedFieldId,
            SetCurrentSchemaUpdate,
            SetDefaultSpecUpdate,
        )

        current = table.schema()
        with_ids = with_table_ids(target, index_by_name(current))
        incoming = pyarrow_to_schema(with_ids)
        fields, changed = merge_schemas(current if current.fields else None, incoming)
        updates: list[Any] = []
        # (pyiceberg's models take their field names; mypy sees only their JSON aliases)
        requirements: list[Any] = [
            AssertCurrentSchemaId(current_schema_id=table.metadata.current_schema_id),  # type: ignore[call-arg]
            AssertLastAssignedFieldId(last_assigned_field_id=table.metadata.last_column_id),  # type: ignore[call-arg]
        ]
        merged = current
        if changed:
            schema_id = max(s.schema_id for s in table.metadata.schemas) + 1
            merged = Schema(*fields, schema_id=schema_id)
            updates += [AddSchemaUpdate(schema=merged), SetCurrentSchemaUpdate(schema_id=-1)]  # type: ignore[call-arg]
        spec = self._spec(merged, table)
        if spec is not None:
            requirements.append(AssertDefaultSpecId(default_spec_id=table.metadata.default_spec_id))  # type: ignore[call-arg]
            updates += [AddPartitionSpecUpdate(spec=spec), SetDefaultSpecUpdate(spec_id=-1)]  # type: ignore[call-arg]
        if not updates:
            return with_ids, None
        return with_ids, (tuple(requirements), tuple(updates))

    def _spec(self, schema: IcebergSchema, table: Table) -> Any:
        """The partition spec to add (None: the table's default is already it)."""
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.transforms import parse_transform

        if not self.partition:
            return None
        fields = []
        next_field_id = max(1000, (table.metadata.last_partition_id or 999) + 1)
        current = table.spec()
        existing = {(f.source_id, str(f.transform)): f for f in current.fields}
        for text in self.partition:
            transform_name, width, column = parse_partition(text)
            try:
                source = schema.find_field(column)
            except ValueError:
                raise TableSchemaError(f"partition {text!r}: no column {column!r} in the table") from None
            spelled = f"{transform_name}[{width}]" if width is not None else transform_name
            transform = parse_transform(spelled)
            if not transform.can_transform(source.field_type):
                raise TableSchemaError(
                    f"partition {text!r}: {transform_name} does not apply to {column} ({source.field_type})"
                )
            same = existing.get((source.field_id, str(transform)))
            if same is not None:
                fields.append(same)
                continue
            suffix = {"identity": "", "bucket": "_bucket", "truncate": "_trunc"}.get(
                transform_name, f"_{transform_name}"
            )
            name = column.replace(".", "_") + suffix
            fields.append(PartitionField(source.field_id, next_field_id, transform, name))
            next_field_id += 1
        if [(f.source_id, str(f.transform)) for f in current.fields] == [
            (f.source_id, str(f.transform)) for f in fields
        ]:
            return None
        spec_id = max(s.spec_id for s in table.metadata.partition_specs) + 1
        return PartitionSpec(*fields, spec_id=spec_id)

    # -- commits ---------------------------------------------------------------------------

    def _commit(
        self, staged: Sequence[Staged], positions: Positions, counts: Counts | None,
        commit_id: str | None,
    ) -> Commit:  # fmt: skip
        from pyiceberg.exceptions import CommitFailedException

        expected = self._expected or Positions()
        files = [f for s in staged for f in s.files]
        rows = sum(s.rows for s in staged)
        id_key = f"{COMMIT_ID_KEY}.{self.app_id}"
        properties = {f"{POSITIONS_KEY}.{self.app_id}": positions.to_json()}
        if commit_id is not None:
            properties[id_key] = commit_id
        if counts is not None:
            properties.update(
                {f"wirearrow.{name.replace('_', '-')}": str(v) for name, v in zip(
                    ("records_in", "records_ok", "records_failed", "rows_out", "dead_letters"),
                    (counts.records_in, counts.records_ok, counts.records_failed, counts.rows_out,
                     counts.dead_letters), strict=True)}
            )  # fmt: skip
        if not files and positions == expected and commit_id is None:
            return Commit(self.identifier, None, 0, 0, positions, counts)
        if not self.exists():
            self._create()
        for attempt in range(COMMIT_ATTEMPTS):
            table = self.table()
            if commit_id is not None and _has_property(table, id_key, commit_id):
                return Commit(self.identifier, None, 0, 0, positions, counts)  # committed before
            now = _positions_of(table, self.app_id)
            if now != expected:
                raise CommitConflict(
                    f"{self.identifier}: another job of app id {self.app_id!r} committed since "
                    f"this one read its positions ({expected.to_json()} -> {now.to_json()}); read "
                    "them again and skip what they cover"
                )
            try:
                with (
                    table.transaction() as txn,
                    txn.update_snapshot(snapshot_properties=properties).fast_append() as append,
                ):
                    for f in files:
                        append.append_data_file(f)
            except CommitFailedException:
                time.sleep(min(0.05 * 2**attempt, 2.0))
                continue  # another writer's commit came first: append on top of it
            snapshot = self.table().current_snapshot()
            return Commit(
                self.identifier,
                snapshot.snapshot_id if snapshot is not None else None,
                rows,
                len(files),
                positions,
                counts,
            )
        raise CommitConflict(f"{self.identifier}: {COMMIT_ATTEMPTS} commits lost the race to other writers")


def _source(schema: pa.Schema, target: pa.Schema) -> pa.Schema:
    """The rows' columns that the table stores (empty structs are dropped)."""
    keep = set(target.names)
    return pa.schema([f for f in schema if f.name in keep], metadata=schema.metadata)


def _has_property(table: Table, key: str, value: str) -> bool:
    """Does one of the newest COMMIT_ID_DEPTH snapshots (the current one's ancestors) have
    ``key`` = ``value`` in its summary?"""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return False
    for snapshot in itertools.islice(ancestors_of(current, table.metadata), COMMIT_ID_DEPTH):
        summary = snapshot.summary
        if summary is not None and summary.additional_properties.get(key) == value:
            return True
    return False


def _positions_of(table: Table, app_id: str) -> Positions:
    """The app id's positions at its newest snapshot among the current one's ancestors."""
    from pyiceberg.table.snapshots import ancestors_of

    key = f"{POSITIONS_KEY}.{app_id}"
    current = table.current_snapshot()
    if current is None:
        return Positions()
    for snapshot in ancestors_of(current, table.metadata):
        summary = snapshot.summary
        value = summary.additional_properties.get(key) if summary is not None else None
        if value is not None:
            return Positions.from_json(value)
    return Positions()
