"""Nothing too late vanishes: every record of a streaming schedule is a row, a dead letter
or a late record -- per window and in total -- whatever the order of its windows, on the
direct runner (TestStream), the FnApiRunner and a portable runner (a replayed schedule:
neither runs TestStream).

A schedule is a list of steps: ``("add", ((i, t), ...))`` delivers records i at event
time t, ``("wm", t)`` advances the watermark to t. A record is too late when the watermark
has reached its window's end plus the allowed lateness before it comes (Beam's grouping
drops it once the watermark is past that; at that very microsecond the guard already
counts it late, never the other way round).
"""

from __future__ import annotations

import datetime
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import corpus  # benchmarks/, put on sys.path by conftest.py

beam = pytest.importorskip("apache_beam")

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner  # noqa: E402
from apache_beam.testing import test_stream  # noqa: E402
from apache_beam.transforms import trigger, window  # noqa: E402
from apache_beam.transforms.timeutil import TimeDomain  # noqa: E402
from apache_beam.transforms.userstate import (  # noqa: E402
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)

import wirearrow as wa  # noqa: E402
import wirearrow.beam as wab  # noqa: E402

pytestmark = [pytest.mark.beam]

ROOT = Path(__file__).resolve().parent.parent
ID_PLAN = {
    "proto": {
        "file": "bidrequest.proto",
        "message": "BidRequestEvent",
        "import_paths": [str(ROOT / "examples" / "schema")],
    },
    "denormalizer": {"columns": [{"name": "id", "path": "id"}]},
}
# Random schedules per run of the property test (each is a streaming pipeline of a few
# seconds); WIREARROW_LATE_SCHEDULES=200 tries more.
SCHEDULES = int(os.environ.get("WIREARROW_LATE_SCHEDULES", "6"))
INF = float("inf")


class Schedule:
    """Steps, fixed windows (size, offset s), allowed lateness (s), the corrupt records
    (dead letters at ToArrow), and where too-late records go: ``"split"`` (SplitLate
    before ToArrow: late dead letters) or ``"late_dir"`` (the sinks' late_dir: late rows
    and late dead letters)."""

    def __init__(self, steps, size=60, offset=0, lateness=60, corrupt=(), mode="split"):
        self.steps = tuple(steps)
        self.size, self.offset, self.lateness = size, offset, lateness
        self.corrupt = frozenset(corrupt)
        self.mode = mode
        self.times = {i: t for kind, step in self.steps if kind == "add" for i, t in step}

    def __repr__(self) -> str:
        return (
            f"Schedule({list(self.steps)!r}, size={self.size}, offset={self.offset}, "
            f"lateness={self.lateness}, corrupt={sorted(self.corrupt)}, mode={self.mode!r})"
        )

    def window_start(self, i: int) -> int:
        t = self.times[i]
        return t - (t - self.offset) % self.size

    def too_late(self) -> set[int]:
        late, wm = set(), -INF
        for kind, step in self.steps:
            if kind == "wm":
                wm = max(wm, step)
                continue
            for i, _ in step:
                if wm >= self.window_start(i) + self.size + self.lateness:
                    late.add(i)
        return late

    def records(self) -> list[bytes]:
        good = corpus.generate(max(self.times, default=-1) + 1, seed=37)
        # A corrupt record: a length that runs past the record's end (distinct bytes).
        return [r + b"\x0a\x7f" if i in self.corrupt else r for i, r in enumerate(good)]

    def windowing(self) -> beam.WindowInto:
        return beam.WindowInto(
            window.FixedWindows(self.size, self.offset),
            trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
            allowed_lateness=self.lateness,
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )

    def test_stream(self, records: list[bytes]) -> test_stream.TestStream:
        stream = test_stream.TestStream()
        for kind, step in self.steps:
            if kind == "wm":
                stream = stream.advance_watermark_to(step)
            else:
                stream = stream.add_elements(
                    [window.TimestampedValue(records[i], t) for i, t in step]
                )
        return stream.advance_watermark_to_infinity()


