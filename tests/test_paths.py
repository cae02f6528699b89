"""The path language parser (bufarrow-behaviour §1.1–1.4, §1.6): syntax only."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depth import examples
from wirearrow.errors import PathError
from wirearrow.paths import (
    And,
    Compare,
    FieldStep,
    FilterStep,
    IndexStep,
    KeyStep,
    Literal,
    Not,
    Or,
    Path,
    RelPath,
    SliceStep,
    Truthy,
    WildcardStep,
    format_path,
    parse_path,
)


def shape(node: object) -> object:
    """``node`` without positions, with value types kept (so ``True`` is not ``1``)."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return (
            type(node).__name__,
            *(shape(getattr(node, f.name)) for f in dataclasses.fields(node) if f.name != "pos"),
        )
    if isinstance(node, tuple):
        return tuple(shape(item) for item in node)
    return (type(node).__name__, node)


def steps_of(text: str) -> object:
    return shape(parse_path(text).steps)


def expect_error(text: str, pos: int, fragment: str) -> PathError:
    with pytest.raises(PathError) as info:
        parse_path(text)
    err = info.value
    assert fragment in err.message
    assert err.text == text
    assert err.pos == pos, f"caret at {err.pos}, expected {pos}:\n{err}"
    assert str(err) == f"{err.message}\n  {text}\n  {' ' * pos}^"
    assert isinstance(err, ValueError)
    return err


# ------------------------------------------------------------------------------------------
# §1.2 syntax: fields, roots, the empty path


def test_fields_and_positions() -> None:
    path = parse_path("imps[*].deals[1].id")
    assert path == Path(
        text="imps[*].deals[1].id",
        root=None,
        root_pos=0,
        steps=(
            FieldStep("imps", 0),
            WildcardStep(4),
            FieldStep("deals", 8),
            IndexStep(1, 13),
            FieldStep("id", 17),
        ),
    )


def test_identifiers() -> None:
    assert parse_path("_a9.B_c").steps == (FieldStep("_a9", 0), FieldStep("B_c", 4))
    # true/false are only keywords inside brackets and predicates.
    assert parse_path("true.false").steps == (FieldStep("true", 0), FieldStep("false", 5))


@pytest.mark.parametrize("text", ["", "   ", "\t"])
def test_empty_path_is_valid_syntax(text: str) -> None:
    assert parse_path(text) == Path(text=text, root=None, root_pos=0, steps=())


def test_explicit_root() -> None:
    assert parse_path("(tp.Root)") == Path("(tp.Root)", "tp.Root", 1, ())
    path = parse_path("(tp.Root).imps[0].id")
    assert (path.root, path.root_pos) == ("tp.Root", 1)
    assert path.steps == (FieldStep("imps", 10), IndexStep(0, 14), FieldStep("id", 18))
    assert parse_path("( pkg.Outer.Inner ) . x").root == "pkg.Outer.Inner"
    assert parse_path("(Root).x").root == "Root"  # whether it names the root: the compiler's call


def test_spaces_and_tabs_are_skipped_but_kept_in_text() -> None:
    text = "imps [ * ] . deals\t[ 1 ] .id"
    path = parse_path(text)
    assert path.text == text
    assert steps_of(text) == steps_of("imps[*].deals[1].id")
    assert path.steps[1] == WildcardStep(5)
    assert path.steps[2] == FieldStep("deals", 13)
    assert steps_of("tags[ 1 ]") == steps_of("tags[1]")


def test_chained_brackets_parse() -> None:
    # Meaningless for most schemas, but that is the plan compiler's error to report.
    assert parse_path('m["a"]["b"]').steps == (FieldStep("m", 0), KeyStep("a", 1), KeyStep("b", 6))
    assert parse_path("l[0][1]").steps == (FieldStep("l", 0), IndexStep(0, 1), IndexStep(1, 4))


# ------------------------------------------------------------------------------------------
# §1.1 integer literals


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("0", 0),
        ("-0", 0),
        ("7", 7),
        ("-1", -1),
        ("-6", -6),
        ("123", 123),
        ("010", 8),
        ("-010", -8),
        ("00", 0),
        ("0777", 511),
        ("0x2", 2),
        ("0X1f", 31),
        ("0xFF", 255),
        ("-0x10", -16),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("0x7fffffffffffffff", 2**63 - 1),
    ],
)
def test_integer_literals(literal: str, value: int) -> None:
    assert parse_path(f"tags[{literal}]").steps[1] == IndexStep(value, 4)


