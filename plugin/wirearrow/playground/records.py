"""The playground's records: a bounded sample of a file of records, or one pasted record.

A file (on the server's disk, or the first bytes of one uploaded from the page) is read
from its start and never whole: at most ``max_records`` records and ``max_bytes`` bytes
(decompressed), framed as a :class:`~wirearrow.RecordFormat` says, by the same splitter
every reader uses. Framing problems (a length prefix that cannot be one, a record cut by
the end of the file or of the byte budget) end the sample with a note; the records before
them are kept.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import re
from dataclasses import dataclass, field

import numpy as np

from wirearrow.sources.compression import compression_of, open_decompressed
from wirearrow.sources.format import CONFLUENT, RecordFormat
from wirearrow.sources.framing import TRAILERS, looks_like, split_framed_prefix
from wirearrow.sources.protojson import split_ndjson
from wirearrow.sources.sniff import hint

__all__ = ["HEAD_BYTES", "RecordsError", "Sample", "parse_pasted", "sample_file", "sample_upload"]

# The first bytes of an input kept with its sample: what they look like is said from them
# (sources.sniff) when most records fail.
HEAD_BYTES = 64 * 1024
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
    head: bytes = b""  # the input's first (decompressed) bytes, at most HEAD_BYTES
    whole: bool = False  # head is the whole input
    given: RecordFormat = field(default_factory=RecordFormat)  # how the input was read

    def framing_hint(self) -> str:
        """What the input's first bytes look like when they do not read well as
        ``given`` says (sources.sniff): "" when they do, or nothing else reads them."""
        fmt = self.given
        framed = self.framing not in (None, "lines")
        return hint(
            self.head,
            format=fmt.format,
            framing=self.framing if framed else None,
            confluent=fmt.confluent,
            whole=self.whole,
        )

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
            return _sample(raw, path, codec, fmt, max_records, max_bytes)
    except IsADirectoryError:
        raise RecordsError(f"{path}: is a directory, not a file of records") from None
    except (OSError, ImportError) as err:
        raise RecordsError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from None


def sample_upload(
    name: str, data: bytes, fmt: RecordFormat, *, size: int, max_records: int, max_bytes: int
) -> Sample:
    """The first records of a file uploaded from the page: ``data`` is its first bytes (of
    ``size``; the page sends no more than the sample can use), ``name`` its name (its
    suffix says its compression, as a file's does)."""
    codec = compression_of(name, fmt.compression)
    cut = size > len(data)
    where = f"{name} (uploaded{f', its first {len(data):,} of {size:,} bytes' if cut else ''})"
    try:
        sample = _sample(io.BytesIO(data), where, codec, fmt, max_records, max_bytes, cut=cut)
    except ImportError as err:  # a codec whose package is missing
        raise RecordsError(f"cannot read {name}: {err}") from None
    return sample


def _sample(
    raw, source: str, codec: str, fmt: RecordFormat, max_records: int, max_bytes: int,
    cut: bool = False,
) -> Sample:
    """The sample of the stream ``raw`` (``cut``: it holds only the input's first bytes:
    its end is the sample's limit, not a broken input)."""
    stream = raw if codec == "none" else open_decompressed(raw, codec, "the file")
    data = stream.read(max_bytes + 1)
    broken = getattr(stream, "broken", None)
    more = len(data) > max_bytes
    data = data[:max_bytes]
    if cut and not more:
        # The upload's end cuts its last record (or a compressed stream): not the file's.
        more, broken = True, None
    # Each record is then read on its own: Confluent records keep their prefix.
    each = fmt.replace(
        framing=CONFLUENT if fmt.confluent else None, delimited_by=None, compression="none"
    )
    framing = None if fmt.format == "json" else fmt.stream_framing
    sample = Sample(
        source=source,
        framing=framing or "lines",
        fmt=each,
        head=bytes(data[:HEAD_BYTES]),
        whole=not more and broken is None and len(data) <= HEAD_BYTES,
        given=fmt,
    )
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
    if problem is not None and framing is not None:  # (problems are a framing's)
        sample.note = f"{problem[1]} at byte {problem[0]}" + looks_like(
            sample.head, framing, sample.whole
        )
    elif broken is not None:
        sample.note = broken
    elif more:
        sample.truncated = True
        limit = (
            "the end of the uploaded part"
            if cut and len(data) < max_bytes
            else f"the sample's limit of {max_bytes:,} bytes"
        )
        sample.note = f"stopped at byte {consumed}: the next record would pass {limit}"
    elif framing is not None and consumed < len(data):
        sample.note = (
            f"truncated {framing} stream: the record at byte {consumed} runs past the end "
            f"({len(data) - consumed:,} bytes left)" + looks_like(sample.head, framing, sample.whole)
        )
    return sample


def parse_pasted(text: str, max_bytes: int, fmt: RecordFormat | None = None) -> Sample:
    """One record pasted as hex (spaces allowed, optional 0x) or base64; with ``fmt``
    format json, protojson records as their text (one, or one per line). A Confluent ``fmt``:
    the record carries its prefix."""
    fmt = fmt or RecordFormat()
    each = fmt.replace(framing=CONFLUENT if fmt.confluent else None, delimited_by=None, compression="none")
    if fmt.format == "json":
        data = text.encode("utf-8")
        if len(data) > max_bytes:
            raise RecordsError(f"the pasted text is longer than the limit of {max_bytes:,} bytes")
        try:  # one record, perhaps over several lines (pretty-printed)
            json.loads(data)
            starts, ends = np.array([0]), np.array([len(data)])
        except ValueError:  # else one per line (a bad one is the decoder's to name)
            starts, ends = split_ndjson(data)
        if not len(starts) or not data.strip():
            raise RecordsError("paste a protojson record, or several, one per line")
        return Sample(
            records=[data[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)],
            offsets=starts.tolist(),
            source=f"pasted protojson ({len(starts)} record{'s' if len(starts) > 1 else ''})",
            framing="lines",
            fmt=each,
            head=data[:HEAD_BYTES],
            whole=len(data) <= HEAD_BYTES,
            given=fmt,
        )
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
    return Sample(
        records=[data],
        offsets=[0],
        source=f"pasted {kind} ({len(data):,} bytes)",
        fmt=each,
        head=data[:HEAD_BYTES],
        whole=len(data) <= HEAD_BYTES,
        given=fmt,
    )