# The issue's schedule: a is on time in [0, 60); the watermark jumps to 1000; b (too late
# for [0, 60), which had a) and c (too late for [180, 240), which no record had) come.
ISSUE = [("add", ((0, 10),)), ("wm", 1000), ("add", ((1, 30), (2, 200)))]


def transcode_and_write(records: beam.PCollection, schedule: Schedule, out: Path) -> None:
    """The streaming job's shape: records -> (SplitLate) -> ToArrow -> Parquet rows and
    dead letters under ``out``."""
    late_dir = None
    if schedule.mode == "split":
        split = records | wab.SplitLate()
        _ = split["late"] | "WriteLate" >> wab.WriteDeadLetters(str(out / "late"))
        records = split["on_time"]
    else:
        late_dir = "_late"
    result = records | wab.ToArrow(ID_PLAN, batch_size=4, on_error="dead_letter")
    _ = result.batches | wab.WriteToParquetFiles(
        str(out / "rows"), schema=result.schema, late_dir=late_dir
    )
    _ = result.dead_letters | wab.WriteDeadLetters(str(out / "dead"), late_dir=late_dir)


def _window_of(name: str) -> int | None:
    """The window start (s) in a file name, None for a file of the global window."""
    parts = name.split("-")
    if len(parts) < 3 or not parts[1].endswith("Z"):
        return None
    start = datetime.datetime.strptime(parts[1], "%Y%m%dT%H%M%S.%fZ")
    return round((start - datetime.datetime(1970, 1, 1)).total_seconds())


def _outputs(out: Path, column: str) -> Iterator[tuple[int | None, object]]:
    if out.is_dir():
        for f in sorted(out.glob("*.parquet")):
            for value in pq.read_table(f, columns=[column]).column(column).to_pylist():
                yield _window_of(f.name), value


def check_balance(schedule: Schedule, records: list[bytes], out: Path) -> dict:
    """Every record once: a row or a dead letter in its own window's files, or late
    exactly when the schedule has it too late; per window and in total."""
    transcoder = wa.load_plan(ID_PLAN).transcoder()
    index_of_id = {
        transcoder.transcode([r]).column("id")[0].as_py(): i
        for i, r in enumerate(records)
        if i not in schedule.corrupt and i in schedule.times
    }
    index_of_raw = {r: i for i, r in enumerate(records)}
    seen: Counter = Counter()
    rows, dead, late = Counter(), Counter(), Counter()  # per window start
    misplaced = []
    for kind, directory, column, index, where in [
        ("row", out / "rows", "id", index_of_id, rows),
        ("dead", out / "dead", "raw", index_of_raw, dead),
        ("late", out / "late", "raw", index_of_raw, late),
        ("late", out / "rows" / "_late", "id", index_of_id, late),
        ("late", out / "dead" / "_late", "raw", index_of_raw, late),
    ]:
        for file_window, value in _outputs(directory, column):
            i = index[value]
            seen[i] += 1
            start = schedule.window_start(i)
            where[start] += 1
            if kind != "late" and file_window != start:
                misplaced.append((i, kind, file_window, start))
            if kind == "late" and file_window is not None:
                misplaced.append((i, kind, file_window, "global"))
    sent = Counter(schedule.window_start(i) for i in schedule.times)
    assert not misplaced, misplaced
    assert set(seen) == set(schedule.times), (
        f"vanished: {sorted(set(schedule.times) - set(seen))}",
        schedule,
    )
    assert all(n == 1 for n in seen.values()), {i: n for i, n in seen.items() if n > 1}
    for start in sent:  # per window: rows + dead letters + late = records in
        assert rows[start] + dead[start] + late[start] == sent[start], (start, schedule)
    assert sum(rows.values()) + sum(dead.values()) + sum(late.values()) == len(schedule.times)
    late_ids = {
        index_of_raw[v] for d in ("late", "dead/_late") for _, v in _outputs(out / d, "raw")
    } | {index_of_id[v] for _, v in _outputs(out / "rows" / "_late", "id")}
    return {
        "records_in": len(schedule.times),
        "rows": sum(rows.values()),
        "dead_letters": sum(dead.values()),
        "late": sum(late.values()),
        "late_ids": late_ids,
    }


