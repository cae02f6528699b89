"""Plans are untrusted input: bounded compile time and memory, a PlanError with the place.

Each case once gave a RecursionError, an OverflowError, a UnicodeDecodeError, a misleading
message or an exponential compile (issue 15); none may take more than a moment now.
"""

from __future__ import annotations

import pathlib
import re
import time

import pytest

import wirearrow as wa
from wirearrow.config import MAX_PLAN_NESTING, MAX_PLAN_NODES
from wirearrow.options import MAX_DEPTH
from wirearrow.options import MAX_NESTING_LIMIT as MAX_NESTING
from wirearrow.paths import MAX_FILTER_DEPTH
from wirearrow.plan.compiler import MAX_EXPR_DEPTH, MAX_PLAN_FIELDS

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples" / "schema"
HEAD = f"proto:\n  file: {EXAMPLES}/bidrequest.proto\n  message: BidRequestEvent\n"
TREE = 'syntax = "proto3"; package t; message T { int32 v = 1; T left = 2; T right = 3; }'


@pytest.fixture(scope="module")
def bid() -> wa.Schema:
    return wa.Schema.from_proto(EXAMPLES / "bidrequest.proto", "BidRequestEvent")


@pytest.fixture
def tree(compile_proto) -> wa.Schema:
    return compile_proto(TREE, "t.T")[0]


def _plan_error(source: object) -> str:
    with pytest.raises(wa.PlanError) as info:
        wa.load_plan(source).transcoder()
    return str(info.value)


def _columns(expr: str) -> str:
    return HEAD + f"denormalizer:\n  columns:\n    - name: x\n      expr: {expr}\n"


def _nested_coalesce(depth: int) -> str:
    e = "{func: coalesce, args: [{path: id}, {path: id}]}"
    for _ in range(depth - 1):
        e = "{func: coalesce, args: [{expr: " + e + "}, {path: id}]}"
    return e


def test_a_type_with_two_recursive_fields_is_bounded(tree: wa.Schema) -> None:
    """The whole-message type doubles per level: the size is known before anything is built."""
    small = wa.Transcoder(tree, max_depth=3)
    assert small.arrow_schema.field("left").type.field("right").type.field("left").type == (
        small.arrow_schema.field("left").type.field("left").type.field("left").type
    )
    started = time.perf_counter()
    for depth in (22, 60, MAX_DEPTH):
        with pytest.raises(wa.PlanError) as info:
            wa.Transcoder(tree, max_depth=depth)
        message = str(info.value)
        assert f"t.T read whole with max_depth={depth} has" in message
        assert f"(the limit is {MAX_PLAN_FIELDS:,})" in message
    assert "12,582,910 fields" in _transcoder_error(tree, max_depth=22)
    assert time.perf_counter() - started < 60  # a hang guard, not a timing assertion
    # A path into the recursion is bounded by its text, whatever max_depth.
    flat = wa.Transcoder(tree, columns=["left.right.left.v", "right.v"], max_depth=MAX_DEPTH)
    assert flat.transcode([b"\x1a\x02\x08\x05"]).to_pylist() == [
        {"left.right.left.v": None, "right.v": 5}
    ]


def _transcoder_error(schema: wa.Schema, **options: object) -> str:
    with pytest.raises(wa.PlanError) as info:
        wa.Transcoder(schema, **options)  # type: ignore[arg-type]
    return str(info.value)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("max_depth", 10**6, f"max_depth must be in 1..{MAX_DEPTH}, not 1000000"),
        ("max_depth", 0, f"max_depth must be in 1..{MAX_DEPTH}, not 0"),
        ("max_nesting", 10**20, f"max_nesting must be in 1..{MAX_NESTING}, not 10"),
        ("max_nesting", 5000, f"max_nesting must be in 1..{MAX_NESTING}, not 5000"),
        ("max_nesting", 1.5, "max_nesting must be an integer, not 1.5"),
        ("max_nesting", True, "max_nesting must be an integer, not True"),
    ],
)
def test_out_of_range_options_name_themselves(
    tree: wa.Schema, option: str, value: object, message: str
) -> None:
    assert message in _transcoder_error(tree, columns=["v"], **{option: value})


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("max_nesting: 100000000000000000000", "max_nesting: must be at most 1023"),
        ("max_nesting: 1.0e+20", "max_nesting: expected an integer, got a number"),
        ("max_nesting: 5000", "max_nesting: must be at most 1023, got 5000"),
        ("max_depth: 1000000", f"max_depth: must be at most {MAX_DEPTH}"),
    ],
)
def test_out_of_range_yaml_options_name_key_and_line(line: str, message: str) -> None:
    assert f"<string>:4: {message}" in _plan_error(HEAD + line + "\n")


