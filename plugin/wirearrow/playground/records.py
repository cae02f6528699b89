"""The playground's records: a bounded sample of a framed file, or one pasted record.

A file is read a record at a time from its start and never whole: at most ``max_records``
records and ``max_bytes`` bytes. Framing problems (a length prefix that cannot be one, a
record cut by the end of the file or of the byte budget) end the sample with a note; the
records before them are kept.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass, field

__all__ = ["FRAMINGS", "RecordsError", "Sample", "parse_pasted", "sample_file"]

FRAMINGS = ("varint", "u32le", "u32be")
# A varint length prefix is at most 10 bytes; more continuation bytes cannot be a length.
_MAX_VARINT = 10
_HEX = re.compile(r"[0-9a-fA-F]+")


class RecordsError(ValueError):
    """Records that cannot be read at all: the message is shown on the page."""


@dataclass
class Sample:
    """Records with the byte offset of each one's frame in its source."""

    records: list[bytes] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    source: str = ""
    framing: str | None = None  # None: pasted (no framing)
    note: str = ""  # why the sample stopped where it did, when not at the end of the input
    truncated: bool = False  # the input holds more than the sample

    def describe(self) -> dict:
        return {
            "source": self.source,
            "framing": self.framing,
            "records": len(self.records),
            "bytes": sum(map(len, self.records)),
            "note": self.note,
            "truncated": self.truncated,
        }


def _header(file, framing: str, at: int) -> tuple[int, int] | str | None:
    """(header size, payload size) of the frame at ``at``; None at a clean end; else why not."""
    if framing == "varint":
        length = shift = 0
        for i in range(_MAX_VARINT):
            byte = file.read(1)
            if not byte:
                return None if i == 0 else f"the varint length prefix at byte {at} is cut short"
            length |= (byte[0] & 0x7F) << shift
            if byte[0] < 0x80:
                return i + 1, length
            shift += 7
        return f"the varint length prefix at byte {at} is longer than {_MAX_VARINT} bytes"
    head = file.read(4)
    if not head:
        return None
    if len(head) < 4:
        return f"the 4-byte length prefix at byte {at} is cut short ({len(head)} bytes left)"
    return 4, int.from_bytes(head, "little" if framing == "u32le" else "big")


def sample_file(path: str, framing: str, *, max_records: int, max_bytes: int) -> Sample:
    """The first records of a framed file, within ``max_records`` and ``max_bytes``."""
    if framing not in FRAMINGS:
        raise RecordsError(f"framing must be one of {', '.join(FRAMINGS)}, not {framing!r}")
    path = os.path.expanduser(path)
    sample = Sample(source=path, framing=framing)
    try:
        with open(path, "rb") as file:
            position = 0
            while len(sample.records) < max_records:
                header = _header(file, framing, position)
                if header is None:
                    return sample
                if isinstance(header, str):
                    sample.note = header
                    return sample
                head, size = header
                if position + head + size > max_bytes:
                    sample.note = (
                        f"stopped at byte {position}: the next record ({size:,} bytes) would "
                        f"pass the sample's limit of {max_bytes:,} bytes"
                    )
                    sample.truncated = True
                    return sample
                payload = file.read(size)
                if len(payload) < size:
                    sample.note = (
                        f"truncated {framing} stream: the record at byte {position} needs "
                        f"{size:,} bytes, {len(payload):,} are left"
                    )
                    return sample
                sample.records.append(payload)
                sample.offsets.append(position)
                position += head + size
            sample.truncated = bool(file.read(1))
            if sample.truncated:
                sample.note = f"the first {max_records:,} records (the sample's limit)"
    except IsADirectoryError:
        raise RecordsError(f"{path}: is a directory, not a file of records") from None
    except OSError as err:
        raise RecordsError(f"cannot read {path}: {err.strerror or err}") from None
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
