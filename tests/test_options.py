"""The transcoder's options are declared once (wirearrow.options.Options); everything that
names them derives from that table."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import wirearrow as wa
from wirearrow.config import load_plan
from wirearrow.options import OPTIONS, PLAN_OPTIONS, Options, options_table

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_docs_table_is_the_generated_one() -> None:
    text = (DOCS / "options.md").read_text()
    start = text.index("-->\n") + len("-->\n")
    end = text.index("\n<!-- end options-table -->")
    assert text[start:end] == options_table(), (
        "docs/options.md is out of date; its table is now:\n" + options_table()
    )


def test_transcoder_keywords_are_the_options(bid_schema: wa.Schema) -> None:
    params = inspect.signature(wa.Transcoder).parameters
    for name, f in OPTIONS.items():
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[name].default == f.default
        assert f"``{name}``" in (wa.Transcoder.__doc__ or "")
    with pytest.raises(TypeError, match="unknown options: max_deph"):
        wa.Transcoder(bid_schema, ["id"], max_deph=3)


def test_every_option_is_a_yaml_key_with_its_rule(tmp_path: Path) -> None:
    bad = {
        name: ("nope" if f.metadata["rule"].__class__.__name__ != "Choice" else 7)
        for name, f in OPTIONS.items()
        if name != "on_error"
    }
    proto = tmp_path / "m.proto"
    proto.write_text('syntax = "proto3"; message M { int64 a = 1; }')
    text = f"proto: {{file: {proto}, message: M}}\n" + "".join(
        f"{name}: {value}\n" for name, value in bad.items()
    )
    with pytest.raises(wa.PlanError) as err:
        load_plan(text)
    assert len(err.value.problems) == len(bad)
    for problem, name in zip(err.value.problems, bad, strict=True):
        assert f": {name}: " in problem  # located at its own key and line


def test_the_cache_key_covers_the_plan_options_only(bid_schema: wa.Schema) -> None:
    base = wa.TranscodeSpec(bid_schema, ["id"])
    assert tuple(name for name in OPTIONS if name != "on_error") == PLAN_OPTIONS
    assert base.replace(on_error="skip").plan_key == base.plan_key
    assert base.replace(validate="full").plan_key != base.plan_key


def test_options_alone_are_checked_together() -> None:
    with pytest.raises(wa.PlanError) as err:
        Options(validate="most", max_nesting=0)
    assert [p.split(" ")[0] for p in err.value.problems] == ["validate", "max_nesting"]
    assert Options().options == {name: f.default for name, f in OPTIONS.items()}