def test_a_deep_filter_is_a_plan_error(bid: wa.Schema) -> None:
    ok = "(" * (MAX_FILTER_DEPTH - 1) + ".id == '1'" + ")" * (MAX_FILTER_DEPTH - 1)
    wa.Transcoder(bid, columns=[f"imp[?({ok})].id"])
    for predicate in (
        "(" * 3000 + ".id == '1'" + ")" * 3000,
        "!" * 3000 + ".id",
        " && ".join([".id == '1'"] * 3000),
    ):
        with pytest.raises(wa.PlanError, match=f"filter nested deeper than {MAX_FILTER_DEPTH}"):
            wa.Transcoder(bid, columns=[f"imp[?({predicate})].id"])
    message = _plan_error(
        HEAD + "denormalizer:\n  columns:\n    - path: \"imp[?(" + "(" * 3000 + ".id)].id\"\n"
    )
    assert "<string>:6: denormalizer.columns[0].path: filter nested deeper" in message


def test_a_deep_expression_is_a_plan_error(bid: wa.Schema) -> None:
    ok = wa.load_plan(_columns(_nested_coalesce(MAX_EXPR_DEPTH))).transcoder()
    assert ok.transcode([b""]).num_rows == 1
    assert "nested deeper than" in _plan_error(_columns(_nested_coalesce(2000)))
    x = wa.fn.path("id")
    for _ in range(2000):
        x = wa.fn.coalesce(x, wa.fn.path("id"))
    with pytest.raises(wa.PlanError, match=f"'x': expression nested deeper than {MAX_EXPR_DEPTH}"):
        wa.Transcoder(bid, columns=[wa.Column(name="x", expr=x)])


@pytest.mark.parametrize("style", ["flow", "block", "mapping"])
def test_deep_yaml_is_a_plan_error(style: str) -> None:
    n = 100_000 if style == "flow" else 1000  # (block: 1 MB of indentation, under the size limit)
    if style == "flow":
        text = HEAD + "denormalizer: " + "[" * n + "]" * n + "\n"
    elif style == "block":
        text = HEAD + "x:\n" + "".join("  " * (i + 1) + "-\n" for i in range(n))
    else:
        text = HEAD + "x:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(n))
    assert f"YAML: nested deeper than {MAX_PLAN_NESTING} levels" in _plan_error(text)


def test_deep_or_cyclic_mappings_are_plan_errors() -> None:
    deep: dict = {}
    node = deep
    for _ in range(5000):
        node["x"] = {}
        node = node["x"]
    assert f"nested deeper than {MAX_PLAN_NESTING}" in _plan_error({"proto": {}, "x": deep})
    cyclic: dict = {"proto": {}}
    cyclic["x"] = [cyclic]
    assert "a cycle" in _plan_error(cyclic)


def _alias_bomb(levels: int) -> str:
    lines = [HEAD, "denormalizer:\n  columns:\n"]
    lines.append("    - {name: c0, expr: &a0 {func: coalesce, args: [{path: id}, {path: id}]}}\n")
    for i in range(1, levels):
        arg = f"{{expr: *a{i - 1}}}"
        lines.append(
            f"    - {{name: c{i}, expr: &a{i} {{func: coalesce, args: [{', '.join([arg] * 4)}]}}}}\n"
        )
    return "".join(lines)


def test_yaml_alias_expansion_is_limited() -> None:
    wa.load_plan(_alias_bomb(4)).transcoder()  # aliases that fit are fine
    started = time.perf_counter()
    message = _plan_error(_alias_bomb(12))  # 1.3 KB: ~4**11 expanded expression nodes
    assert f"YAML: more than {MAX_PLAN_NODES:,} nodes with every alias expanded" in message
    assert time.perf_counter() - started < 30  # a hang guard, not a timing assertion
    assert "inside its own anchor" in _plan_error(HEAD + "x: &a [1, *a]\n")


def test_non_utf8_yaml_is_a_plan_error(tmp_path) -> None:
    raw = (HEAD + "# caf\xe9\n").encode("latin-1")
    assert "<string>: cannot read the plan: 'utf-8' codec" in _plan_error(raw)
    path = tmp_path / "plan.yaml"
    path.write_bytes(raw)
    assert "cannot read the plan" in _plan_error(str(path))


# ---- issue 33: the YAML loader, the plan's size, literals, quoted text --------------------


def test_plans_are_read_by_libyaml_with_their_lines() -> None:
    """PyYAML's pure-Python parser took 5.6 s a MB (50 MB of comments: minutes); libyaml's,
    in PyYAML's wheels, ~0.01 s. Line numbers still come with every problem."""
    import yaml

    from wirearrow import config

    assert yaml.__with_libyaml__
    assert issubclass(config._LineLoader, yaml.CSafeLoader)
    text = HEAD + ("#" + " comment" * 10 + "\n") * 30_000 + "validate: everything\n"
    assert len(text) > 2_000_000
    message = _plan_error(text)
    assert message.startswith("<string>:30004: validate: unknown value 'everything'"), message