@pytest.mark.parametrize(
    ("text", "pos", "fragment"),
    [
        ("tags[08]", 5, "invalid octal literal 08"),
        ("tags[-09]", 5, "invalid octal literal -09"),
        ("tags[0b1]", 5, "unsupported literal 0b1"),
        ("tags[0o7]", 5, "unsupported literal 0o7"),
        ("tags[0x]", 5, "hex literal 0x has no digits"),
        ("tags[0x1g]", 5, "invalid number literal 0x1g"),
        ("tags[12ab]", 5, "invalid number literal 12ab"),
        # a lone index may be a uint64 map key; beyond that, or negative past int64, it is out
        ("tags[18446744073709551616]", 5, "does not fit in int64 or uint64"),
        ("tags[-9223372036854775809]", 5, "does not fit in int64 or uint64"),
        ("tags[0x10000000000000000]", 5, "does not fit in int64 or uint64"),
        ("tags[9223372036854775808:]", 5, "slice bound 9223372036854775808 does not fit in int64"),
        ("tags[1:99999999999999999999]", 7, "does not fit in int64"),
        ("tags[-]", 5, "'-' must be directly followed by digits"),
        ("tags[- 1]", 5, "'-' must be directly followed by digits"),
        ("1abc", 0, "invalid number literal 1abc"),
    ],
)
def test_bad_integer_literals(text: str, pos: int, fragment: str) -> None:
    expect_error(text, pos, fragment)


@pytest.mark.parametrize("literal", ["1.5", "-0.5", "2e3", "1.5e-3", "0.0"])
def test_float_is_not_an_index(literal: str) -> None:
    expect_error(f"tags[{literal}]", 5, f"float literal {literal} is not an index")


def test_float_is_not_a_slice_bound() -> None:
    expect_error("tags[1:2.5]", 7, "float literal 2.5 is not an index")
    expect_error("tags[::1e1]", 7, "float literal 1e1 is not an index")


# ------------------------------------------------------------------------------------------
# §1.1 string literals and keys


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ('"k"', "k"),
        ("'k'", "k"),
        ('""', ""),
        ("'say \"hi\"'", 'say "hi"'),
        ('"it\'s"', "it's"),
        ('"\\a\\b\\f\\n\\r\\t\\v"', "\a\b\f\n\r\t\v"),
        ('"\\\\ \\\' \\" \\?"', "\\ ' \" ?"),
        ('"\\101\\60\\7"', "A0\x07"),
        ('"\\0"', "\x00"),
        ('"\\1011"', "A1"),  # octal escapes stop after 3 digits
        ('"\\x41\\x4"', "A\x04"),
        ('"\\x414"', "A4"),  # \x stops after 2 digits
        ('"\\u00e9\\U0001F600"', "é😀"),
        ('"\\xc3\\xa9"', "é"),  # \x escapes are bytes, decoded as UTF-8 together
        ('"\\303\\251"', "é"),
        ('"é 😀 ü"', "é 😀 ü"),
        ('"a b\tc"', "a b\tc"),  # spaces inside a string are not skipped
    ],
)
def test_string_keys(literal: str, value: str) -> None:
    step = parse_path(f"counts[{literal}]").steps[1]
    assert step == KeyStep(value, 6)
    assert type(step.key) is str


