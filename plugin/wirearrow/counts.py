"""Counts: what a decode did with its records, as one value that adds up.

The one record of counters: a decode returns it (``Transcoder.decode(...).counts``), a
transcoder sums its calls (``tc.stats``), and the engines and the command line add the
counts of batches, workers and files with ``+`` instead of declaring the same counters
again. The invariant holds for every sum: ``records_in == records_ok + records_failed``,
and ``dead_letters <= records_failed`` (equal under ``on_error="dead_letter"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from operator import add, attrgetter

__all__ = ["Counts"]


@dataclass(frozen=True, slots=True)
class Counts:
    """Record counts of one decode, or of any sum of them.

    ``records_in``: records given (each becomes rows or a failure); ``records_ok`` /
    ``records_failed``: decoded / not; ``rows_out``: rows produced (a record fans out into
    any number); ``bytes_in``: the records' bytes; ``dead_letters``: failures kept as dead
    letters. ``precision_lost``: Timestamp / Duration values decoded with nanoseconds the
    column's unit cannot hold, and so truncated (``timestamp_unit="ns"`` or
    ``well_known_types=False`` lose none; docs/types.md). ``strings_not_utf8``: values of
    strings the schema does not validate (proto2, editions ``utf8_validation = NONE``) that
    were not UTF-8, and so were moved to their message's unknown fields (docs/types.md).
    """

    records_in: int = 0
    records_ok: int = 0
    records_failed: int = 0
    rows_out: int = 0
    bytes_in: int = 0
    dead_letters: int = 0
    precision_lost: int = 0
    strings_not_utf8: int = 0

    def __add__(self, other: Counts) -> Counts:
        if not isinstance(other, Counts):
            return NotImplemented
        return Counts(*map(add, _values(self), _values(other)))

    def values(self) -> tuple[int, ...]:
        """The counts in field order."""
        return _values(self)

    def replace(self, **changes: int) -> Counts:
        return dataclasses.replace(self, **changes)

    @classmethod
    def total(cls, parts: Iterable[Counts]) -> Counts:
        """The sum of ``parts`` (zero for none)."""
        out = cls()
        for part in parts:
            out = out + part
        return out

    def __str__(self) -> str:
        return (
            f"records in {self.records_in:,}, ok {self.records_ok:,}, failed "
            f"{self.records_failed:,} ({self.dead_letters:,} dead letters); rows out "
            f"{self.rows_out:,}"
        )


_FIELDS = dataclasses.fields(Counts)
# The counts as a tuple in field order, in one C call (adding counts is per batch).
_values = attrgetter(*(f.name for f in _FIELDS))
