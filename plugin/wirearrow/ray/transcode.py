"""Transcode in Ray Data: the map_batches step and the one-call path (docs/ray.md)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import ray
from ray.data import Dataset

from wirearrow.cache import ParserCache, resolve_profile
from wirearrow.counts import Counts
from wirearrow.dead_letters import CARRY, dead_letter_table
from wirearrow.errors import DecodeError
from wirearrow.plans import PlanLike, Resolved
from wirearrow.ray.datasource import READ_ERROR
from wirearrow.ray.job import Step, TranscodeResult, resolve, run_job, with_source
from wirearrow.ray.ledger import Ledger
from wirearrow.ray.profiles import share_with_ray
from wirearrow.sources.format import FIELDS, RecordFormat
from wirearrow.spec import TranscodeSpec

__all__ = ["Transcode", "batch_key", "transcode"]


class Transcode(Step):
    """``Dataset.map_batches(Transcode, batch_format="pyarrow")``: a batch of records -> a
    batch of rows (docs/ray.md, The building block). ``input`` or its fields as keywords:
    the record format (default: the plan's ``input:``, :meth:`RecordFormat.one_by_one`);
    ``carry``: input columns repeated on every row. Dead letters (``on_error=
    "dead_letter"``) go to ``dead_letters`` (Parquet) and/or ``ledger``, with ``source``."""

    def __init__(
        self,
        plan: PlanLike | Resolved | ray.ObjectRef,
        input: RecordFormat | None = None,
        *,
        carry: Sequence[str] = (),
        on_error: str | None = None,
        dead_letters: str | os.PathLike[str] | None = None,
        filesystem: pafs.FileSystem | None = None,
        ledger: Ledger | None = None,
        **input_options: Any,
    ) -> None:
        super().__init__(plan, on_error, dead_letters, filesystem, ledger)
        self._input = RecordFormat.one_by_one(self._resolved.input, input, **input_options)
        self._carry = list(carry)
        clash = set(self._carry) & set(self._tc.arrow_schema.names)
        if clash:
            raise ValueError(f"carry columns clash with the plan's output: {sorted(clash)}")

    @property
    def spec(self) -> TranscodeSpec:
        """The spec this instance transcodes with (the plan's, ``on_error`` applied)."""
        return self._tc.spec

    @property
    def arrow_schema(self) -> pa.Schema:
        """The schema of the rows (without ``carry`` columns, whose types come with the data)."""
        return self._tc.arrow_schema

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        batch = self._table(batch)
        column = self._input.column
        if column is None:  # the table's only column, else "value" (as Transcoder.decode)
            names = [n for n in batch.column_names if n != READ_ERROR]
            column = names[0] if len(names) == 1 else "value"
            self._input = self._input.replace(column=column)
        if column not in batch.column_names:
            raise KeyError(f"no column {column!r} in the batch (columns: {batch.column_names})")
        key = batch_key(batch, column)  # the whole batch's, read_error rows included
        batch, positions, unread = _read_errors(batch, column)
        if unread and self._policy == "raise":
            raise unread[0][0]
        records = batch if positions is None else batch.take(positions)
        try:
            rows, dead, counts = self._tc.decode(records, self._input, carry=self._carry or None)
        except DecodeError as err:
            others = [name for name in records.column_names if name != column]
            if others and 0 <= err.index < records.num_rows and hasattr(err, "add_note"):
                err.add_note(f"input row: {records.select(others).slice(err.index, 1).to_pylist()[0]}")
            raise err from None
        if CARRY in dead.column_names:  # the carried columns are in source too
            dead = dead.drop_columns([CARRY])
        if dead.num_rows and positions is not None:  # index: the position in the batch
            index = pa.array(positions[dead.column("index").to_numpy()], pa.int64())
            dead = dead.set_column(0, dead.schema.field(0), index)
        if unread:  # rows read_delimited(truncated="dead_letter") could not read: failures
            n, kept = len(unread), len(unread) if self._policy == "dead_letter" else 0
            counts = counts + Counts(records_in=n, records_failed=n, dead_letters=kept)
            if kept:
                dead = pa.concat_tables([dead, dead_letter_table(unread)])
        self._account(key, counts, with_source(dead, batch, column), started)
        return pa.Table.from_batches([rows])


def _read_errors(
    batch: pa.Table, column: str
) -> tuple[pa.Table, np.ndarray | None, list[tuple[DecodeError, bytes]]]:
    """(``batch`` without READ_ERROR; the positions of its records, None when every row is
    one; a failure for each row that is not a record, with its reason)."""
    if READ_ERROR not in batch.column_names:
        return batch, None, []
    errors = batch.column(READ_ERROR)
    batch = batch.drop_columns([READ_ERROR])
    if errors.null_count == len(errors):
        return batch, None, []
    bad = pc.is_valid(errors).to_numpy(zero_copy_only=False)
    failed = np.flatnonzero(bad)
    reasons, raws = errors.take(failed).to_pylist(), batch.column(column).take(failed).to_pylist()
    unread = [
        (DecodeError(reason, index=int(i), offset=0, path=""), raw)
        for i, reason, raw in zip(failed, reasons, raws, strict=True)
    ]
    return batch, np.flatnonzero(~bad), unread


def batch_key(batch: pa.Table, column: str = "value") -> str:
    """A name of ``batch`` by its input, the same on any worker and attempt: a hash of the
    record count, every record's length, the first, middle and last records and the first
    and last rows of the other columns (docs/ray.md, Exactly once)."""
    values = batch.column(column)
    n = len(values)
    h = hashlib.blake2b(digest_size=12)
    h.update(n.to_bytes(8, "little"))
    if n:
        lengths = pc.fill_null(pc.binary_length(values), -1).cast(pa.int64())
        h.update(np.ascontiguousarray(lengths.to_numpy()).data)
        for i in sorted({0, n // 2, n - 1}):
            h.update(values[i].as_buffer() or b"")
        others = [name for name in batch.column_names if name != column]
        if others:
            h.update(repr(batch.select(others).take([0, n - 1]).to_pylist()).encode())
    return h.hexdigest()


def transcode(
    ds: Dataset,
    plan: PlanLike | ray.ObjectRef,
    input: RecordFormat | None = None,
    *,
    carry: Sequence[str] = (),
    on_error: str | None = None,
    dead_letters: str | os.PathLike[str] | None = None,
    filesystem: pafs.FileSystem | None = None,
    compute: str = "tasks",
    concurrency: int | tuple[int, int] | None = None,
    num_cpus: float | None = None,
    batch_size: int | None = None,
    resource_reservation: bool | None = None,
    profile: str | os.PathLike[str] | ParserCache | None = None,
    **options: Any,
) -> TranscodeResult:
    """Transcode the records of ``ds`` with ``plan``, on Ray tasks or an actor pool: the
    one-call path (docs/ray.md, Transcoding). Keywords named like a RecordFormat's fields
    are the record format; other keywords go to ``map_batches``. The plan is resolved here
    (its errors raise now) and shipped once. Returns a :class:`TranscodeResult`."""
    given = {name: options.pop(name) for name in list(options) if name in FIELDS}
    cache = None
    if profile is not None:
        cache = resolve_profile(profile)
        if cache.exchange is None:
            share_with_ray(cache)
    resolved = resolve(plan, on_error, cache)
    fmt = RecordFormat.one_by_one(resolved.input, input, **given)
    plan = Resolved(resolved.transcoder, fmt, None)
    result = run_job(
        ds, Transcode, plan, {"carry": tuple(carry)}, dead_letters, filesystem, compute,
        concurrency, num_cpus, batch_size, resource_reservation, options,
    )
    result.schema = rows_schema(ds, resolved.transcoder, fmt, carry)
    return result


def rows_schema(
    ds: Dataset, tc: Any, fmt: RecordFormat, carry: Sequence[str]
) -> pa.Schema | None:
    """The schema of ``Transcode``'s rows of ``ds``, known without running a block when
    Ray knows the input's (a decode of no records, as the step decodes a batch); None when
    it does not."""
    given = ds.schema(fetch_if_missing=False)
    base = getattr(given, "base_schema", given)
    if not isinstance(base, pa.Schema):
        return None
    names = [n for n in base.names if n != READ_ERROR]
    column = fmt.column or (names[0] if len(names) == 1 else "value")
    if column not in names:
        return None  # the step raises, naming the columns
    try:
        rows, _, _ = tc.decode(base.empty_table().select(names), fmt.replace(column=column),
                               carry=list(carry) or None)  # fmt: skip
    except Exception:  # what the step raises on its first batch, not here
        return None
    return rows.schema
