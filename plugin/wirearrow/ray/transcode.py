"""Transcode in Ray Data: the map_batches step and the one-call path."""

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
    """A callable class for ``Dataset.map_batches(..., batch_format="pyarrow")``: a batch of
    records -> a batch of rows, decoded as Arrow in place (``zero_copy_batch=True`` is safe).

    ``plan``: anything :func:`wirearrow.plans.resolve_plan` takes, or best an ``ObjectRef``
    from :func:`~wirearrow.ray.put_plan` (it travels once; each actor compiles it once,
    here). ``input`` (a :class:`~wirearrow.RecordFormat`) or its fields as keywords: how
    the records arrive -- ``column`` (None: the batch's only column, else ``"value"``),
    ``format="json"``, ``framing="confluent"`` with ``schemas`` and ``schema_id``; a YAML
    plan's ``input:`` is the default (:meth:`~wirearrow.RecordFormat.one_by_one`).
    ``carry``: input columns repeated on every row of their record, after the plan's
    columns.

    ``on_error`` overrides the plan's policy. With ``"dead_letter"`` the bad records go to
    ``dead_letters`` (a directory or URI: one Parquet file per batch that has any) and/or
    to ``ledger``; with neither, construction fails rather than lose them. Dead letters are
    ``DEAD_LETTER_SCHEMA`` (``index``: the position in the batch) plus ``source``: a struct
    of the record's other input columns. A row with a ``read_error``
    (``read_delimited(truncated="dead_letter")``) is one failure with that reason.
    """

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
            _locate(err, records, column)
            raise err from None
        if dead.num_rows:
            if CARRY in dead.column_names:  # the carried columns are in source too
                dead = dead.drop_columns([CARRY])
            if positions is not None:  # index: the record's position in the whole batch
                index = pa.array(positions[dead.column("index").to_numpy()], pa.int64())
                dead = dead.set_column(0, dead.schema.field(0), index)
            dead = with_source(dead, batch, column)
        if unread:
            n = len(unread)
            kept = n if self._policy == "dead_letter" else 0
            counts = counts + Counts(records_in=n, records_failed=n, dead_letters=kept)
            if kept:
                letters = with_source(dead_letter_table(unread), batch, column)
                dead = pa.concat_tables([dead, letters]) if dead.num_rows else letters
        self._account(key, counts, dead, started)
        return pa.Table.from_batches([rows])


def _read_errors(
    batch: pa.Table, column: str
) -> tuple[pa.Table, np.ndarray | None, list[tuple[DecodeError, bytes]]]:
    """(``batch`` without its READ_ERROR column; the positions of its records, None when
    every row is one; a failure for each row that is not a record, with its reason)."""
    if READ_ERROR not in batch.column_names:
        return batch, None, []
    errors = batch.column(READ_ERROR)
    batch = batch.drop_columns([READ_ERROR])
    if errors.null_count == len(errors):
        return batch, None, []
    bad = pc.is_valid(errors).to_numpy(zero_copy_only=False)
    failed = np.flatnonzero(bad)
    reasons = errors.take(failed).to_pylist()
    raws = batch.column(column).take(failed).to_pylist()
    unread = [
        (DecodeError(reason, index=int(i), offset=0, path=""), raw)
        for i, reason, raw in zip(failed, reasons, raws, strict=True)
    ]
    return batch, np.flatnonzero(~bad), unread


def batch_key(batch: pa.Table, column: str = "value") -> str:
    """A name of ``batch`` by its input, the same on any worker, in any attempt: a hash of
    the record count, every record's length, the first, middle and last records of
    ``column`` and the first and last rows of the other columns (positions such as file +
    offset make it exact). One pass over the lengths: 0.15 % of a decode, where hashing
    every byte would add 15-70 % (docs/ray.md, Exactly once)."""
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


def _locate(err: DecodeError, batch: pa.Table, column: str) -> None:
    """Name the input row of a record that made the job fail (on_error="raise")."""
    others = [name for name in batch.column_names if name != column]
    if others and 0 <= err.index < batch.num_rows and hasattr(err, "add_note"):  # 3.11+
        err.add_note(f"input row: {batch.select(others).slice(err.index, 1).to_pylist()[0]}")


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
    """Transcode the records of ``ds`` with ``plan``: the one-call path (docs/ray.md).

    ``input`` and the keywords named like :class:`~wirearrow.RecordFormat`'s fields, and
    ``carry`` and ``on_error``, are :class:`Transcode`'s; other keywords go to
    ``map_batches``. The plan is resolved here (its errors raise now) and shipped once.
    With ``on_error="dead_letter"`` the bad records come back as
    :attr:`TranscodeResult.dead_letters`, also written as Parquet under ``dead_letters``
    when given (``filesystem`` overrides the one inferred).

    ``compute="tasks"`` (default): Ray tasks (``concurrency=n`` caps them, ``num_cpus``
    each), one Transcode per worker process and job, fused with the write that follows.
    ``"actors"``: an autoscaling pool of Transcode actors sized by
    :func:`~wirearrow.ray.pool_size` (``concurrency``: ``n`` or ``(min, max)``), which
    never takes every CPU. ``resource_reservation``: Ray Data's
    ``op_resource_reservation_enabled`` on ``ds.context`` (None: off on at most 4 CPUs).
    ``batch_size=None``: one batch per input block, which keeps the counts exact when Ray
    runs a batch again (docs/ray.md, Exactly once). ``profile``: a saved profile (a path)
    or a :class:`~wirearrow.ParserCache` to compile on, shared across the workers
    (:func:`~wirearrow.ray.share_with_ray`; docs/cache.md).

    Returns a :class:`~wirearrow.ray.TranscodeResult`: the lazy ``rows`` (a Dataset), then
    the job's counts and dead letters.
    """
    given = {name: options.pop(name) for name in list(options) if name in FIELDS}
    cache = None
    if profile is not None:
        cache = resolve_profile(profile)
        if cache.exchange is None:
            share_with_ray(cache)
    resolved = resolve(plan, on_error, cache)
    fmt = RecordFormat.one_by_one(resolved.input, input, **given)
    plan = Resolved(resolved.transcoder, fmt, None)
    return run_job(
        ds, Transcode, plan, {"carry": tuple(carry)}, dead_letters, filesystem, compute,
        concurrency, num_cpus, batch_size, resource_reservation, options,
    )
