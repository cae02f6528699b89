"""protojson in and out, against the runtime's json_format.

Oracle: for every text, ``json_format.Parse`` either rejects it (so must we: a dead letter)
or gives a message whose ``SerializeToString(deterministic=True)`` must equal our wire bytes,
and whose binary transcode must equal our JSON transcode. Texts come from random messages of
the rich schema and of random proto2/proto3/editions schemas (printed by MessageToJson with
random options), from random edits of those texts, and from hand-made malformed cases.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pyarrow as pa
import pyarrow.parquet
import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

import wirearrow as wa
from depth import randomized
from schemagen import compile_file, compile_source, messages, schema_specs
from wirearrow.sources.protojson import JsonReader

RICH = pathlib.Path(__file__).parent / "protos" / "rich.proto"
ROOT = "wirearrow.tests.rich.Root"



class _Rich(tuple):
    def __repr__(self) -> str:  # hypothesis prints its arguments: not the descriptor set
        return "rich"


@pytest.fixture(scope="module")
def rich():
    compiled = compile_file(str(RICH))
    cls = compiled.message_class(ROOT)
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, ROOT)
    return _Rich((compiled, cls, schema))


def runtime(text: Any, cls: type, pool: Any, ignore: bool = False) -> bytes | None:
    """The runtime's verdict: the message's deterministic bytes, or None when rejected.

    Rejected also when the runtime cannot parse its own bytes back (a Struct nested past
    its depth limit: json_format builds it, the wire form is too deep for any reader).
    """
    try:
        message = json_format.Parse(text, cls(), ignore_unknown_fields=ignore, descriptor_pool=pool)
        wire = message.SerializeToString(deterministic=True)
        cls.FromString(wire)
    except Exception:  # the runtime's own failures are not all ParseError (e.g. UTF-8)
        return None
    return wire


def _canon(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "NaN"  # NaN != NaN: compare it as a marker
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canon(v) for v in value]
    return value


def same(a: pa.RecordBatch, b: pa.RecordBatch) -> bool:
    return a.schema == b.schema and _canon(a.to_pylist()) == _canon(b.to_pylist())


def check_parity(texts: list, cls: type, schema: wa.Schema, ignore: bool = False) -> None:
    pool = cls.DESCRIPTOR.file.pool
    wire, index, failures = JsonReader(cls.DESCRIPTOR, ignore_unknown_fields=ignore).to_wire(
        texts
    )
    got = dict(zip(index.tolist(), wire.to_pylist(), strict=True))
    for i, text in enumerate(texts):
        want = runtime(text, cls, pool, ignore)
        if want is None:
            assert i not in got, f"accepted what the runtime rejects: {text!r}"
        else:
            assert i in got, f"rejected what the runtime accepts: {text!r}: {failures}"
            assert got[i] == want, f"wire differs for {text!r}"
    # and the same Arrow as the binary form, through the Transcoder, bad records dead-lettered
    tc = wa.Transcoder(schema, on_error="dead_letter")
    accepted = [texts[i] for i in sorted(got)]
    binary = [got[i] for i in sorted(got)]
    from_json = tc.transcode(texts, format="json", ignore_unknown_fields=ignore)
    assert same(from_json, tc.transcode(binary))
    dead = tc.dead_letters()
    assert dead.column("index").to_pylist() == sorted(set(range(len(texts))) - set(got))
    assert len(accepted) == from_json.num_rows
    assert all(r.startswith("JSON: ") for r in dead.column("reason").to_pylist())


def print_json(message: Any, options: dict) -> str | None:
    """The runtime's text, or None for a message it cannot print (an Any of no known type)."""
    pool = message.DESCRIPTOR.file.pool
    try:
        return json_format.MessageToJson(message, indent=None, descriptor_pool=pool, **options)
    except Exception:
        return None


_OPTIONS = st.fixed_dictionaries(
    {
        "preserving_proto_field_name": st.booleans(),
        "use_integers_for_enums": st.booleans(),
        "always_print_fields_with_no_presence": st.booleans(),
    }
)


