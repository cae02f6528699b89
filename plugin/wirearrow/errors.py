"""Exceptions raised by wirearrow.

Every error double-inherits ``ValueError`` (as pyarrow's ``ArrowInvalid`` does), so callers
that already catch ``ValueError`` around parsing keep working.
"""

from __future__ import annotations

__all__ = ["DecodeError", "PathError", "PlanError", "SchemaError", "WirearrowError"]


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


class DecodeError(WirearrowError, ValueError):
    """A record's bytes are not valid protobuf for the schema.

    ``index`` is the record's position in the input of the call, ``offset`` the byte offset
    inside that record where decoding stopped, ``path`` the field path being read
    (``imp[2].banner.w``; ``#17`` names a field number the schema does not know).
    """

    def __init__(self, reason: str, *, index: int, offset: int, path: str) -> None:
        self.reason = reason
        self.index = index
        self.offset = offset
        self.path = path
        where = f" at {path}" if path else ""
        super().__init__(f"record {index}, byte {offset}{where}: {reason}")
