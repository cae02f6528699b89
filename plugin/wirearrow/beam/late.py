"""SplitLate: records later than their window's allowed lateness, counted and kept as dead
letters instead of vanishing at the next GroupByKey.

Beam's Python SDK drops such records at a window's grouping without a count (its trigger
driver skips elements of expired windows; Java's ``droppedDueToLateness`` counter has no
Python counterpart), and a DoFn cannot read the watermark. Event-time timers can: a timer
set at a window's expiry (its end plus the allowed lateness) fires once the watermark has
passed it. So every record goes, in the global window and under one key, through a
stateful DoFn that keeps the expiries of the windows it has seen, with a timer at the
earliest; the latest fired expiry is a watermark the DoFn has observed. A record whose
window expired at or before that is late: a DeadLetter with reason "late", counted in
the ``records_late`` metric. Every other record goes on in its own window (restored by a
WindowFn that keeps each element's window), under the input's windowing strategy.
"""

# No `from __future__ import annotations`: Beam reads the DoFns' annotations at run time.

import typing
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.coders import PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import trigger
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.windowed_value import WindowedValue

from wirearrow.beam.transcode import METRICS_NAMESPACE, DeadLetter, _key_text, _origin

__all__ = ["SplitLate"]


def _with_window(element: Any, win: Any = beam.DoFn.WindowParam, ts: Any = beam.DoFn.TimestampParam):
    # One key: the expiries every record is checked against are the whole stream's.
    return (0, (element, win, ts))


# The guard's state: the latest expiry whose timer fired (a watermark it has seen), the
# expiries of the windows seen since, and the timer at the earliest of them.
_SEEN = ReadModifyWriteStateSpec("watermark_seen", PickleCoder())
_PENDING = ReadModifyWriteStateSpec("pending_expiries", PickleCoder())
_EXPIRY = TimerSpec("expiry", TimeDomain.WATERMARK)
_SEEN_STATE = beam.DoFn.StateParam(_SEEN)
_PENDING_STATE = beam.DoFn.StateParam(_PENDING)
_EXPIRY_TIMER = beam.DoFn.TimerParam(_EXPIRY)


class _LateGuardFn(beam.DoFn):
    """(0, (element, window, timestamp)) -> the element in its window, or (tagged
    ``late_tag``) what :meth:`_late_element` makes of it, counted in ``metric`` by
    :meth:`_weight`. This class passes late elements on as they are, one each."""

    def __init__(self, allowed_lateness: Any, late_tag: str, metric: str) -> None:
        super().__init__()
        self._lateness = allowed_lateness
        self._late_tag = late_tag
        self._late = Metrics.counter(METRICS_NAMESPACE, metric)

    def _weight(self, element: Any) -> int:
        return 1

    def _late_element(self, element: Any, win: Any, expiry: Any) -> Any:
        return element

    def process(
        self,
        item: tuple,
        seen: Any = _SEEN_STATE,
        pending: Any = _PENDING_STATE,
        timer: Any = _EXPIRY_TIMER,
    ) -> Iterator[Any]:
        element, win, ts = item[1]
        expiry = win.max_timestamp() + self._lateness
        watermark = seen.read()
        if watermark is not None and expiry <= watermark:
            self._late.inc(self._weight(element))
            yield pvalue.TaggedOutput(self._late_tag, self._late_element(element, win, expiry))
            return
        expiries = pending.read() or []
        if expiry not in expiries:
            expiries = sorted([*expiries, expiry])
            pending.write(expiries)
            timer.set(expiries[0])
        yield WindowedValue(element, ts, (win,))

    @on_timer(_EXPIRY)
    def expired(
        self,
        fired: Any = beam.DoFn.TimestampParam,
        seen: Any = _SEEN_STATE,
        pending: Any = _PENDING_STATE,
        timer: Any = _EXPIRY_TIMER,
    ) -> None:
        seen.write(fired)
        expiries = [e for e in (pending.read() or []) if e > fired]
        pending.write(expiries)
        if expiries:
            timer.set(expiries[0])



class _LateRecordFn(_LateGuardFn):
    """SplitLate's guard: a late record becomes a DeadLetter, counted in records_late."""

    def __init__(self, allowed_lateness: Any, field: str, late_tag: str) -> None:
        super().__init__(allowed_lateness, late_tag, "records_late")
        self._field = field

    def _late_element(self, element: Any, win: Any, expiry: Any) -> DeadLetter:
        key, raw, origin = None, element, None
        if isinstance(element, tuple) and not hasattr(element, "_fields") and len(element) == 2:
            key, raw = element
        elif not isinstance(element, bytes | bytearray | memoryview | str) and element is not None:
            key, raw = getattr(element, "key", None), getattr(element, self._field, None)
            origin = _origin(element)
        if isinstance(raw, str):
            raw = raw.encode()
        reason = (
            f"late: its window {win} expired at {expiry} (the window's end plus the allowed "
            f"lateness of {self._lateness} s) before the record arrived"
        )
        return DeadLetter(
            -1, 0, "", reason, None if raw is None else bytes(raw), _key_text(key), *(origin or ())
        )


class _KeepWindow(beam_window.NonMergingWindowFn):
    """Assigns each element the window it already has (set by _LateGuardFn's output)."""

    def __init__(self, original: beam_window.WindowFn) -> None:
        self._original = original

    def assign(self, context: Any) -> list:
        return [context.window]

    def get_window_coder(self) -> Any:
        return self._original.get_window_coder()


def split_expired(pcoll: beam.PCollection, guard: _LateGuardFn, late_type: Any) -> tuple:
    """(on time, late) of a windowed PCollection, through ``guard`` under one key: the
    elements whose window has not expired, in their windows under ``pcoll``'s windowing,
    and the late ones (``late_type``) firing one by one in the global window."""
    windowing = pcoll.windowing
    checked = (
        pcoll
        | "WithWindow"
        >> beam.Map(_with_window).with_output_types(typing.Tuple[int, typing.Any])  # noqa: UP006
        | "Global" >> beam.WindowInto(beam_window.GlobalWindows())
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
    """Windowed records -> ``{"on_time": ..., "late": ...}``: the records whose window has
    not expired (in their windows, under the input's windowing), and the records later
    than the input's allowed lateness as :class:`~wirearrow.beam.DeadLetter` rows with a
    "late: ..." reason (``index`` -1; ``raw``, ``key`` and the Kafka fields as for
    ToArrow's dead letters), counted in the ``records_late`` metric.

    Apply it right after ``WindowInto`` and before ``ToArrow`` to have too-late records
    as dead letters rather than rows, or before a grouping of your own (which would drop
    them). ``WriteToParquetFiles(late_dir=...)`` keeps the rows of too-late records
    instead, checking batches rather than records. Elements are what ToArrow takes (bytes, ``(key, bytes)``, rows with a
    ``field``). The check runs under one key (a watermark the whole stream shares): one
    state read per record on one worker.
    """

    def __init__(self, field: str = "value") -> None:
        super().__init__()
        self._field = field

    def expand(self, pcoll: beam.PCollection):  # -> {"on_time", "late"} (Beam reads hints)
        guard = _LateRecordFn(pcoll.windowing.allowed_lateness, self._field, "late")
        on_time, late = split_expired(pcoll, guard, DeadLetter)
        return {"on_time": on_time, "late": late}
