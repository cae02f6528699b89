"""What the first bytes of an input look like, when they do not read as they were said to.

A file read with the wrong framing still frames, often: a varint reader takes the first
byte of a u32le length for a length and carries on, and the records it cuts fail to decode
one after the other ("invalid field number 0"). The readers then say what the bytes look
like instead, from their first bytes only: compressed (a codec's magic number), another
framing whose records are well-formed protobuf (and TFRecord's checksums match),
Confluent-prefixed records, or protojson text. Cold path: it runs after most of the first
records failed, on at most :data:`SNIFF_BYTES` and the first :data:`SNIFF_RECORDS` records,
each walked for at most :data:`WALK_BYTES` (a wrong framing shows in a record's first tags).

Schema-free: a record is well-formed when its tags are (field numbers from 1 to 2**29-1,
wire types 0, 1, 2, 5 and matched groups, lengths inside the record), which a decoder of
any schema would at least need.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from wirearrow._core.framing import FRAMINGS as _CODES
from wirearrow._core.framing import split

__all__ = [
    "LOOK_BYTES",
    "LOOK_RECORDS",
    "SNIFF_BYTES",
    "SNIFF_RECORDS",
    "Guess",
    "guess_input",
    "hint",
    "mostly_malformed",
    "suspect",
    "well_formed",
]

SNIFF_BYTES = 64 * 1024  # bytes of the input's start looked at
SNIFF_RECORDS = 32  # records of a framing looked at
WALK_BYTES = 512  # bytes of each record walked: a wrong framing fails in the first tags
# The first look, on every read_delimited call (so the cheapest that tells): the first tags
# of the first few records. Only a bad look leads to the guess, which reads more.
LOOK_RECORDS = 8
LOOK_BYTES = 24
_FRAMINGS = tuple(_CODES)
_MAX_FIELD = (1 << 29) - 1
_COMPRESSED = {  # magic number: (codec, suffix)
    b"\x1f\x8b": ("gzip", ".gz"),
    b"\x28\xb5\x2f\xfd": ("zstd", ".zst"),
    b"BZh": ("bz2", ".bz2"),
    b"\xfd7zXZ\x00": ("xz", ".xz"),
}


@dataclass(frozen=True)
class Guess:
    """What the bytes look like (``what``, in words) and the RecordFormat fields that read
    them so (``changes``)."""

    what: str
    changes: dict = field(default_factory=dict)

    def words(self) -> str:
        """"like u32le framing (framing='u32le')", "compressed with gzip (.gz): ..."."""
        given = ", ".join(f"{k}={v!r}" for k, v in self.changes.items())
        if "compression" in self.changes:
            return f"{self.what}: name the file with its suffix or give {given}"
        return f"like {self.what} ({given})"


def well_formed(record: bytes | memoryview, budget: int = WALK_BYTES) -> bool:
    """Whether ``record``'s tags are well-formed protobuf wire data, as far as its first
    ``budget`` bytes go (a field that starts inside them must end inside the record)."""
    data = memoryview(record).cast("B") if not isinstance(record, bytes) else record
    end = len(data)
    pos = 0
    groups: list[int] = []
    try:
        while pos < end:
            if pos >= budget:
                return True  # well-formed so far: enough to tell a framing
            tag, pos = _varint(data, pos)
            number, wire = tag >> 3, tag & 7
            if number == 0 or number > _MAX_FIELD:
                return False
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 2:
                size, pos = _varint(data, pos)
                pos += size
            elif wire == 5:
                pos += 4
            elif wire == 3:
                groups.append(number)
            elif wire == 4:
                if not groups or groups.pop() != number:
                    return False
            else:
                return False
            if pos > end:
                return False
    except IndexError:  # a varint cut by the end of the record
        return False
    return not groups


def _varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(10):
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise IndexError("a varint longer than 10 bytes")


def _frames(sample: bytes, framing: str, whole: bool) -> tuple[list[bytes], bool] | None:
    """The first records of ``sample`` in ``framing`` and whether its checksums held
    (TFRecord); None when the framing cannot read it (a length that cannot be one, or a
    whole input that does not end on a record's end)."""
    try:
        starts, ends, consumed, flags = split(memoryview(sample), _CODES[framing])
    except ValueError:
        return None
    if whole and consumed != len(sample):
        return None
    lo = np.frombuffer(memoryview(starts), np.int64)[:SNIFF_RECORDS]
    hi = np.frombuffer(memoryview(ends), np.int64)[:SNIFF_RECORDS]
    if not len(lo):
        return None
    checked = flags is None or not np.frombuffer(memoryview(flags), np.uint8)[: len(lo)].any()
    return [sample[s:e] for s, e in zip(lo.tolist(), hi.tolist(), strict=True)], checked


def _strip_confluent(record: bytes) -> bytes | None:
    """A Confluent record's payload (after magic 0, the schema id and the message-index
    array), or None when it has no such prefix."""
    if len(record) < 6 or record[0] != 0:
        return None
    try:
        count, pos = _varint(record, 5)
        count = (count >> 1) ^ -(count & 1)
        if count < 0 or count > 64:
            return None
        for _ in range(count):
            _, pos = _varint(record, pos)
    except IndexError:
        return None
    return record[pos:]


def mostly_malformed(records: Sequence[bytes | memoryview]) -> bool:
    """Whether most of ``records`` are not well-formed, from the first tags of the first
    LOOK_RECORDS of them (JSON text and compressed data are looked for by the guess)."""
    first = records[:LOOK_RECORDS]
    good = sum(well_formed(r, LOOK_BYTES) for r in first)
    return bool(len(first)) and good < len(first) / 2


def suspect(data: bytes | memoryview) -> bool:
    """The start of ``data`` is a codec's magic number or JSON text: what a look at the
    first tags can miss (``{`` is a well-formed group start)."""
    head = bytes(data[:8]).lstrip()
    return head.startswith(b"{") or any(head.startswith(m) for m in _COMPRESSED)


def _json_text(sample: bytes) -> bool:
    text = sample.lstrip()
    if not text.startswith(b"{"):
        return False
    line = text.split(b"\n", 1)[0]
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _evidence(records: Sequence[bytes | None]) -> tuple[float, int]:
    """(share of well-formed records, how many of them are not empty): an empty record is
    well-formed protobuf, and what a wrong framing cuts from runs of zero bytes."""
    good = [r for r in records if r is not None and well_formed(r)]
    return (len(good) / len(records) if records else 0.0), sum(1 for r in good if len(r))


def _reads_well(share: float, solid: int, whole: bool, strict: bool) -> bool:
    """Well-formed records enough to name a reading: most of them, and some not empty
    (``strict``: nearly all, and several; else half will do for a whole input framed to
    its last byte, which is evidence of its own)."""
    if strict:
        return share >= 0.9 and solid >= 2
    return solid >= 1 and (share >= 0.9 or (whole and share >= 0.5))


def _readings(sample: bytes, whole: bool, strict: bool) -> list[tuple[float, str, bool]]:
    """Each way binary records can be framed in ``sample`` that reads it well, as (rank,
    stream framing, Confluent-prefixed)."""
    found = []
    for framing in _FRAMINGS:
        framed = _frames(sample, framing, whole)
        if framed is None:
            continue
        records, checked = framed
        if not checked:  # a TFRecord checksum that does not match
            continue
        share, solid = _evidence(records)
        # Evidence: TFRecord's checksums; a whole input framed to its last byte; records
        # that are well-formed protobuf (varint frames any bytes for a while).
        if framing == "tfrecord" and any(records):
            found.append((2 + share, framing, False))
        elif framing != "tfrecord" and _reads_well(share, solid, whole, strict):
            found.append((share + (0.5 if whole else 0), framing, False))
        payloads = [_strip_confluent(r) for r in records]
        if all(p is not None for p in payloads):
            share, solid = _evidence(payloads)
            if _reads_well(share, solid, False, strict):
                found.append((1 + share, framing, True))
    return found


def guess_input(
    sample: bytes,
    *,
    format: str = "binary",
    framing: str | None = None,
    confluent: bool = False,
    whole: bool = False,
    strict: bool = False,
) -> list[Guess]:
    """What ``sample`` (an input's first bytes; ``whole``: all of it) looks like when it
    does not read well as ``format`` records in the stream framing ``framing`` (None:
    ``sample`` is one record), Confluent-prefixed or not: each reading that reads it well,
    best first; [] when there is none, or when it reads well as it was said to (then the
    records fail for other reasons: the schema, the plan). ``strict``: more evidence, for
    a reader that has seen no record fail (read_delimited), only malformed ones."""
    sample = bytes(sample[:SNIFF_BYTES])
    whole = whole and len(sample) < SNIFF_BYTES
    for magic, (codec, suffix) in _COMPRESSED.items():
        if sample.startswith(magic):
            return [Guess(f"compressed with {codec} ({suffix})", {"compression": codec})]
    if _json_text(sample):
        return [] if format == "json" else [Guess("protojson text, one record per line", {"format": "json"})]
    if format == "binary":
        said = framing or "varint"
        if any(f == said and c == confluent for _, f, c in _readings(sample, whole, False)):
            return []  # it reads well as it was said to
        one = _strip_confluent(sample) if confluent else sample
        if framing is None and one is not None and well_formed(one):
            return []  # one record, and it is well-formed
    guesses = []
    for _, other, prefixed in sorted(_readings(sample, whole, strict), key=lambda r: -r[0]):
        if format == "binary" and other == (framing or "varint") and prefixed == confluent:
            continue
        changes: dict = {"format": "binary"} if format != "binary" else {}
        if prefixed:
            changes["framing"] = "confluent"
            if other != "varint":
                changes["delimited_by"] = other
            what = f"Confluent-prefixed records in {other} framing"
        else:
            changes["framing"] = other
            what = f"{other} framing"
        guesses.append(Guess(what, changes))
    return guesses


def hint(
    sample: bytes,
    *,
    format: str = "binary",
    framing: str | None = None,
    confluent: bool = False,
    whole: bool = False,
    strict: bool = False,
) -> str:
    """:func:`guess_input` in words: "the data looks like u32le framing (framing='u32le')"
    (two guesses: "… or …"); "" when there is none. The fields are RecordFormat's: the
    command line's ``in_flags`` words them as its flags."""
    guesses = guess_input(
        sample, format=format, framing=framing, confluent=confluent, whole=whole, strict=strict
    )
    if not guesses:
        return ""
    return "the data looks " + " or ".join(g.words() for g in guesses[:2])