@randomized(8, shrink=False)  # shrinking these takes minutes
@given(data=st.data())
def test_rich_messages_printed_by_the_runtime(rich, data) -> None:
    _compiled, cls, schema = rich
    batch = data.draw(st.lists(messages(cls.DESCRIPTOR), min_size=1, max_size=4))
    options = data.draw(_OPTIONS)
    texts = [t for t in (print_json(m, options) for m in batch) if t is not None]
    # both str and bytes records
    check_parity([t if i % 2 else t.encode() for i, t in enumerate(texts)], cls, schema)


@randomized(4, shrink=False)  # shrinking these takes minutes
@given(data=st.data())
def test_random_schemas_printed_by_the_runtime(data) -> None:
    spec = data.draw(schema_specs())
    compiled = compile_source(spec.render())
    cls = compiled.message_class(spec.root)
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    batch = data.draw(st.lists(messages(cls.DESCRIPTOR, max_depth=3), min_size=1, max_size=3))
    options = data.draw(_OPTIONS)
    texts = [t for t in (print_json(m, options) for m in batch) if t is not None]
    if texts:
        check_parity(texts, cls, schema)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.sampled_from(
        ["", "1", "-1", "1.5", "1e3", " 2", "0x10", "NaN", "Infinity", "-Infinity", "nan",
         "true", "false", "RED", "GREEN", "INFRARED", "BLUE", "3", "AAEC", "AA-_", "A===",
         "!!!", "1970-01-01T00:00:00Z", "2024-02-30T00:00:00Z", "9999-12-31T23:59:59.999Z",
         "1.5s", "-0.000000001s", "1s5", "a,bC", "fooBar", "\ud800", "1_000", "4294967296",
         "18446744073709551616", "-2147483649", "3.4028235e38", "3.5e38"]
    )
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _set(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    obj[path[0]] = _set(obj[path[0]], path[1:], value)
    return obj


_FIELD_NAMES = st.sampled_from(
    ["id", "imp", "s", "n", "d", "c", "opt", "color", "colors", "ts", "dur", "wInt64", "w_bool",
     "wDouble", "wBytes", "wFloat", "mask", "any", "scalars", "fDouble", "fFloat", "fInt32",
     "fUint64", "fBool", "fBytes", "fEnum", "counts", "dealByNum", "flags", "blobs",
     "colorsByCode", "timesById", "times", "big", "lists", "opts", "@type", "unknown", "[x.y]"]
)


@randomized(38, shrink=False)  # shrinking these takes minutes
@given(data=st.data())
def test_edited_texts_are_accepted_and_rejected_as_the_runtime_does(rich, data) -> None:
    _compiled, cls, schema = rich
    base = data.draw(messages(cls.DESCRIPTOR, max_depth=3))
    printed = print_json(base, {})
    obj = json.loads(printed) if printed is not None else {}
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(_paths(obj)))
        if data.draw(st.booleans()) and isinstance(obj, dict):
            obj[data.draw(_FIELD_NAMES)] = data.draw(_JSON)
        else:
            obj = _set(obj, where, data.draw(_JSON))
    text = json.dumps(obj)
    ignore = data.draw(st.booleans())
    check_parity([text], cls, schema, ignore)


# Floats past float's range: the runtime refuses a JSON number with a fraction or exponent
# (3.4028235e38) but takes a quoted or integer one, rounded as C rounds (to FLT_MAX, or to
# infinity from the halfway point 2**128 - 2**103 on). A hypothesis run found the quoted case.
FLOAT_EDGES = [
    '{"wFloat": "3.4028235e38"}',
    '{"wFloat": "-3.4028235e38"}',
    '{"wFloat": "1e39"}',
    '{"wFloat": "1e400"}',
    '{"wFloat": "3.4028235677973362e38"}',
    '{"wFloat": "3.4028235677973366e38"}',
    '{"wFloat": 340282356779733661637539395458142568447}',
    '{"wFloat": 340282356779733661637539395458142568448}',
    '{"scalars": {"fFloat": "-3.40282357e38"}}',
]


