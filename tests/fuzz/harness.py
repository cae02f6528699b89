"""The fuzz harness: mutated records through transcode and encode, checked against upb.

For each target schema, batches of valid records (``mutations.random_message``) and
structure-aware mutations of them (``mutations.mutate``) go through ``transcode`` under
every error policy, and the rows back through ``encode``. Checked for every record:

- **no escape**: nothing but a ``wirearrow`` error leaves ``transcode`` / ``encode``;
- **accounting**: ``records_in == records_ok + records_failed``, one row per good record,
  one dead letter (index, raw bytes) per bad one, ``"raise"`` raising the lowest bad index;
- **differential** (``validate="full"``): the record is accepted exactly when the protobuf
  runtime (upb) parses it, and an accepted record encodes back to the runtime's
  ``SerializeToString(deterministic=True)`` of the message it parsed (or both refuse).

A disagreement the docs explain (``KNOWN``) is counted, not failed. Run it with
``python tests/fuzz/run.py`` (docs/fuzzing.md); tests/fuzz/test_fuzz.py runs a short
deterministic slice in CI.
"""

from __future__ import annotations

import collections
import functools
import pathlib
import random
from dataclasses import dataclass, field
from typing import Any

import google.protobuf
import google.type.date_pb2
from google.protobuf import message_factory
from google.protobuf.message import DecodeError as RuntimeDecodeError
from google.protobuf.message import EncodeError as RuntimeEncodeError
from mutations import mutate, random_message

import wirearrow as wa

HERE = pathlib.Path(__file__).resolve().parent
PROTOS = HERE.parent / "protos"
GAPIS = str(pathlib.Path(google.type.date_pb2.__file__).parents[2])

# (file, message, max_depth for whole-message reads of a recursive type, name, options):
# fuzz.Node twice: its extensions as unknown fields (kept, and written back in the runtime's
# order), and as fields (extensions=True)
TARGETS = [
    (HERE / "protos" / "fuzz.proto", "wirearrow.tests.fuzz.Node", 4, "Node", {}),
    (HERE / "protos" / "fuzz.proto", "wirearrow.tests.fuzz.Node", 2, "NodeExt", {"extensions": True}),
    (PROTOS / "roundtrip.proto", "wirearrow.tests.roundtrip.Wkt", None, "Wkt", {}),
    (PROTOS / "roundtrip.proto", "wirearrow.tests.roundtrip.Maps", None, "Maps", {}),
    (PROTOS / "roundtrip.proto", "wirearrow.tests.roundtrip.Tree", 3, "Tree", {}),
    (PROTOS / "groups.proto", "wirearrow.tests.groups.G", None, "G", {}),
    (PROTOS / "delimited.proto", "wirearrow.tests.delimited.D", None, "D", {}),
    (PROTOS / "malformed.proto", "wirearrow.tests.malformed.Request", 3, "Request", {}),
]

# Disagreements with the runtime that docs/ explains, by the reason wirearrow gives.
KNOWN = {
    # docs/types.md: Timestamp / Duration that do not fit int64 nanoseconds are an error.
    "out of range for unit": "timestamp or duration outside the ns range (docs/types.md)",
    # docs/round-trip.md: the encoder refuses what the runtime's Timestamp cannot hold.
    "outside google.protobuf.Timestamp's range": "Timestamp outside 0001..9999 (round-trip.md)",
    "outside google.protobuf.Duration's range": "Duration beyond 10,000 years (round-trip.md)",
    # docs/errors.md: a proto2 string read into an Arrow utf8 column must be valid UTF-8.
    "invalid UTF-8 in a string field": "proto2 string that is not UTF-8 (errors.md)",
    # docs/errors.md: a field the plan reads, with another wire type, is an error (upb
    # keeps it as an unknown field; whole-message plans read every field).
    "wrong wire type for the field": "a read field with another wire type (errors.md)",
    # docs/types.md "Values outside the type": no Arrow value gives them back as they came.
    "nanos outside": "Timestamp / Duration nanos outside the type (types.md)",
    "is not a whole calendar date": "google.type.Date that is not a calendar date (types.md)",
    "google.type.TimeOfDay outside": "TimeOfDay outside 00:00..23:59:59.999999999 (types.md)",
    "is not NULL_VALUE (0)": "a Value whose null_value is not 0 (types.md)",
}
# A length prefix of 6-10 bytes (a small length padded with 0x80 bytes): protobuf 7's upb
# rejects it, and so does wirearrow; protobuf 6's upb accepts it (docs/errors.md).
PROTOBUF_MAJOR = int(google.protobuf.__version__.split(".")[0])
if PROTOBUF_MAJOR < 7:
    KNOWN["length prefix varint longer than 5 bytes"] = (
        "a length prefix over 5 bytes: protobuf 7 rejects it, 6 accepts it (errors.md)"
    )