def test_plan_text_over_the_size_limit_is_refused_before_parsing(tmp_path) -> None:
    from wirearrow.config import MAX_PLAN_BYTES

    text = HEAD + "#" * MAX_PLAN_BYTES + "\n"
    expected = f"the plan is {len(text):,} bytes, over the limit of {MAX_PLAN_BYTES:,}"
    assert expected in _plan_error(text)
    assert expected in _plan_error(text.encode())
    path = tmp_path / "big.yaml"
    path.write_text(text)
    assert _plan_error(path).startswith(f"{path}: {expected}")
    # UTF-8 bytes, not characters: 2 bytes each
    assert "over the limit of 100" in _plan_error_with(HEAD + "#" + "é" * 40, max_bytes=100)
    # configurable both ways
    assert wa.load_plan(text, max_bytes=len(text)).source == "<string>"
    assert "over the limit of 64" in _plan_error_with(HEAD, max_bytes=64)
    with pytest.raises(ValueError, match="max_bytes must be a positive integer"):
        wa.load_plan(HEAD, max_bytes=0)


def _plan_error_with(source: object, **options: object) -> str:
    with pytest.raises(wa.PlanError) as info:
        wa.load_plan(source, **options)  # type: ignore[arg-type]
    return str(info.value)


def test_a_large_literal_is_refused_when_the_plan_compiles(bid: wa.Schema, bid_corpus) -> None:
    """A 10 MB concat literal compiled, and transcode raised ArrowCapacityError on the first
    batch over 200 records (10 MB a row: more than an Arrow string array holds)."""
    from wirearrow.plan.expressions import MAX_LITERAL_BYTES

    big = "x" * 10_000_000
    for expr in (
        wa.fn.concat("id", wa.fn.lit(big)),
        wa.fn.concat("id", big),  # a bare string that is no path: a literal
        wa.fn.concat("id", sep=big),
        wa.fn.default("id", big),
        wa.fn.coerce("id", "yes", big),
    ):
        with pytest.raises(wa.PlanError, match=f"over the limit of {MAX_LITERAL_BYTES:,}"):
            wa.Transcoder(bid, columns=[wa.Column(name="x", expr=expr)])
    yaml_text = _columns("{func: concat, args: [{path: id}, {literal: " + "y" * 70_000 + "}]}")
    message = _plan_error(yaml_text)
    assert "<string>:6: denormalizer.columns[0]" in message and "70,000 bytes" in message
    # at the limit: fine, and every row gets it
    at_limit = wa.Transcoder(
        bid, columns=[wa.Column(name="x", expr=wa.fn.concat(wa.fn.lit("z" * MAX_LITERAL_BYTES)))]
    )
    assert at_limit.transcode(bid_corpus[:3]).column("x").to_pylist() == ["z" * MAX_LITERAL_BYTES] * 3


def test_errors_quote_a_bounded_part_of_a_huge_text(bid: wa.Schema) -> None:
    """A 1 MB field name gave a 2 MB message: every error quotes at most MAX_QUOTED
    characters of an offending text, and says how long it was."""
    from wirearrow.errors import MAX_MESSAGE, MAX_QUOTED

    name = "f" * 1_000_000
    messages = []
    for columns in (
        [name],
        [wa.Column(name=name, path="nope")],
        [wa.Column(name="x", expr=wa.fn.concat(wa.fn.path(name)))],
        [f"imp[*].{name}"],
        ["imp[" + "9" * 100_000 + "].id"],  # also: int() refuses over 4300 digits
        # (under the literal limit)
        [wa.Column(name="x", expr=wa.fn.strptime("id", "%" * 60_001 + "Q"))],
        [wa.Column(name="x", expr=wa.fn.date_part("id", "q" * 60_000))],
    ):
        messages.append(_transcoder_error(bid, columns=columns))
    for source in (
        HEAD + f"validate: {name}\n",
        HEAD + f"denormalizer: {{columns: [{{name: x, expr: {{func: {name}}}}}]}}\n",
        HEAD + f"denormalizer: {{columns: [{{name: {name}, path: nope}}]}}\n",
        {"proto": {"file": f"{EXAMPLES}/bidrequest.proto", "message": name}},
    ):
        with pytest.raises(ValueError) as info:  # a PlanError, or a SchemaError (the message)
            wa.load_plan(source).transcoder()  # type: ignore[arg-type]
        messages.append(str(info.value))
    for i, message in enumerate(messages):
        assert len(message) < MAX_MESSAGE + 500, message[:300]
        assert re.search(rf"(.)\1{{{MAX_QUOTED + 50}}}", message) is None, message[:300]
        if i != 9:  # (YAML names the column by its place, not by its name)
            assert re.search(r"\([0-9][0-9,]+ (characters|digits)\)", message), message


def test_a_path_error_in_a_long_path_shows_the_fault() -> None:
    from wirearrow.errors import MAX_QUOTED, PathError

    text = "a." * 50_000 + "b?c"
    err = PathError("illegal character '?'", text, text.index("?"))
    _, shown, caret = str(err).split("\n")
    assert len(shown) < MAX_QUOTED + 10 and shown.startswith("  ...")
    assert shown[caret.index("^")] == "?"
    short = PathError("x", "ab?", 2)
    assert str(short) == "x\n  ab?\n    ^"