@pytest.mark.parametrize("text", FLOAT_EDGES)
def test_floats_past_the_range_read_as_the_runtime_reads_them(rich, text) -> None:
    _compiled, cls, schema = rich
    assert runtime(text, cls, cls.DESCRIPTOR.file.pool) is not None  # accepted there
    check_parity([text], cls, schema)
    assert runtime('{"wFloat": 3.4028235e38}', cls, cls.DESCRIPTOR.file.pool) is None
    check_parity(['{"wFloat": 3.4028235e38}'], cls, schema)


MALFORMED = [
    '{"id": 5}',  # wrong type
    '{"opt": "x"}',
    '{"opt": 2147483648}',  # out of range
    '{"big": -1}',
    '{"scalars": {"fUint32": 4294967296}}',
    '{"scalars": {"fFloat": 3.5e38}}',
    '{"scalars": {"fInt32": 1.5}}',
    '{"scalars": {"fBool": "true"}}',
    '{"scalars": {"fDouble": NaN}}',
    '{"scalars": {"fBytes": 5}}',  # bad base64
    '{"scalars": {"fBytes": "A"}}',
    '{"ts": "2024-13-01T00:00:00Z"}',  # bad timestamps
    '{"ts": "not a time"}',
    '{"ts": 0}',
    '{"dur": "1.5"}',
    '{"id": "a", "id": "b"}',  # duplicate keys
    '{"imp": [{"id": "1", "id": "2"}]}',
    '{"s": "a", "n": "1"}',  # two members of a oneof
    '{"imp": null, "imp": []}',
    '{"imp": [null]}',
    '{"imp": {"id": "1"}}',
    '{"counts": {"a": "b"}}',
    '{"dealByNum": {"x": {}}}',
    '{"flags": {"yes": "v"}}',
    '{"color": "BLUE"}',
    '{"nope": 1}',  # unknown field
    '{"any": {"value": "x"}}',
    '{"any": {"@type": "type.googleapis.com/no.Such"}}',
    '{"[ext.x]": 1}',
    "5",
    "null",
    "",
    "{",
    '{"id": "\\ud800"}',
    b'{"id": "\xff"}',  # not UTF-8
    "\ufeff{}",
    '{"imp": [{"deals": [{"seats": [{"code": 1}]}]}]}',
    '{"d": ' * 150 + "{}" + "}" * 150,  # deeper than max_recursion_depth
    "[" * 5000 + "]" * 5000,  # deeper than any parser's stack
    '{"imp": [{"dealById": {"k": ' * 60 + "{}" + "}}]}" * 60,
    # A field name that is not UTF-8 (a lone surrogate) fails the runtime's lookup even with
    # ignore_unknown_fields; a string read as a message iterates its characters as names.
    '{"\\ud800": 1}',
    '{"lists": {"x\\udc00": 1}}',
    '{"lists": "\\ud800"}',
]


@pytest.mark.malformed  # (also run against the bounds-checked debug build)
def test_malformed_texts_are_per_record_errors(rich) -> None:
    _compiled, cls, schema = rich
    good = '{"id": "ok"}'
    texts = [good, *MALFORMED, good]
    for ignore in (False, True):
        check_parity(texts, cls, schema, ignore)
    tc = wa.Transcoder(schema, on_error="dead_letter")
    batch = tc.transcode(texts, format="json")
    assert batch.column("id").to_pylist() == ["ok", "ok"]
    dead = tc.dead_letters()
    assert dead.num_rows == len(MALFORMED)
    assert dead.column("raw")[0].as_py() == MALFORMED[0].encode()
    by_index = {r["index"]: r for r in dead.to_pylist()}
    assert by_index[1]["path"] == "id"
    assert by_index[16]["reason"] == "JSON: duplicate key 'id'"
    assert by_index[26]["reason"].startswith('JSON: Message type "wirearrow.tests.rich.Root" has no')
    assert tc.stats.records_failed == len(MALFORMED) and tc.stats.records_ok == 2


