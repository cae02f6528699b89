"""The Transcoder API: inputs, names, fan-out, presence, errors and accounting."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

import wirearrow as wa

PROTO = """
syntax = "proto3";
package t;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Deal { string id = 1; double price = 2; }
message Imp { string id = 1; repeated Deal deals = 2; int32 w = 3; repeated string tags = 4; }
message Geo { string country = 1; optional int32 zip = 2; }
message Device { Geo geo = 1; string os = 2; }
message Root {
  string id = 1;
  repeated Imp imps = 2;
  repeated string cur = 3;
  Device device = 4;
  map<string, int64> counts = 5;
  oneof choice { string s = 6; int64 n = 7; Deal d = 8; }
  google.protobuf.Timestamp ts = 9;
  google.protobuf.Int64Value wi = 10;
  repeated int32 nums = 11;
  bytes blob = 12;
}
"""


@pytest.fixture
def root(compile_proto):
    return compile_proto(PROTO, "t.Root")


def _msg(cls, **kw):
    return cls(**kw).SerializeToString()


def test_correlated_nested_fanout_and_left_join(root) -> None:
    schema, Root = root
    m = Root(id="r1")
    i1 = m.imps.add(id="i1")
    i1.deals.add(id="d11")
    i1.deals.add(id="d12")
    m.imps.add(id="i2")  # no deals: still one row
    i3 = m.imps.add(id="i3")
    i3.deals.add(id="d31")
    tc = wa.Transcoder(schema, columns=["id", "imps[*].id", "imps[*].deals[*].id"])
    rows = tc.transcode([m.SerializeToString()]).to_pylist()
    assert [(r["imps[*].id"], r["imps[*].deals[*].id"]) for r in rows] == [
        ("i1", "d11"),
        ("i1", "d12"),
        ("i2", None),
        ("i3", "d31"),
    ]
    assert {r["id"] for r in rows} == {"r1"}
    # column order never changes values
    tc2 = wa.Transcoder(schema, columns=["imps[*].deals[*].id", "imps[*].id"])
    rows2 = tc2.transcode([m.SerializeToString()]).to_pylist()
    assert [(r["imps[*].id"], r["imps[*].deals[*].id"]) for r in rows2] == [
        ("i1", "d11"),
        ("i1", "d12"),
        ("i2", None),
        ("i3", "d31"),
    ]


def test_sibling_fanouts_cross_join_first_outermost(root) -> None:
    schema, Root = root
    data = _msg(Root, imps=[{"id": "a"}, {"id": "b"}], cur=["USD", "EUR", "GBP"])
    rows = wa.Transcoder(schema, columns=["imps[*].id", "cur[*]"]).transcode([data]).to_pylist()
    assert [(r["imps[*].id"], r["cur[*]"]) for r in rows] == [
        ("a", "USD"),
        ("a", "EUR"),
        ("a", "GBP"),
        ("b", "USD"),
        ("b", "EUR"),
        ("b", "GBP"),
    ]


def test_fanouts_under_a_pick_are_ordered_among_its_siblings(root) -> None:
    """docs/paths.md rule 5: a pick (imps[0]) adds no rows, so the fan-outs below it are
    ordered by first use among the fan-outs beside it, not right after one another."""
    schema, Root = root
    m = Root(cur=["USD", "EUR"])
    i0 = m.imps.add(id="i0")
    i0.deals.add(id="d1")
    i0.deals.add(id="d2")
    columns = ["imps[0].deals[*].id", "cur[*]", "imps[0].deals[:2].id"]
    rows = wa.Transcoder(schema, columns=columns).transcode([m.SerializeToString()]).to_pylist()
    assert [tuple(r[c] for c in columns) for r in rows] == [
        (a, cur, b) for a in ("d1", "d2") for cur in ("USD", "EUR") for b in ("d1", "d2")
    ]


def test_empty_message_yields_one_row_of_nulls_and_defaults(root) -> None:
    schema, _ = root
    tc = wa.Transcoder(
        schema, columns=["id", "imps[*].id", "device.geo.country", "device.geo.zip", "ts", "wi"]
    )
    rows = tc.transcode([b""]).to_pylist()
    assert rows == [
        {
            "id": "",
            "imps[*].id": None,
            "device.geo.country": None,
            "device.geo.zip": None,
            "ts": None,
            "wi": None,
        }
    ]


def test_presence_under_present_parents(root) -> None:
    schema, Root = root
    tc = wa.Transcoder(schema, columns=["device.geo.country", "device.geo.zip", "device.os", "wi"])
    with_geo = _msg(Root, device={"geo": {}}, wi={})
    no_geo = _msg(Root, device={})
    rows = tc.transcode([with_geo, no_geo]).to_pylist()
    assert rows[0] == {"device.geo.country": "", "device.geo.zip": None, "device.os": "", "wi": 0}
    assert rows[1] == {
        "device.geo.country": None,
        "device.geo.zip": None,
        "device.os": "",
        "wi": None,
    }


def test_indices_slices_maps_and_filters(root) -> None:
    schema, Root = root
    data = _msg(
        Root,
        imps=[{"id": f"i{k}", "w": k} for k in range(5)],
        counts={"a": 1, "b": 2},
        cur=["a", "b", "c", "d", "e"],
    )
    tc = wa.Transcoder(
        schema,
        columns=[
            wa.Column("imps[0].id", name="first"),
            wa.Column("imps[-1].id", name="last"),
            wa.Column("imps[9].id", name="missing"),
            wa.Column('counts["b"]', name="b"),
            wa.Column('counts["zz"]', name="zz"),
        ],
    )
    assert tc.transcode([data]).to_pylist() == [
        {"first": "i0", "last": "i4", "missing": None, "b": 2, "zz": None}
    ]
    sliced = wa.Transcoder(schema, columns=["cur[::-2]"]).transcode([data]).column(0).to_pylist()
    assert sliced == ["e", "c", "a"]
    kept = wa.Transcoder(schema, columns=["imps[?(.w >= 1 && .id != 'i3')].id"]).transcode([data])
    assert kept.column(0).to_pylist() == ["i1", "i2", "i4"]
    entries = wa.Transcoder(schema, columns=["counts[*]"]).transcode([data]).column(0).to_pylist()
    assert sorted(entries) == [1, 2]


def test_first_and_last_match_pick_one_element_without_fan_out(root) -> None:
    schema, Root = root
    records = [
        _msg(Root, imps=[{"id": f"i{k}", "w": k % 3, "deals": [{"id": f"d{k}"}]} for k in range(6)]),
        _msg(Root, imps=[{"id": "only", "w": 0}]),  # no element matches .w == 1
        _msg(Root),
    ]
    tc = wa.Transcoder(
        schema,
        columns=[
            wa.Column("imps[?(.w == 1)][0].id", name="first"),
            wa.Column("imps[?(.w == 1)][-1].id", name="last"),
            wa.Column("imps[?(.w == 1)][1].deals[*].id", name="second_deals"),
            wa.Column("imps[?(.w == 1)][-3].id", name="third_last"),
            wa.Column("imps[?(.w == 1)][0].w", name="first_w"),  # same pick, other field
        ],
    )
    assert tc.transcode(records).to_pylist() == [
        {"first": "i1", "last": "i4", "second_deals": "d4", "third_last": None, "first_w": 1},
        {"first": None, "last": None, "second_deals": None, "third_last": None, "first_w": None},
        {"first": None, "last": None, "second_deals": None, "third_last": None, "first_w": None},
    ]
    # next to a fan-out: broadcast on every element's row, never a cross join
    both = wa.Transcoder(schema, columns=["imps[*].id", "imps[?(.w == 2)][0].id"])
    assert both.transcode(records[:1]).to_pylist() == [
        {"imps[*].id": f"i{k}", "imps[?(.w == 2)][0].id": "i2"} for k in range(6)
    ]
    # strict mode does not apply: fewer matches than the index is a null, not a bad record
    strict = wa.Transcoder(schema, columns=[wa.Column("imps[?(.w == 1)][5].id", strict=True)])
    assert strict.transcode(records).column(0).to_pylist() == [None, None, None]


@pytest.mark.parametrize(
    ("path", "pos", "fragment"),
    [
        ("imps[?(.w == 1)][*].id", 16, "[*] cannot follow a filter: only [N] (the N-th match"),
        ("imps[?(.w == 1)][0:2].id", 16, "a slice cannot follow a filter"),
        ("imps[?(.w == 1)][?(.w)].id", 16, "a filter cannot follow a filter"),
        ("imps[?(.w == 1)][0][0].id", 19, "an index must follow a field"),
        ("imps[?(.w == 1)][9223372036854775808]", 16, "out of range for a list"),
        ("device.geo[?(.zip > 1)][0].country", 23, "'geo' is not repeated: its filter keeps"),
        ("imps[?(.ww == 1)][0].id", 7, "field 'ww' not in message t.Imp (did you mean 'w'?)"),
    ],
)
def test_match_errors_point_at_the_step(root, path, pos, fragment) -> None:
    schema, _ = root
    with pytest.raises(wa.PlanError) as info:
        wa.Transcoder(schema, columns=[path])
    (problem,) = info.value.problems
    assert fragment in problem
    caret = problem.splitlines()[-1]
    assert caret.index("^") - 2 == pos, problem


def test_list_map_struct_and_wkt_leaves(root) -> None:
    schema, Root = root
    data = _msg(
        Root,
        nums=[3, -1],
        counts={"k": 7},
        device={"geo": {"country": "FR", "zip": 75}},
        ts={"seconds": 1_700_000_000, "nanos": 123_456_789},
        imps=[{"tags": ["x", "y"]}],
    )
    tc = wa.Transcoder(schema, columns=["nums", "counts", "device", "ts", "imps[*].tags"])
    t = tc.arrow_schema
    assert t.field("nums").type == pa.list_(pa.int32())
    assert t.field("counts").type == pa.map_(pa.utf8(), pa.int64())
    assert t.field("ts").type == pa.timestamp("us", tz="UTC")
    row = tc.transcode([data]).to_pylist()[0]
    assert row["nums"] == [3, -1]
    assert row["counts"] == [("k", 7)]
    assert row["device"] == {"geo": {"country": "FR", "zip": 75}, "os": ""}
    assert row["ts"].timestamp() == pytest.approx(1_700_000_000.123456)
    assert row["imps[*].tags"] == ["x", "y"]


def test_oneof_last_member_wins(root) -> None:
    schema, Root = root
    first = _msg(Root, s="text")
    second = _msg(Root, n=5)
    tc = wa.Transcoder(schema, columns=["s", "n", "d.id"])
    assert tc.transcode([first + second]).to_pylist() == [{"s": None, "n": 5, "d.id": None}]
    assert tc.transcode([second + first]).to_pylist() == [{"s": "text", "n": None, "d.id": None}]


def test_merge_of_repeated_singular_message_and_last_scalar_wins(root) -> None:
    schema, Root = root
    a = _msg(Root, id="x", device={"os": "ios"})
    b = _msg(Root, id="y", device={"geo": {"country": "DE"}})
    rows = (
        wa.Transcoder(schema, columns=["id", "device.os", "device.geo.country"])
        .transcode([a + b])
        .to_pylist()
    )
    assert rows == [{"id": "y", "device.os": "ios", "device.geo.country": "DE"}]


def test_inputs_are_equivalent(root) -> None:
    schema, Root = root
    msgs = [_msg(Root, id=f"m{i}", imps=[{"id": str(j)} for j in range(i % 3)]) for i in range(20)]
    tc = wa.Transcoder(schema, columns=["id", "imps[*].id"])
    expected = tc.transcode(msgs)
    arr = pa.array(msgs, type=pa.binary())
    assert tc.transcode(arr).equals(expected)
    assert tc.transcode(pa.array(msgs, type=pa.large_binary())).equals(expected)
    assert tc.transcode(pa.chunked_array([arr[:7], arr[7:]])).equals(expected)
    sliced = pa.array([b"junk", *msgs], type=pa.binary())[1:]
    assert tc.transcode(sliced).equals(expected)
    framed = b"".join(len(m).to_bytes(4, "little") + m for m in msgs)
    assert tc.transcode(framed, framing="u32le").equals(expected)
    with pytest.raises(TypeError):
        tc.transcode(framed)


def test_read_delimited_framings(tmp_path, root) -> None:
    _, Root = root
    msgs = [_msg(Root, id="a" * i) for i in range(300)]

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out)

    frames = {
        "varint": b"".join(varint(len(m)) + m for m in msgs),
        "u32le": b"".join(len(m).to_bytes(4, "little") + m for m in msgs),
        "u32be": b"".join(len(m).to_bytes(4, "big") + m for m in msgs),
    }
    for framing, blob in frames.items():
        path = tmp_path / f"ev.{framing}"
        path.write_bytes(blob)
        assert wa.read_delimited(path, framing=framing).to_pylist() == msgs
        assert wa.read_delimited(blob, framing=framing).to_pylist() == msgs
        with pytest.raises(ValueError, match="truncated"):
            wa.read_delimited(blob[:-1], framing=framing)
    with pytest.raises(ValueError, match="framing"):
        wa.read_delimited(b"", framing="u16")


def test_dead_letters_and_accounting(root) -> None:
    schema, Root = root
    good = _msg(Root, id="ok", imps=[{"id": "1"}, {"id": "2"}])
    bad = good[:-3]  # truncated inside the last imp
    msgs = [good, bad, good, b"\x00", None]
    tc = wa.Transcoder(schema, columns=["id", "imps[*].id"], on_error="dead_letter")
    batch = tc.transcode(pa.array(msgs, type=pa.binary()))
    assert batch.num_rows == 4  # two good records x two imps
    s = tc.stats
    assert (s.records_in, s.records_ok, s.records_failed, s.rows_out) == (5, 2, 3, 4)
    dead = tc.dead_letters()
    assert dead.column("index").to_pylist() == [1, 3, 4]
    assert dead.column("raw").to_pylist() == [bad, b"\x00", None]
    assert "imps[1]" in dead.column("path")[0].as_py()
    assert tc.dead_letters().num_rows == 0  # drained

    skip = wa.Transcoder(schema, columns=["id"], on_error="skip")
    assert skip.transcode(msgs[:4]).num_rows == 2
    assert skip.dead_letters().num_rows == 0

    strict = wa.Transcoder(schema, columns=["id"])
    with pytest.raises(wa.DecodeError) as info:
        strict.transcode(msgs[:4])
    assert info.value.index == 1 and isinstance(info.value, ValueError)


def test_plan_errors_are_reported_together_with_carets(root) -> None:
    schema, _ = root
    with pytest.raises(wa.PlanError) as info:
        wa.Transcoder(
            schema, columns=["idd", "imps.id", "id", wa.Column("cur[*]", name="id"), "counts.key"]
        )
    text = str(info.value)
    assert "field 'idd' not in message t.Root" in text
    assert "imps" in text and "[*]" in text
    assert "duplicate output name 'id'" in text
    assert len(info.value.problems) == 4
    assert "\n  idd\n  ^" in text


def test_pickle_ships_the_spec_and_rebuilds(root) -> None:
    schema, Root = root
    tc = wa.Transcoder(schema, columns=["id", wa.Column("imps[*].id", name="imp")], on_error="skip")
    blob = pickle.dumps(tc)
    assert len(blob) < 4096
    clone = pickle.loads(blob)
    data = [_msg(Root, id="x", imps=[{"id": "1"}])]
    assert clone.transcode(data).equals(tc.transcode(data))
    assert clone.arrow_schema == tc.arrow_schema


def test_whole_message_mode(root) -> None:
    schema, Root = root
    tc = wa.Transcoder(schema)
    assert tc.arrow_schema.names == [f.name for f in schema.descriptor.fields]
    row = tc.transcode(
        [_msg(Root, id="x", imps=[{"id": "1", "deals": [{"id": "d"}]}])]
    ).to_pylist()[0]
    assert row["imps"][0]["deals"] == [{"id": "d", "price": 0.0}]


def test_strict_mode(root) -> None:
    schema, Root = root
    data = _msg(Root, cur=["a", "b"])
    assert wa.Transcoder(schema, columns=["cur[5]"]).transcode([data]).column(0).to_pylist() == [
        None
    ]
    with pytest.raises(wa.DecodeError, match="out of range"):
        wa.Transcoder(schema, columns=[wa.Column("cur[5]", strict=True)]).transcode([data])
    with pytest.raises(wa.DecodeError):
        wa.Transcoder(schema, columns=[wa.Column("cur[0:10]", strict=True)]).transcode([data])
    ok = wa.Transcoder(schema, columns=[wa.Column("cur[0:2]", strict=True)]).transcode([data])
    assert ok.column(0).to_pylist() == ["a", "b"]


def test_map_keys_seen_again_replace_earlier_entries(root) -> None:
    schema, Root = root
    wire = b"".join(
        Root(counts={k: v}).SerializeToString() for k, v in [("a", 1), ("b", 2), ("a", 5)]
    )
    assert dict(Root.FromString(wire).counts) == {"a": 5, "b": 2}
    tc = wa.Transcoder(schema, columns=["counts"])
    assert tc.transcode([wire]).column(0).to_pylist() == [[("b", 2), ("a", 5)]]
    fanned = wa.Transcoder(schema, columns=["counts[*]"]).transcode([wire]).column(0).to_pylist()
    assert fanned == [2, 5]
    assert wa.Transcoder(schema, columns=['counts["a"]']).transcode([wire]).column(
        0
    ).to_pylist() == [5]


def test_strict_and_range_errors_follow_the_error_policy(compile_proto) -> None:
    schema, Msg = compile_proto(
        'syntax = "proto3"; import "google/protobuf/timestamp.proto";'
        "message M { repeated string tags = 1; google.protobuf.Timestamp ts = 2; }",
        "M",
    )
    good = Msg(tags=["a", "b"], ts={"seconds": 10}).SerializeToString()
    short = Msg(tags=["a"]).SerializeToString()
    far = Msg(tags=["a", "b"], ts={"seconds": 10**11}).SerializeToString()  # past year 2262
    tc = wa.Transcoder(
        schema,
        columns=[wa.Column("tags[1]", strict=True), "ts"],
        on_error="dead_letter",
        timestamp_unit="ns",
    )
    batch = tc.transcode([good, short, far, good])
    assert batch.column(0).to_pylist() == ["b", "b"]
    dead = tc.dead_letters()
    assert dead.column("index").to_pylist() == [1, 2]
    assert "out of range" in dead.column("reason")[0].as_py()
    assert dead.column("raw").to_pylist() == [short, far]
    s = tc.stats
    assert (s.records_in, s.records_ok, s.records_failed) == (4, 2, 2)
    with pytest.raises(wa.DecodeError) as info:
        wa.Transcoder(schema, columns=["ts"], timestamp_unit="ns").transcode([good, far])
    assert info.value.index == 1


def test_raise_names_the_first_bad_record_whatever_its_kind(root) -> None:
    schema, Root = root
    ok = _msg(Root, id="x")
    with pytest.raises(wa.DecodeError) as info:
        wa.Transcoder(schema, columns=["id"]).transcode(
            pa.array([ok, b"\x00", None], type=pa.binary())
        )
    assert info.value.index == 1


def test_json_well_known_types_single_and_repeated(compile_proto) -> None:
    schema, Msg = compile_proto(
        'syntax = "proto3"; import "google/protobuf/struct.proto";'
        "message M { google.protobuf.Struct st = 1; repeated google.protobuf.Value vals = 2; }",
        "M",
    )
    m = Msg()
    m.st.update({"a": 1, "b": [True, "x"]})
    m.vals.add().string_value = "s"
    m.vals.add().number_value = 2.5
    tc = wa.Transcoder(schema)
    assert tc.arrow_schema.field("vals").type == pa.list_(pa.utf8())
    row = tc.transcode([m.SerializeToString(), b""]).to_pylist()
    assert row[0] == {"st": '{"a":1.0,"b":[true,"x"]}', "vals": ['"s"', "2.5"]}
    assert row[1] == {"st": None, "vals": []}
    fan = wa.Transcoder(schema, columns=["vals[*]"]).transcode([m.SerializeToString()])
    assert fan.column(0).to_pylist() == ['"s"', "2.5"]
    with pytest.raises(wa.PlanError, match="JSON"):
        wa.Transcoder(schema, columns=["st", 'st.fields["a"]'])


def test_empty_message_is_a_struct_without_children(compile_proto) -> None:
    schema, Msg = compile_proto(
        'syntax = "proto3"; import "google/protobuf/empty.proto";'
        "message E {} message M { E e = 1; google.protobuf.Empty g = 2; int32 x = 3; }",
        "M",
    )
    tc = wa.Transcoder(schema)
    assert tc.arrow_schema.field("e").type == pa.struct([])
    batch = tc.transcode([Msg(e={}).SerializeToString(), b""])
    assert batch.column("e").is_null().to_pylist() == [False, True]


def test_full_validation_treats_a_wrong_wire_type_as_unknown_like_the_runtime(
    compile_proto,
) -> None:
    schema, Msg = compile_proto(
        'syntax = "proto3"; message Inner { string s = 1; }'
        "message M { int32 n = 1; Inner inner = 2; string name = 3; }",
        "M",
    )
    odd = bytes([0x08, 0x07, 0x18, 0x01])  # n=7, then `name` sent as a varint
    assert Msg.FromString(odd).n == 7
    tc = wa.Transcoder(schema, columns=["n"], validate="full")
    assert tc.transcode([odd]).column(0).to_pylist() == [7]
    bad_utf8 = Msg(inner={"s": "x"}).SerializeToString().replace(b"x", b"\xff")
    assert wa.Transcoder(schema, columns=["n"]).transcode([bad_utf8]).num_rows == 1
    with pytest.raises(wa.DecodeError, match="UTF-8") as info:
        tc.transcode([bad_utf8])
    assert info.value.path == "inner.s"


def test_uint64_map_keys_and_slice_spellings(compile_proto) -> None:
    schema, Msg = compile_proto(
        'syntax = "proto3"; message M { map<uint64, string> m = 1; repeated int32 v = 2; }', "M"
    )
    data = Msg(m={2**64 - 1: "max", 1: "one"}, v=[1, 2, 3]).SerializeToString()
    tc = wa.Transcoder(schema, columns=["m[0xFFFFFFFFFFFFFFFF]", "m[1]"])
    assert tc.transcode([data]).to_pylist() == [{"m[0xFFFFFFFFFFFFFFFF]": "max", "m[1]": "one"}]
    same = wa.Transcoder(schema, columns=["v[:2]", "v[0:2:1]"]).transcode([data])
    assert same.num_rows == 2  # one fan-out, not a cross join
    with pytest.raises(wa.PlanError, match="out of range for a list"):
        wa.Transcoder(schema, columns=["v[0xFFFFFFFFFFFFFFFF]"])
    with pytest.raises(wa.PlanError, match="uint64 keys"):
        wa.Transcoder(schema, columns=['m["k"]'])


def test_strings_output_as_utf8_are_valid_even_in_proto2(compile_proto) -> None:
    schema, Msg = compile_proto(
        'syntax = "proto2"; message M { optional string s = 1; optional int32 n = 2; }', "M"
    )
    bad = b"\x0a\x02\xc3\x28\x10\x05"  # s = b"\xc3\x28" (invalid UTF-8), n = 5
    assert Msg.FromString(bad).n == 5  # the runtime does not check proto2 strings
    assert wa.Transcoder(schema, columns=["n"]).transcode([bad]).column(0).to_pylist() == [5]
    # nor does wirearrow reject the record; the utf8 column cannot hold s: moved to _unknown
    tc = wa.Transcoder(schema, columns=["s", "n", "_unknown"], on_error="dead_letter")
    assert tc.transcode([bad]).to_pylist() == [{"s": None, "n": 5, "_unknown": bad[:4]}]
    assert (tc.stats.records_failed, tc.stats.strings_not_utf8) == (0, 1)
    tc = wa.Transcoder(schema, columns=["s", "n"], on_error="dead_letter",
                       unvalidated_strings="reject")  # fmt: skip
    assert tc.transcode([bad]).num_rows == 0
    assert tc.dead_letters().column("path").to_pylist() == ["s"]


def test_raise_prefers_an_earlier_strict_failure_to_a_later_wire_error(root) -> None:
    schema, Root = root
    good = _msg(Root, id="a", cur=["x", "y"])
    short = _msg(Root, id="b", cur=["x"])
    broken = good + b"\x0a\x05ab"
    tc = wa.Transcoder(schema, columns=["id", wa.Column("cur[1]", strict=True)])
    with pytest.raises(wa.DecodeError, match="strict") as info:
        tc.transcode([good, short, broken])
    assert info.value.index == 1
    skip = wa.Transcoder(schema, columns=["id", wa.Column("cur[1]", strict=True)], on_error="skip")
    assert skip.transcode([good, short, broken]).num_rows == 1
    s = skip.stats
    assert (s.records_ok, s.records_failed) == (1, 2)
    assert s.bytes_in == len(good) + len(short) + len(broken)


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_times_broadcast_onto_a_fan_out_are_the_runtimes(compile_proto, unit) -> None:
    # A fan-out's Timestamp and Duration columns are gathered at their row tables inside
    # ArrowTree.build (their epoch values, built first): as the runtime reads them, nulls kept.
    schema, Msg = compile_proto(
        'syntax = "proto3"; import "google/protobuf/timestamp.proto";'
        ' import "google/protobuf/duration.proto";'
        " message M { repeated string tags = 1; google.protobuf.Timestamp ts = 2;"
        " google.protobuf.Duration d = 3; }",
        "M",
    )
    messages = [
        Msg(tags=["a", "b"], ts={"seconds": 1_700_000_000, "nanos": 123_456_789}),
        Msg(tags=["c"], d={"seconds": -3, "nanos": -500_000_000}),
        Msg(ts={"seconds": 5}),  # no tags: one row, its tag null (docs/paths.md)
        Msg(tags=["d", "e", "f"], ts={"seconds": -86_400}, d={"seconds": 7}),
        Msg(tags=["g"]),
    ]
    tc = wa.Transcoder(schema, columns=["tags[*]", "ts", "d"], timestamp_unit=unit)
    batch = tc.transcode([m.SerializeToString() for m in messages])
    per = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    want = [
        (
            tag,
            (m.ts.seconds * per + m.ts.nanos * per // 10**9) if m.HasField("ts") else None,
            (m.d.seconds * per + int(m.d.nanos * per / 10**9)) if m.HasField("d") else None,
        )
        for m in messages
        for tag in (m.tags or [None])
    ]
    got = list(zip(
        batch.column(0).to_pylist(),
        *(batch.column(i).cast(pa.int64()).to_pylist() for i in (1, 2)),
        strict=True,
    ))
    assert got == want
    assert batch.schema.field("ts").type == pa.timestamp(unit, tz="UTC")
    assert batch.schema.field("d").type == pa.duration(unit)


def test_picked_elements_are_the_runtimes(compile_proto) -> None:
    # A tree that adds no rows: its picked columns (items[0].name) are gathered at their
    # pick tables inside ArrowTree.build; a missing element or field is null.
    schema, Msg = compile_proto(
        'syntax = "proto3"; import "google/protobuf/timestamp.proto";'
        " message Item { string name = 1; optional double price = 2; bool on = 3;"
        " google.protobuf.Timestamp at = 4; bytes raw = 5; }"
        " message M { string id = 1; repeated Item items = 2; }",
        "M",
    )
    messages = [
        Msg(id="a", items=[{"name": "x", "price": 1.5, "on": True, "at": {"seconds": 9}},
                           {"name": "y", "raw": b"\x00\xff"}]),
        Msg(id="b"),
        Msg(items=[{"price": 0.0}]),
        Msg(id="d", items=[{"name": "p"}, {"name": "q"}, {"name": "r", "on": True}]),
    ]
    paths = ["id", "items[0].name", "items[-1].name", "items[1].price", "items[0].on",
             "items[0].at", "items[1].raw", "items[0].price"]
    batch = wa.Transcoder(schema, columns=paths).transcode([m.SerializeToString() for m in messages])

    def pick(m, k, field):
        if not -len(m.items) <= k < len(m.items):
            return None
        item = m.items[k]
        if field == "price":
            return item.price if item.HasField("price") else None
        if field == "at":
            return item.at.seconds * 10**6 if item.HasField("at") else None
        return getattr(item, field)

    want = {
        "id": [m.id for m in messages],
        "items[0].name": [pick(m, 0, "name") for m in messages],
        "items[-1].name": [pick(m, -1, "name") for m in messages],
        "items[1].price": [pick(m, 1, "price") for m in messages],
        "items[0].on": [pick(m, 0, "on") for m in messages],
        "items[0].at": [pick(m, 0, "at") for m in messages],
        "items[1].raw": [pick(m, 1, "raw") for m in messages],
        "items[0].price": [pick(m, 0, "price") for m in messages],
    }
    got = batch.to_pydict()
    got["items[0].at"] = batch.column("items[0].at").cast(pa.int64()).to_pylist()
    assert got == want


def test_range_check_reads_only_the_selected_elements(compile_proto) -> None:
    schema, Msg = compile_proto(
        'syntax = "proto3"; import "google/protobuf/timestamp.proto";'
        "message M { repeated google.protobuf.Timestamp times = 1; }",
        "M",
    )
    data = Msg(times=[{"seconds": 5}, {"seconds": 10**11}]).SerializeToString()
    tc = wa.Transcoder(schema, columns=["times[0]"], timestamp_unit="ns")
    assert tc.transcode([data]).column(0).to_pylist()[0].timestamp() == 5
    with pytest.raises(wa.DecodeError, match="out of range"):
        wa.Transcoder(schema, columns=["times[1]"], timestamp_unit="ns").transcode([data])


NODE = (
    'syntax = "proto3"; enum C { C_UNSET = 0; RED = 1; GREEN = 2; }'
    "message Node { string name = 1; repeated Node children = 2; Node parent = 3; C c = 4; }"
)


def test_recursive_types_are_rejected_or_cut_at_max_depth(compile_proto) -> None:
    schema, Node = compile_proto(NODE, "Node")
    with pytest.raises(wa.PlanError, match=r"recursive message type \(Node -> Node\)"):
        wa.Transcoder(schema)
    leaf = Node(name="aaa", children=[Node(name="deeper")])
    m = Node(name="root", children=[Node(name="a", children=[Node(name="aa", children=[leaf])])])
    tc = wa.Transcoder(schema, max_depth=2)
    row = tc.transcode([m.SerializeToString()]).to_pylist()[0]
    aa = row["children"][0]["children"][0]
    assert aa["name"] == "aa"
    (kept,) = aa["children"]  # below max_depth: the serialized message, nothing lost
    assert Node.FromString(kept) == leaf
    assert (
        tc.arrow_schema.field("parent").type.field("parent").type.field("parent").type
        == pa.binary()
    )
    # paths into a recursive type need no max_depth
    assert wa.Transcoder(schema, columns=["children[*].children[*].name"]).transcode(
        [m.SerializeToString()]
    ).column(0).to_pylist() == ["aa"]


def test_enums_as_names(compile_proto) -> None:
    schema, Node = compile_proto(NODE, "Node")
    data = [Node(c=2).SerializeToString(), Node(c=7).SerializeToString(), b""]
    tc = wa.Transcoder(schema, columns=["c", "children[?(.c == 1)].name"], enums="name")
    assert tc.arrow_schema.field("c").type == pa.dictionary(pa.int32(), pa.utf8())
    assert tc.transcode(data).column("c").to_pylist() == ["GREEN", "7", "C_UNSET"]
    numbers = wa.Transcoder(schema, columns=["c"]).transcode(data).column(0).to_pylist()
    assert numbers == [2, 7, 0]
    with pytest.raises(wa.PlanError, match="enums"):
        wa.Transcoder(schema, columns=["c"], enums="label")


def test_large_whole_message_batches_match_small_ones(compile_proto) -> None:
    # A large batch (pooled buffers, writes prefetched block by block from the sizes the
    # previous batch left, bad records rolled back on the way) must equal the same records
    # in small batches, and account for and report its bad records the same way.
    schema, M = compile_proto(
        """
        syntax = "proto3"; package big;
        enum E { E0 = 0; E1 = 1; }
        message Item { string s = 1; }
        message M { int64 n = 1; E e = 2; repeated Item items = 3; map<string, int32> m = 4; }
        """,
        "big.M",
    )
    n = 3 * 8192 + 17
    records = [
        M(n=i, e=i % 3, items=[{"s": str(i)}] * (i % 3), m={str(i % 5): i}).SerializeToString()
        for i in range(n)
    ]
    whole = wa.Transcoder(schema, enums="name", keep_unknown=True)
    batch = whole.transcode(records)
    small = [whole.transcode(records[lo : lo + 1000]) for lo in range(0, n, 1000)]
    assert batch.num_rows == n
    assert batch.to_pylist() == [row for b in small for row in b.to_pylist()]
    assert batch.column("e").to_pylist()[:4] == ["E0", "E1", "2", "E0"]  # dictionaries unified

    bad = list(records)
    bad[20_000] = b"\x0f"  # reserved wire type, in the third part
    bad[24_580] = None  # a null record, rejected before decoding, in the last part
    tc = wa.Transcoder(schema, on_error="dead_letter")
    tc.transcode(records)  # sizes learned: the next batch is presized and prefetched
    rows = tc.transcode(bad)
    assert rows.num_rows == n - 2
    good = tc.transcode(records).to_pylist()  # (same transcoder: buffers reused again)
    assert rows.to_pylist() == [r for i, r in enumerate(good) if i not in (20_000, 24_580)]
    assert [d["index"] for d in tc.dead_letters().to_pylist()] == [20_000, 24_580]
    assert (tc.stats.records_in, tc.stats.records_failed) == (3 * n, 2)
    with pytest.raises(wa.DecodeError) as err:
        wa.Transcoder(schema).transcode(bad)
    assert err.value.index == 20_000
    bad[10] = None  # now the null record is the lowest
    with pytest.raises(wa.DecodeError) as err:
        wa.Transcoder(schema).transcode(bad)
    assert err.value.index == 10


def test_precision_lost_counts_truncated_timestamps_and_durations(compile_proto) -> None:
    schema, Msg = compile_proto(
        'syntax = "proto3"; import "google/protobuf/timestamp.proto";'
        'import "google/protobuf/duration.proto";'
        "message M { google.protobuf.Timestamp ts = 1; repeated google.protobuf.Duration d = 2;"
        " map<string, google.protobuf.Timestamp> by = 3; }",
        "M",
    )
    records = [
        Msg(ts={"seconds": 1, "nanos": 123_456_789}),  # whole ms, us: no; ns: exact
        Msg(ts={"seconds": -1, "nanos": 5_000_000}),  # exact in ms, us
        Msg(d=[{"seconds": -2, "nanos": -1_500}, {"seconds": 3}], by={"k": {"nanos": 7_000}}),
        Msg(),  # absent: nothing to lose
    ]
    wire = [m.SerializeToString() for m in records]
    # values with nanos below the unit: ts 123456789 (s, ms, us), 5e6 (s), -1500 (s, ms,
    # us), 7000 (s, ms)
    for unit, lost in (("s", 4), ("ms", 3), ("us", 2), ("ns", 0)):
        tc = wa.Transcoder(schema, timestamp_unit=unit)
        tc.transcode(wire)
        assert tc.stats.precision_lost == lost, unit
        tc.transcode(wire[:1])  # cumulative, like every count
        assert tc.stats.precision_lost == lost + (unit != "ns"), unit
    # flat plans count the columns they read
    flat = wa.Transcoder(schema, columns=["d[*]"], timestamp_unit="ms")
    flat.transcode(wire)
    assert flat.stats.precision_lost == 1
    plain = wa.Transcoder(schema, well_known_types=False)
    batch = plain.transcode(wire)
    assert plain.stats.precision_lost == 0
    assert batch.column("ts")[0].as_py() == {"seconds": 1, "nanos": 123_456_789}


# (field, value, the start of the reason): values the runtime parses that no Arrow value
# gives back as they came (docs/types.md "Values outside the type")
OUTSIDE_THE_TYPE = [
    ("ts", {"seconds": 5, "nanos": -1}, "google.protobuf.Timestamp nanos"),
    ("times", [{}, {"nanos": 1_000_000_000}], "google.protobuf.Timestamp nanos"),
    ("durs", [{"seconds": 1, "nanos": -1}], "google.protobuf.Duration nanos"),
    ("dur", {"nanos": -1_000_000_000}, "google.protobuf.Duration nanos"),
    ("date", {"year": 2021, "month": 2, "day": 29}, "google.type.Date is not"),
    ("date", {}, "google.type.Date is not"),
    ("date", {"year": 2020, "month": 13, "day": 1}, "google.type.Date is not"),
    ("tod", {"hours": 24}, "google.type.TimeOfDay outside"),
    ("tod", {"seconds": 60}, "google.type.TimeOfDay outside"),
    ("tod", {"minutes": -1}, "google.type.TimeOfDay outside"),
    # NullValue is an open enum: the runtime keeps 5, JSON null would give back 0
    ("val", {"null_value": 5}, "google.protobuf.Value null_value 5 is not NULL_VALUE"),
    ("st", "a Struct holding [null_value 3] under a", "google.protobuf.Value null_value 3"),
    ("lv", {"values": [{"number_value": 1}, {"null_value": -2}]}, "google.protobuf.Value null_value -2"),
]


@pytest.mark.parametrize(("field", "value", "reason"), OUTSIDE_THE_TYPE)
def test_well_known_values_outside_their_type_are_bad_records(
    field: str, value: object, reason: str
) -> None:
    import pathlib

    import google.type.date_pb2
    from google.protobuf import message_factory

    gapis = str(pathlib.Path(google.type.date_pb2.__file__).parents[2])
    proto = pathlib.Path(__file__).parent / "protos" / "roundtrip.proto"
    schema = wa.Schema.from_proto(proto, "wirearrow.tests.roundtrip.Wkt", import_paths=[gapis])
    Msg = message_factory.GetMessageClass(schema.descriptor)
    good = Msg(
        ts={"seconds": -1, "nanos": 999_999_999},
        durs=[{"seconds": -1, "nanos": -999_999_999}, {"nanos": 5}],
        date={"year": 2024, "month": 2, "day": 29},
        tod={"hours": 23, "minutes": 59, "seconds": 59, "nanos": 999_999_999},
    )
    bad = Msg(w_list=[{"value": 1}])
    if field == "st":  # a dict would give the Struct a key "fields"
        bad.st.fields["a"].list_value.values.add().null_value = 3  # type: ignore[assignment]
    else:
        bad.MergeFrom(Msg(**{field: value}))
    records = [good.SerializeToString(), bad.SerializeToString()]
    columns = ["ts", "dur", "times", "durs", "date", "tod", "val", "st", "lv"]
    tc = wa.Transcoder(schema, columns=columns, on_error="dead_letter", timestamp_unit="ns")
    batch = tc.transcode(records)
    assert batch.num_rows == 1, tc.dead_letters().to_pylist()
    (letter,) = tc.dead_letters().to_pylist()
    assert letter["index"] == 1 and letter["reason"].startswith(reason), letter
    assert letter["path"] == field
    # a plan that does not read the value does not fail on it
    assert wa.Transcoder(schema, columns=["w_list"]).transcode(records).num_rows == 2
    # as plain messages the record is read, and written back, as it came
    plain = wa.Transcoder(schema, well_known_types=False, keep_unknown=True, max_depth=3)
    expected = [Msg.FromString(r).SerializeToString(deterministic=True) for r in records]
    assert plain.encode(plain.transcode(records)).to_pylist() == expected


# ---- the spec ------------------------------------------------------------------------------

ALL_OPTIONS = {
    "on_error": "dead_letter",
    "validate": "full",
    "timestamp_unit": "ns",
    "max_nesting": 17,
    "max_depth": 3,
    "enums": "name",
    "keep_unknown": True,
    "well_known_types": False,
    "unvalidated_strings": "binary",
    "bytes_as_string": ("t.Root.blob",),
    "oneof_case": True,
    "extensions": True,
    "any_types": ("t.Deal", "t.Geo"),
    "field_ids": False,
}


def test_spec_holds_every_option_and_survives_pickle_and_replace(root) -> None:
    schema, _ = root
    tc = wa.Transcoder(schema, **ALL_OPTIONS)
    spec = tc.spec
    assert isinstance(spec, wa.TranscodeSpec) and spec.options == ALL_OPTIONS
    assert pickle.loads(pickle.dumps(tc)).spec == spec
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert wa.Transcoder(spec).spec == spec
    skip = tc.replace(on_error="skip")
    assert skip.spec == spec.replace(on_error="skip")
    assert {k: v for k, v in skip.spec.options.items() if k != "on_error"} == {
        k: v for k, v in ALL_OPTIONS.items() if k != "on_error"
    }
    assert tc.replace(on_error="dead_letter") is tc
    # the policy does not change the compiled tables: one compile for both
    assert skip._plan is tc._plan and spec.plan_key == skip.spec.plan_key
    assert spec.replace(max_nesting=18).plan_key != spec.plan_key


def test_spec_checks_every_option_at_once(root) -> None:
    schema, _ = root
    with pytest.raises(wa.PlanError) as info:
        wa.TranscodeSpec(schema, on_error="ignore", max_nesting=10**20, enums="names")
    text = str(info.value)
    assert "on_error must be one of" in text and "'ignore'" in text
    assert "max_nesting must be in 1..1023" in text
    assert "enums must be one of" in text
    with pytest.raises(wa.PlanError, match=r"max_depth must be in 1\.\.100"):
        wa.Transcoder(schema, max_depth=0)
    with pytest.raises(TypeError, match="from the spec"):
        wa.Transcoder(wa.TranscodeSpec(schema), on_error="skip")
    with pytest.raises(TypeError, match="unknown transcoder options: colour"):
        wa.TranscodeSpec.of(schema, None, {"colour": 1})


# ---- which record each row came from -------------------------------------------------------


def test_record_index_names_each_rows_record_flat_and_nested(root) -> None:
    schema, Root = root
    records = [
        _msg(Root, id="a", imps=[{"id": "1", "deals": [{"id": "x"}, {"id": "y"}]}, {"id": "2"}]),
        b"\xff\xff",  # bad: no rows
        _msg(Root, id="b"),  # no imps: one row (left join)
        None,  # a null record: no rows
        _msg(Root, id="c", imps=[{"id": str(i)} for i in range(5)], cur=["EUR", "USD"]),
    ]
    plans = [
        ["id", "imps[*].id", "imps[*].deals[*].id"],
        ["id", "cur[*]", "imps[*].id"],  # cross join of siblings
        ["imps[0:2].id"],
        None,  # whole messages: one row per good record
    ]
    for columns in plans:
        tc = wa.Transcoder(schema, columns=columns, on_error="skip")
        batch = tc.transcode(records, record_index=True)
        assert batch.schema.names[-1] == "_record_index"
        assert batch.schema.field("_record_index").type == pa.int64()
        # each record alone: its row count is how often its index must appear, in order
        want = []
        for i, record in enumerate(records):
            alone = wa.Transcoder(schema, columns=columns, on_error="skip").transcode([record])
            want += [i] * alone.num_rows
        assert batch.column("_record_index").to_pylist() == want, columns
        assert batch.drop_columns(["_record_index"]).equals(tc.transcode(records))
    named = wa.Transcoder(schema, columns=["id"], on_error="skip").transcode(
        records, record_index="rec"
    )
    assert named.column("rec").to_pylist() == [0, 2, 4]


def test_record_index_after_plan_rejections_and_framed_input(compile_proto) -> None:
    schema, Msg = compile_proto(
        'syntax = "proto3"; message M { repeated string tags = 1; }', "M"
    )
    records = [Msg(tags=t).SerializeToString() for t in (["a", "b"], ["a"], ["c", "d", "e"])]
    tc = wa.Transcoder(schema, [wa.Column("tags[1]", strict=True)], on_error="skip")
    batch = tc.transcode(records, record_index=True)
    assert batch.to_pylist() == [
        {"tags[1]": "b", "_record_index": 0},
        {"tags[1]": "d", "_record_index": 2},
    ]
    framed = b"".join(len(r).to_bytes(4, "little") + r for r in records)
    again = tc.transcode(framed, framing="u32le", record_index=True)
    assert again.equals(batch)
    with pytest.raises(ValueError, match="record_index"):
        tc.transcode(records, record_index="tags[1]")


def test_a_filter_on_a_large_uint64_is_true(compile_proto) -> None:
    # a uint64 above 2**63 is non-zero: true in a filter, as any other (hypothesis found
    # the comparison with an int64 zero raising on it)
    schema, Msg = compile_proto(
        'syntax = "proto3"; message Item { uint64 v = 1; float f = 2; }'
        "message M { repeated Item items = 1; }",
        "M",
    )
    values = [(2**63, 0.0), (0, 0.5), (2**64 - 1, 0.0)]
    record = Msg(items=[{"v": v, "f": f} for v, f in values]).SerializeToString()
    for path, want in (("items[?(.v && .v)].v", [2**63, 2**64 - 1]), ("items[?(.f)].f", [0.5])):
        batch = wa.Transcoder(schema, columns=[path]).transcode([record, record])
        assert batch.column(0).to_pylist() == want * 2