@pytest.mark.parametrize(
    ("text", "pos", "fragment"),
    [
        ('m["abc', 2, "unterminated string literal"),
        ("m['abc\"]", 2, "unterminated string literal"),
        ('m["ab\\', 5, "unterminated string literal"),
        ('m["\\q"]', 3, "unknown escape sequence \\q"),
        ('m["\\xz"]', 3, "\\x escape needs 1 or 2 hex digits"),
        ('m["\\u00e"]', 3, "\\u escape needs exactly 4 hex digits"),
        ('m["\\U0001F60"]', 3, "\\U escape needs exactly 8 hex digits"),
        ('m["\\ud800"]', 3, "not a Unicode scalar value"),
        ('m["\\U00110000"]', 3, "not a Unicode scalar value"),
        ('m["\\400"]', 3, "larger than \\377"),
        ('m["\\xff"]', 2, "not valid UTF-8"),
        ('m["\\xc3"]', 2, "not valid UTF-8"),
        ('m["a\nb"]', 4, "raw newline in string literal"),
        ('m["a\x00b"]', 4, "raw NUL in string literal"),
        ('m["a\udcffb"]', 4, "not valid UTF-8"),
    ],
)
def test_bad_strings(text: str, pos: int, fragment: str) -> None:
    expect_error(text, pos, fragment)


def test_bool_keys() -> None:
    assert parse_path("flags[true]").steps[1] == KeyStep(True, 5)
    assert parse_path("flags[ false ]").steps[1] == KeyStep(False, 5)
    assert type(parse_path("flags[true]").steps[1].key) is bool


# ------------------------------------------------------------------------------------------
# wildcards and slices (§1.3, §1.4)


@pytest.mark.parametrize(
    "index", ["*", " * ", ":", "::", "::1", "0:", "0::1", "0::", ":: 1", "-0:", "0x0:", "00:"]
)
def test_whole_list_is_the_wildcard(index: str) -> None:
    assert parse_path(f"tags[{index}]").steps == (FieldStep("tags", 0), WildcardStep(4))


@pytest.mark.parametrize(
    ("index", "start", "stop", "step"),
    [
        # the §1.4 examples
        ("1:3", 1, 3, None),
        ("-2:", -2, None, None),
        (":-3", None, -3, None),
        ("::-2", None, None, -2),
        ("3:0:-1", 3, 0, -1),
        ("5:2", 5, 2, None),
        ("-10:2", -10, 2, None),
        ("1:100", 1, 100, None),
        # not the whole list, so not normalised
        ("0:5", 0, 5, None),
        ("0:-1", 0, -1, None),
        ("1:", 1, None, None),
        ("::2", None, None, 2),
        ("::-1", None, None, -1),
        ("0::-1", 0, None, -1),
        ("0x1:010:0x2", 1, 8, 2),
        (" 1 : 3 : 1 ", 1, 3, 1),
    ],
)
def test_slices(index: str, start: int | None, stop: int | None, step: int | None) -> None:
    assert parse_path(f"tags[{index}]").steps[1] == SliceStep(start, stop, step, 4)


@pytest.mark.parametrize(("index", "value"), [("-1", -1), ("-6", -6), ("0x2", 2), ("010", 8)])
def test_section_1_4_index_examples(index: str, value: int) -> None:
    assert parse_path(f"tags[{index}]").steps[1] == IndexStep(value, 4)


@pytest.mark.parametrize(("text", "pos"), [("tags[::0]", 7), ("tags[1:2:0]", 9), ("t[::-0]", 4)])
def test_slice_step_zero(text: str, pos: int) -> None:
    expect_error(text, pos, "slice step must not be zero")


# ------------------------------------------------------------------------------------------
# §1.6 filters


def test_filter_examples_from_the_reference() -> None:
    assert parse_path("imps[?(.w > 2)].id").steps == (
        FieldStep("imps", 0),
        FilterStep(Compare(">", RelPath(("w",), 7), Literal(2, 12), 10), 4),
        FieldStep("id", 16),
    )
    assert parse_path("imps[?(.w >= 1 && .id != 'i3')].id").steps[1] == FilterStep(
        And(
            Compare(">=", RelPath(("w",), 7), Literal(1, 13), 10),
            Compare("!=", RelPath(("id",), 18), Literal("i3", 25), 22),
            15,
        ),
        4,
    )
    assert parse_path("imps[?(.w)].id").steps[1] == FilterStep(Truthy(RelPath(("w",), 7), 7), 4)