def test_the_runtimes_leniencies_are_followed(rich) -> None:
    # json_format accepts these; so do we, with the same values (check_parity compares bytes)
    _compiled, cls, schema = rich
    texts = [
        "[]",  # iterated as an object with no keys
        '{"scalars": {"fEnum": 1.5, "fInt32": "1e3", "fBytes": "!!AAE="}}',
        '{"scalars": {"fFloat": "Infinity", "fDouble": "-1e400", "fUint64": "0x"}}',
        '{"id": "a", "imp": [{"w": 1.0}], "opt": "\t7"}',
    ]
    check_parity(texts[:2] + texts[3:], cls, schema)
    tc = wa.Transcoder(schema, columns=["scalars.f_enum", "scalars.f_int32", "scalars.f_bytes"])
    assert tc.transcode([texts[1]], format="json").to_pylist() == [
        {"scalars.f_enum": 1, "scalars.f_int32": 1000, "scalars.f_bytes": b"\x00\x01"}
    ]


STRUCTS = """
syntax = "proto3";
package s;
import "google/protobuf/struct.proto";
import "google/protobuf/any.proto";
message M {
  google.protobuf.Struct s = 1;
  google.protobuf.Value v = 2;
  repeated google.protobuf.Value vs = 3;
  google.protobuf.ListValue l = 4;
  google.protobuf.Any a = 5;
  google.protobuf.NullValue n = 6;
}
"""


def test_struct_value_any_corners() -> None:
    compiled = compile_source(STRUCTS)
    cls = compiled.message_class("s.M")
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, "s.M")
    texts = [
        '{"s": {"a": 1, "b": [1, "x", null, {"c": true}], "": {}}, "v": null, "vs": [null, 1.5],'
        ' "l": [], "n": null}',
        '{"v": NaN}',
        '{"v": {"x": 1e400}}',
        '{"s": null, "v": 1}',
        '{"a": {"@type": "type.googleapis.com/google.protobuf.Struct", "value": {"k": [1]}}}',
        '{"a": {"@type": "t/google.protobuf.Any", "value": {"@type": "t/s.M", "n": null}}}',
        '{"a": {"@type": "type.googleapis.com/s.M", "v": 2}}',
        '{"a": {"@type": "x/google.protobuf.Int32Value", "value": "7"}}',
        '{"a": {"@type": "x/google.protobuf.Duration", "value": "-1.5s"}}',
        '{"a": {"@type": "x/google.protobuf.Int32Value"}}',
        '{"v": ' + "[" * 30 + "]" * 30 + "}",
        '{"v": ' + "[" * 300 + "]" * 300 + "}",  # past the depth limit
        '{"v": ' + '{"a":' * 300 + "1" + "}" * 300 + "}",
        '{"s": {"b": 18446744073709551617}}',
    ]
    for ignore in (False, True):
        check_parity(texts, cls, schema, ignore)
    # non-finite numbers have no JSON form: the text column writes them as Python does
    tc = wa.Transcoder(schema, columns=["v"])
    assert tc.transcode(texts[1:3], format="json").to_pylist() == [
        {"v": "NaN"},
        {"v": '{"x":Infinity}'},
    ]


def test_raise_policy_names_the_first_bad_record_and_its_json_path(rich) -> None:
    _, _, schema = rich
    tc = wa.Transcoder(schema)
    with pytest.raises(wa.DecodeError) as info:
        tc.transcode(['{"id": "a"}', '{"imp": [{"banner": {"w": "wide"}}]}'], format="json")
    assert info.value.index == 1 and info.value.path == "imp[0].banner.w"
    assert "JSON:" in str(info.value)


