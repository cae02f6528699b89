"""Independent readers of the tables the sinks write: DuckDB's iceberg and delta extensions.

The extensions come from the pip packages ``duckdb-extension-iceberg`` / ``-delta`` / ``-avro``
(the test group installs them; there is no network to INSTALL them from DuckDB's site), loaded
by path. A reader that is not the writer's own library is what tells a table is readable.
"""

from __future__ import annotations

import glob
import importlib.util
import os

import duckdb
import pyarrow as pa


def _extension(name: str) -> str:
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"duckdb_extension_{name} is not installed (the test group has it)")
    root = next(iter(spec.submodule_search_locations))
    found = glob.glob(os.path.join(root, "extensions", "*", f"{name}.duckdb_extension"))
    if not found:
        raise RuntimeError(f"duckdb_extension_{name} holds no extension file under {root}")
    return found[0]


def connect() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the avro, iceberg and delta extensions loaded."""
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for name in ("avro", "iceberg", "delta"):
        con.execute(f"LOAD '{_extension(name)}'")
    return con


def iceberg_scan(metadata_location: str, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """The rows of the Iceberg table at ``metadata_location`` (its current metadata file)."""
    con = con or connect()
    return con.sql(f"SELECT * FROM iceberg_scan('{metadata_location}')").to_arrow_table()


def delta_scan(path: str, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """The rows of the Delta table in ``path``."""
    con = con or connect()
    return con.sql(f"SELECT * FROM delta_scan('{path}')").to_arrow_table()


def except_all(con: duckdb.DuckDBPyConnection, a: str, b: str) -> tuple[int, int]:
    """Rows of query ``a`` not in ``b`` and of ``b`` not in ``a``, duplicates counted
    (EXCEPT ALL both ways): (0, 0) when they hold the same multiset of rows."""
    left = con.sql(f"SELECT count(*) FROM (({a}) EXCEPT ALL ({b}))").fetchone()
    right = con.sql(f"SELECT count(*) FROM (({b}) EXCEPT ALL ({a}))").fetchone()
    assert left is not None and right is not None
    return int(left[0]), int(right[0])
