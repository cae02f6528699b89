"""SplitLate: records later than their window's allowed lateness, counted and kept as dead
letters instead of vanishing at the next grouping (Beam's Python SDK drops them there
without a count, and a DoFn cannot read the watermark). How the guard knows the watermark
anyway, a ladder of event-time timers, and why no record escapes it: docs/beam.md, "Late
data"."""

# No `from __future__ import annotations`: Beam reads the DoFns' annotations at run time.

import typing
from collections.abc import Iterator
from typing import Any, Optional

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.coders import PickleCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import trigger
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Duration, Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from wirearrow.beam.transcode import METRICS_NAMESPACE, DeadLetter, dead_letter

__all__ = ["LateGuardFn", "SplitLate", "split_expired"]

# The step of the lattice of WindowFns whose windows can end anywhere (sessions, custom
# ones), in microseconds: a record within this much of its window's expiry may be counted
# late though the grouping would still have taken it (never the other way round).
DEFAULT_RESOLUTION_US = 1_000_000
# The highest time a timer in the global window can have.
_TOP_US = beam_window.GlobalWindow().max_timestamp().micros


class _ExpiryLattice:
    """The times at which a window of ``windowfn`` can expire, in microseconds: its
    ``max_timestamp()`` plus the allowed lateness, at or before the moment a grouping drops
    its records. Points ``phase + k * step``: every expiry of fixed and sliding windows is
    one; other windows' expiries are rounded to ``resolution_us`` steps."""

    def __init__(self, windowfn: Any, lateness_us: int, resolution_us: int) -> None:
        while isinstance(windowfn, _KeepWindow):  # a guard after a guard
            windowfn = windowfn.original
        if isinstance(windowfn, beam_window.FixedWindows):
            step, end = windowfn.size.micros, windowfn.offset.micros
        elif isinstance(windowfn, beam_window.SlidingWindows):
            step, end = windowfn.period.micros, windowfn.offset.micros + windowfn.size.micros
        else:
            step, end = 0, 0
        self.step = step if step > 0 else max(1, int(resolution_us))
        self.phase = (end - 1 + lateness_us) % self.step if step > 0 else 0
        self.bottom = self.index(MIN_TIMESTAMP.micros)
        self.top = self.index(_TOP_US)
        # Levels 0 .. levels-1 of rungs reach from the bottom to the top in one ladder.
        self.levels = 1
        while _BASE**self.levels <= self.top - self.bottom:
            self.levels += 1

    def index(self, micros: int) -> int:
        """The highest lattice index whose point is at or before ``micros``."""
        return (micros - self.phase) // self.step

    def nearest(self, micros: int) -> int:
        """The lattice index whose point is nearest ``micros``: the rung a timer firing at
        ``micros`` was set for. The Fn API carries timers in milliseconds, so a rung
        fires up to 999 us before its point (floor(index) would take it for the rung
        below, which would be set again, and fire again, for ever)."""
        return (micros - self.phase + self.step // 2) // self.step

    def point(self, k: int) -> int:
        return self.phase + k * self.step


def _with_window(element: Any, win: Any = beam.DoFn.WindowParam, ts: Any = beam.DoFn.TimestampParam):
    # One key: the watermark every record is checked against is the whole stream's.
    return (0, (element, win, ts))


def _start(_: Any) -> tuple:
    # The element that arms the guard's timers (see LateGuardFn.process).
    return (0, None)


# The guard's state: the lattice index of the highest rung that fired (the watermark has
# reached its point), and the ladder of timers above it (one per rung, by dynamic tag):
# BASE-1 rungs per level, level i's BASE**i lattice steps apart from the level's base
# (the index it was armed from), and "next", one step up.
_BASE = 16
_FIRED = ReadModifyWriteStateSpec("watermark_index", VarIntCoder())
_BASES = ReadModifyWriteStateSpec("ladder_bases", PickleCoder())
_RUNG = TimerSpec("rung", TimeDomain.WATERMARK)
_FIRED_STATE = beam.DoFn.StateParam(_FIRED)
_BASES_STATE = beam.DoFn.StateParam(_BASES)
_RUNG_TIMER = beam.DoFn.TimerParam(_RUNG)


class LateGuardFn(beam.DoFn):
    """(0, (element, window, timestamp)) -> the element in its window, or tagged ``late``
    once its window has expired: as it is, or with ``column`` (SplitLate's records) as a
    DeadLetter counted in ``records_late``. (0, None) arms the ladder."""

    def __init__(
        self,
        windowing: Any,
        column: Optional[str] = None,  # noqa: UP045
        resolution_us: int = DEFAULT_RESOLUTION_US,
    ) -> None:
        super().__init__()
        self._lateness = Duration.of(windowing.allowed_lateness)
        self._lattice = _ExpiryLattice(windowing.windowfn, self._lateness.micros, resolution_us)
        self._column = column
        self._late = Metrics.counter(METRICS_NAMESPACE, "records_late")

    def _arm(self, timer: Any, k: int, level: int) -> None:
        """The rungs of ``level`` above lattice index k: k + d * BASE**level, d = 1 .. BASE-1
        (none past the top), tagged "level.d"."""
        lattice, spacing = self._lattice, _BASE**level
        for d in range(1, _BASE):
            at = k + d * spacing
            if at > lattice.top:
                break
            timer.set(Timestamp(micros=lattice.point(at)), dynamic_timer_tag=f"{level}.{d}")

    def _next(self, timer: Any, k: int) -> None:
        if k < self._lattice.top:
            timer.set(Timestamp(micros=self._lattice.point(k + 1)), dynamic_timer_tag="next")

    def process(
        self,
        item: tuple,
        fired: Any = _FIRED_STATE,
        bases: Any = _BASES_STATE,
        timer: Any = _RUNG_TIMER,
    ) -> Iterator[Any]:
        if item[1] is None:  # the start: arm the ladder from the lowest time there is
            if fired.read() is None:
                bottom = self._lattice.bottom
                fired.write(bottom)
                bases.write([bottom] * self._lattice.levels)
                self._next(timer, bottom)
                for level in range(self._lattice.levels):
                    self._arm(timer, bottom, level)
            return
        element, win, ts = item[1]
        expiry = win.max_timestamp() + self._lateness
        k = fired.read()
        # None: the start has not come yet, so neither has any watermark.
        if k is not None and expiry.micros < self._lattice.point(k + 1):
            if self._column is not None:
                self._late.inc()
                reason = (
                    f"late: its window {win} expired at {expiry} (the window's end plus the "
                    f"allowed lateness of {self._lateness} s) before the record arrived"
                )
                element = dead_letter(element, self._column, -1, 0, "", reason)
            yield pvalue.TaggedOutput("late", element)
            return
        yield WindowedValue(element, ts, (win,))

    @on_timer(_RUNG)
    def rung_fired(
        self,
        at: Any = beam.DoFn.TimestampParam,
        tag: Any = beam.DoFn.DynamicTimerTagParam,
        fired: Any = _FIRED_STATE,
        bases: Any = _BASES_STATE,
        timer: Any = _RUNG_TIMER,
    ) -> None:
        k = self._lattice.nearest(Timestamp.of(at).micros)
        current = fired.read()
        if current is None:
            return  # (a timer of an earlier run of this state: cannot happen)
        level, _, digit = tag.partition(".")
        if k <= current:
            # A rung below the highest that fired, fired late or twice. The direct runner
            # delivers a firing again when it extracts timers before the first delivery
            # ran, and clears the tag's timer on each delivery, whatever it was set to
            # since: put the tag back where it belongs.
            if tag == "next":
                self._next(timer, current)
            else:
                i = int(level)
                at_index = bases.read()[i] + int(digit) * _BASE**i
                if current < at_index <= self._lattice.top:
                    timer.set(Timestamp(micros=self._lattice.point(at_index)), dynamic_timer_tag=tag)
            return
        fired.write(k)
        # The next point is always pending: on a runner that holds the output watermark
        # at pending timers, nothing this DoFn lets through can be overtaken by it.
        self._next(timer, k)
        if tag != "next" and int(level) > 0:
            # Between here and the next rung of this level or above (BASE**level steps
            # up), the level below takes over: each round of firings descends a level.
            # Near the top, the highest level below with a rung before it.
            below = int(level) - 1
            while below > 0 and k + _BASE**below > self._lattice.top:
                below -= 1
            levels = bases.read()
            levels[below] = k
            bases.write(levels)
            self._arm(timer, k, below)


class _KeepWindow(beam_window.NonMergingWindowFn):
    """Assigns each element the window it already has (set by LateGuardFn's output)."""

    def __init__(self, original: beam_window.WindowFn) -> None:
        self.original = original

    def assign(self, context: Any) -> list:
        return [context.window]

    def get_window_coder(self) -> Any:
        return self.original.get_window_coder()


def split_expired(pcoll: beam.PCollection, guard: LateGuardFn, late_type: Any) -> tuple:
    """(on time, late) of a windowed PCollection, through ``guard`` under one key: the
    elements whose window has not expired, in their windows under ``pcoll``'s windowing,
    and the late ones (``late_type``) firing one by one in the global window."""
    windowing = pcoll.windowing
    any_type = typing.Tuple[int, typing.Any]  # noqa: UP006
    keyed = (
        pcoll
        | "WithWindow" >> beam.Map(_with_window).with_output_types(any_type)
        | "Global" >> beam.WindowInto(beam_window.GlobalWindows())
    )
    # An element at the beginning of time: its arrival arms the guard's timers before the
    # watermark can pass anything (it holds the guard's input watermark until then).
    start = (
        pcoll.pipeline
        | "Start" >> beam.Impulse()
        | "StartKey" >> beam.Map(_start).with_output_types(any_type)
    )
    checked = (
        (keyed, start)
        | "WithStart" >> beam.Flatten()
        | "Guard"
        >> beam.ParDo(guard)
        .with_output_types(typing.Any, late=late_type)
        .with_outputs("late", main="on_time")
    )
    on_time = checked.on_time | "Rewindow" >> beam.WindowInto(
        _KeepWindow(windowing.windowfn),
        trigger=windowing.triggerfn,
        accumulation_mode=windowing.accumulation_mode,
        allowed_lateness=windowing.allowed_lateness,
        timestamp_combiner=windowing.timestamp_combiner,
    )
    # The late elements' own windows have closed: a grouping there would drop them again.
    # They fire one by one in the global window instead, so a file sink writes them as
    # they come.
    late = checked.late | "LateFireAtOnce" >> beam.WindowInto(
        beam_window.GlobalWindows(),
        trigger=trigger.Repeatedly(trigger.AfterCount(1)),
        accumulation_mode=trigger.AccumulationMode.DISCARDING,
    )
    return on_time, late


class SplitLate(beam.PTransform):
    """Windowed records (what ToArrow takes; ``column``: a row's record field) ->
    ``{"on_time": ..., "late": ...}``: those later than the allowed lateness as DeadLetters
    ("late: ..." reason), counted in ``records_late``, the others in their windows. Apply it
    after ``WindowInto``, before any grouping. docs/beam.md, "Late data"."""

    def __init__(self, column: str = "value") -> None:
        super().__init__()
        self._column = column

    def expand(self, pcoll: beam.PCollection):  # -> {"on_time", "late"} (Beam reads hints)
        guard = LateGuardFn(pcoll.windowing, self._column)
        on_time, late = split_expired(pcoll, guard, DeadLetter)
        return {"on_time": on_time, "late": late}
