"""Schema versions in one output (wirearrow.versions): the superset of a message's versions.

Rows are checked against the protobuf runtime (upb, through tests/oracle.py): each record is
parsed with the class of its own version, and the superset's rows must hold what that
parse holds, with null in the columns its version does not have.
"""

from __future__ import annotations

import textwrap

import pyarrow as pa
import pytest
from google.protobuf import message_factory

import oracle
import wirearrow as wa
from wirearrow.field_ids import field_ids
from wirearrow.sources.confluent import confluent_prefix

V1 = """
syntax = "proto3";
package ev;
message Geo { string country = 1; float lat = 2; }
message Event {
  message Item { string sku = 1; int32 qty = 2; }
  int32 count = 1;
  string user_agent = 2;
  Geo geo = 3;
  repeated Item items = 4;
}
"""
# count widened, user_agent renamed ua, Geo.lat widened, Geo.city and tags added
V2 = """
syntax = "proto3";
package ev;
message Geo { string country = 1; double lat = 2; string city = 3; }
message Event {
  message Item { string sku = 1; int32 qty = 2; }
  int64 count = 1;
  string ua = 2;
  Geo geo = 3;
  repeated Item items = 4;
  map<string, int64> tags = 5;
}
"""
# total and Item.note added
V3 = V2.replace("int32 qty = 2; }", "int32 qty = 2; string note = 3; }").replace(
    "map<string, int64> tags = 5;", "map<string, int64> tags = 5;\n  double total = 6;"
)
# user_agent's number holds an int64 here: refused
BAD = V1.replace("string user_agent = 2;", "int64 user_agent = 2;")

COLUMNS = ["count", "ua", "geo.lat", "geo.city", "items[*].sku", "items[*].note", "total"]
# the names of the columns' fields in each version (None: the version does not have it)
IN_V1 = {"ua": "user_agent", "geo.city": None, "items[*].note": None, "total": None}
IN_V2 = {"items[*].note": None, "total": None}


def _schema(tmp_path, text: str, name: str) -> wa.Schema:
    (tmp_path / name).write_text(textwrap.dedent(text))
    return wa.Schema.from_proto(tmp_path / name, "ev.Event")


@pytest.fixture
def versions(tmp_path):
    return [_schema(tmp_path, t, f"v{i}.proto") for i, t in enumerate((V1, V2, V3), start=1)]


def _messages(schemas) -> list[tuple[int, bytes]]:
    """(version index, payload) of 18 records, versions interleaved."""
    classes = [message_factory.GetMessageClass(s.descriptor) for s in schemas]
    out = []
    for i in range(18):
        v = i % 3
        m = classes[v](count=i * 1000 - 7)
        setattr(m, "user_agent" if v == 0 else "ua", f"ua{i}")
        if i % 4:
            m.geo.country = "FR"
            m.geo.lat = 0.1 * i
            if v:
                m.geo.city = f"c{i}"
        for j in range(i % 3):
            item = m.items.add(sku=f"s{i}.{j}", qty=j)
            if v == 2:
                item.note = f"n{j}"
        if v:
            m.tags["k"] = i
        if v == 2:
            m.total = i / 4
        out.append((v, m.SerializeToString()))
    return out


def _expected(schemas, records) -> list[dict]:
    """The oracle's rows: each record parsed by its own version, named as the reference."""
    rows = []
    for v, payload in records:
        renames = (IN_V1, IN_V2, {})[v]
        cls = message_factory.GetMessageClass(schemas[v].descriptor)
        own = [(renames.get(c, c), c) for c in COLUMNS if renames.get(c, c) is not None]
        for row in oracle.expected_rows(cls, [payload], own):
            rows.append({c: row.get(c) for c in COLUMNS})
    return rows


def test_the_superset_of_three_versions(versions) -> None:
    v1, v2, v3 = versions
    whole = wa.Transcoder(v3, versions=[v1, v2]).arrow_schema
    assert whole.names == ["count", "ua", "geo", "items", "tags", "total"]  # v3's names, order
    assert whole.field("count").type == pa.int64()  # int32 in v1: widened
    assert whole.field("geo").type.field("lat").type == pa.float64()  # float in v1
    # an older reference: the later fields join after its own, with their own names
    old = wa.Transcoder(v1, versions=[v2, v3]).arrow_schema
    assert old.names == ["count", "user_agent", "geo", "items", "tags", "total"]
    assert old.field("count").type == pa.int64()
    assert [f.name for f in old.field("geo").type] == ["country", "lat", "city"]
    # field ids follow the numbers: the same in every version and in the superset
    ids = field_ids(whole)
    for version in versions:
        for path, i in field_ids(wa.Transcoder(version).arrow_schema).items():
            assert ids[{"user_agent": "ua"}.get(path, path)] == i, path
    assert field_ids(old) == {
        {"ua": "user_agent"}.get(p, p): i for p, i in ids.items()
    }


def test_confluent_records_of_every_version_read_as_upb_reads_them(versions) -> None:
    records = _messages(versions)
    framed = [confluent_prefix(v + 1, (1,)) + p for v, p in records]
    schemas = {i + 1: s for i, s in enumerate(versions)}
    # the plan names the fields of its own message, the newest here; v1 and v2 lack some
    flat = wa.Transcoder(versions[2], COLUMNS, versions=versions[:2])
    for given in ({}, {"versions": ()}):  # declared up front, or met in the records
        tc = flat if not given else flat.replace(**given)
        rows = tc.transcode(framed, framing="confluent", schemas=schemas, schema_id=True)
        got = rows.drop_columns(["_schema_id"]).to_pylist()
        oracle.assert_rows_equal(tc.arrow_schema, got, _expected(versions, records), str(given))
        ids = rows.column("_schema_id").to_pylist()
        assert ids == [v + 1 for v, p in records for _ in range(max(1, len(_items(versions, v, p))))]
    # a column whose path an old version lacks: null, and its records keep the rows of
    # the fan-out the version has (one per item, not one per record)
    assert len(rows) == sum(max(1, len(_items(versions, v, p))) for v, p in records)


