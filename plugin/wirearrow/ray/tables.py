"""Ray Data into Iceberg and Delta tables: the workers write the data files, the driver
commits them, once per job or every N blocks, exactly once.

    job = war.transcode(ds, plan, carry=["file", "offset"], on_error="dead_letter")
    done = war.write_table(job, wa.Output(format="iceberg", table="events.bids",
                                          warehouse="wh"), source="file")

A thin use of :mod:`wirearrow.tables`. The sinks are opened here, on the driver, which
creates or evolves the table (:meth:`~wirearrow.tables.TableSink.prepare`); a
``map_batches`` step (fused with the decode: the same tasks) holds the picklable
FileWriter and turns each block into data files, leaving out the rows an earlier commit
covers, and returns one small row per block: what it staged and the positions after it.
The driver reads those rows as they come (never the data) and commits them, recording how
far into its sources the job got. A TranscodeResult's dead letters go to their own table
after the rows, with the same positions. docs/tables.md, "From Ray".
"""

from __future__ import annotations

import pickle
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa
import ray
from ray.data import Dataset

from wirearrow.output import Output
from wirearrow.ray.job import TranscodeResult
from wirearrow.tables import Commit, FileWriter, Positions, SourceColumns, TableSink, open_sinks
from wirearrow.tables.positions import source_columns

__all__ = ["TableWriteResult", "write_table"]

STAGED = "staged"  # the staging step's output: one row per block, its Staged pickled


@dataclass(frozen=True)
class TableWriteResult:
    """What :func:`write_table` committed: the rows' commits and the dead letters'
    (``dead_commits``), the positions after them, and the records an earlier run had
    already committed (``skipped_rows``, ``skipped_dead_letters``: not written again)."""

    table: str
    commits: tuple[Commit, ...]
    dead_table: str | None = None
    dead_commits: tuple[Commit, ...] = ()
    positions: Positions = field(default_factory=Positions)
    skipped_rows: int = 0
    skipped_dead_letters: int = 0

    @property
    def rows(self) -> int:
        """Rows committed by this job."""
        return sum(c.rows for c in self.commits)

    @property
    def dead_letters(self) -> int:
        """Dead letters committed by this job."""
        return sum(c.rows for c in self.dead_commits)


# The staging step's arguments, by object ref, fetched once per worker process and job: an
# Iceberg writer carries its table's metadata, which need not travel with every task.
_STEPS: OrderedDict[str, tuple[FileWriter, SourceColumns | None, Positions, str | None]] = OrderedDict()
_STEPS_KEPT = 4


def _stage_block(block: pa.Table, *, step: ray.ObjectRef) -> pa.Table:
    """A block of rows -> its data files, written here: one row (the Staged pickled, the
    block's positions, the rows left out because an earlier commit covers them)."""
    key = step.hex()
    if key not in _STEPS:
        _STEPS[key] = ray.get(step)
        while len(_STEPS) > _STEPS_KEPT:
            _STEPS.popitem(last=False)
    writer, columns, committed, nested = _STEPS[key]
    table = block if isinstance(block, pa.Table) else pa.Table.from_batches([block])
    positions = Positions()
    skipped = 0
    if columns is not None and table.num_rows:
        where = table
        if nested is not None:  # the dead letters': the columns are in this struct
            if nested not in table.column_names:
                raise KeyError(
                    f"the dead letters have no {nested!r} column saying where each record "
                    f"came from (columns: {table.column_names})"
                )
            struct = table.column(nested).combine_chunks()
            where = pa.Table.from_arrays(struct.flatten(), names=[f.name for f in struct.type])
        positions = columns.positions(where)
        if committed:
            keep = columns.uncommitted(where, committed)
            skipped = int(len(keep) - keep.sum())
            if skipped:
                table = table.filter(pa.array(keep))
    staged = writer.write(table)
    return pa.table({
        STAGED: pa.array([pickle.dumps(staged)], pa.binary()),
        "positions": [positions.to_json()],
        "skipped": pa.array([skipped], pa.int64()),
    })  # fmt: skip


def _stage(ds: Dataset, writer: FileWriter, columns: SourceColumns | None, committed: Positions,
           nested: str | None = None) -> Dataset:  # fmt: skip
    step = ray.put((writer, columns, committed, nested))
    return ds.map_batches(
        cast(Any, _stage_block), fn_kwargs={"step": step}, batch_format="pyarrow",
        batch_size=None, zero_copy_batch=True,
    )  # fmt: skip


def _commit_stream(
    sink: TableSink, staged: Dataset, commit_every: int | None, end: Positions | None,
    on_commit: Callable[[Commit], Any] | None,
) -> tuple[list[Commit], Positions, int]:  # fmt: skip
    """Commit the staged blocks as they come (every ``commit_every``, else all at once),
    each commit with the positions after the blocks so far; the last one also ``end``.
    Returns (the commits made, the job's positions, rows skipped)."""
    commits: list[Commit] = []
    pending: list[Any] = []
    seen = Positions()
    skipped = 0

    def commit(positions: Positions) -> None:
        done = sink.commit(pending, positions)
        pending.clear()
        if done.version is not None:
            commits.append(done)
            if on_commit is not None:
                on_commit(done)

    for block in staged.iter_batches(batch_format="pyarrow", batch_size=None):
        batch = cast(pa.Table, block)
        for raw, text, n in zip(batch.column(STAGED).to_pylist(), batch.column("positions").to_pylist(),
                                batch.column("skipped").to_pylist(), strict=True):  # fmt: skip
            pending.append(pickle.loads(raw))
            seen = seen.advanced(Positions.from_json(text))
            skipped += n
            if commit_every is not None and len(pending) >= commit_every:
                commit(seen)
    final = seen.advanced(end) if end is not None else seen
    commit(final)  # what is left, or only the positions (nothing at all: no commit)
    return commits, final, skipped


