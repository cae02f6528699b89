"""Exceptions raised by wirearrow.

Every error double-inherits ``ValueError`` (as pyarrow's ``ArrowInvalid`` does), so callers
that already catch ``ValueError`` around parsing keep working.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

__all__ = [
    "DecodeError",
    "EncodeError",
    "PathError",
    "PlanError",
    "SchemaError",
    "WirearrowError",
    "did_you_mean",
]


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to a misspelt ``word``, or ""."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not close:
        close = [c for c in choices if c == word.lower()]
    return f" (did you mean {close[0]!r}?)" if close else ""


class WirearrowError(Exception):
    """Base class of every wirearrow error."""


class SchemaError(WirearrowError, ValueError):
    """A .proto file, descriptor set or message name could not be turned into a schema."""


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
        caret = " " * max(self.pos, 0) + "^"
        return f"{self.message}\n  {self.text}\n  {caret}"


class PlanError(WirearrowError, ValueError):
    """A plan (its columns, their names or types) is invalid; lists every problem at once."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
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
        self.reason = _valid_text(reason)
        self.index = index
        self.offset = offset
        self.path = _valid_text(path)
        where = f" at {self.path}" if path else ""
        super().__init__(f"record {index}, byte {offset}{where}: {self.reason}")


class EncodeError(WirearrowError, ValueError):
    """Arrow rows that cannot be written as protobuf messages of the schema.

    ``row`` is the row of the batch (``None`` when the batch's schema itself does not fit),
    ``path`` the column path of the offending value (``points[3].x``: element 3 of the list
    ``points``; ``m[0].key``: the key of a map's first entry, in the array's order).
    """

    def __init__(self, reason: str, *, row: int | None, path: str) -> None:
        self.reason = reason
        self.row = row
        self.path = path
        where = [f"row {row}"] if row is not None else []
        where += [f"column {path}"] if path else []
        super().__init__(f"{', '.join(where)}: {reason}" if where else reason)
