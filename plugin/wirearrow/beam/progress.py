"""A running Beam job's progress, told from inside its workers.

A Beam runner reports its metrics when the job ends (the FnApiRunner, the portable
runner), or in its own console (Dataflow); a job of a few minutes otherwise shows nothing
while it runs. :class:`ToArrow`'s DoFns add every decode's counts to their worker
process's totals here, and at most every :data:`EVERY` seconds a line goes to the logger
``wirearrow.beam.progress`` at INFO::

    wirearrow.beam: 40,960 records in, 109,863 rows, 5 dead letters, 12.3 MB in 4.1 s (10,012 records/s), process 1234

One line per process (a worker process runs many bundles in threads: the totals are
shared and locked), so a job on two SDK workers prints two interleaved series. Nothing is
formatted unless the logger is enabled for INFO, which Python's default configuration is
not: a job shows the lines by configuring that logger (``pipelines/beam_batch.py`` does on
a terminal); Dataflow's workers log INFO, so there they appear in the worker logs.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from wirearrow.counts import Counts

__all__ = ["EVERY", "LOGGER", "TOTALS", "WorkerTotals"]

LOGGER = logging.getLogger(__name__)

# Seconds between two lines of one worker process: often enough to see a job move on a
# terminal, rare enough for a worker log over hours (a line costs ~20 us).
EVERY = 5.0


class WorkerTotals:
    """What this process's decodes have counted since its first one."""

    def __init__(self, every: float = EVERY) -> None:
        self.every = every
        self._lock = threading.Lock()
        self.counts = Counts()
        self._started: float | None = None
        self._last = 0.0

    def add(self, counts: Counts) -> None:
        """Add one decode's counts; log the totals if ``every`` seconds have passed."""
        now = time.monotonic()
        with self._lock:
            self.counts = self.counts + counts
            if self._started is None:
                self._started = self._last = now
            if now - self._last < self.every or not LOGGER.isEnabledFor(logging.INFO):
                return
            self._last = now
            totals, seconds = self.counts, now - self._started
        LOGGER.info(
            "wirearrow.beam: %s records in, %s rows, %s dead letters, %.1f MB in %.1f s "
            "(%s records/s), process %d",
            f"{totals.records_in:,}", f"{totals.rows_out:,}", f"{totals.dead_letters:,}",
            totals.bytes_in / 1e6, seconds, f"{totals.records_in / max(seconds, 1e-9):,.0f}",
            os.getpid(),
        )  # fmt: skip


TOTALS = WorkerTotals()