@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">="])
def test_comparison_operators(op: str) -> None:
    step = parse_path(f"a[?(.x {op} .y.z)]").steps[1]
    assert shape(step.predicate) == shape(
        Compare(op, RelPath(("x",), 0), RelPath(("y", "z"), 0), 0)
    )


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("'s'", "s"),
        ('"\\u00e9"', "é"),
        ("42", 42),
        ("-42", -42),
        ("0x10", 16),
        ("010", 8),
        ("1.5", 1.5),
        ("-2.5e-3", -2.5e-3),
        ("1e3", 1000.0),
        ("true", True),
        ("false", False),
        ("18446744073709551615", 2**64 - 1),  # uint64 fields can be compared with
        ("-9223372036854775808", -(2**63)),
    ],
)
def test_predicate_literals(literal: str, value: object) -> None:
    predicate = parse_path(f"a[?(.x == {literal})]").steps[1].predicate
    assert isinstance(predicate, Compare)
    assert predicate.right == Literal(value, 10)
    assert type(predicate.right.value) is type(value)


def test_precedence_and_grouping() -> None:
    def predicate(text: str) -> object:
        return shape(parse_path(f"a[?({text})]").steps[1].predicate)

    x, y, z = (Truthy(RelPath((name,), 0), 0) for name in "xyz")
    assert predicate(".x || .y && .z") == shape(Or(x, And(y, z, 0), 0))
    assert predicate("(.x || .y) && .z") == shape(And(Or(x, y, 0), z, 0))
    assert predicate(".x && .y || .z") == shape(Or(And(x, y, 0), z, 0))
    assert predicate(".x || .y || .z") == shape(Or(Or(x, y, 0), z, 0))
    assert predicate("!.x && .y") == shape(And(Not(x, 0), y, 0))
    assert predicate("!(.x && .y)") == shape(Not(And(x, y, 0), 0))
    assert predicate("!!.x") == shape(Not(Not(x, 0), 0))
    assert predicate("!.x == 1") == shape(Not(Compare("==", x.operand, Literal(1, 0), 0), 0))
    assert predicate("((.x))") == shape(x)
    assert predicate("'lit'") == shape(Truthy(Literal("lit", 0), 0))


def test_filter_positions() -> None:
    predicate = parse_path("a[?(!.x || .y && 1 < .z)]").steps[1].predicate
    assert predicate == Or(
        Not(Truthy(RelPath(("x",), 5), 5), 4),
        And(
            Truthy(RelPath(("y",), 11), 11),
            Compare("<", Literal(1, 17), RelPath(("z",), 21), 19),
            14,
        ),
        8,
    )


def test_filter_continues_the_path() -> None:
    assert shape(parse_path("imps[?(.w > 2)].deals[*].id").steps[2:]) == shape(
        (FieldStep("deals", 0), WildcardStep(0), FieldStep("id", 0))
    )
    assert isinstance(parse_path("nested[?(.id == 'x')]").steps[1], FilterStep)
    assert isinstance(parse_path("a[ ? ( .x ) ]").steps[1], FilterStep)


@pytest.mark.parametrize(
    ("text", "pos", "fragment"),
    [
        (
            "imps[?(w > 1)]",
            7,
            "bare identifier 'w' in a filter predicate; did you forget a leading '.'?",
        ),
        ("imps[?(.w > w)]", 12, "did you forget a leading '.'?"),
        ("a[?(.b[0])]", 6, "indexing is not supported inside filter predicates"),
        ("a[?(.x > 1]", 10, "expected ')' to close the filter predicate, found ']'"),
        ("a[?(.x > 1)", 11, "unclosed '[': expected ']' after the filter"),
        ("a[?(.x > 1)) ]", 11, "expected ']' after the filter, found ')'"),
        ("a[?.x]", 3, "expected '(' after '[?'"),
        ("a[?()]", 4, "expected a field (.name), a literal or '(' in the filter predicate"),
        ("a[?(.x > )]", 9, "expected a field (.name), a literal or '('"),
        ("a[?(.x = 1)]", 7, "unexpected '=' (did you mean '=='?)"),
        ("a[?(.x & .y)]", 7, "did you mean '&&'?"),
        ("a[?(.x | .y)]", 7, "did you mean '||'?"),
        ("a[?(.x == 1 == 2)]", 12, "expected ')' to close the filter predicate, found '=='"),
        ("a[?(.x..y)]", 7, "double '.'"),
        ("a[?(.)]", 5, "expected a field name after '.', found ')'"),
        ("a[?(.x > 18446744073709551616)]", 9, "does not fit in int64 or uint64"),
        ("a[?((.x]", 7, "expected ')' to close '(', found ']'"),
        ("a[?(.x 1)]", 7, "expected ')' to close the filter predicate, found integer 1"),
    ],
)
def test_filter_errors(text: str, pos: int, fragment: str) -> None:
    expect_error(text, pos, fragment)