# A repeated group sent length-delimited: protobuf 7's upb and wirearrow keep it as an
# unknown field, 6's reads a group after the length (docs/errors.md). Recognised on 6 by
# the tag of such a field anywhere in the record.
GROUP_AS_LENGTH = (
    "a repeated group sent length-delimited: protobuf 7 reads an unknown field, 6 a group "
    "(errors.md)"
)
# Extensions read as unknown fields (no extensions=True) are checked as unknown fields: a
# message extension whose bytes do not parse is accepted; with extensions=True it is not.
EXTENSION_AS_UNKNOWN = (
    "an extension kept as an unknown field is checked as one; with extensions=True its "
    "content is (types.md)"
)
# docs/round-trip.md: a level below a max_depth cut is written back as it came, so a
# required field missing inside it is not refused (upb's SerializePartialToString writes the
# same bytes; its SerializeToString refuses).
REQUIRED_BELOW_CUT = "a required field missing below the max_depth cut is written as it came"
# A map entry upb keeps whole as an unknown field (docs/types.md, "Unknown fields"): its
# message value is written as it came, where upb re-serializes it (the same value parsed).
MESSAGE_ENTRY = (
    "a map entry kept as an unknown field holds its message value as it came, upb "
    "re-serializes it (types.md)"
)


@dataclass
class Target:
    name: str
    schema: wa.Schema
    cls: Any
    max_depth: int | None
    seeds: list[bytes] = field(default_factory=list)
    options: dict = field(default_factory=dict)  # transcoder options of this target


