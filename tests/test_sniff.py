"""A wrong framing is named: what an input's first bytes look like (sources.sniff), and the
readers that say so when most of the first records fail -- read_delimited, the command
line, the playground."""

from __future__ import annotations

import gzip
import re
import warnings
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from depth import examples
from wirearrow.cli import main as cli_main
from wirearrow.sources.framing import FRAMINGS
from wirearrow.sources.sniff import SNIFF_BYTES, guess_input, hint, well_formed

RECORDS = corpus.generate(80, seed=5)
ARRAY = pa.array(RECORDS, pa.binary())
FRAMED = {f: bytes(wa.frame_records(ARRAY, f)) for f in FRAMINGS}
PLAN = Path(__file__).resolve().parent.parent / "transforms" / "openrtb_flat.yaml"


def test_well_formed_is_the_tags_of_protobuf() -> None:
    assert all(well_formed(r) for r in RECORDS)
    assert well_formed(b"")  # an empty message
    assert not well_formed(b"\x00\x01")  # field number 0
    assert not well_formed(b"\x0e")  # wire type 6
    assert not well_formed(b"\x0a\x05abc")  # a length past the end
    assert not well_formed(b"\x08")  # a varint cut by the end
    assert well_formed(b"\x0b\x08\x01\x0c")  # group 1 { field 1: 1 }
    assert not well_formed(b"\x0b\x08\x01\x14")  # closed by group 2
    assert not well_formed(b"\x0b\x08\x01")  # never closed
    # Past the budget: well-formed so far is enough.
    assert well_formed(b"\x08\x01" * 10 + b"\x00", budget=8)
    assert not well_formed(b"\x08\x01" * 10 + b"\x00")


