"""Where a pipelines/ job's time went, in the lines each job prints at its end.

The driver's stages run one after the other and are timed where they run (:class:`Clock`):
the engine's start (``ray.init``), the plan (the input listed and split at record
boundaries, the plan compiled), the run. Inside the run, reading, transcoding and writing
are streamed together in the engine's tasks, so they are timed inside the tasks and summed
over them: the transcoder's own time comes from the job's stats (Ray's
``JobStats.transcode_seconds``); :func:`ray_parquet_sink` writes Parquet as Ray's
``write_parquet`` does and times, in each write task, its writes and its waits for its
blocks (in a task-mode job, Ray fuses the read and the transcode into the write task: the
waits are their time); Beam reports the execution time of each step itself
(:func:`beam_step_seconds`). What the tasks' times leave of the run is the engine's own:
starting its worker processes, scheduling, moving blocks.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

__all__ = [
    "Clock",
    "add_progress_option",
    "beam_step_seconds",
    "drop_progress_disabled_notice",
    "ray_parquet_sink",
    "show_beam_progress",
    "show_ray_progress",
]


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress``: the jobs' progress display while they run."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress while the job runs: Ray Data's progress bars; on Beam, each worker's "
        "totals every few seconds (default: on when stderr is a terminal, so not in CI or "
        "into a file; --no-progress turns it off)",
    )


def show_ray_progress(progress: bool | None) -> None:
    """Ray Data's progress display for this driver: on a terminal unless ``progress`` says.
    Ray's rich display (its default tqdm one drew nothing on Ray 2.60); ``--progress`` off a
    terminal: Ray logs the progress instead."""
    import ray  # only the Ray jobs call this: the Beam ones import this module without Ray

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = sys.stderr.isatty() if progress is None else progress
    ctx.enable_rich_progress_bars, ctx.use_ray_tqdm = True, False
    drop_progress_disabled_notice()


def show_beam_progress(progress: bool | None) -> None:
    """The Beam workers' progress lines (``wirearrow.beam.progress``: records, rows, dead
    letters so far, per worker process, every few seconds) on stderr: on a terminal unless
    ``progress`` says. Workers in this process (FnApiRunner's default) log through the
    handler set here; SDK worker processes log INFO to the runner, which prints them."""
    from wirearrow.beam import progress as beam_progress

    logger = beam_progress.LOGGER
    if not (sys.stderr.isatty() if progress is None else progress):
        logger.setLevel(logging.WARNING)  # also in workers that log INFO
        return
    logger.setLevel(logging.INFO)
    if not any(getattr(h, "wirearrow_progress", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("  %(message)s"))
        handler.wirearrow_progress = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.propagate = False  # one line, not also the root logger's


# Ray Data's logger that warns "Progress bars disabled. To enable, set ..." when they are off.
RAY_PROGRESS_LOGGER = "ray.data._internal.progress"


def _not_progress_disabled_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Progress bars disabled")


def drop_progress_disabled_notice() -> None:
    """Off, Ray warns once per job how to turn its bars on through its DataContext; the
    job's own flag (--progress) is the way here, and CI's logs need no warning for the
    default. Drops that record only (idempotent)."""
    logger = logging.getLogger(RAY_PROGRESS_LOGGER)
    if _not_progress_disabled_notice not in logger.filters:
        logger.addFilter(_not_progress_disabled_notice)


class Clock:
    """The driver's stages, each timed as it runs: ``with clock.stage("plan"): ...``."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.stages: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.stages[name] = self.stages.get(name, 0.0) + time.perf_counter() - t0

    @property
    def total(self) -> float:
        return time.perf_counter() - self.started

    def line(self) -> str:
        """``7.41 s in all: Ray start 3.20 s, plan 0.11 s, run 4.10 s``."""
        parts = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.stages.items())
        return f"{self.total:.2f} s in all: {parts}"


def ray_parquet_sink(path: str) -> Any:
    """A Ray Datasink writing Parquet under ``path`` (one file per write task, as
    ``Dataset.write_parquet`` writes; any pyarrow filesystem URI) that times its tasks.
    After ``ds.write_datasink(sink)``, ``sink.seconds`` holds, summed over the write
    tasks: ``blocks`` (waiting for the task's blocks: what runs before the write in the
    task, or waiting for other tasks), ``write`` (writing them), and ``tasks``."""
    import pyarrow.parquet as pq
    from ray.data.datasource import BlockBasedFileDatasink

    class TimedParquet(BlockBasedFileDatasink):
        def __init__(self, path: str) -> None:
            super().__init__(path, file_format="parquet")
            self.seconds: dict[str, float] = {"blocks": 0.0, "write": 0.0, "tasks": 0}

        def write(self, blocks, ctx) -> tuple[float, float]:  # type: ignore[override]
            held, waited = [], 0.0
            t0 = time.perf_counter()
            for block in blocks:  # each next() runs the work fused before the write
                waited += time.perf_counter() - t0
                held.append(block)
                t0 = time.perf_counter()
            waited += time.perf_counter() - t0
            t0 = time.perf_counter()
            super().write(held, ctx)
            return waited, time.perf_counter() - t0

        def write_block_to_file(self, block, file) -> None:
            pq.write_table(block.to_arrow(), file)

        def on_write_complete(self, write_result) -> None:
            super().on_write_complete(write_result)
            for waited, wrote in write_result.write_returns:
                self.seconds["blocks"] += waited
                self.seconds["write"] += wrote
                self.seconds["tasks"] += 1

    return TimedParquet(path)


def beam_step_seconds(result: Any, steps: dict[str, str]) -> dict[str, float]:
    """Seconds of execution of each top-level step of a finished Beam pipeline, from the
    runner's monitoring metrics (``ptransform_execution_time``, summed over the step's
    inner transforms): ``steps`` maps a label to the step's name (or name prefix). Runners
    that do not report it give zeros."""
    seconds = dict.fromkeys(steps, 0.0)
    try:
        counters = result.monitoring_metrics().query()["counters"]
    except (AttributeError, NotImplementedError, KeyError):
        return seconds
    for counter in counters:
        if not counter.key.metric.name.endswith("ptransform_execution_time:total_msecs:v1"):
            continue
        step = counter.key.step or ""
        for label, name in steps.items():
            if step == name or step.startswith(name + "/"):
                seconds[label] += (counter.committed or 0) / 1000
    return seconds