def _items(versions, v: int, payload: bytes) -> list:
    return list(message_factory.GetMessageClass(versions[v].descriptor).FromString(payload).items)


def test_whole_messages_of_every_version(versions) -> None:
    records = _messages(versions)
    framed = [confluent_prefix(v + 1, (1,)) + p for v, p in records]
    tc = wa.Transcoder(versions[2])
    rows = tc.transcode(framed, framing="confluent", schemas={i + 1: s for i, s in enumerate(versions)})
    assert rows.schema.equals(tc.arrow_schema, check_metadata=True)
    for (v, payload), row in zip(records, rows.to_pylist(), strict=True):
        own = wa.Transcoder(versions[v]).transcode([payload]).to_pylist()[0]
        if v == 0:  # named as the reference, fields it lacks null
            own["ua"] = own.pop("user_agent")
            own["tags"] = own["total"] = None
            if own["geo"] is not None:
                own["geo"]["city"] = None
            for item in own["items"]:
                item["note"] = None
        elif v == 1:
            own["total"] = None
            for item in own["items"]:
                item["note"] = None
        assert row == {k: own[k] for k in row}, (v, row, own)


def test_a_version_first_seen_in_a_batch_joins_the_superset(versions) -> None:
    v1, v2, v3 = versions
    tc = wa.Transcoder(v2, on_error="dead_letter")
    assert "total" not in tc.arrow_schema.names
    records = _messages(versions)
    lookup = {1: v1, 2: v2, 3: v3}
    first = tc.decode([confluent_prefix(2, (1,)) + records[1][1]], framing="confluent", schemas=lookup.get)
    assert first.rows.schema.names == ["count", "ua", "geo", "items", "tags"]
    second = tc.decode(
        [confluent_prefix(v + 1, (1,)) + p for v, p in records], framing="confluent", schemas=lookup.get
    )
    assert second.rows.schema.names == ["count", "ua", "geo", "items", "tags", "total"]
    assert tc.arrow_schema.equals(second.rows.schema, check_metadata=True)
    assert second.counts.records_ok == len(records) and second.rows.num_rows == len(records)


def test_an_incompatible_version_is_refused_at_plan_time_or_dead_lettered(tmp_path, versions) -> None:
    v1 = versions[0]
    bad = _schema(tmp_path, BAD, "bad.proto")
    with pytest.raises(wa.PlanError, match=r"field user_agent \(number 2\): string in .* but int64 in"):
        wa.Transcoder(v1, versions=[bad])
    tc = wa.Transcoder(v1, on_error="dead_letter")
    good = confluent_prefix(1, (1,)) + b"\x08\x05"
    decoded = tc.decode([good, confluent_prefix(9, (1,)) + b"\x10\x07", good], framing="confluent", schemas={1: v1, 9: bad})
    assert decoded.rows.column("count").to_pylist() == [5, 5]
    (reason,) = decoded.dead_letters.column("reason").to_pylist()
    assert reason.startswith("Confluent schema id 9 cannot share the output of")
    assert "string in" in reason and "int64 in" in reason
    with pytest.raises(wa.DecodeError, match=r"record 1.*cannot share"):
        wa.Transcoder(v1).decode([good, confluent_prefix(9, (1,)) + b"\x10\x07"], framing="confluent", schemas={1: v1, 9: bad})


def test_other_changes_of_one_number_are_refused(tmp_path) -> None:
    base = 'syntax = "proto3"; package ev; message Event { %s }'
    ref = _schema(tmp_path, base % "int64 a = 1; string b = 2;", "r.proto")
    for body, match in (
        ("repeated int64 a = 1; string b = 2;", r"field a \(number 1\)"),  # to a list
        ("int64 a = 1; string a2 = 2; string b = 3;", r"field name 'b' of ev.Event is field 2 in the reference and field 3"),  # b moved
        ("int64 a = 1; bytes b = 2;", r"field b \(number 2\): string in .* but binary"),
    ):
        other = _schema(tmp_path, base % body, "o.proto")
        with pytest.raises(wa.PlanError, match=match):
            wa.Transcoder(ref, versions=[other])


def test_records_without_schema_ids_read_as_the_reference(versions) -> None:
    _v1, v2, v3 = versions
    tc = wa.Transcoder(v2, versions=[v3])
    _, payload = _messages(versions)[1]
    row = tc.transcode([payload]).to_pylist()[0]
    assert row["total"] is None and all(item["note"] is None for item in row["items"])
    assert row["ua"] == "ua1"


def test_yaml_plan_names_versions(tmp_path, versions) -> None:
    for i, text in enumerate((V1, V2, V3), start=1):
        (tmp_path / f"v{i}.proto").write_text(textwrap.dedent(text))
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "proto: {file: v3.proto, message: ev.Event}\n"
        "versions:\n"
        "  - {file: v1.proto, message: ev.Event}\n"
        "  - {file: v2.proto, message: ev.Event}\n"
        "denormalizer:\n"
        "  columns:\n"
        "    - {name: count, path: count}\n"
        "    - {name: note, path: 'items[*].note'}\n"
    )
    tc = wa.load_plan(plan).transcoder()
    assert tc.arrow_schema.field("count").type == pa.int64()
    assert len(tc.spec.versions) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("proto: {file: v3.proto, message: ev.Event}\nversions: {file: v1.proto}\n")
    with pytest.raises(wa.PlanError, match=r"bad.yaml:2: versions: expected a list"):
        wa.load_plan(bad)
