"""Where rows go is declared once (wirearrow.Output): the YAML keys, the command line's flags
and docs/tables.md's table derive from its fields, and every field and combination is
checked by the value itself."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import wirearrow as wa
from wirearrow.arguments import OUTPUT_FLAGS, add_output_arguments, out_flags, output_of
from wirearrow.output import FIELDS, output_table

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_docs_table_is_the_generated_one() -> None:
    text = (DOCS / "tables.md").read_text()
    start = text.index("<!-- output-table:")
    start = text.index("-->\n", start) + len("-->\n")
    end = text.index("\n<!-- end output-table -->")
    assert text[start:end] == output_table(), (
        "docs/tables.md is out of date; its table is now:\n" + output_table()
    )


def test_output_checks_fields_and_combinations() -> None:
    assert wa.Output().format == "parquet"
    out = wa.Output(format="iceberg", table="ns.t", warehouse="/w", partition="day(ts)")
    assert out.partition == ("day(ts)",) and out.is_table
    assert out.dead_letter_table == "ns.t_dead_letters"
    assert wa.Output(format="delta", table="/d/t/").dead_letter_table == "/d/t_dead_letters"
    bad = {
        "format must be one of parquet, iceberg, delta": dict(format="csv"),
        "table 'bids' must be NAMESPACE.NAME": dict(format="iceberg", table="bids"),
        "path is for parquet output": dict(format="delta", table="t", path="x"),
        "catalog is for an iceberg table": dict(format="delta", table="t", catalog="sqlite:///x"),
        "delta partitions by columns, not transforms": dict(format="delta", table="t", partition=["day(ts)"]),
        "bucket takes a width first": dict(format="iceberg", table="a.b", partition=["bucket(id)"]),
        "table is for a table output": dict(table="a.b"),
        "commit_every must be an integer of at least 1": dict(format="delta", table="t", commit_every=0),
        "app_id must be a name": dict(format="delta", table="t", app_id="a b"),
    }
    for message, kw in bad.items():
        with pytest.raises(ValueError, match=message):
            wa.Output(**kw)
    with pytest.raises(TypeError, match="unknown output options: shards"):
        wa.Output.of(shards=3)
    assert wa.Output.of(out, commit_every=5, catalog=None).commit_every == 5



def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_output_arguments(parser)
    return parser.parse_args(list(argv))


def test_flags_are_the_fields() -> None:
    assert set(OUTPUT_FLAGS) == set(FIELDS)  # every field has its flag
    plan = wa.Output(format="iceberg", table="ns.t", warehouse="/w", partition=("day(ts)",),
                     compression="snappy")  # fmt: skip
    # a flag replaces its key; the rest is the plan's
    out = output_of(parse("--table", "ns.u", "--commit-every", "5"), plan)
    assert out == plan.replace(table="ns.u", commit_every=5)
    assert output_of(parse("--partition", "a", "--partition", "bucket(4, b)"), plan).partition == (
        "a", "bucket(4, b)",
    )  # fmt: skip
    # another format starts from its defaults (the codec kept)
    out = output_of(parse("--to", "delta", "--table", "t"), plan)
    assert out == wa.Output(format="delta", table="t", compression="snappy")
    assert output_of(parse("-o", "files"), plan) == wa.Output(path="files", compression="snappy")
    # --catalog: a URL, a name, or KEY=VALUE properties
    assert output_of(parse("--catalog", "postgresql+psycopg2://u:p@h/db?sslmode=require"), plan).catalog == (
        "postgresql+psycopg2://u:p@h/db?sslmode=require"
    )
    props = output_of(parse("--catalog", "type=rest", "--catalog", "uri=https://x/y?a=b"), plan)
    assert props.catalog == {"type": "rest", "uri": "https://x/y?a=b"}
    with pytest.raises(ValueError, match="not both"):
        output_of(parse("--catalog", "type=rest", "--catalog", "sqlite:///x"), plan)
    # errors say the flags
    with pytest.raises(ValueError) as err:
        output_of(parse("--table", "x"), wa.Output(format="iceberg"))
    assert out_flags(str(err.value)) == "--table 'x' must be NAMESPACE.NAME"
    with pytest.raises(ValueError) as err:
        output_of(parse("--table", "x.y"), wa.Output())
    assert out_flags(str(err.value)) == "--table is for a table output (--to iceberg or --to delta)"