# ------------------------------------------------------------------------------------------
# §1.2 / §1.3 syntax errors, with the caret


@pytest.mark.parametrize(
    ("text", "pos", "fragment"),
    [
        (".id", 0, "a path starts with a field name, not '.'"),
        ("id.", 2, "trailing '.'"),
        ("a.b.", 3, "trailing '.'"),
        ("a..b", 2, "double '.'"),
        ("imps[*]id", 7, "missing '.' before field name 'id'"),
        ("imps[0] id", 8, "missing '.' before field name 'id'"),
        ("a b", 2, "missing '.' before field name 'b'"),
        ("tags[1", 6, "unclosed '['"),
        ("tags[", 5, "unclosed '['"),
        ("tags[*", 6, "unclosed '['"),
        ("tags[1:", 7, "unclosed '['"),
        ('tags["k"', 8, "unclosed '['"),
        ("tags[]", 5, "found ']'"),
        ("tags[x.]", 7, "expected the extension's full name inside '[ ]', found ']'"),
        ("tags[x y]", 7, "expected ']' after the extension's name, found identifier 'y'"),
        ("tags[1 2]", 7, "expected ']' after the index, found integer 2"),
        ("tags[1:2:3:4]", 10, "expected ']' after the slice, found ':'"),
        ("tags[*:]", 6, "expected ']' after '*', found ':'"),
        ("tags[(1)]", 5, "found '('"),
        ("a]", 1, "expected '.', '[' or end of path, found ']'"),
        ("a-1", 1, "found integer -1"),
        ("a.1", 2, "expected a field name after '.', found integer 1"),
        ("a.'b'", 2, "expected a field name after '.', found string 'b'"),
        ("[0]", 1, "a path starts with a field name, an extension ([pkg.ext]) or '(', found '[' and integer 0"),
        ("*", 0, "found '*'"),
        ("a😀", 1, "illegal character '😀'"),
        ("a.b$", 3, "illegal character '$'"),
        ("a\nb", 1, "illegal character '\\n'"),
        ("(tp.Root", 8, "expected ')' after the root message name, found end of path"),
        ("()", 1, "expected a message name inside '( )', found ')'"),
        ("(.tp.Root).x", 1, "expected a message name"),
        ("(tp..Root).x", 4, "expected a message name"),
        ("(tp.Root)[0]", 9, "expected '.' or end of path after the root message"),
        ("(tp.Root)id", 9, "expected '.' or end of path after the root message"),
        ("(tp.Root).", 9, "trailing '.'"),
        ("(tp.Root)..x", 10, "double '.'"),
    ],
)
def test_syntax_errors(text: str, pos: int, fragment: str) -> None:
    expect_error(text, pos, fragment)


def test_error_rendering() -> None:
    err = expect_error("imps[*]id", 7, "missing '.'")
    assert str(err) == "missing '.' before field name 'id'\n  imps[*]id\n         ^"


def test_leftmost_error_wins() -> None:
    # The syntax error at offset 2 is reported, not the illegal character after it.
    expect_error("a..b😀", 2, "double '.'")
    expect_error("tags[1.5😀]", 5, "float literal 1.5")