def run_on_direct_runner(schedule: Schedule, out: Path) -> dict:
    records = schedule.records()
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
    windowed = p | schedule.test_stream(records) | schedule.windowing()
    transcode_and_write(windowed, schedule, out)
    p.run().wait_until_finish()
    return check_balance(schedule, records, out)


@pytest.mark.parametrize("mode", ["split", "late_dir"])
def test_the_issue_schedule_loses_no_record(tmp_path, mode, complete_direct_metrics) -> None:
    """b is too late for a window the guard has seen, c for one it has not: both late."""
    schedule = Schedule(ISSUE, size=60, lateness=60, mode=mode)
    got = run_on_direct_runner(schedule, tmp_path)
    assert got["late_ids"] == schedule.too_late() == {1, 2}
    assert (got["rows"], got["dead_letters"], got["late"]) == (1, 0, 2)


@st.composite
def schedules(draw) -> Schedule:
    size = draw(st.sampled_from([10, 60, 300]))
    steps: list = []
    wm, n = 0, 0
    for _ in range(draw(st.integers(2, 7))):
        if draw(st.booleans()):
            # Around the watermark: on time, late within the lateness, too late, and
            # windows no record had before.
            times = draw(st.lists(st.integers(-900, 120), min_size=1, max_size=4))
            steps.append(("add", tuple((n + j, max(0, wm + t)) for j, t in enumerate(times))))
            n += len(times)
        else:
            wm += draw(st.sampled_from([1, 10, 59, 60, 61, 300, 1000, 10**6]))
            steps.append(("wm", wm))
    if not n:
        steps.append(("add", ((0, wm),)))
        n = 1
    return Schedule(
        steps,
        size=size,
        offset=draw(st.integers(0, size - 1)),
        lateness=draw(st.sampled_from([0, 30, 60, 600])),
        corrupt=draw(st.sets(st.integers(0, n - 1), max_size=2)),
        mode=draw(st.sampled_from(["split", "late_dir"])),
    )