@dataclass
class Report:
    """What a run tried and found."""

    records: int = 0
    mutated: int = 0
    accepted: int = 0
    rejected: int = 0
    mutations: collections.Counter = field(default_factory=collections.Counter)
    known: collections.Counter = field(default_factory=collections.Counter)
    failures: list[str] = field(default_factory=list)  # each: what, the record in hex

    def fail(self, target: Target, what: str, record: bytes | None = None) -> None:
        hexed = f" record {record.hex()}" if record is not None else ""
        self.failures.append(f"[{target.name}] {what}{hexed}")

    def merge(self, other: Report) -> None:
        for name in ("records", "mutated", "accepted", "rejected"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.mutations.update(other.mutations)
        self.known.update(other.known)
        self.failures += other.failures


def load_targets(names: list[str] | None = None) -> list[Target]:
    out = []
    for path, message, max_depth, short, options in TARGETS:
        if names and short not in names and message not in names:
            continue
        schema = wa.Schema.from_proto(path, message, import_paths=[GAPIS])
        cls = message_factory.GetMessageClass(schema.descriptor)
        out.append(Target(short, schema, cls, max_depth, options=options))
    return out


def seed_records(target: Target, rng: random.Random, n: int) -> list[bytes]:
    depth = target.max_depth or 3
    # deterministic: upb writes map entries in an order that changes from run to run, and
    # the mutations draw from the bytes, so without it a seed would not replay its run
    return [
        random_message(rng, target.cls, max_depth=depth).SerializePartialToString(
            deterministic=True
        )
        for _ in range(n)
    ]


def batch(target: Target, rng: random.Random, size: int, report: Report) -> list[bytes]:
    """``size`` records: some valid, most mutated once or a few times."""
    if not target.seeds:
        target.seeds = seed_records(target, rng, 32)
    out = []
    for _ in range(size):
        record = rng.choice(target.seeds)
        if rng.random() < 0.8:
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                record, what = mutate(rng, record, target.seeds)
                report.mutations[what.split(" ")[0]] += 1
            report.mutated += 1
        out.append(record)
    return out


def _runtime(target: Target, record: bytes) -> tuple[Any | None, bytes | None]:
    """(the runtime's message or None if it rejects the bytes, its deterministic bytes or
    None if it refuses to serialize the message)."""
    try:
        message = target.cls.FromString(record)
    except RuntimeDecodeError:
        return None, None
    if not message.IsInitialized():
        # SerializeToString would raise; with a map field in the message upb 6.33 crashes
        # instead (a segfault on 62006a00 for fuzz.Node: found by this harness).
        return message, None
    try:
        return message, message.SerializeToString(deterministic=True)
    except RuntimeEncodeError:
        return message, None


def _known(reason: str) -> str | None:
    return next((why for text, why in KNOWN.items() if text in reason), None)


# Strings the schema does not validate that are not UTF-8 move to the unknown fields
# (docs/types.md, "Strings the schema does not validate"), so encode writes them after the
# known fields: the same message for the runtime, in other bytes where the order differs.
MOVED_ORDER = "a string that is not UTF-8 is written back among the unknown fields (same message)"
# A required string moved so reads as missing, and encode refuses a missing required field.
MOVED_REQUIRED = "a required string that is not UTF-8 moved to the unknown fields: encode refuses it"


def _moves_strings(target: Target, record: bytes) -> bool:
    """Whether the record holds an unvalidated string that is not UTF-8 (it moves)."""
    tc = wa.Transcoder(target.schema, on_error="skip", max_depth=target.max_depth,
                       keep_unknown=True, timestamp_unit="ns", **target.options)  # fmt: skip
    tc.transcode([record])
    return tc.stats.strings_not_utf8 > 0


def _extension_content(target: Target, record: bytes) -> bool:
    """Whether a record accepted with its extensions as unknown fields is rejected once they
    are fields (their content is then checked, as upb checks it)."""
    if target.options.get("extensions") or not target.schema.descriptor.extension_ranges:
        return False
    # (cut at 1: below the cut, validate="full" parses the bytes as the runtime does)
    tc = wa.Transcoder(target.schema, on_error="skip", max_depth=1 if target.max_depth else None,
                       validate="full", timestamp_unit="ns", extensions=True)  # fmt: skip
    tc.transcode([record])
    return tc.stats.records_failed > 0


def _explain(target: Target, record: bytes, message: Any | None, reason: str = "") -> str | None:
    """Which documented disagreement, if any, accounts for this record."""
    why = _known(reason)
    if why is not None:
        return why
    if PROTOBUF_MAJOR < 7 and any(t in record for t in _group_list_tags(target.cls.DESCRIPTOR)):
        return GROUP_AS_LENGTH
    if message is not None and _message_entry_kept(message):
        return MESSAGE_ENTRY
    return None


@functools.cache
def _group_list_tags(descriptor: Any) -> tuple[bytes, ...]:
    """The tags, with wire type 2, of the repeated groups reachable from `descriptor`, its
    extensions' included (docs/fuzzing.md, findings 7 and 12: protobuf 6 rejects
    `d2 06 00` for a repeated group extension 106 where 7 keeps an unknown field)."""
    from mutations import varint

    tags: set[bytes] = set()
    seen: set[str] = set()
    todo = [descriptor]
    while todo:
        d = todo.pop()
        if d.full_name in seen:
            continue
        seen.add(d.full_name)
        for fd in [*d.fields, *d.file.pool.FindAllExtensions(d)]:
            if fd.message_type is not None:
                todo.append(fd.message_type)
                if fd.type == fd.TYPE_GROUP and fd.is_repeated:
                    tags.add(varint(fd.number << 3 | 2))
    return tuple(sorted(tags))


def _walk(message: Any):
    yield message
    for fd, value in message.ListFields():
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            values = [v for v in value.values()] if fd.message_type.fields_by_number[2].message_type else []
        else:
            values = value if fd.is_repeated else [value]
        for v in values:
            yield from _walk(v)


def _message_entry_kept(message: Any) -> bool:
    """Whether an unknown field of some message is an entry of its map with message values."""
    from google.protobuf import unknown_fields

    for m in _walk(message):
        numbers = {
            fd.number
            for fd in m.DESCRIPTOR.fields
            if fd.message_type is not None
            and fd.message_type.GetOptions().map_entry
            and fd.message_type.fields_by_number[2].message_type is not None
        }
        if numbers and any(u.field_number in numbers for u in unknown_fields.UnknownFieldSet(m)):
            return True
    return False


def check(target: Target, records: list[bytes], report: Report) -> None:
    """Every check of the module docstring, on one batch."""
    report.records += len(records)
    options = {"max_depth": target.max_depth, "keep_unknown": True, "timestamp_unit": "ns",
               **target.options}  # fmt: skip
    tc = wa.Transcoder(target.schema, on_error="dead_letter", validate="full", **options)
    try:
        out = tc.transcode(records)
    except wa.WirearrowError as err:
        report.fail(target, f"dead_letter transcode raised {err!r}")
        return
    except Exception as err:  # the point of the harness: nothing else may escape
        report.fail(target, f"escaped from transcode: {type(err).__name__}: {err}")
        return
    letters = {d["index"]: d for d in tc.dead_letters().to_pylist()}
    s = tc.stats
    if not (s.records_in == len(records) == s.records_ok + s.records_failed):
        report.fail(target, f"accounting: {s} for {len(records)} records")
    if out.num_rows != s.records_ok or len(letters) != s.records_failed:
        report.fail(target, f"rows {out.num_rows} / letters {len(letters)} vs {s}")
    for i, letter in letters.items():
        if letter["raw"] != records[i] or not letter["reason"]:
            report.fail(target, f"dead letter {i} does not hold its record", records[i])
    _check_policies(target, records, options, letters, report)
    good = [i for i in range(len(records)) if i not in letters]
    encoded = _encode_rows(target, tc, out, good, records, report)
    for i, record in enumerate(records):
        message, canonical = _runtime(target, record)
        if i in letters:
            report.rejected += 1
            if message is not None:
                why = _explain(target, record, message, letters[i]["reason"])
                if why is None:
                    report.fail(target, f"rejected ({letters[i]['reason']}), upb accepts", record)
                else:
                    report.known[why] += 1
            continue
        report.accepted += 1
        if message is None:
            why = _explain(target, record, None)
            if why is None and _extension_content(target, record):
                why = EXTENSION_AS_UNKNOWN
            if why is None:
                report.fail(target, "accepted, upb rejects", record)
            else:
                report.known[why] += 1
            continue
        mine = encoded.get(i)
        if isinstance(mine, str):  # an EncodeError
            why = _explain(target, record, message, mine)
            if canonical is None and "required field" in mine:
                continue  # both refuse a message missing a required field
            if why is None and "required field" in mine and _moves_strings(target, record):
                why = MOVED_REQUIRED
            if why is None:
                report.fail(target, f"encode refused ({mine}), upb serializes", record)
            else:
                report.known[why] += 1
        elif canonical is None:
            # upb refuses to serialize a message missing a required field. Encode refuses
            # one too, except inside bytes it writes back as they came (a level below the
            # max_depth cut): what it wrote must then parse to the very same message.
            if _runtime(target, mine)[0] == message:
                report.known[REQUIRED_BELOW_CUT] += 1
            else:
                report.fail(target, "encode wrote a message upb refuses to serialize", record)
        elif mine != canonical:
            why = _explain(target, record, message)
            if why is None and _moves_strings(target, record) and _runtime(target, mine)[0] == message:
                why = MOVED_ORDER
            if why is None:
                report.fail(
                    target, f"encode differs from upb: {mine.hex()} != {canonical.hex()}", record
                )
            else:
                report.known[why] += 1


def _encode_rows(
    target: Target, tc: wa.Transcoder, out: Any, good: list[int], records: list[bytes], report: Report
) -> dict[int, bytes | str]:
    """The whole batch at once; when a row cannot be encoded (the error names it), the
    rest again without it, so that every row is checked."""
    result: dict[int, bytes | str] = {}
    rows = list(range(len(good)))
    while rows:
        try:
            encoded = tc.encode(out.take(rows)).to_pylist()
        except wa.EncodeError as err:
            if err.row is None:
                report.fail(target, f"encode refused the batch's schema: {err}")
                return result
            bad = rows.pop(err.row)
            result[good[bad]] = str(err)
            continue
        except Exception as err:
            report.fail(target, f"escaped from encode: {type(err).__name__}: {err}")
            return result
        result.update((good[r], value) for r, value in zip(rows, encoded, strict=True))
        break
    return result


def _check_policies(
    target: Target, records: list[bytes], options: dict, letters: dict, report: Report
) -> None:
    """"skip" counts what "dead_letter" kept; "raise" raises for the lowest bad record."""
    skip = wa.Transcoder(target.schema, on_error="skip", validate="full", **options)
    raising = wa.Transcoder(target.schema, validate="full", **options)
    try:
        skip.transcode(records)
        if skip.stats.records_failed != len(letters):
            report.fail(target, f"skip failed {skip.stats.records_failed}, dead_letter {len(letters)}")
        raising.transcode(records)
        if letters:
            report.fail(target, "raise did not raise", records[min(letters)])
    except wa.DecodeError as err:
        if not letters or err.index != min(letters):
            report.fail(target, f"raise gave record {err.index}, lowest bad {min(letters, default=None)}")
    except Exception as err:
        report.fail(target, f"escaped under skip/raise: {type(err).__name__}: {err}")


def run(
    seconds: float | None = None,
    batches: int | None = None,
    seed: int = 0,
    batch_size: int = 16,
    names: list[str] | None = None,
    progress: Any = None,
) -> Report:
    """Fuzz every target in turn until ``batches`` batches or ``seconds`` have passed."""
    import time

    rng = random.Random(seed)
    targets = load_targets(names)
    report = Report()
    started = time.monotonic()
    k = 0
    while True:
        if batches is not None and k >= batches:
            break
        if seconds is not None and time.monotonic() - started >= seconds:
            break
        target = targets[k % len(targets)]
        check(target, batch(target, rng, batch_size, report), report)
        k += 1
        if progress is not None and k % 200 == 0:
            progress(report, time.monotonic() - started)
    return report
