"""Output: where rows go, as one frozen, picklable value, every option declared once.

A YAML plan's ``output:`` section, the command line's output flags (``-o``, ``--to``,
``--table``, ``--catalog``, ...) and the table sinks (``wirearrow.tables``) all take this
one value under the same names. Each field carries its meaning, its choices and its
command-line flag in its metadata (:data:`FIELDS`): the YAML keys, the flags and their help
derive from it, and every field and combination is checked here (a ValueError naming
them all), so no reader checks them again.

Three formats:

* ``parquet``: files. ``path`` is a directory (one file per input) or ``FILE.parquet``.
* ``iceberg``: an Apache Iceberg table ``NAMESPACE.NAME`` in a catalog: the SQL catalog on a
  SQLite file by default (``warehouse`` alone: ``WAREHOUSE/catalog.db``), a database URL
  (``postgresql+psycopg2://...``), or any catalog's properties passed through to pyiceberg.
* ``delta``: a Delta Lake table, ``table`` its directory or URI.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wirearrow.parquet import PARQUET_COMPRESSIONS

__all__ = ["FIELDS", "OUTPUT_FORMATS", "TABLE_FORMATS", "Output", "output_table", "partition_problem"]

OUTPUT_FORMATS = ("parquet", "iceberg", "delta")
TABLE_FORMATS = ("iceberg", "delta")
# Iceberg's partition transforms (the spec's names); a bare column name is `identity`.
PARTITION_TRANSFORMS = ("identity", "year", "month", "day", "hour", "bucket", "truncate", "void")
_PARTITION = re.compile(
    r"^\s*(?:(?P<func>[a-z]+)\s*\(\s*(?:(?P<arg>\d+)\s*,\s*)?(?P<col>[^()\s,][^(),]*?)\s*\)"
    r"|(?P<bare>[^()\s,][^(),]*?))\s*$"
)
# An app id names whose positions a commit records: it goes into property keys and
# Delta app ids, so it stays a simple name.
_APP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def _field(default: Any, doc: str, *, flag: str | None = None, **meta: Any) -> Any:
    return dataclasses.field(default=default, metadata={"doc": doc, "flag": flag, **meta})


def partition_problem(text: object) -> str | None:
    """Why ``text`` is not a partition field (``day(event_time)``, ``bucket(16, id)``,
    ``truncate(4, name)``, or a column name: identity); None when it is one."""
    if not isinstance(text, str) or not text.strip():
        return f"a partition field is a string such as 'day(event_time)', not {text!r}"
    m = _PARTITION.match(text)
    if m is None:
        return f"{text!r} is not a partition field (e.g. 'day(event_time)', 'bucket(16, id)', 'id')"
    func = m.group("func")
    if func is None:
        return None
    if func not in PARTITION_TRANSFORMS:
        return (
            f"{text!r}: unknown transform {func!r}; one of {', '.join(PARTITION_TRANSFORMS)}"
        )
    needs_arg = func in ("bucket", "truncate")
    if needs_arg and m.group("arg") is None:
        return f"{text!r}: {func} takes a width first, e.g. {func}(16, column)"
    if not needs_arg and m.group("arg") is not None:
        return f"{text!r}: {func} takes only a column"
    if needs_arg and int(m.group("arg")) < 1:
        return f"{text!r}: the width must be at least 1"
    return None


def parse_partition(text: str) -> tuple[str, int | None, str]:
    """``(transform, width or None, column path)`` of a checked partition field."""
    m = _PARTITION.match(text)
    assert m is not None, text
    if m.group("bare") is not None:
        return "identity", None, m.group("bare").strip()
    arg = m.group("arg")
    return m.group("func"), (int(arg) if arg is not None else None), m.group("col").strip()


@dataclass(frozen=True)
class Output:
    """Where rows go: Parquet files, an Iceberg table or a Delta table. Every field is
    optional; :meth:`replace` derives variants (checked again)."""

    format: str = _field(
        "parquet",
        "`parquet` files, an `iceberg` table or a `delta` table",
        flag="--to",
        choices=OUTPUT_FORMATS,
    )
    path: str | None = _field(
        None,
        "parquet: a directory (one NAME.parquet per input) or FILE.parquet (every input in "
        "one file)",
        flag="--output",
    )
    table: str | None = _field(
        None,
        "iceberg: the table's identifier NAMESPACE.NAME; delta: the table's directory or URI. "
        "Created on the first commit from the plan's schema (field ids kept), evolved when a "
        "schema version adds or widens fields",
        flag="--table",
    )
    catalog: str | Mapping[str, str] | None = _field(
        None,
        "iceberg: the catalog. A database URL (sqlite:///PATH.db, "
        "postgresql+psycopg2://USER:PASS@HOST:PORT/DB) is pyiceberg's SQL catalog; a "
        "mapping is a catalog's properties, passed to pyiceberg's load_catalog as they are "
        "(type, uri, warehouse, credentials...); another string names a catalog configured "
        "in .pyiceberg.yaml. Default: a SQLite catalog in the warehouse (WAREHOUSE/catalog.db)",
        flag="--catalog",
    )
    warehouse: str | None = _field(
        None,
        "iceberg: where a SQL catalog keeps the tables' files (a directory or URI); default: "
        "the catalog's own warehouse property",
        flag="--warehouse",
    )
    partition: tuple[str, ...] = _field(
        (),
        "iceberg: the partition spec, one field each, e.g. `day(event_time)`, "
        "`bucket(16, id)`, `truncate(4, name)` or a column (identity); delta: partition "
        "columns (identity only). Column paths may name struct fields (`device.geo.country`)",
        flag="--partition",
    )
    dead_letters: str | None = _field(
        None,
        "iceberg / delta: the table of the dead letters (NAMESPACE.NAME / a directory), "
        "committed with the same positions as the rows; default: the table's name with "
        "`_dead_letters` appended",
        flag="--dead-letter-table",
    )
    app_id: str = _field(
        "wirearrow",
        "iceberg / delta: the name a job's commits record their source positions under (Kafka "
        "offsets, file offsets); jobs writing the same sources into one table with different "
        "plans need different ones",
        flag="--app-id",
    )
    commit_every: int | None = _field(
        None,
        "iceberg / delta: commit after this many batches (each commit one atomic snapshot with "
        "its positions); default: once per input file (the command line), per job (Ray)",
        flag="--commit-every",
    )
    compression: str = _field(
        "zstd",
        "the Parquet codec of the files written",
        flag="--compression",
        choices=PARQUET_COMPRESSIONS,
    )
    row_group_size: int | None = _field(
        None,
        "rows per Parquet row group; default: the writer's (128,000 for parquet files)",
        flag="--row-group-size",
    )

    def __post_init__(self) -> None:
        if isinstance(self.partition, str):
            object.__setattr__(self, "partition", (self.partition,))
        elif not isinstance(self.partition, tuple):
            object.__setattr__(self, "partition", tuple(self.partition))
        if isinstance(self.compression, str):
            object.__setattr__(self, "compression", self.compression.lower())
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        """Every problem of this output (empty: it is valid)."""
        out: list[str] = []
        if self.format not in OUTPUT_FORMATS:
            out.append(f"format must be one of {', '.join(OUTPUT_FORMATS)}, not {self.format!r}")
            return out
        if self.compression not in PARQUET_COMPRESSIONS:
            out.append(
                f"compression must be one of {', '.join(PARQUET_COMPRESSIONS)}, not "
                f"{self.compression!r}"
            )
        for name in ("path", "table", "warehouse", "dead_letters"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                out.append(f"{name} must be a non-empty string, not {value!r}")
        if self.catalog is not None and not isinstance(self.catalog, str | Mapping):
            out.append(f"catalog must be a URL, a name or a mapping of properties, not {self.catalog!r}")
        for name in ("row_group_size", "commit_every"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                out.append(f"{name} must be an integer of at least 1, not {value!r}")
        if not isinstance(self.app_id, str) or not _APP_ID.match(self.app_id):
            out.append(
                f"app_id must be a name of letters, digits, '_', '.', ':' or '-', not {self.app_id!r}"
            )
        out += [why for p in self.partition if (why := partition_problem(p)) is not None]
        table_only = ("table", "catalog", "warehouse", "dead_letters", "commit_every")
        if self.format == "parquet":
            out += [f"{name} is for a table output (format iceberg or delta)" for name in table_only
                    if getattr(self, name) is not None]  # fmt: skip
            if self.partition:
                out.append("partition is for a table output (format iceberg or delta)")
            return out
        if self.path is not None:
            out.append(f"path is for parquet output; an {self.format} output names its table")
        if self.format == "delta":
            for name in ("catalog", "warehouse"):
                if getattr(self, name) is not None:
                    out.append(f"{name} is for an iceberg table; a delta table is its directory")
            for p in self.partition:
                if partition_problem(p) is None and parse_partition(p)[0] != "identity":
                    out.append(f"delta partitions by columns, not transforms: {p!r}")
        if self.format == "iceberg":
            for name in ("table", "dead_letters"):
                value = getattr(self, name)
                if isinstance(value, str) and value and "." not in value.strip("."):
                    out.append(f"{name} {value!r} must be NAMESPACE.NAME")
        return out

    @property
    def is_table(self) -> bool:
        """An Iceberg or Delta table (commits, positions), not files."""
        return self.format in TABLE_FORMATS

    @property
    def dead_letter_table(self) -> str | None:
        """The dead letters' table: ``dead_letters``, else the table's (a Parquet output:
        its path's) with ``_dead_letters`` appended."""
        name = self.table if self.is_table else self.path
        if self.dead_letters is not None or name is None:
            return self.dead_letters
        return name.rstrip("/") + "_dead_letters"

    def replace(self, **changes: Any) -> Output:
        """This output with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, output: Output | None = None, **changes: Any) -> Output:
        """``output`` (default: Parquet) with ``changes`` applied (None values ignored)."""
        unknown = sorted(set(changes) - set(FIELDS))
        if unknown:
            raise TypeError(f"unknown output options: {', '.join(unknown)}")
        changes = {k: v for k, v in changes.items() if v is not None}
        if output is None:
            return cls(**changes)
        if not isinstance(output, Output):
            raise TypeError(f"output must be a wirearrow.Output, not {type(output).__name__}")
        return output.replace(**changes) if changes else output


# name -> field, in declaration order: the YAML keys of `output:` and the command line's flags.
FIELDS: Mapping[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(Output)}


def output_table() -> str:
    """Every field of :class:`Output` as the Markdown table of docs/tables.md: the YAML key
    (``output:``), the command line's flag, the default and what it means."""
    rows = ["| key (`output:`) | flag | default | meaning |", "|---|---|---|---|"]
    for name, f in FIELDS.items():
        flag = f.metadata.get("flag") or ""
        if name == "path":
            flag = f"-o, {flag}"
        default = "none" if f.default in (None, ()) else f"`{f.default}`"
        doc = f.metadata["doc"]
        choices = f.metadata.get("choices")
        if choices:
            doc += f" (one of {', '.join(f'`{c}`' for c in choices)})"
        rows.append(f"| `{name}` | `{flag}` | {default} | {doc} |")
    return "\n".join(rows)