# ------------------------------------------------------------------------------------------
# format_path


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("imp[*].pmp.deals[2]", "imp[*].pmp.deals[2]"),
        ("(tp.Root).id", "id"),
        ("imp [ * ] . pmp", "imp[*].pmp"),
        ("tags[0x2]", "tags[2]"),
        ("tags[-010]", "tags[-8]"),
        ("tags[0:]", "tags[*]"),
        ("tags[::]", "tags[*]"),
        ("tags[1:3]", "tags[1:3]"),
        ("tags[:-3]", "tags[:-3]"),
        ("tags[::-2]", "tags[::-2]"),
        ("tags[3:0:-1]", "tags[3:0:-1]"),
        ("tags[1::1]", "tags[1::1]"),
        ("m['k']", 'm["k"]'),
        ("m['a\"b\\\\c']", 'm["a\\"b\\\\c"]'),
        ('m["\\n\\t\\r\\x01\\x7f é"]', 'm["\\n\\t\\r\\x01\\x7f é"]'),
        ("m[true][false]", "m[true][false]"),
        ("imps[?(.w>2)].id", "imps[?(.w > 2)].id"),
        ("imps[?(.w >= 1 && .id != 'i3')]", 'imps[?(.w >= 1 && .id != "i3")]'),
        ("a[?((.x || .y) && !(.z == 1.5))]", "a[?((.x || .y) && !(.z == 1.5))]"),
        ("a[?(.x || (.y || .z))]", "a[?(.x || (.y || .z))]"),
        ("a[?(!!.x)]", "a[?(!!.x)]"),
        ("a[?(!(.x && .y))]", "a[?(!(.x && .y))]"),
        ("a[?(.a.b == 0x10 || false)]", "a[?(.a.b == 16 || false)]"),
        ("a[?(.f < -1e3)]", "a[?(.f < -1000.0)]"),
    ],
)
def test_format_path(text: str, canonical: str) -> None:
    assert format_path(parse_path(text).steps) == canonical
    assert steps_of(canonical) == steps_of(text)


def test_format_path_of_a_suffix() -> None:
    steps = parse_path("imp[2].banner.w").steps
    assert format_path(steps[1:]) == "[2].banner.w"
    assert format_path(steps[2:]) == "banner.w"
    assert format_path(iter(steps)) == "imp[2].banner.w"


def test_format_path_rejects_non_steps() -> None:
    with pytest.raises(TypeError):
        format_path(["imp"])  # type: ignore[list-item]


# A step sequence survives format_path → parse_path unchanged.

_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
_int64 = st.integers(-(2**63), 2**63 - 1)
_bound = st.none() | _int64
_atoms = st.one_of(
    st.lists(_names, min_size=1, max_size=3).map(lambda names: RelPath(tuple(names), 0)),
    st.text(st.characters(codec="utf-8"), max_size=8).map(lambda s: Literal(s, 0)),
    st.integers(-(2**63), 2**64 - 1).map(lambda i: Literal(i, 0)),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: Literal(f, 0)),
    st.booleans().map(lambda b: Literal(b, 0)),
)
_predicates = st.recursive(
    st.one_of(
        _atoms.map(lambda atom: Truthy(atom, 0)),
        st.builds(
            lambda op, left, right: Compare(op, left, right, 0),
            st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
            _atoms,
            _atoms,
        ),
    ),
    lambda inner: st.one_of(
        inner.map(lambda p: Not(p, 0)),
        st.builds(lambda a, b: And(a, b, 0), inner, inner),
        st.builds(lambda a, b: Or(a, b, 0), inner, inner),
    ),
    max_leaves=8,
)
_slices = st.builds(
    lambda start, stop, step: SliceStep(start, stop, step, 0),
    _bound,
    _bound,
    st.none() | _int64.filter(bool),
).filter(lambda s: not (s.start in (None, 0) and s.stop is None and s.step in (None, 1)))
_brackets = st.one_of(
    _int64.map(lambda i: IndexStep(i, 0)),
    st.text(st.characters(codec="utf-8"), max_size=8).map(lambda k: KeyStep(k, 0)),
    st.booleans().map(lambda b: KeyStep(b, 0)),
    st.just(WildcardStep(0)),
    _slices,
    _predicates.map(lambda p: FilterStep(p, 0)),
)
_paths = st.builds(
    lambda first, rest: (first, *rest),
    _names.map(lambda n: FieldStep(n, 0)),
    st.lists(_names.map(lambda n: FieldStep(n, 0)) | _brackets, max_size=6),
)


@settings(max_examples=examples(38), deadline=None, database=None)
@given(_paths)
def test_format_then_parse_round_trips(steps: tuple) -> None:
    text = format_path(steps)
    assert shape(parse_path(text).steps) == shape(steps)
    assert format_path(parse_path(text).steps) == text
