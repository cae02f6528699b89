"""Malformed input: never a crash or a hang, never a silent loss, errors that say where.

Random damage (truncation, byte flips, insertions) to valid records checks the accounting
of every error policy against per-record runs and the protobuf runtime; hand-made records
check each kind of wire error with its record index, byte offset and field path.
Example counts are the unit tier's; WIREARROW_TEST_DEPTH multiplies them (tests/depth.py).
"""

from __future__ import annotations

import dataclasses
import faulthandler
import pathlib
import resource
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import google.protobuf
import pyarrow as pa
import pytest
from google.protobuf import message_factory, unknown_fields
from google.protobuf.message import DecodeError as RuntimeDecodeError
from hypothesis import event, given, note
from hypothesis import strategies as st

import wirearrow as wa
from depth import randomized
from oracle import assert_rows_equal, check_unknown, expected_rows
from schemagen import compile_file, delimited, messages, tag, varint
from wirearrow.plan.types import is_repeated

pytestmark = pytest.mark.malformed
_PROTOBUF_MAJOR = int(google.protobuf.__version__.split(".")[0])

PROTOS = pathlib.Path(__file__).parent / "protos"
REQUEST = "wirearrow.tests.malformed.Request"
LEGACY = "wirearrow.tests.legacy.Legacy"
PLAN = [
    "id",
    "imp[*].id",
    "imp[*].banner.w",
    "imp[*].deals[*].price",
    "imp[*].sizes",
    "s",
    "f",
    "blob",
    "tree.name",
    "tree.child.v",
]


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    """A hang (e.g. a loop that never advances) kills the run with a traceback."""
    faulthandler.dump_traceback_later(300, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def request_schema() -> tuple[wa.Schema, Any]:
    path = PROTOS / "malformed.proto"
    schema = wa.Schema.from_proto(str(path), REQUEST, import_paths=[str(PROTOS)])
    return schema, compile_file(str(path)).message_class(REQUEST)


@pytest.fixture(scope="module")
def legacy_schema() -> wa.Schema:
    path = PROTOS / "legacy.proto"
    return wa.Schema.from_proto(str(path), LEGACY, import_paths=[str(PROTOS)])


def _has_unknown_fields(message: Any) -> bool:
    """Whether the runtime kept unknown fields anywhere (e.g. a field with the wrong wire type)."""
    if len(unknown_fields.UnknownFieldSet(message)):
        return True
    for fd, value in message.ListFields():
        if fd.message_type is None:
            continue
        if any(_has_unknown_fields(item) for item in (value if is_repeated(fd) else [value])):
            return True
    return False


def _runtime_parse(message_class: Any, record: bytes) -> Any | None:
    try:
        return message_class.FromString(record)
    except RuntimeDecodeError:
        return None


def _check_dead_letter(letter: dict[str, Any], index: int, record: bytes) -> None:
    assert letter["index"] == index
    assert letter["raw"] == record
    assert 0 <= letter["offset"] <= len(record), letter
    assert isinstance(letter["path"], str)
    assert letter["reason"], letter


# --------------------------------------------------------------------------------------------
# Random damage


@st.composite
def _damaged(draw: Any, record: bytes) -> bytes:
    if not record:
        return draw(st.binary(min_size=1, max_size=8))
    kind = draw(st.sampled_from(["truncate", "flip", "insert", "overwrite"]))
    at = draw(st.integers(0, len(record) - 1))
    if kind == "truncate":
        return record[:at]
    if kind == "insert":
        return record[:at] + draw(st.binary(min_size=1, max_size=4)) + record[at:]
    if kind == "overwrite":
        junk = draw(st.binary(min_size=1, max_size=4))
        return record[:at] + junk + record[at + len(junk) :]
    out = bytearray(record)
    for _ in range(draw(st.integers(1, 3))):
        out[draw(st.integers(0, len(out) - 1))] ^= draw(st.integers(1, 255))
    return bytes(out)


def _damaged_batch(data: st.DataObject, request: Any, size: int) -> tuple[list[bytes], str]:
    """1..size valid records of `request`, at least one of them damaged; and a validate mode."""
    values = data.draw(
        st.lists(messages(request.DESCRIPTOR, max_depth=3), min_size=1, max_size=size)
    )
    records = [value.SerializeToString() for value in values]
    for i in data.draw(st.sets(st.integers(0, len(records) - 1), min_size=1), label="damaged"):
        records[i] = data.draw(_damaged(records[i]), label=f"record {i}")
    validate = data.draw(st.sampled_from(["plan", "full"]), label="validate")
    note(f"records: {[r.hex() for r in records]}")
    return records, validate


@randomized(19)
@given(data=st.data())
def test_damaged_records(request_schema: tuple[wa.Schema, Any], data: st.DataObject) -> None:
    schema, request = request_schema
    records, validate = _damaged_batch(data, request, 5)

    # Each record on its own: accepted with its rows, or one dead letter naming it.
    single = wa.Transcoder(schema, columns=PLAN, on_error="dead_letter", validate=validate)
    accepted: dict[int, list[dict[str, Any]]] = {}
    for i, record in enumerate(records):
        rows = single.transcode([record]).to_pylist()
        letters = single.dead_letters().to_pylist()
        if letters:
            assert rows == [] and len(letters) == 1, (i, rows, letters)
            _check_dead_letter(letters[0], 0, record)
        else:
            assert rows, f"record {i} gave no rows and no dead letter"
            accepted[i] = rows
        parsed = _runtime_parse(request, record)
        event(
            f"runtime {'rejects' if parsed is None else 'accepts'}, wirearrow {'accepts' if i in accepted else 'rejects'}"
        )
        if parsed is None:
            if validate == "full":
                assert i not in accepted, (
                    f"record {i}: the runtime rejects it, validate=full accepts"
                )
            continue
        if i in accepted:
            want = expected_rows(request, [record], PLAN)
            assert_rows_equal(single.arrow_schema, accepted[i], want, f"record {i}")
        elif not _has_unknown_fields(parsed):
            pytest.fail(f"record {i} is valid protobuf but was rejected: {letters[0]}")
    failed = [i for i in range(len(records)) if i not in accepted]
    good_rows = [row for i in sorted(accepted) for row in accepted[i]]

    # All records at once, under each policy, agree with the single runs.
    for policy in ("skip", "dead_letter"):
        tc = wa.Transcoder(schema, columns=PLAN, on_error=policy, validate=validate)
        batch = tc.transcode(pa.array(records, pa.binary()))
        assert_rows_equal(batch.schema, batch.to_pylist(), good_rows, policy)
        stats = tc.stats
        assert (stats.records_in, stats.rows_out, stats.records_failed) == (
            len(records),
            len(good_rows),
            len(failed),
        )
        letters = tc.dead_letters().to_pylist()
        if policy == "dead_letter":
            assert [letter["index"] for letter in letters] == failed
            for letter in letters:
                _check_dead_letter(letter, letter["index"], records[letter["index"]])
        else:
            assert letters == []
    tc = wa.Transcoder(schema, columns=PLAN, validate=validate)
    if failed:
        with pytest.raises(wa.DecodeError) as info:
            tc.transcode(records)
        assert info.value.index == failed[0]
        assert 0 <= info.value.offset <= len(records[failed[0]])
    else:
        assert_rows_equal(tc.arrow_schema, tc.transcode(records).to_pylist(), good_rows, "raise")


# --------------------------------------------------------------------------------------------
# Hand-made records


def _nested(depth: int) -> bytes:
    """A Request whose tree is ``depth`` Nodes deep."""
    node = tag(1, 2) + b"\x04leaf"
    for _ in range(depth - 1):
        node = delimited(2, node)
    return delimited(1, b"x") + delimited(7, node)


def _imps_with_bad_banner_w() -> bytes:
    good_imp = delimited(2, tag(1, 0) + varint(300))
    bad_imp = delimited(2, tag(1, 5) + b"\x2c\x01\x00\x00")  # w as fixed32: wrong wire type
    return b"".join(
        delimited(2, delimited(1, b"i%d" % i) + imp)
        for i, imp in enumerate([good_imp, good_imp, bad_imp])
    )


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    record: bytes
    columns: tuple[str, ...]
    path: str | tuple[str, ...]  # the error path, or the paths any of which is acceptable
    validate: str = "plan"


CASES = [
    Case("truncated-varint", tag(5, 0) + b"\xff\xff", ("s",), "s"),
    Case("varint-over-10-bytes", tag(5, 0) + b"\xff" * 10 + b"\x01", ("s",), "s"),
    Case("length-past-end", tag(1, 2) + varint(5) + b"ab", ("id",), "id"),
    Case("length-past-end-of-unread-field", delimited(1, b"x") + tag(7, 2) + varint(50) + b"\x0a", ("id",), "tree"),
    Case("field-number-0", delimited(1, b"x") + b"\x00\x00", ("id",), ("#0", "")),
    Case("wire-type-6", delimited(1, b"x") + tag(1, 6) + b"\x00", ("id",), "id"),
    Case("wire-type-7-unknown-field", tag(17, 7) + b"\x00" + delimited(1, b"x"), ("id",), "#17"),
    Case("wire-type-7-nested", delimited(2, delimited(1, b"a")) + delimited(2, tag(1, 7)), ("imp[*].id",), "imp[1].id"),
    Case("stray-end-group", delimited(1, b"x") + tag(17, 4), ("id",), "#17"),
    Case("end-group-mismatch", tag(17, 3) + tag(1, 0) + b"\x01" + tag(18, 4), ("id",), ("#17", "#18")),
    Case("unterminated-group", delimited(1, b"x") + tag(17, 3) + tag(1, 0) + b"\x01", ("id",), "#17"),
    Case("invalid-utf8-read", delimited(1, b"\xff\xfe"), ("id",), "id"),
    Case("invalid-utf8-unread-full", delimited(8, b"\xc3") + delimited(1, b"x"), ("id",), "note", "full"),
    Case("huge-length", tag(1, 2) + varint(1 << 62) + b"x", ("id",), "id"),
    Case("huge-length-2gib", tag(1, 2) + varint(2**31 - 1) + b"x", ("id",), "id"),
    Case("huge-packed-length", delimited(2, tag(4, 2) + varint(1 << 40) + b"\x01"), ("imp[*].sizes",), "imp[0].sizes"),
    Case("nesting-too-deep", _nested(150), ("id",), "tree", "full"),
    Case("truncated-varint-in-packed", delimited(2, delimited(4, b"\x01\x80")), ("imp[*].sizes",), "imp[0].sizes"),
    Case("packed-fixed32-length-not-multiple-of-4", delimited(9, b"\x01\x02\x03"), ("marks",), "marks"),
    Case("tag-over-32-bits", delimited(1, b"x") + varint(1 << 35), ("id",), ("", "#4294967296")),
    # upb: a tag takes at most 5 bytes, even one that pads a small number (80 88 80 80 80 00)
    Case("tag-padded-to-6-bytes", delimited(1, b"x") + b"\x88\x80\x80\x80\x80\x00\x01", ("id",), ""),
    Case("tag-padded-to-6-bytes-unread", b"\x88\x80\x80\x80\x80\x00\x01", ("id",), ""),
    # validate="full": a packed field the plan does not read is parsed, as upb parses it
    Case("unread-packed-varint-cut", delimited(2, delimited(4, b"\x80")), ("id",), "imp.sizes", "full"),
    Case("unread-packed-fixed32-length", delimited(9, b"\x01"), ("id",), "marks", "full"),
    # protobuf 7's upb: a length prefix takes at most 5 bytes (6's accepts 10: errors.md)
    Case("length-padded-to-6-bytes", tag(1, 2) + b"\x81\x80\x80\x80\x80\x00x", ("id",), "id"),
    Case("length-padded-unread", tag(8, 2) + b"\x81" + b"\x80" * 8 + b"\x00x", ("id",), "note"),
]  # fmt: skip


# A known field under another wire type: upb keeps it as an unknown field and the field
# reads as absent; these were decode errors once (a rejection that is now an acceptance).
WRONG_WIRE_TYPE = {
    "read-int32-as-fixed32": (_imps_with_bad_banner_w(), ("imp[*].banner.w", "imp[*].id")),
    "read-string-as-group": (tag(1, 3) + tag(1, 4) + tag(5, 0) + varint(3), ("id", "s")),
    "read-string-as-varint": (tag(1, 0) + varint(7) + delimited(1, b"x"), ("id",)),
    "message-as-varint": (tag(7, 0) + varint(1) + delimited(1, b"y"), ("id", "tree.name")),
    "message-as-fixed64": (delimited(2, tag(2, 1) + bytes(8)), ("imp[*].banner.w", "imp[*].banner")),
    "varint-on-packed-fixed32": (tag(9, 0) + varint(5) + delimited(9, bytes(4)), ("marks",)),
    "fixed32-on-packable-int32": (delimited(2, tag(4, 5) + bytes(4) + tag(4, 0) + varint(2)), ("imp[*].sizes",)),
    "double-for-a-float": (tag(6, 1) + bytes(8) + tag(6, 5) + b"\x00\x00\x80\x3f", ("f",)),
}  # fmt: skip


@pytest.mark.parametrize("name", WRONG_WIRE_TYPE)
@pytest.mark.parametrize("validate", ["plan", "full"])
def test_wrong_wire_type_is_an_unknown_field(
    request_schema: tuple[wa.Schema, Any], name: str, validate: str
) -> None:
    schema, request = request_schema
    record, columns = WRONG_WIRE_TYPE[name]
    parsed = request.FromString(record)  # the runtime accepts it...
    assert _has_unknown_fields(parsed)  # ...as an unknown field
    flat = wa.Transcoder(schema, columns=list(columns), validate=validate)
    got = flat.transcode([record]).to_pylist()
    want = expected_rows(request, [record], [(c, c) for c in columns])
    assert_rows_equal(flat.arrow_schema, got, want, name)
    whole = wa.Transcoder(schema, validate=validate, keep_unknown=True, max_depth=4)
    batch = whole.transcode([record])
    check_unknown(batch.to_pylist()[0], parsed)
    assert whole.encode(batch)[0].as_py() == parsed.SerializeToString(deterministic=True)


# A repeated group sent length-delimited (docs/errors.md): protobuf 7's upb keeps it as an
# unknown field, like any field under another wire type, and so does wirearrow; protobuf
# 6's upb checks the length, then reads a group after it up to its end-group tag. Each row:
# the record, then the runtime's deterministic bytes of it (None: rejected) on protobuf 7
# and on protobuf 6; the installed runtime is checked against its column.
_D, _G = "wirearrow.tests.delimited.D", "wirearrow.tests.groups.G"
GROUP_AS_LENGTH = [
    ("delimited.proto", _D, "120708010861806202", "120708010861806202", None),
    ("delimited.proto", _D, "1200", "1200", None),
    ("delimited.proto", _D, "1200080114", None, "13080114"),
    ("delimited.proto", _D, "12050801140801", "12050801140801", "130801140801"),
    ("delimited.proto", _D, "120014120014", None, "13141314"),
    ("delimited.proto", _D, "12ff0108011400", None, None),
    ("delimited.proto", _D, "0a020801", "0a020801", "0a020801"),
    ("delimited.proto", _D, "12021a0113142005", "1314200512021a01", "131813142005"),
    ("groups.proto", _G, "2a0230012c5a00", None, "2b30012c5a00"),
    ("groups.proto", _G, "2a003b2a003c2c5a00", None, "2b3b2a003c2c5a00"),
    ("groups.proto", _G, "12021a005a00", "5a0012021a00", "5a0012021a00"),
    ("groups.proto", _G, "12002c5a00", None, None),
    ("groups.proto", _G, "2a0230015a00", "5a002a023001", None),
    # docs/fuzzing.md finding 8: on protobuf 6, the runtime cannot parse these bytes (a
    # group again after the length), which are protobuf 7's serialization too
    ("groups.proto", _G, "2a0252012b2c30015a00", "2b2c5a002a0252013001", "2b52012b2c5a003001"),
]


@pytest.mark.parametrize(("file", "name", "record", "pb7", "pb6"), GROUP_AS_LENGTH)
@pytest.mark.parametrize("validate", ["plan", "full"])
def test_a_group_sent_length_delimited_is_read_as_protobuf_7_reads_it(
    file: str, name: str, record: str, pb7: str | None, pb6: str | None, validate: str
) -> None:
    path = PROTOS / file
    schema = wa.Schema.from_proto(str(path), name)
    cls = compile_file(str(path)).message_class(name)
    data = bytes.fromhex(record)
    try:
        runtime = cls.FromString(data).SerializeToString(deterministic=True).hex()
    except RuntimeDecodeError:
        runtime = None
    assert runtime == (pb7 if _PROTOBUF_MAJOR >= 7 else pb6)
    tc = wa.Transcoder(schema, validate=validate, keep_unknown=True, on_error="dead_letter")
    batch = tc.transcode([data])
    if pb7 is not None:
        assert batch.num_rows == 1, tc.dead_letters().to_pylist()
        assert tc.encode(batch)[0].as_py().hex() == pb7
    else:
        (letter,) = tc.dead_letters().to_pylist()
        assert letter["raw"] == data and letter["reason"]


# (record, reason, the same record with the shortest tag and lengths)
PADDED = {
    "tag": (b"\x88\x80\x80\x80\x80\x00\x01", "tag varint longer than 5 bytes", b"\x08\x01"),
    "length": (tag(1, 2) + b"\x81\x80\x80\x80\x80\x00x", "length prefix varint longer than 5 bytes", delimited(1, b"x")),
    "packed length": (tag(9, 2) + b"\x84" + b"\x80" * 8 + b"\x00" + bytes(4), "length prefix varint longer than 5 bytes", delimited(9, bytes(4))),
    "unknown length": (tag(99, 2) + b"\x81\x80\x80\x80\x80\x00x", "length prefix varint longer than 5 bytes", delimited(99, b"x")),
}  # fmt: skip


@pytest.mark.parametrize("name", PADDED)
@pytest.mark.parametrize("validate", ["plan", "full"])
def test_padded_tags_and_lengths_are_rejected_as_protobuf_7_rejects_them(
    request_schema: tuple[wa.Schema, Any], name: str, validate: str
) -> None:
    """Tags over 5 bytes: every upb rejects them. Length prefixes over 5 bytes: protobuf
    7's upb rejects them, 6's accepts them; wirearrow follows 7 (docs/errors.md)."""
    schema, request = request_schema
    record, reason, shortest = PADDED[name]
    try:
        request.FromString(record)
        runtime_accepts = True
    except RuntimeDecodeError:
        runtime_accepts = False
    assert runtime_accepts == (name != "tag" and _PROTOBUF_MAJOR < 7)
    for columns in (None, ["s"]):
        tc = wa.Transcoder(schema, columns=columns, validate=validate, on_error="dead_letter", max_depth=3)
        assert tc.transcode([record, b""]).num_rows == 1
        (letter,) = tc.dead_letters().to_pylist()
        assert (letter["index"], letter["reason"]) == (0, reason)
        # only the padding: the same fields at their shortest are accepted, by both
        request.FromString(shortest)
        assert tc.transcode([shortest]).num_rows == 1 and tc.stats.records_failed == 1


def _check_path(case: Case, path: str) -> None:
    if isinstance(case.path, tuple):
        assert path in case.path, f"{case.name}: path {path!r}, expected one of {case.path}"
    elif case.name.startswith("nesting"):
        assert path.startswith(case.path), f"{case.name}: path {path!r}"
    else:
        assert path == case.path, f"{case.name}: path {path!r}, expected {case.path!r}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_record_raises(request_schema: tuple[wa.Schema, Any], case: Case) -> None:
    schema, request = request_schema
    good = request(id="ok", s=-3).SerializeToString()
    tc = wa.Transcoder(schema, columns=list(case.columns), validate=case.validate)
    tracemalloc.start()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    try:
        with pytest.raises(wa.DecodeError) as info:
            tc.transcode([good, case.record, good])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 5
    assert peak < 64 << 20, f"{case.name}: {peak} bytes allocated"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 256 << 10  # KiB
    err = info.value
    assert isinstance(err, ValueError)
    assert err.index == 1
    assert 0 <= err.offset <= len(case.record), f"{case.name}: offset {err.offset}"
    _check_path(case, err.path)
    assert err.reason


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_record_skipped_or_dead_lettered(
    request_schema: tuple[wa.Schema, Any], case: Case
) -> None:
    schema, request = request_schema
    good = [request(id="a", s=1).SerializeToString(), request(id="b").SerializeToString()]
    columns = list(case.columns)
    clean = wa.Transcoder(schema, columns=columns, validate=case.validate).transcode(good)
    raised = wa.Transcoder(schema, columns=columns, validate=case.validate)
    with pytest.raises(wa.DecodeError) as info:
        raised.transcode([good[0], case.record, good[1]])

    for policy in ("skip", "dead_letter"):
        tc = wa.Transcoder(schema, columns=columns, on_error=policy, validate=case.validate)
        batch = tc.transcode([good[0], case.record, good[1]])
        assert batch.to_pylist() == clean.to_pylist(), f"{case.name}/{policy}"
        stats = tc.stats
        assert (stats.records_in, stats.rows_out, stats.records_failed) == (3, clean.num_rows, 1)
        letters = tc.dead_letters()
        if policy == "skip":
            assert letters.num_rows == 0
            continue
        assert letters.schema.names == ["index", "offset", "path", "reason", "raw"]
        assert letters.schema.field("index").type == pa.int64()
        assert letters.schema.field("raw").type == pa.binary()
        (letter,) = letters.to_pylist()
        _check_dead_letter(letter, 1, case.record)
        assert (letter["offset"], letter["path"]) == (info.value.offset, info.value.path)
        assert tc.dead_letters().num_rows == 0, "dead_letters() drains"


def test_deep_nesting_within_the_limit_is_accepted(request_schema: tuple[wa.Schema, Any]) -> None:
    schema, request = request_schema
    record = _nested(50)
    assert request.FromString(record).tree.child.child.name == ""
    batch = wa.Transcoder(schema, columns=["id"], validate="full").transcode([record])
    assert batch.to_pylist() == [{"id": "x"}]


def test_deep_nesting_the_plan_never_enters_is_skipped(
    request_schema: tuple[wa.Schema, Any],
) -> None:
    """validate="plan" skips sub-messages the plan does not read by length, unchecked."""
    schema, _ = request_schema
    batch = wa.Transcoder(schema, columns=["id"], validate="plan").transcode([_nested(150)])
    assert batch.to_pylist() == [{"id": "x"}]


def test_invalid_utf8_in_an_unread_field_passes_plan_validation(
    request_schema: tuple[wa.Schema, Any],
) -> None:
    schema, _ = request_schema
    record = delimited(8, b"\xc3") + delimited(1, b"x")
    batch = wa.Transcoder(schema, columns=["id"], validate="plan").transcode([record])
    assert batch.to_pylist() == [{"id": "x"}]


@pytest.mark.parametrize("validate", ["plan", "full"])
def test_an_unread_field_with_another_wire_type_is_skipped(
    request_schema: tuple[wa.Schema, Any], validate: str
) -> None:
    """Like the runtime: a known field the plan does not read is treated as unknown."""
    schema, request = request_schema
    record = tag(8, 0) + varint(5) + delimited(1, b"x") + tag(9, 0) + varint(1)
    assert request.FromString(record).id == "x"
    batch = wa.Transcoder(schema, columns=["id"], validate=validate).transcode([record])
    assert batch.to_pylist() == [{"id": "x"}]


def test_proto2_strings_are_checked_only_where_arrow_needs_it(legacy_schema: wa.Schema) -> None:
    # proto2 has no UTF-8 rule: the runtime accepts this record, and so does wirearrow. Bytes
    # the plan does not output are not checked; a string the plan outputs lands in an Arrow
    # utf8 column, which must be valid UTF-8: one that is not moves to the unknown fields.
    record = (
        delimited(1, b"\xff\xfe")
        + delimited(2, b"ok")
        + delimited(2, b"\xc3")
        + tag(3, 0)
        + b"\x07"
    )
    legacy = message_factory.GetMessageClass(legacy_schema.descriptor)
    assert list(legacy.FromString(record).tags) == ["ok", b"\xc3"]
    for validate in ("plan", "full"):
        ok = wa.Transcoder(legacy_schema, columns=["n"], validate=validate).transcode([record])
        assert ok.column(0).to_pylist() == [7]
        assert wa.Transcoder(legacy_schema, columns=["n"]).stats.strings_not_utf8 == 0
        tc = wa.Transcoder(
            legacy_schema, ["name", "tags[*]", "_unknown"], validate=validate, on_error="raise"
        )
        assert tc.transcode([record]).to_pylist() == [
            {"name": None, "tags[*]": "ok", "_unknown": delimited(1, b"\xff\xfe") + delimited(2, b"\xc3")}
        ]
        assert (tc.stats.records_failed, tc.stats.strings_not_utf8) == (0, 2)
        # unvalidated_strings="reject": the strict rule, a bad record
        tc = wa.Transcoder(legacy_schema, columns=["name", "tags[*]"], validate=validate,
                           on_error="dead_letter", unvalidated_strings="reject")  # fmt: skip
        assert tc.transcode([record]).num_rows == 0
        dead = tc.dead_letters()
        assert dead.column("reason").to_pylist() == ["invalid UTF-8 in a string field"]
        assert dead.column("path").to_pylist() == ["name"]


def test_truncated_framed_stream(request_schema: tuple[wa.Schema, Any]) -> None:
    schema, request = request_schema
    record = request(id="a").SerializeToString()
    stream = varint(len(record)) + record + varint(len(record) + 5) + record
    with pytest.raises(wa.DecodeError) as info:
        wa.Transcoder(schema, columns=["id"]).transcode(stream, framing="varint")
    assert info.value.index == 1


@pytest.mark.parametrize("policy", ["skip", "dead_letter"])
@pytest.mark.parametrize("framing", ["varint", "u32le"])
def test_a_bad_frame_prefix_costs_only_the_tail(
    request_schema: tuple[wa.Schema, Any], policy: str, framing: str
) -> None:
    """The records before an unframeable tail come back; the tail is one accounted failure."""
    schema, request = request_schema
    records = [request(id=str(i)).SerializeToString() for i in range(3)]
    frame = varint if framing == "varint" else (lambda n: n.to_bytes(4, "little"))
    good = b"".join(frame(len(r)) + r for r in records)
    # An 11-byte varint cannot be a length; a u32 length past the end is a truncated tail.
    tail = b"\xff" * 10 + b"\x01" + records[0] if framing == "varint" else frame(999) + b"xy"
    tc = wa.Transcoder(schema, columns=["id"], on_error=policy)
    batch = tc.transcode(good + tail, framing=framing)
    assert batch.column("id").to_pylist() == ["0", "1", "2"]
    s = tc.stats
    assert (s.records_in, s.records_ok, s.records_failed) == (4, 3, 1)
    if policy == "dead_letter":
        (letter,) = tc.dead_letters().to_pylist()
        assert letter["index"] == 3 and letter["raw"] == tail
        if framing == "varint":
            assert f"at byte {len(good)}" in letter["reason"]
    with pytest.raises(wa.DecodeError) as info:
        wa.Transcoder(schema, columns=["id"]).transcode(good + tail, framing=framing)
    assert info.value.index == 3


@pytest.fixture(scope="module")
def json_schema() -> wa.Schema:
    import google.type.date_pb2

    gapis = str(pathlib.Path(google.type.date_pb2.__file__).parents[2])
    return wa.Schema.from_proto(
        PROTOS / "roundtrip.proto", "wirearrow.tests.roundtrip.Wkt", import_paths=[gapis]
    )


# field 18 (map<string, Value>) entry {value: number_value -inf}; field 17 (repeated Value)
# whose struct_value ends in a stray end-group tag: both from the issue.
NON_FINITE_VALUE = bytes.fromhex("92010b120911000000000000f0ff")
MALFORMED_VALUE = bytes.fromhex("8a01052a0304b755")


@pytest.mark.parametrize("columns", [None, ["vals", "val_by_key"], ["vals[*]"]])
def test_a_malformed_struct_value_is_one_bad_record(
    json_schema: wa.Schema, columns: list[str] | None
) -> None:
    good = NON_FINITE_VALUE
    with pytest.raises(wa.DecodeError) as info:
        wa.Transcoder(json_schema, columns).transcode([good, MALFORMED_VALUE])
    assert (info.value.index, info.value.reason) == (1, "malformed google.protobuf.Value")
    assert info.value.path.startswith("vals")
    tc = wa.Transcoder(json_schema, columns, on_error="dead_letter")
    batch = tc.transcode([MALFORMED_VALUE, good, b""])
    assert tc.stats.records_failed == 1 and tc.stats.records_ok == 2
    (letter,) = tc.dead_letters().to_pylist()
    assert letter["index"] == 0 and letter["raw"] == MALFORMED_VALUE
    assert batch.num_rows == 2


def test_non_finite_struct_numbers_are_kept_as_bare_tokens(json_schema: wa.Schema) -> None:
    """JSON has no form for them: NaN / Infinity / -Infinity, which encode reads back."""
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(json_schema.descriptor)
    m = cls()
    m.val.number_value = float("nan")
    m.st.fields["a"].number_value = float("inf")
    m.lv.values.add().number_value = -float("inf")
    m.val_by_key["k"].number_value = 1.5
    tc = wa.Transcoder(json_schema, on_error="skip")
    batch = tc.transcode([m.SerializeToString(), NON_FINITE_VALUE])
    assert tc.stats.records_failed == 0
    rows = batch.select(["val", "st", "lv", "val_by_key"]).to_pylist()
    assert rows[0] == {
        "val": "NaN",
        "st": '{"a":Infinity}',
        "lv": "[-Infinity]",
        "val_by_key": [("k", "1.5")],
    }
    assert rows[1]["val_by_key"] == [("", "-Infinity")]
    back = tc.encode(batch).to_pylist()
    assert back[0] == m.SerializeToString(deterministic=True)
    assert back[1] == cls.FromString(NON_FINITE_VALUE).SerializeToString(deterministic=True)


# --------------------------------------------------------------------------------------------
# Whole messages (nested mode, unknown fields kept)

WHOLE = ["id", "imp", "blob", "s", "f", "note", "marks"]  # `tree` is recursive: checked apart


@randomized(10)
@given(data=st.data())
def test_damaged_whole_messages(request_schema: tuple[wa.Schema, Any], data: st.DataObject) -> None:
    schema, request = request_schema
    records, validate = _damaged_batch(data, request, 4)
    tc = wa.Transcoder(
        schema, on_error="dead_letter", validate=validate, max_depth=6, keep_unknown=True
    )
    plain = wa.Transcoder(schema, max_depth=6).arrow_schema
    batch = tc.transcode(records)
    letters = {letter["index"]: letter for letter in tc.dead_letters().to_pylist()}
    assert tc.stats.records_in == len(records) == batch.num_rows + len(letters)
    rows = iter(batch.to_pylist())
    for i, record in enumerate(records):
        parsed = _runtime_parse(request, record)
        if i in letters:
            _check_dead_letter(letters[i], i, record)
            if parsed is not None:
                # Only a known field with another wire type: the runtime keeps it as unknown.
                assert _has_unknown_fields(parsed), f"record {i}: valid, rejected: {letters[i]}"
            continue
        row = next(rows)
        if parsed is None:
            # Only bytes the plan skips unread: under a cut recursive level, with validate=plan.
            assert validate == "plan", f"record {i}: the runtime rejects it, validate=full accepts"
            continue
        want = expected_rows(request, [record], [(c, c) for c in WHOLE])
        got = [{c: _without_unknown(row[c]) for c in WHOLE}]
        assert_rows_equal(pa.schema([plain.field(c) for c in WHOLE]), got, want, str(i))
        check_unknown(row, parsed)


def _without_unknown(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_unknown(v) for k, v in value.items() if k != "_unknown"}
    if isinstance(value, list):
        return [_without_unknown(v) for v in value]
    return value


def test_full_validation_reaches_below_a_max_depth_cut() -> None:
    """Found by tests/fuzz: damage two levels below the cut passed validate="full"."""
    import google.type.date_pb2
    from google.protobuf import message_factory

    gapis = str(pathlib.Path(google.type.date_pb2.__file__).parents[2])
    schema = wa.Schema.from_proto(
        PROTOS / "roundtrip.proto", "wirearrow.tests.roundtrip.Tree", import_paths=[gapis]
    )
    tree = message_factory.GetMessageClass(schema.descriptor)
    good = tree(left={"kids": [{"kids": [{"left": {"v": 1}}]}]}).SerializeToString()
    # left.kids[0].kids[0].left holds b"a\x80b": a fixed64 field cut short, below the cut.
    record = bytes.fromhex("12091a071a051203618062")
    with pytest.raises(RuntimeDecodeError):
        tree.FromString(record)
    full = wa.Transcoder(schema, on_error="dead_letter", validate="full", max_depth=3)
    assert full.transcode([good, record]).num_rows == 1
    (letter,) = full.dead_letters().to_pylist()
    assert letter["index"] == 1 and letter["path"] == "left"
    assert letter["reason"] == "malformed wirearrow.tests.roundtrip.Tree below the max_depth cut"
    plan = wa.Transcoder(schema, on_error="dead_letter", validate="plan", max_depth=3)
    assert plan.transcode([good, record]).num_rows == 2  # bytes the plan keeps unread