def _arrow_schema(ds: Dataset) -> pa.Schema:
    """The Dataset's Arrow schema (Ray runs its first block when the plan cannot say)."""
    schema = ds.schema()
    if schema is None:
        raise ValueError("the Dataset has no schema (no blocks): nothing to write")
    base = getattr(schema, "base_schema", schema)
    if not isinstance(base, pa.Schema):
        raise TypeError(f"write_table writes Arrow blocks, not {type(base).__name__}")
    return base


def write_table(
    rows: Dataset | TranscodeResult,
    output: Output | None = None,
    *,
    dead_letters: Dataset | bool | None = None,
    source: str | SourceColumns | None = None,
    end: Positions | Mapping[str, int] | None = None,
    commit_every: int | None = None,
    on_commit: Callable[[Commit], Any] | None = None,
    **output_fields: Any,
) -> TableWriteResult:
    """Write ``rows`` (a Dataset, or a :class:`~wirearrow.ray.TranscodeResult`: its rows,
    then its dead letters) into ``output``'s table (:class:`wirearrow.Output` of format
    ``iceberg`` or ``delta``, or its fields as keywords). The data files are written by
    Ray's tasks; the driver commits once at the end, or every ``commit_every`` blocks
    (default: ``output.commit_every``; then in input order: Ray's ``preserve_order`` is set
    on the Dataset). Runs the job; returns a :class:`TableWriteResult`.

    ``source``: where each record came from, so that a job started again skips what the
    table holds: ``"kafka"`` (the rows carry ``topic``, ``partition``, ``offset``:
    ``transcode(..., carry=[...])``), ``"file"`` (``file``, ``offset``: ``read_delimited(...,
    include_location=True)`` and ``carry=["file", "offset"]``) or a
    :class:`~wirearrow.tables.SourceColumns`. Without it a job run twice writes twice.
    ``end``: the positions the job read up to (e.g. the Kafka end offsets it was given),
    recorded by the last commit even when its last records made no row. Start the next job
    where :func:`wirearrow.tables.resume` says.

    ``dead_letters``: a Dataset of dead letters, or False for none; default: the
    TranscodeResult's when its policy is ``dead_letter``. They go to the output's
    dead-letter table after the rows (their source columns read from their ``source``
    struct), committed once with the rows' positions. ``on_commit``: called with each
    :class:`~wirearrow.tables.Commit` as it is made (progress).
    """
    output = Output.of(output, **output_fields)
    if not output.is_table:
        raise ValueError(
            "write_table writes a table: format iceberg or delta (Parquet files: "
            "Dataset.write_parquet, or wirearrow transcode -o)"
        )
    result = rows if isinstance(rows, TranscodeResult) else None
    if not isinstance(rows, TranscodeResult | Dataset):
        raise TypeError(f"write_table takes a Dataset or a TranscodeResult, not {type(rows).__name__}")
    dataset: Dataset = rows.rows if isinstance(rows, TranscodeResult) else rows
    if dead_letters is True and result is None:
        raise ValueError("dead_letters=True takes a TranscodeResult's: give a Dataset of them")
    # the dead letters of the result exist once its rows have run: read after them
    later = result is not None and (
        dead_letters is True or (dead_letters is None and result.on_error == "dead_letter")
    )
    dead_ds = dead_letters if isinstance(dead_letters, Dataset) else None
    columns = source_columns(source) if source is not None else None
    rows_sink, dead_sink = open_sinks(output, dead_letters=later or dead_ds is not None)
    commit_every = commit_every if commit_every is not None else output.commit_every
    if commit_every is not None:
        if commit_every < 1:
            raise ValueError(f"commit_every must be at least 1, not {commit_every}")
        dataset.context.execution_options.preserve_order = True
    # the rows' schema: transcode's when it knows it, else Ray's (which runs one block)
    schema = result.schema if result is not None and result.schema is not None else _arrow_schema(dataset)
    if columns is not None:
        columns.check(schema.names)  # here, before a task fails on it
    writer = rows_sink.prepare(schema)
    committed = rows_sink.committed()
    end_positions = None if end is None else end if isinstance(end, Positions) else Positions(dict(end))
    commits, final, skipped = _commit_stream(
        rows_sink, _stage(dataset, writer, columns, committed), commit_every, end_positions,
        on_commit,
    )  # fmt: skip
    if dead_sink is None:
        return TableWriteResult(rows_sink.name, tuple(commits), positions=final, skipped_rows=skipped)
    if later:
        assert result is not None
        dead_ds = result.dead_letters
    assert dead_ds is not None
    dead_committed = dead_sink.committed()
    dead_schema = _arrow_schema(dead_ds)
    dead_writer = dead_sink.prepare(dead_schema)
    nested = "source" if columns is not None else None  # with_source's struct
    dead_commits, _, dead_skipped = _commit_stream(
        dead_sink, _stage(dead_ds, dead_writer, columns, dead_committed, nested), None, final,
        on_commit,
    )  # fmt: skip
    return TableWriteResult(
        rows_sink.name, tuple(commits), dead_sink.name, tuple(dead_commits), final, skipped,
        dead_skipped,
    )