@settings(max_examples=SCHEDULES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(schedule=schedules())
def test_random_schedules_lose_no_record(tmp_path_factory, schedule: Schedule) -> None:
    out = tmp_path_factory.mktemp("schedule")
    got = run_on_direct_runner(schedule, out)
    # Exactly the records the schedule has too late are late: none more, none vanished.
    assert got["late_ids"] == schedule.too_late(), schedule


# ------------------------------------------------- the FnApiRunner and a portable runner


_STEP = TimerSpec("step", TimeDomain.WATERMARK)
_NEXT = ReadModifyWriteStateSpec("next", beam.coders.VarIntCoder())
_STEP_TIMER = beam.DoFn.TimerParam(_STEP)
_NEXT_STATE = beam.DoFn.StateParam(_NEXT)


class Replay(beam.DoFn):
    """(0, None) -> a schedule's records at their event times, in the global window: the
    records of each "add" step go out once an event-time timer at the watermark of the
    step before has fired (so the watermark behind them is the schedule's), for runners
    that do not run TestStream. In batch mode the watermark jumps to the end at once, so
    the steps go out in quick rounds of timers, and no grouping drops data there: the
    guard must still keep every record and end."""

    def __init__(self, steps: tuple, records: list[bytes]) -> None:
        super().__init__()
        self._steps, self._records = steps, records

    def process(self, _, timer=_STEP_TIMER, at=_NEXT_STATE):
        yield from self._release(0, timer, at)

    @on_timer(_STEP)
    def step(self, timer=_STEP_TIMER, at=_NEXT_STATE):
        yield from self._release(at.read(), timer, at)

    def _release(self, k: int, timer, at) -> Iterator:
        while k < len(self._steps) and self._steps[k][0] == "add":
            for i, t in self._steps[k][1]:
                yield window.TimestampedValue(self._records[i], t)
            k += 1
        if k < len(self._steps):  # a watermark step: the rest once it is reached
            timer.set(self._steps[k][1])
            at.write(k + 1)


def replayed(p: beam.Pipeline, schedule: Schedule, records: list[bytes]) -> beam.PCollection:
    return (
        p
        | beam.Create([(0, None)])
        | beam.ParDo(Replay(schedule.steps, records))
        | schedule.windowing()
    )


FIXED = [
    Schedule(ISSUE, size=60, lateness=60, corrupt={1}),
    Schedule(
        [("add", ((0, 5), (1, 65), (2, 130))), ("wm", 125), ("add", ((3, 40), (4, 200))),
         ("wm", 10**6), ("add", ((5, 10), (6, 500), (7, 10**6 - 1)))],
        size=60, lateness=30, corrupt={6},
    ),
]


@pytest.mark.parametrize("schedule", FIXED, ids=["issue", "jumps"])
def test_schedules_on_the_fn_api_runner(tmp_path, schedule: Schedule) -> None:
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    records = schedule.records()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        transcode_and_write(replayed(p, schedule, records), schedule, tmp_path)
    got = check_balance(schedule, records, tmp_path)
    # Batch: the records all come before the watermark moves, so none is late there.
    assert got["late"] == 0 and got["rows"] + got["dead_letters"] == got["records_in"]


@pytest.fixture(scope="module")
def portable() -> Iterator:
    sys.path.insert(0, str(ROOT / "pipelines"))
    from local_beam import LocalPortableBeam, ServicesUnavailable

    # The SDK workers import this module (Replay) and the corpus, as well as wirearrow.
    path = os.pathsep.join(str(ROOT / d) for d in ("plugin", "tests", "benchmarks"))
    services = LocalPortableBeam(env={"PYTHONPATH": path})
    try:
        services.__enter__()
    except ServicesUnavailable as err:
        pytest.skip(f"no local Beam job service: {err}")
    try:
        yield services
    finally:
        services.stop()


@pytest.mark.parametrize("schedule", FIXED, ids=["issue", "jumps"])
def test_schedules_on_a_portable_runner(tmp_path, portable, schedule: Schedule) -> None:
    records = schedule.records()
    options = PipelineOptions(portable.pipeline_args)
    with beam.Pipeline(options=options) as p:
        transcode_and_write(replayed(p, schedule, records), schedule, tmp_path)
    got = check_balance(schedule, records, tmp_path)
    assert got["late"] == 0 and got["rows"] + got["dead_letters"] == got["records_in"]
    assert "with state DONE" in portable.log("job_service")


def test_the_streaming_pipeline_prints_its_balance(tmp_path, capsys) -> None:
    """pipelines/beam_streaming.py ends with records in = records with rows + dead letters
    + late records, counted from its files; some records come past the allowed lateness."""
    sys.path.insert(0, str(ROOT / "pipelines"))
    import beam_streaming

    args = ["--n", "600", "--rate", "20", "--window", "10", "--lateness", "5", "--late", "30"]
    assert beam_streaming.main([*args, "--out", str(tmp_path)]) == 0
    lines = dict(
        line.split(":", 1) for line in capsys.readouterr().out.splitlines() if ":" in line
    )
    sent, dead, late = (int(lines[k].replace(",", "")) for k in ("records in", "dead letters",
                                                                  "late records"))
    assert sent == 600 + len(range(0, 600, 20 * 7)) and dead == sent - 600 and late > 0
    assert lines["balance"].endswith(f"of {sent}: every record accounted for"), lines["balance"]