def test_input_forms_and_flat_plans(rich) -> None:
    compiled, cls, schema = rich
    texts = ['{"id": "a", "imp": [{"id": "x"}, {"id": "y"}]}', '{"id": "b"}']
    tc = wa.Transcoder(schema, columns=["id", "imp[*].id"])
    want = tc.transcode([runtime(t, cls, compiled.pool) for t in texts])
    for records in (
        texts,
        [t.encode() for t in texts],
        pa.array(texts),
        pa.array([t.encode() for t in texts], type=pa.large_binary()),
        pa.chunked_array([pa.array(texts[:1]), pa.array(texts[1:])]),
    ):
        assert same(tc.transcode(records, format="json"), want)
    with pytest.raises(ValueError, match="format must be one of"):
        tc.transcode(texts, format="yaml")


def test_ignore_unknown_fields_skips_fields_and_enum_names(rich) -> None:
    _, _, schema = rich
    tc = wa.Transcoder(schema, columns=["id", "color", "colors"], on_error="skip")
    text = '{"id": "a", "nope": {"x": 1}, "color": "BLUE", "colors": ["RED", "BLUE"]}'
    assert tc.transcode([text], format="json").num_rows == 0
    batch = tc.transcode([text], format="json", ignore_unknown_fields=True)
    assert batch.to_pylist() == [{"id": "a", "color": 0, "colors": [1]}]


def test_read_ndjson(tmp_path, rich) -> None:
    _, _, schema = rich
    path = tmp_path / "records.ndjson"
    path.write_bytes(b'{"id": "a"}\n\n  \r\n{"id": "b"}\r\n{"id": 3}')
    records = wa.read_ndjson(path)
    assert records.to_pylist() == [b'{"id": "a"}', b'{"id": "b"}\r', b'{"id": 3}']
    tc = wa.Transcoder(schema, columns=["id"], on_error="dead_letter")
    assert tc.transcode(records, format="json").column("id").to_pylist() == ["a", "b"]
    assert tc.dead_letters().column("index").to_pylist() == [2]
    assert wa.read_ndjson(b"").to_pylist() == []


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"preserving_proto_field_name": True},
        {"use_integers_for_enums": True, "always_print_fields_with_no_presence": True},
        {"indent": 2},
    ],
)
def test_to_json_equals_message_to_json(rich, options) -> None:
    compiled, cls, schema = rich
    texts = [
        '{"id": "a", "imp": [{"id": "x", "color": "RED"}], "ts": "2024-01-02T03:04:05.123456Z",'
        ' "wInt64": "7", "counts": {"k": "1"}, "mask": "a,bC", "scalars": {"fBytes": "AAE="}}',
        '{"n": "12", "opt": 0, "dur": "1.5s", "any": {"@type":'
        ' "type.googleapis.com/wirearrow.tests.rich.Seat", "code": "s"}}',
    ]
    tc = wa.Transcoder(schema)
    batch = tc.transcode(texts, format="json")
    out = tc.to_json(batch, **options)
    want = [
        json_format.MessageToJson(
            json_format.Parse(t, cls(), descriptor_pool=compiled.pool),
            descriptor_pool=compiled.pool,
            **{"indent": None, **options},
        )
        for t in texts
    ]
    assert out.to_pylist() == want
    # and back: the printed texts read to the same Arrow
    assert same(tc.transcode(out, format="json"), batch)


# -- YAML, CLI and engines ------------------------------------------------------------------

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples" / "schema"


@pytest.fixture(scope="module")
def bid_json(bid_corpus, bid_class):
    return [print_json(bid_class.FromString(r), {}) for r in bid_corpus]


