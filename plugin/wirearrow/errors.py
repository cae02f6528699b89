"""Exceptions raised by wirearrow.

Every error double-inherits ``ValueError`` (as pyarrow's ``ArrowInvalid`` does), so callers
that already catch ``ValueError`` around parsing keep working.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

__all__ = [
    "MAX_MESSAGE",
    "MAX_QUOTED",
    "DecodeError",
    "EncodeError",
    "PathError",
    "PlanError",
    "SchemaError",
    "WirearrowError",
    "capped",
    "did_you_mean",
    "quoted",
]

# Plans and records are untrusted input, and errors quote them (a name, a value, a path): a
# message quotes at most MAX_QUOTED characters of one text, and one problem (a PlanError's
# line, a DecodeError's reason) is cut to MAX_MESSAGE characters whatever built it, so that a
# 1 MB field name gives a short error, not a 2 MB one.
MAX_QUOTED = 200
MAX_MESSAGE = 2000


def quoted(text: object, limit: int = MAX_QUOTED) -> str:
    """``repr(text)`` for an error message; a text over ``limit`` characters is cut there
    and says its length: ``'ffff...' (1,000,000 characters)``."""
    s = text if isinstance(text, str) else str(text)
    if len(s) <= limit:
        return repr(s)
    return f"{s[:limit]!r}... ({len(s):,} characters)"


def capped(message: str, limit: int = MAX_MESSAGE) -> str:
    """``message`` cut to about ``limit`` characters, keeping its start (where) and its end
    (the hint), and saying how much was cut."""
    if len(message) <= limit:
        return message
    keep = limit // 2
    cut = len(message) - 2 * keep
    return f"{message[:keep]}... [{cut:,} characters cut] ...{message[-keep:]}"


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to a misspelt ``word``, or ""."""
    if len(word) > MAX_QUOTED:  # no name is that long, and difflib's cost grows with it
        return ""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not close:
        close = [c for c in choices if c == word.lower()]
    return f" (did you mean {close[0]!r}?)" if close else ""


class WirearrowError(Exception):
    """Base class of every wirearrow error."""


class SchemaError(WirearrowError, ValueError):
    """A .proto file, descriptor set or message name could not be turned into a schema."""

    def __init__(self, message: object = "") -> None:
        # (protoc's diagnostics, one a line, can be many: a larger cap)
        super().__init__(capped(str(message), 5 * MAX_MESSAGE))


class PathError(WirearrowError, ValueError):
    """A path expression is malformed or does not fit the schema.

    ``str()`` shows the path with a caret under the fault::

        field "idd" not in message BidRequest
          idd.x
          ^
    """

    def __init__(self, message: str, text: str, pos: int) -> None:
        self.message = message
        self.text = text
        self.pos = pos
        super().__init__(self.render())

    def render(self) -> str:
        """The message, and the path with a caret under the fault; a long path shows only
        the MAX_QUOTED characters around the fault, ``...`` where it is cut."""
        text, pos = self.text, max(self.pos, 0)
        if len(text) > MAX_QUOTED:
            start = max(0, min(pos - MAX_QUOTED // 2, len(text) - MAX_QUOTED))
            end = start + MAX_QUOTED
            head = "..." if start > 0 else ""
            text = head + text[start:end] + ("..." if end < len(text) else "")
            pos = pos - start + len(head)
        return f"{capped(self.message)}\n  {text}\n  {' ' * pos}^"


class PlanError(WirearrowError, ValueError):
    """A plan (its columns, their names or types) is invalid; lists every problem at once."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = [capped(p) for p in problems]
        super().__init__("\n".join(self.problems))


def _valid_text(text: str) -> str:
    """``text`` with lone surrogates written as ``\\udXXX`` escapes.

    A reason or path may quote a bad record's own text (a JSON key or string ``"\\ud800"``
    decodes to a lone surrogate), and a dead letter's ``utf8`` columns, Parquet and every
    UTF-8 stream would refuse it: the error would cost more than its record."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class DecodeError(WirearrowError, ValueError):
    """A record's bytes are not valid protobuf for the schema.

    ``index`` is the record's position in the input of the call, ``offset`` the byte offset
    inside that record where decoding stopped, ``path`` the field path being read
    (``imp[2].banner.w``; ``#17`` names a field number the schema does not know).
    """

    def __init__(self, reason: str, *, index: int, offset: int, path: str) -> None:
        self.reason = capped(_valid_text(reason))
        self.index = index
        self.offset = offset
        self.path = capped(_valid_text(path), MAX_QUOTED)
        where = f" at {self.path}" if path else ""
        super().__init__(f"record {index}, byte {offset}{where}: {self.reason}")


class EncodeError(WirearrowError, ValueError):
    """Arrow rows that cannot be written as protobuf messages of the schema.

    ``row`` is the row of the batch (``None`` when the batch's schema itself does not fit),
    ``path`` the column path of the offending value (``points[3].x``: element 3 of the list
    ``points``; ``m[0].key``: the key of a map's first entry, in the array's order).
    """

    def __init__(self, reason: str, *, row: int | None, path: str) -> None:
        self.reason = capped(reason)
        self.row = row
        self.path = capped(path, MAX_QUOTED)
        where = [f"row {row}"] if row is not None else []
        where += [f"column {path}"] if path else []
        super().__init__(f"{', '.join(where)}: {reason}" if where else reason)