@pytest.mark.parametrize("actual", FRAMINGS)
@pytest.mark.parametrize("said", FRAMINGS)
def test_every_wrong_framing_is_named(actual: str, said: str) -> None:
    data = FRAMED[actual]
    for sample, whole in ((data, True), (data * 4, False), (data[: len(data) // 2], False)):
        guesses = guess_input(sample, framing=said, whole=whole)
        if said == actual:
            assert guesses == [], (actual, whole)
        else:
            assert guesses and guesses[0].changes == {"framing": actual}, (actual, said, whole)


def test_confluent_records_json_text_and_compression_are_named() -> None:
    prefixed = wa.frame_records(ARRAY, "confluent", schema_id=9)
    for stream in ("varint", "u32be"):
        data = bytes(wa.frame_records(prefixed, stream))
        expected = {"framing": "confluent"} | ({"delimited_by": stream} if stream != "varint" else {})
        assert guess_input(data, framing=stream)[0].changes == expected
        # Read as Confluent records in that framing: nothing to say.
        assert guess_input(data, framing=stream, confluent=True) == []
    # Confluent records read without their prefix: the plain framing.
    assert guess_input(FRAMED["u32le"], framing="u32le", confluent=True)[0].changes == {
        "framing": "u32le"
    }
    from google.protobuf import json_format

    _, cls = corpus.load_schema()
    text = "\n".join(json_format.MessageToJson(cls.FromString(r), indent=None) for r in RECORDS)
    assert guess_input(text.encode(), framing="varint")[0].changes == {"format": "json"}
    assert guess_input(text.encode(), format="json") == []
    # Binary records read as JSON: their framing, and the binary format.
    assert guess_input(FRAMED["tfrecord"], format="json")[0].changes == {
        "format": "binary",
        "framing": "tfrecord",
    }
    words = hint(gzip.compress(FRAMED["varint"]), framing="varint")
    assert words.startswith("the data looks compressed with gzip (.gz)") and "compression='gzip'" in words


def test_one_record_given_as_it_is() -> None:
    assert guess_input(RECORDS[0]) == []
    assert guess_input(FRAMED["u32le"][: 4 + len(RECORDS[0])])[0].changes == {"framing": "u32le"}


@settings(max_examples=examples(40), deadline=None)
@given(
    st.binary(max_size=2000),
    st.sampled_from([None, *FRAMINGS]),
    st.booleans(),
    st.sampled_from(["binary", "json"]),
)
def test_any_bytes_get_an_answer_that_reads_them(data, framing, whole, fmt) -> None:
    """Untrusted bytes never break the guess, and each guess is a RecordFormat that
    constructs."""
    for guess in guess_input(data, format=fmt, framing=framing, whole=whole):
        changes = dict(guess.changes)
        if changes.get("framing") == "confluent":
            changes["schemas"] = {}
        wa.RecordFormat(**changes)
        assert guess.words()


def test_the_guess_reads_only_the_first_bytes() -> None:
    data = FRAMED["u32le"]
    big = data * (4 * SNIFF_BYTES // len(data) + 1)
    assert guess_input(big, framing="varint") == guess_input(big[:SNIFF_BYTES], framing="varint")


def test_read_delimited_warns_when_its_records_are_not_protobuf() -> None:
    prefixed = wa.frame_records(ARRAY, "confluent", schema_id=9)
    data = bytes(wa.frame_records(prefixed, "varint"))
    words = (
        "the buffer: 32 of the first 32 varint records are not protobuf wire data; the data "
        "looks like Confluent-prefixed records in varint framing (framing='confluent')"
    )
    with pytest.warns(UserWarning, match=re.escape(words)):
        assert len(wa.read_delimited(data, "varint")) == 80
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # records that are protobuf: no warning
        for framing, framed in FRAMED.items():
            assert wa.read_delimited(framed, framing).to_pylist() == RECORDS
        assert len(wa.read_delimited(b"", "varint")) == 0
    # A failure names the framing, from a part of a long stream too.
    with pytest.raises(ValueError, match=r"looks like u32le framing \(framing='u32le'\)"):
        wa.read_delimited(FRAMED["u32le"] * 30, "varint")


@pytest.fixture
def files(tmp_path):
    u32le = tmp_path / "events.u32le"
    u32le.write_bytes(FRAMED["u32le"])
    return tmp_path, u32le


def test_the_command_line_names_the_framing(files, capsys) -> None:
    tmp_path, u32le = files
    plan = str(PLAN)
    out = str(tmp_path / "out.parquet")
    # Policy skip: a warning after the first batch; the run goes on.
    assert cli_main(["transcode", plan, str(u32le), "--framing", "varint", "--on-error", "skip", "-o", out]) == 0
    err = capsys.readouterr().err
    assert "records failed; the data looks like u32le framing (--framing u32le)" in err
    # Policy raise: the error says it.
    assert cli_main(["transcode", plan, str(u32le), "--framing", "varint", "-o", out]) == 1
    err = capsys.readouterr().err
    assert "invalid field number 0" in err and "looks like u32le framing (--framing u32le)" in err
    # The right framing: no word of it.
    assert cli_main(["transcode", plan, str(u32le), "--framing", "u32le", "-o", out]) == 0
    assert "looks like" not in capsys.readouterr().err
    # Records that fail for another reason (another message: field 1 a varint, not the
    # string id) get no framing hint.
    other = tmp_path / "other.u32le"
    other.write_bytes(bytes(wa.frame_records(pa.array([b"\x08\x96\x01"] * 20), "u32le")))
    args = ["transcode", plan, str(other), "--framing", "u32le", "--on-error", "skip", "-o", out]
    assert cli_main(args) == 0
    err = capsys.readouterr().err
    assert "looks like" not in err and "warning" not in err


def test_the_playground_names_the_framing(files) -> None:
    from wirearrow.playground.session import Session

    _, u32le = files
    session = Session()
    session.open_plan(str(PLAN))
    text = PLAN.read_text()
    session.set_records_file(str(u32le), wa.RecordFormat(framing="varint"))
    result = session.evaluate(text, "yaml")
    assert "records fail: the data looks like u32le framing (framing='u32le')" in result["hint"]
    session.set_records_file(str(u32le), wa.RecordFormat(framing="u32le"))
    assert "hint" not in session.evaluate(text, "yaml")
