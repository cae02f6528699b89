"""The playground's records: a bounded sample of a file of records, or one pasted record.

A file is read from its start and never whole: at most ``max_records`` records and
``max_bytes`` bytes (decompressed), framed as a :class:`~wirearrow.RecordFormat` says, by
the same splitter every reader uses. Framing problems (a length prefix that cannot be one,
a record cut by the end of the file or of the byte budget) end the sample with a note; the
records before them are kept.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass, field

import numpy as np

from wirearrow.sources.compression import compression_of, open_decompressed
from wirearrow.sources.format import CONFLUENT, RecordFormat
from wirearrow.sources.framing import TRAILERS, looks_like, split_framed_prefix
from wirearrow.sources.protojson import split_ndjson

__all__ = ["RecordsError", "Sample", "parse_pasted", "sample_file"]

_HEX = re.compile(r"[0-9a-fA-F]+")


class RecordsError(ValueError):
    """Records that cannot be read at all: the message is shown on the page."""


@dataclass
class Sample:
    """Records with the byte offset of each one's frame (or line) in its source, and how to
    read each of them (``fmt``: a record at a time, as ``Transcoder.decode`` takes a list)."""

    records: list[bytes] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    source: str = ""
    framing: str | None = None  # None: pasted (no framing)
    note: str = ""  # why the sample stopped where it did, when not at the end of the input
    truncated: bool = False  # the input holds more than the sample
    fmt: RecordFormat = field(default_factory=RecordFormat)

    def describe(self) -> dict:
        return {
            "source": self.source,
            "framing": self.framing,
            "format": self.fmt.format,
            "records": len(self.records),
            "bytes": sum(map(len, self.records)),
            "note": self.note,
            "truncated": self.truncated,
        }


def sample_file(path: str, fmt: RecordFormat, *, max_records: int, max_bytes: int) -> Sample:
    """The first records of a file as ``fmt`` frames them (any framing, compression or
    format a reader takes), within ``max_records`` and ``max_bytes`` of its (decompressed)
    bytes: never read whole. A framing problem ends the sample with a note; the records
    before it are kept."""
    path = os.path.expanduser(path)
    codec = compression_of(path, fmt.compression)
    try:
        with open(path, "rb") as raw:
            stream = raw if codec == "none" else open_decompressed(raw, codec, "the file")
            data = stream.read(max_bytes + 1)
            broken = getattr(stream, "broken", None)
    except IsADirectoryError:
        raise RecordsError(f"{path}: is a directory, not a file of records") from None
    except (OSError, ImportError) as err:
        raise RecordsError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
    more = len(data) > max_bytes
    data = data[:max_bytes]
    # Each record is then read on its own: Confluent records keep their prefix.
    each = fmt.replace(
        framing=CONFLUENT if fmt.confluent else None, delimited_by=None, compression="none"
    )
    framing = None if fmt.format == "json" else fmt.stream_framing
    sample = Sample(source=path, framing=framing or "lines", fmt=each)
    if framing is None:
        starts, ends = split_ndjson(data)
        if more and len(ends) and ends[-1] == len(data):  # a line cut by the byte budget
            starts, ends = starts[:-1], ends[:-1]
        consumed = int(ends[-1]) + 1 if len(ends) else 0
        problem, corrupt, frame_at = None, np.zeros(0, np.int64), starts
    else:
        starts, ends, consumed, problem, corrupt = split_framed_prefix(data, framing)
        frame_at = np.concatenate(([0], ends[:-1] + TRAILERS[framing])).astype(np.int64)
    bad = set(corrupt.tolist())
    for i in range(len(starts)):
        if len(sample.records) == max_records:
            sample.truncated = True
            sample.note = f"the first {max_records:,} records (the sample's limit)"
            return sample
        if i not in bad:
            sample.records.append(bytes(data[starts[i] : ends[i]]))
            sample.offsets.append(int(frame_at[i]))
    if bad:
        sample.note = f"{len(bad)} record(s) left out: their {framing} CRC32C does not match"
    if problem is not None:
        sample.note = f"{problem[1]} at byte {problem[0]}"
    elif broken is not None:
        sample.note = broken
    elif more:
        sample.truncated = True
        sample.note = (
            f"stopped at byte {consumed}: the next record would pass the sample's limit of "
            f"{max_bytes:,} bytes"
        )
    elif framing is not None and consumed < len(data):
        sample.note = (
            f"truncated {framing} stream: the record at byte {consumed} runs past the end "
            f"({len(data) - consumed:,} bytes left)" + looks_like(data, framing, whole=True)
        )
    return sample


def parse_pasted(text: str, max_bytes: int) -> Sample:
    """One record pasted as hex (spaces allowed, optional 0x) or base64."""
    compact = "".join(text.split())
    if compact.lower().startswith("0x"):
        compact = compact[2:]
    if not compact:
        raise RecordsError("paste one record as hex or base64")
    if len(compact) > 2 * max_bytes:
        raise RecordsError(f"the pasted record is longer than the limit of {max_bytes:,} bytes")
    if _HEX.fullmatch(compact) and len(compact) % 2 == 0:
        data, kind = bytes.fromhex(compact), "hex"
    else:
        # base64 or its URL-safe alphabet, padding optional; anything else is an error
        # (b64decode without validate would silently drop the characters it does not know).
        standard = compact.replace("-", "+").replace("_", "/").rstrip("=")
        try:
            data = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise RecordsError(
                "the pasted text is neither hex (an even number of 0-9a-f digits) nor base64"
            ) from None
        kind = "base64"
    return Sample(records=[data], offsets=[0], source=f"pasted {kind} ({len(data):,} bytes)")