def test_yaml_input_format_and_cli_on_ndjson(tmp_path, bid_schema, bid_corpus, bid_json, capsys):
    import pyarrow.parquet as pq

    from wirearrow.cli import main

    lines = [*bid_json[:100], '{"id": 7}', *bid_json[100:]]
    (tmp_path / "in.ndjson").write_text("\n".join(lines) + "\n")
    (tmp_path / "plan.yaml").write_text(
        f"proto:\n  file: {EXAMPLES / 'bidrequest.proto'}\n  message: BidRequestEvent\n"
        f"  import_paths: [{EXAMPLES}]\n"
        "denormalizer:\n  columns:\n    - {name: id, path: id}\n    - {name: imp_id, path: 'imp[*].id'}\n"
        "errors:\n  policy: dead_letter\n"
        "input:\n  format: json\n"
    )
    plan = wa.load_plan(tmp_path / "plan.yaml")
    assert plan.input.format == "json" and not plan.input.ignore_unknown_fields
    out, dead = tmp_path / "out.parquet", tmp_path / "dead.parquet"
    assert main(["transcode", str(tmp_path / "plan.yaml"), str(tmp_path / "in.ndjson"),
                 "-o", str(out), "--dead-letters", str(dead)]) == 0
    want = wa.Transcoder(bid_schema, columns=[wa.Column("id"), wa.Column("imp[*].id", name="imp_id")])
    assert pq.read_table(out).to_pylist() == want.transcode(bid_corpus).to_pylist()
    letters = pq.read_table(dead).to_pylist()
    assert [(d["index"], d["path"]) for d in letters] == [(100, "id")]
    assert letters[0]["raw"] == b'{"id": 7}' and letters[0]["reason"].startswith("JSON: ")
    assert f"{len(lines)} records in" in capsys.readouterr().out.replace(",", "")
    # a bad value under input: is a located plan error
    (tmp_path / "bad.yaml").write_text(
        (tmp_path / "plan.yaml").read_text().replace("format: json", "format: xml")
    )
    with pytest.raises(wa.PlanError, match=r"input\.format"):
        wa.load_plan(tmp_path / "bad.yaml")


_TIMESTAMPS = st.builds(
    lambda y, mo, d, h, mi, s, frac, sep, z: f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}"
    + (f".{frac}" if frac is not None else "")
    + z,
    st.integers(0, 10000),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 24),
    st.integers(0, 60),
    st.integers(0, 61),
    st.none() | st.text("0123456789", min_size=0, max_size=10),
    st.sampled_from(["T", "t", " "]),
    st.sampled_from(["Z", "z", "+01:00", "-00:30", ""]),
)


@randomized(38, shrink=False)  # shrinking these takes minutes
@given(data=st.data())
def test_timestamps_parse_as_the_runtime_parses_them(rich, data) -> None:
    # canonical RFC 3339 texts take a path of our own; every other spelling the runtime's
    _compiled, cls, schema = rich
    stamps = data.draw(st.lists(_TIMESTAMPS, min_size=1, max_size=5))
    texts = [json.dumps({"ts": s, "times": [s]}) for s in stamps]
    check_parity(texts, cls, schema)


def test_a_lone_surrogate_in_a_bad_text_makes_a_dead_letter_of_valid_text(rich, tmp_path) -> None:
    """A JSON key "\\ud800" decodes to a lone surrogate, which the runtime's error message
    quotes: the dead letter's utf8 columns (and Parquet) must still take the reason."""
    schema = rich[2]
    texts = ['{"\\ud800": 1}', '{"dealByNum": {"-129": "\\ud800"}}', '{"id": "ok"}']
    tc = wa.Transcoder(schema, on_error="dead_letter")
    assert tc.transcode(texts, format="json").num_rows == 1
    dead = tc.dead_letters()
    assert dead.column("index").to_pylist() == [0, 1]
    reasons = dead.column("reason").to_pylist()
    assert all("\\ud800" in r for r in reasons), reasons
    pa.parquet.write_table(dead, tmp_path / "dead.parquet")
    with pytest.raises(wa.DecodeError) as raised:
        wa.Transcoder(schema).transcode(texts[:1], format="json")
    str(raised.value).encode("utf-8")  # printable to any UTF-8 stream
