"""protojson records through the engines: Ray (Transcode and transcode()) and Beam (ToArrow)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest
from google.protobuf import json_format

import wirearrow as wa

ROOT = Path(__file__).resolve().parent.parent
PLAN = str(ROOT / "transforms" / "openrtb_flat.yaml")
BAD_JSON = ['{"id": 5}', "{", '{"nope": 1}']


@pytest.fixture(scope="module")
def texts(bid_corpus, bid_class) -> list[str]:
    return [json_format.MessageToJson(bid_class.FromString(r), indent=None) for r in bid_corpus]


def beam_quiet(test):
    """Beam's own modules warn on import and while running (deprecations, pickling hints)."""
    for kind in ("DeprecationWarning", "PendingDeprecationWarning", "UserWarning", "FutureWarning"):
        test = pytest.mark.filterwarnings(f"ignore::{kind}")(test)
    return test


def sorted_rows(table) -> list[str]:
    return sorted(map(repr, table.to_pylist()))


def expected(records: list[bytes]) -> pa.Table:
    return pa.Table.from_batches([wa.load_plan(PLAN).transcoder().transcode(records)])


@pytest.mark.ray
def test_ray_transcode_class_reads_a_string_column(bid_corpus, texts) -> None:
    war = pytest.importorskip("wirearrow.ray")
    fn = war.Transcode(PLAN, column="value", on_error="skip", format="json")
    table = pa.table({"value": pa.array(texts[:50] + BAD_JSON + texts[50:], pa.utf8())})
    out = pa.concat_tables([fn(table.slice(i, 64)) for i in range(0, table.num_rows, 64)])
    assert sorted_rows(out) == sorted_rows(expected(bid_corpus))
    assert fn.stats.records_failed == len(BAD_JSON)
    # carry= carries input columns onto the rows of their record, JSON or not
    keyed = table.append_column("k", pa.array(range(table.num_rows)))
    rows = war.Transcode(PLAN, column="value", carry=["k"], on_error="skip", format="json")(keyed)
    assert set(rows.column("k").to_pylist()) == set(range(table.num_rows)) - {50, 51, 52}


@pytest.mark.ray
def test_ray_transcode_takes_the_plans_input(bid_corpus, texts) -> None:
    """A plan's input: (protojson text in column "text") is Transcode's default; input=
    and keywords win over it."""
    war = pytest.importorskip("wirearrow.ray")
    plan = dataclasses.replace(
        wa.load_plan(PLAN), input_settings=(("format", "json"), ("column", "text"))
    )
    table = pa.table({"text": pa.array(texts, pa.utf8()), "n": range(len(texts))})
    rows = war.Transcode(plan, carry=["n"])(table)
    assert sorted_rows(rows.drop_columns(["n"])) == sorted_rows(expected(bid_corpus))
    binary = pa.table({"value": pa.array(bid_corpus, pa.binary())})
    given = war.Transcode(plan, wa.RecordFormat(column="value"))(binary)
    assert sorted_rows(given) == sorted_rows(expected(bid_corpus))
    assert war.Transcode(plan, format="binary", column="value")(binary).equals(given)


@pytest.mark.beam
@beam_quiet
def test_beam_to_arrow_takes_json_text(bid_corpus, texts) -> None:
    beam = pytest.importorskip("apache_beam")
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that

    import wirearrow.beam as wab

    want = sorted_rows(expected(bid_corpus[:80]))
    records = texts[:40] + BAD_JSON + [t.encode() for t in texts[40:80]]

    def check_rows(batches) -> None:
        got = sorted(r for b in batches for r in map(repr, b.to_pylist()))
        assert got == want, (len(got), len(want))

    def check_dead(letters) -> None:
        assert sorted(d[1] for d in letters) == sorted(BAD_JSON)
        assert all(d[0].startswith("JSON: ") for d in letters)

    pipeline = beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions())
    with pipeline as p:
        result = p | beam.Create(records) | wab.ToArrow(
            PLAN, batch_size=30, format="json", on_error="dead_letter"
        )
        assert_that(result.batches, check_rows, label="rows")
        assert_that(
            result.dead_letters | beam.Map(lambda d: (d.reason, d.raw.decode())),
            check_dead,
            label="dead",
        )
    with pytest.raises(ValueError, match="format"):
        wab.ToArrow(PLAN, format="xml")


NESTED = {
    "proto": {
        "file": "bidrequest.proto",
        "message": "BidRequestEvent",
        "import_paths": [str(ROOT / "examples" / "schema")],
    },
}


@pytest.mark.ray
def test_ray_to_json_step(bid_corpus, bid_class) -> None:
    war = pytest.importorskip("wirearrow.ray")
    tc = wa.load_plan(NESTED).transcoder()
    rows = pa.Table.from_batches([tc.transcode(bid_corpus[:20])])
    step = war.ToJson(NESTED, use_integers_for_enums=True)
    out = step(rows.append_column("extra", pa.array(range(20))))
    want = [
        json_format.MessageToJson(bid_class.FromString(r), indent=None, use_integers_for_enums=True)
        for r in bid_corpus[:20]
    ]
    assert out.column_names == ["json"] and out.column("json").to_pylist() == want


@pytest.mark.beam
@beam_quiet
def test_beam_to_json_round_trip(bid_corpus, texts) -> None:
    beam = pytest.importorskip("apache_beam")
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    import wirearrow.beam as wab

    records = texts[:50]
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions()) as p:
        batches = (p | beam.Create(records) | wab.ToArrow(NESTED, batch_size=16, format="json")).batches
        assert_that(batches | wab.ToJson(NESTED), equal_to(records))
