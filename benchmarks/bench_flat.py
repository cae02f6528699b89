"""Protobuf wire bytes -> Arrow: wirearrow against what users would pick instead.

Every row runs in this one process, single-threaded, on the same in-memory corpus
(``corpus.generate(n, seed)``, OpenRTB-style ``BidRequestEvent``, ~1 KB a message):

* wirearrow flat plans, from a ``pa.BinaryArray`` (fast path) and from a ``list[bytes]``;
* pybufarrow flat ("denorm") with and without a HyperType, and nested;
* ptars (Rust, whole message -> nested Arrow), from a list and from a BinaryArray;
* protarrow (protobuf runtime parse, then pure-Python conversion);
* the protobuf runtime's ``FromString`` alone (a floor for "parse in Python first");
* a hand-written protobuf parse + ``pa.array`` loop, i.e. what users write today.

Timing follows ``timeit.Timer.autorange``: calls are grouped so that one measurement lasts at
least ``--min-time`` seconds (the calibration doubles as warm-up), then ``--repeat``
measurements are taken with the garbage collector off; the median is the headline, the
minimum is shown as "best". Peak memory is measured in a fresh subprocess per row.

Run ``python benchmarks/bench_flat.py --help``; see benchmarks/README.md for how to read it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa

import conditions
import corpus

# --------------------------------------------------------------------------- plans
# Paths use wirearrow's path grammar, which is the reference system's (bufarrowlib), so
# pybufarrow receives the very same strings.

PLANS: dict[str, tuple[str, ...]] = {
    "flat-4": ("id", "imp[*].id", "imp[*].bidfloor", "device.geo.country"),
    # Nested fan-out (imp[*] -> pmp.deals[*]): wirearrow correlates it (one row per deal,
    # carrying its own impression); pybufarrow cross-joins it (more, wrong rows).
    "flat-15": (
        "id",
        "imp[*].id",
        "imp[*].banner.w",
        "imp[*].banner.h",
        "imp[*].video.w",
        "imp[*].pmp.deals[*].id",
        "imp[*].pmp.deals[*].bidfloor",
        "device.geo.country",
        "device.os",
        "user.id",
        "site.publisher.id",
        "timestamp",
        "at",
        "tmax",
        "technicalprovider.id",
    ),
}
BASELINE = ("pybufarrow flat", "flat-4")  # the row every "x" ratio divides by
BINARY_ARRAY, LIST = "BinaryArray", "list[bytes]"
HANDWRITTEN = "hand-written protobuf+pyarrow"

Runner = Callable[[], Any]  # processes the whole corpus once, returns its output


# --------------------------------------------------------------------------- corpus


@dataclass(frozen=True)
class Corpus:
    """The shared input, in both forms every row may take."""

    messages: list[bytes]
    array: pa.BinaryArray

    @classmethod
    def from_messages(cls, messages: list[bytes]) -> Corpus:
        return cls(messages, pa.array(messages, pa.binary()))

    @classmethod
    def from_ipc(cls, path: str | os.PathLike[str]) -> Corpus:
        # Read straight into Arrow buffers: no transient copy that would lift the peak RSS
        # above the steady state and hide a later, smaller peak (see _probe_memory).
        with pa.OSFile(str(path)) as f:
            array = pa.ipc.open_file(f).read_all().column(0).combine_chunks()
        return cls(array.to_pylist(), array)

    def write_ipc(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        table = pa.table({"message": self.array})
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)

    def head(self, k: int) -> Corpus:
        return Corpus(self.messages[:k], self.array.slice(0, k))

    @property
    def n(self) -> int:
        return len(self.messages)

    @functools.cached_property
    def payload_bytes(self) -> int:
        # Message bytes only (no framing): the same numerator for every row's MB/s.
        return sum(map(len, self.messages))


# --------------------------------------------------------------------------- competitors
# Each setup_* does the one-off work (compile a schema, build a transcoder) untimed and
# returns a Runner; only Runner calls are timed ("compile once, decode many").


def import_wirearrow() -> ModuleType:
    """Import the installed wirearrow, else the one in this source tree (in-place build)."""
    try:
        import wirearrow
    except ImportError:
        sys.path.insert(0, str(corpus.REPO_ROOT / "plugin"))
        import wirearrow
    # A source tree without a built extension imports as an empty namespace package.
    if not hasattr(wirearrow, "Transcoder"):
        where = ", ".join(getattr(wirearrow, "__path__", [])) or wirearrow.__file__
        raise ImportError(f"wirearrow at {where} has no Transcoder (not built?)")
    return wirearrow


def setup_wirearrow(plan: str, form: str) -> Callable[[Corpus], Runner]:
    def setup(c: Corpus) -> Runner:
        wa = import_wirearrow()
        schema = wa.Schema.from_proto(
            str(corpus.PROTO_FILE), corpus.MESSAGE_NAME, import_paths=[str(corpus.SCHEMA_DIR)]
        )
        tc = wa.Transcoder(schema, columns=list(PLANS[plan]))
        data = c.array if form == BINARY_ARRAY else c.messages
        return lambda: tc.transcode(data)

    return setup


def confluent_prefix(schema: Any, schema_id: int = 1) -> bytes:
    """The Confluent Schema Registry prefix a serializer writes before ``schema``'s message."""
    descriptor, path = schema.descriptor, []
    while descriptor.containing_type is not None:
        path.append(list(descriptor.containing_type.nested_types).index(descriptor))
        descriptor = descriptor.containing_type
    path.append(list(descriptor.file.message_types_by_name.values()).index(descriptor))
    path.reverse()
    # [0] is written as one 0 byte; else zigzag varints (all small here).
    index = b"\0" if path == [0] else bytes([2 * len(path)] + [2 * i for i in path])
    return b"\0" + schema_id.to_bytes(4, "big") + index


def setup_wirearrow_confluent(plan: str) -> Callable[[Corpus], Runner]:
    """The same records with a Confluent prefix each (as read from Kafka): framing="confluent"."""

    def setup(c: Corpus) -> Runner:
        wa = import_wirearrow()
        schema = wa.Schema.from_proto(
            str(corpus.PROTO_FILE), corpus.MESSAGE_NAME, import_paths=[str(corpus.SCHEMA_DIR)]
        )
        tc = wa.Transcoder(schema, columns=list(PLANS[plan]))
        prefix = confluent_prefix(schema)
        data = pa.array([prefix + m for m in c.messages], pa.binary())
        schemas = {1: schema}
        return lambda: tc.transcode(data, framing="confluent", schemas=schemas)

    return setup


def _pybufarrow_transcoder(columns: Sequence[str] | None, hyper: bool) -> Any:
    import pybufarrow

    # pybufarrow resolves proto_path *inside* import_paths (protocompile semantics), so it
    # takes the file name, not a path to it.
    args = (corpus.PROTO_FILE.name, corpus.MESSAGE_NAME, [str(corpus.SCHEMA_DIR)])
    ht = pybufarrow.HyperType(*args) if hyper else None
    return pybufarrow.Transcoder.from_proto_file(
        *args, denorm_columns=list(columns) if columns else None, hyper_type=ht
    )


def setup_pybufarrow_flat(plan: str, hyper: bool) -> Callable[[Corpus], Runner]:
    def setup(c: Corpus) -> Runner:
        tc = _pybufarrow_transcoder(PLANS[plan], hyper)
        append, flush, messages = tc.append_denorm, tc.flush_denorm, c.messages

        def run() -> pa.RecordBatch:
            # pybufarrow has no batch entry point: one ctypes call per message.
            for m in messages:
                append(m)
            return flush()

        return run

    return setup


def setup_pybufarrow_nested(c: Corpus) -> Runner:
    tc = _pybufarrow_transcoder(None, hyper=True)  # append() requires a HyperType
    append, flush, messages = tc.append, tc.flush, c.messages

    def run() -> pa.RecordBatch:
        for m in messages:
            append(m)
        return flush()

    return run


def setup_ptars(form: str) -> Callable[[Corpus], Runner]:
    def setup(c: Corpus) -> Runner:
        import ptars

        _, cls = corpus.load_schema()
        handler = ptars.HandlerPool([cls.DESCRIPTOR.file]).get_for_message(cls.DESCRIPTOR)
        if form == BINARY_ARRAY:
            return lambda: handler.array_to_record_batch(c.array)
        return lambda: handler.list_to_record_batch(c.messages)

    return setup


def setup_protarrow(c: Corpus) -> Runner:
    import protarrow

    _, cls = corpus.load_schema()
    from_string, messages = cls.FromString, c.messages
    return lambda: protarrow.messages_to_record_batch([from_string(m) for m in messages], cls)


def setup_protobuf_parse(c: Corpus) -> Runner:
    _, cls = corpus.load_schema()
    from_string, messages = cls.FromString, c.messages

    def run() -> int:
        # Discard each message at once: keeping 50k parsed messages alive costs ~3x
        # (allocation, not parsing), and this row is meant as the parse-only floor.
        for m in messages:
            from_string(m)
        return len(messages)

    return run


# The hand-written rows implement wirearrow's semantics (docs: decisions), so they double
# as the correctness reference for the wirearrow rows: left join on empty fan-out, nested
# fan-out correlated, anything under an absent sub-message is null, proto3 implicit-presence
# scalars read as their default.

_SCHEMA_4 = pa.schema(
    [
        ("id", pa.string()),
        ("imp[*].id", pa.string()),
        ("imp[*].bidfloor", pa.float64()),
        ("device.geo.country", pa.string()),
    ]
)
_SCHEMA_15 = pa.schema(
    [
        ("id", pa.string()),
        ("imp[*].id", pa.string()),
        ("imp[*].banner.w", pa.uint32()),
        ("imp[*].banner.h", pa.uint32()),
        ("imp[*].video.w", pa.uint32()),
        ("imp[*].pmp.deals[*].id", pa.string()),
        ("imp[*].pmp.deals[*].bidfloor", pa.float64()),
        ("device.geo.country", pa.string()),
        ("device.os", pa.string()),
        ("user.id", pa.string()),
        ("site.publisher.id", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("at", pa.int32()),
        ("tmax", pa.uint32()),
        ("technicalprovider.id", pa.uint32()),
    ]
)


def setup_handwritten_4(c: Corpus) -> Runner:
    _, cls = corpus.load_schema()
    from_string, messages = cls.FromString, c.messages

    def run() -> pa.RecordBatch:
        ids: list[str] = []
        imp_ids: list[str | None] = []
        floors: list[float | None] = []
        countries: list[str | None] = []
        for raw in messages:
            m = from_string(raw)
            rid = m.id
            country = None
            # Reading m.device.geo on an absent device returns a default instance, so
            # presence has to be asked explicitly to get nulls.
            if m.HasField("device") and m.device.HasField("geo"):
                country = m.device.geo.country
            imps = m.imp
            if not imps:  # left join: the message still yields one row
                ids.append(rid)
                imp_ids.append(None)
                floors.append(None)
                countries.append(country)
            for imp in imps:
                ids.append(rid)
                imp_ids.append(imp.id)
                floors.append(imp.bidfloor)
                countries.append(country)
        return pa.record_batch([ids, imp_ids, floors, countries], schema=_SCHEMA_4)

    return run


def setup_handwritten_15(c: Corpus) -> Runner:
    _, cls = corpus.load_schema()
    from_string, messages = cls.FromString, c.messages

    def run() -> pa.RecordBatch:
        cols: list[list[Any]] = [[] for _ in _SCHEMA_15]
        (rid_c, imp_id_c, bw_c, bh_c, vw_c, deal_id_c, deal_floor_c, *rest) = cols
        for raw in messages:
            m = from_string(raw)
            has = m.HasField
            device = m.device if has("device") else None
            ts = m.timestamp if has("timestamp") else None
            # Per-message (scalar group) values, broadcast to every row of the message.
            scalars = (
                device.geo.country if device is not None and device.HasField("geo") else None,
                device.os if device is not None else None,
                m.user.id if has("user") else None,
                m.site.publisher.id if has("site") and m.site.HasField("publisher") else None,
                ts.seconds * 1_000_000 + ts.nanos // 1000 if ts is not None else None,
                m.at,
                m.tmax,
                m.technicalprovider.id if has("technicalprovider") else None,
            )
            # (imp id, banner w, banner h, video w, deal id, deal bidfloor) per row.
            rows: list[tuple[Any, ...]] = []
            for imp in m.imp:
                banner = imp.banner if imp.HasField("banner") else None
                video_w = imp.video.w if imp.HasField("video") else None
                head = (
                    imp.id,
                    banner.w if banner is not None else None,
                    banner.h if banner is not None else None,
                    video_w,
                )
                deals = imp.pmp.deals  # an absent pmp reads as empty
                if not deals:
                    rows.append((*head, None, None))
                for d in deals:  # correlated: deals of *this* impression only
                    rows.append((*head, d.id, d.bidfloor))
            if not rows:
                rows.append((None,) * 6)
            for r in rows:
                rid_c.append(m.id)
                imp_id_c.append(r[0])
                bw_c.append(r[1])
                bh_c.append(r[2])
                vw_c.append(r[3])
                deal_id_c.append(r[4])
                deal_floor_c.append(r[5])
                for col, v in zip(rest, scalars, strict=True):
                    col.append(v)
        return pa.record_batch(cols, schema=_SCHEMA_15)

    return run


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Benchmark:
    """One row of the table: a method, the plan it computes and the input form it takes."""

    method: str
    plan: str  # a PLANS key, "nested" (whole message) or "parse only"
    input_form: str
    library: str  # distribution whose version is reported
    setup: Callable[[Corpus], Runner] = field(repr=False)
    note: str = ""

    @property
    def key(self) -> str:
        return f"{self.method} | {self.plan} | {self.input_form}"


def all_benchmarks() -> list[Benchmark]:
    cross = "cross-joins nested fan-out; absent fields read as defaults, never null"
    return [
        *(
            Benchmark("wirearrow", plan, form, "wirearrow", setup_wirearrow(plan, form))
            for plan in PLANS
            for form in (BINARY_ARRAY, LIST)
        ),
        *(
            Benchmark(
                "wirearrow confluent",
                plan,
                BINARY_ARRAY,
                "wirearrow",
                setup_wirearrow_confluent(plan),
                "each record behind a Confluent prefix (schema id, message index)",
            )
            for plan in PLANS
        ),
        Benchmark(
            "pybufarrow flat",
            "flat-4",
            LIST,
            "pybufarrow",
            setup_pybufarrow_flat("flat-4", hyper=True),
            "HyperType; absent fields read as defaults, never null",
        ),
        Benchmark(
            "pybufarrow flat",
            "flat-15",
            LIST,
            "pybufarrow",
            setup_pybufarrow_flat("flat-15", hyper=True),
            "HyperType; " + cross,
        ),
        Benchmark(
            "pybufarrow flat, no HyperType",
            "flat-4",
            LIST,
            "pybufarrow",
            setup_pybufarrow_flat("flat-4", hyper=False),
            "protobuf-go dynamic parser fallback",
        ),
        Benchmark(
            "pybufarrow nested",
            "nested",
            LIST,
            "pybufarrow",
            setup_pybufarrow_nested,
            "HyperType; full message as nested Arrow",
        ),
        Benchmark(
            "ptars", "nested", LIST, "ptars", setup_ptars(LIST), "full message as nested Arrow"
        ),
        Benchmark(
            "ptars",
            "nested",
            BINARY_ARRAY,
            "ptars",
            setup_ptars(BINARY_ARRAY),
            "full message as nested Arrow",
        ),
        Benchmark(
            "protarrow",
            "nested",
            LIST,
            "protarrow",
            setup_protarrow,
            "protobuf parse, then Python conversion",
        ),
        Benchmark(
            "protobuf FromString",
            "parse only",
            LIST,
            "protobuf",
            setup_protobuf_parse,
            "no Arrow at all; each message dropped at once",
        ),
        Benchmark(
            HANDWRITTEN,
            "flat-4",
            LIST,
            "protobuf",
            setup_handwritten_4,
            "correct nulls and left join (the reference for wirearrow flat-4)",
        ),
        Benchmark(
            HANDWRITTEN,
            "flat-15",
            LIST,
            "protobuf",
            setup_handwritten_15,
            "correlated fan-out (the reference for wirearrow flat-15)",
        ),
    ]


# --------------------------------------------------------------------------- timing


@dataclass
class Result:
    method: str
    plan: str
    input_form: str
    note: str
    status: str = "ok"  # "ok", "unavailable" (import failed) or "error"
    error: str | None = None
    number: int = 0  # calls per measurement
    times: list[float] = field(default_factory=list)  # seconds per call, one per repeat
    median_s: float | None = None
    min_s: float | None = None
    msg_per_s: float | None = None  # from the median
    best_msg_per_s: float | None = None  # from the minimum
    mb_per_s: float | None = None
    ratio: float | None = None  # msg_per_s / baseline msg_per_s
    rows: int | None = None
    output_bytes: int | None = None
    peak_extra_bytes: int | None = None
    peak_ratio: float | None = None  # peak_extra_bytes / output_bytes


def _timed(run: Runner, number: int) -> tuple[float, Any]:
    out = None
    t0 = time.perf_counter()
    for _ in range(number):
        out = run()
    return time.perf_counter() - t0, out


def measure(
    run: Runner, *, min_time: float, repeat: int, max_time: float
) -> tuple[int, list[float], Any]:
    """Return (calls per measurement, seconds per call for each repeat, last output)."""
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as timeit does: collection pauses are noise, not the method's cost
    try:
        # autorange: 1, 2, 5, 10, 20, 50, ... calls until one measurement >= min_time.
        # These calibration calls are the warm-up (first-call imports, lazy tables, page
        # faults on fresh buffers) and are not reported.
        number, i = 1, 0
        while True:
            elapsed, out = _timed(run, number)
            if elapsed >= min_time:
                break
            i += 1
            number = (1, 2, 5)[i % 3] * 10 ** (i // 3)
        # Slow rows (protarrow: seconds per call) get fewer repeats, never fewer than 3.
        repeat = max(3, min(repeat, int(max_time / max(elapsed, 1e-9))))
        times = []
        for _ in range(repeat):
            del out  # free the previous output before the next measurement
            gc.collect()
            elapsed, out = _timed(run, number)
            times.append(elapsed / number)
        return number, times, out
    finally:
        if gc_was_enabled:
            gc.enable()


def _rows_and_bytes(out: Any) -> tuple[int | None, int | None]:
    if isinstance(out, (pa.RecordBatch, pa.Table)):
        return out.num_rows, out.nbytes
    return None, None


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:160]


def run_benchmark(b: Benchmark, c: Corpus, args: argparse.Namespace) -> tuple[Result, Any]:
    """Time one row; return its result and the output of its last call."""
    r = Result(b.method, b.plan, b.input_form, b.note)
    try:
        run = b.setup(c)
    except ImportError as exc:
        r.status, r.error = "unavailable", _error_text(exc)
        return r, None
    except Exception as exc:  # a competitor that cannot express this plan, or a bug
        r.status, r.error = "error", _error_text(exc)
        return r, None
    try:
        r.number, r.times, out = measure(
            run, min_time=args.min_time, repeat=args.repeat, max_time=args.max_time
        )
    except Exception as exc:
        r.status, r.error = "error", _error_text(exc)
        return r, None
    r.median_s, r.min_s = statistics.median(r.times), min(r.times)
    r.msg_per_s, r.best_msg_per_s = c.n / r.median_s, c.n / r.min_s
    r.mb_per_s = c.payload_bytes / r.median_s / 1e6
    r.rows, r.output_bytes = _rows_and_bytes(out)
    return r, out


# --------------------------------------------------------------------------- peak memory


def _proc_status_bytes(key: str) -> int | None:
    """A ``/proc/self/status`` memory line (``VmRSS``, ``VmHWM``) in bytes; None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024  # always reported in kB
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    # Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _maxrss() -> int:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb if sys.platform == "darwin" else kb * 1024  # Linux reports KiB, macOS bytes


def _settle_memory() -> None:
    """Before the baseline: the allocators' free memory given back, the thread on one CPU.

    Otherwise the figure swung with things outside the call (flat-4, the same build, fresh
    processes: 1.27-1.45x the output): (1) how much free memory glibc's heap happened to
    hold before the call, pages the call's buffers reuse without growing the RSS; it is
    left by the setup, whose dict and set sizes follow the string hash seed (with
    PYTHONHASHSEED fixed, 1.28-1.32x; the allocations of the call were the same in every
    run); (2) the kernel's peak RSS is kept from per-CPU counters that each lag by up to
    31 pages (on 2 CPUs, +-0.25 MB). Emptied (``malloc_trim``, Arrow's pool
    ``release_unused``) and pinned, every page the call writes counts and the figure
    repeats within ~0.01x (benchmarks/README.md, "Threads")."""
    import ctypes

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim this way
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _probe_memory(key: str, corpus_path: str) -> dict[str, Any]:
    """Child-process side: peak memory of one call, on top of the loaded corpus.

    The baseline is taken after the input is loaded, the transcoder built and warmed up and
    the allocators' free memory given back (_settle_memory), so the figure is what one call
    adds: its output plus its transient working memory, every page it writes counted.
    On Linux the peak is VmHWM, reset just before the call. ru_maxrss is the fallback only:
    Linux carries the *parent's* peak RSS into a forked child's ru_maxrss, so under a
    benchmark parent holding the corpus every child would report a peak of 0.
    """
    bench = {b.key: b for b in all_benchmarks()}[key]
    c = Corpus.from_ipc(corpus_path)
    bench.setup(c.head(min(c.n, 64)))()  # warm-up: lazy imports and one-off tables
    run = bench.setup(c)
    gc.collect()
    _settle_memory()
    if _reset_peak_rss() and (before := _proc_status_bytes("VmRSS")) is not None:
        out = run()
        after, source = _proc_status_bytes("VmHWM") or 0, "VmHWM"
    else:
        before = _maxrss()
        out = run()
        after, source = _maxrss(), "ru_maxrss"
    rows, nbytes = _rows_and_bytes(out)
    return {
        "peak_extra_bytes": max(after - before, 0),
        "source": source,
        "rows": rows,
        "output_bytes": nbytes,
    }


def measure_memory(b: Benchmark, corpus_path: Path) -> dict[str, Any]:
    """Run _probe_memory for ``b`` in a fresh interpreter (a peak RSS is per process)."""
    cmd = [sys.executable, __file__, "--probe-key", b.key, "--probe-corpus", str(corpus_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- reporting


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
    }


# The alternatives measured next to wirearrow (their versions go into --json's conditions).
COMPARED = ("pybufarrow", "ptars", "protarrow")


def library_versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    for dist in ("pyarrow", "protobuf", "pybufarrow", "ptars", "protarrow"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    try:
        from google.protobuf.internal import api_implementation

        versions["protobuf"] += f" ({api_implementation.Type()} backend)"
    except ImportError:
        pass
    try:
        import pybufarrow

        versions["pybufarrow"] += f" (libbufarrow {pybufarrow.version()})"
    except Exception:
        pass
    try:
        wa = import_wirearrow()
        where = Path(wa.__file__).parent
        versions["wirearrow"] = f"{getattr(wa, '__version__', '?')} ({where})"
    except Exception as exc:
        versions["wirearrow"] = f"not available ({_error_text(exc)})"
    return versions


def _fmt_rate(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k"


def _fmt_mb(v: int | None) -> str:
    return "-" if v is None else f"{v / 1e6:.1f}"


def render_table(results: Sequence[Result]) -> str:
    header = (
        "method", "plan", "input", "msg/s", "best", "MB/s", "x pb-flat-4",
        "rows", "out MB", "peak MB", "peak/out",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for r in results:
        lead = (r.method, r.plan, r.input_form)
        if r.status != "ok":
            label = "not available" if r.status == "unavailable" else "error"
            rows.append((*lead, f"{r.method}: {label} ({r.error})"))
            continue
        rows.append(
            (
                *lead,
                _fmt_rate(r.msg_per_s),
                _fmt_rate(r.best_msg_per_s),
                f"{r.mb_per_s:,.0f}" if r.mb_per_s is not None else "-",
                f"{r.ratio:.2f}" if r.ratio is not None else "-",
                f"{r.rows:,}" if r.rows is not None else "-",
                _fmt_mb(r.output_bytes),
                _fmt_mb(r.peak_extra_bytes),
                f"{r.peak_ratio:.2f}" if r.peak_ratio is not None else "-",
            )
        )
    # Column widths from the full rows only; an error message spills over the rest.
    full = [header, *(row for row in rows if len(row) == len(header))]
    widths = [max(len(row[i]) for row in full) for i in range(len(header))]
    numeric = range(3, len(header))

    def line(row: tuple[str, ...]) -> str:
        cells = [
            row[i].rjust(widths[i]) if i in numeric else row[i].ljust(widths[i])
            for i in range(min(len(row), len(header)))
        ]
        if len(row) < len(header):
            cells = [*cells[:3], row[3]]
        return "  ".join(cells).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep, *map(line, rows)])


def _find(results: Sequence[Result], method: str, plan: str, form: str | None = None) -> Result:
    for r in results:
        if (r.method, r.plan) == (method, plan) and form in (None, r.input_form):
            return r
    return Result(method, plan, form or "", "", status="missing")


def target_lines(results: Sequence[Result]) -> list[str]:
    def ratio(a: Result, b: Result, best: bool = False) -> str:
        if a.msg_per_s is None or b.msg_per_s is None:
            missing = a if a.msg_per_s is None else b
            return f"n/a ({missing.method} {missing.plan}: {missing.status})"
        if best:  # least-disturbed repeats: a second opinion on a noisy machine
            return f"{(a.best_msg_per_s or 0) / (b.best_msg_per_s or 1):.1f}x"
        return f"{a.msg_per_s / b.msg_per_s:.1f}x"

    pb4 = _find(results, *BASELINE)
    pb15 = _find(results, "pybufarrow flat", "flat-15")
    wa4 = _find(results, "wirearrow", "flat-4", BINARY_ARRAY)
    wa15 = _find(results, "wirearrow", "flat-15", BINARY_ARRAY)
    peaks = [
        r for r in results
        if r.method == "wirearrow" and r.input_form == BINARY_ARRAY and r.peak_ratio is not None
    ]  # fmt: skip
    if peaks:
        worst = max(peaks, key=lambda r: r.peak_ratio or 0.0)
        peak = f"{worst.peak_ratio:.2f} (worst BinaryArray plan: {worst.plan})"
    else:
        peak = "n/a (no wirearrow memory probe)"
    return [
        f"4-col vs pybufarrow: {ratio(wa4, pb4)} (target >= 20x)"
        f"  [best vs best: {ratio(wa4, pb4, best=True)}]",
        f"15-col vs pybufarrow: {ratio(wa15, pb15)} (target >= 10x)"
        f"  [best vs best: {ratio(wa15, pb15, best=True)};"
        f" vs pybufarrow flat-4: {ratio(wa15, pb4)}]",
        f"peak memory / output: {peak} (target <= 1.5)",
    ]


def check_against_reference(outputs: dict[tuple[str, str, str], Any]) -> list[str]:
    """Compare wirearrow's output with the hand-written reference, column by column.

    Informational only: a mismatch is printed, never raised (this is not a test).
    """
    lines = []
    for plan in PLANS:
        ref = outputs.get((HANDWRITTEN, plan, LIST))
        for form in (BINARY_ARRAY, LIST):
            got = outputs.get(("wirearrow", plan, form))
            if ref is None or got is None:
                continue
            label = f"wirearrow {plan} ({form}) vs hand-written"
            if got.num_rows != ref.num_rows:
                lines.append(f"{label}: rows differ ({got.num_rows:,} vs {ref.num_rows:,})")
                continue
            bad = [
                name
                for i, name in enumerate(ref.schema.names)
                if i >= got.num_columns or got.column(i).to_pylist() != ref.column(i).to_pylist()
            ]
            lines.append(f"{label}: " + (f"values differ in {bad}" if bad else "identical values"))
    return lines


# --------------------------------------------------------------------------- main


def load_corpus(args: argparse.Namespace) -> Corpus:
    if args.corpus is not None:
        framing = next((f for f in corpus.FRAMINGS if args.corpus.suffix == f".{f}"), "u32le")
        messages = corpus.read_corpus(args.corpus, framing)
        return Corpus.from_messages(messages[: args.n] if args.n else messages)
    return Corpus.from_messages(corpus.generate(args.n, args.seed))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="wirearrow vs alternatives: protobuf bytes -> Arrow, one thread, one corpus."
    )
    p.add_argument("--n", type=int, default=None, help="messages (default 50,000; 5,000 --quick)")
    p.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    p.add_argument(
        "--corpus", type=Path, default=None, help="read a corpus.py file instead of generating"
    )
    p.add_argument("--quick", action="store_true", help="small corpus, short runs: a smoke test")
    p.add_argument("--repeat", type=int, default=None, help="measurements per row (default 7)")
    p.add_argument(
        "--min-time", type=float, default=None, help="seconds per measurement (default 0.3)"
    )
    p.add_argument(
        "--max-time", type=float, default=None, help="seconds budget per row (default 20)"
    )
    p.add_argument("--only", default=None, help="regex: run rows whose method matches")
    p.add_argument(
        "--memory",
        choices=("all", "wirearrow", "none"),
        default=None,
        help="rows whose peak memory is probed in a subprocess (default all; wirearrow --quick)",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--probe-key", help=argparse.SUPPRESS)  # child side of measure_memory
    p.add_argument("--probe-corpus", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    quick = args.quick
    args.n = args.n if args.n is not None else (5_000 if quick else 50_000)
    args.repeat = args.repeat or (3 if quick else 7)
    args.min_time = args.min_time or (0.05 if quick else 0.3)
    args.max_time = args.max_time or (2.0 if quick else 20.0)
    args.memory = args.memory or ("wirearrow" if quick else "all")
    return args


def print_header(c: Corpus, args: argparse.Namespace) -> tuple[dict, dict]:
    """Machine, library versions, corpus and timing rules: the first lines of every run."""
    machine, versions = machine_info(), library_versions()
    print(f"machine: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} usable)")
    print(f"python:  {machine['python']} on {machine['platform']}")
    for name, v in versions.items():
        print(f"  {name:<11} {v}")
    print(
        f"corpus:  {c.n:,} BidRequestEvent messages, {c.payload_bytes / 1e6:.1f} MB, "
        f"mean {c.payload_bytes / max(c.n, 1):,.0f} B (seed {args.seed})"
    )
    print(
        f"timing:  median of {args.repeat} (best = min), >= {args.min_time} s each, "
        "single thread, gc off\n",
        flush=True,  # progress lines go to stderr; keep the two streams in order
    )
    return machine, versions


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.probe_key:
        print(json.dumps(_probe_memory(args.probe_key, args.probe_corpus)))
        return 0

    args.started = conditions.begin(quick=args.quick, busy_cores=1, compared=COMPARED)
    c = load_corpus(args)
    machine, versions = print_header(c, args)

    benchmarks = [b for b in all_benchmarks() if not args.only or re.search(args.only, b.method)]
    results: list[Result] = []
    # Outputs kept for check_against_reference (flat plans are small; nested ones are not).
    outputs: dict[tuple[str, str, str], Any] = {}
    for b in benchmarks:
        print(f"  running {b.key} ...", file=sys.stderr, flush=True)
        r, out = run_benchmark(b, c, args)
        results.append(r)
        if b.method in ("wirearrow", HANDWRITTEN):
            outputs[(b.method, b.plan, b.input_form)] = out
        del out

    base = _find(results, *BASELINE)
    for r in results:
        if r.msg_per_s is not None and base.msg_per_s:
            r.ratio = r.msg_per_s / base.msg_per_s

    if args.memory != "none":
        probe_path = corpus.DATA_DIR / f"bench-corpus-{os.getpid()}.arrow"
        c.write_ipc(probe_path)
        try:
            for b, r in zip(benchmarks, results, strict=True):
                if r.status != "ok" or (args.memory == "wirearrow" and b.method != "wirearrow"):
                    continue
                print(f"  memory {b.key} ...", file=sys.stderr, flush=True)
                probe = measure_memory(b, probe_path)
                if "error" in probe:
                    r.note = f"{r.note}; memory probe failed: {probe['error']}".lstrip("; ")
                    continue
                r.peak_extra_bytes = probe["peak_extra_bytes"]
                if r.output_bytes:
                    r.peak_ratio = r.peak_extra_bytes / r.output_bytes
        finally:
            probe_path.unlink(missing_ok=True)

    print(render_table(results))
    print()
    for i, r in enumerate(results, 1):
        if r.note:
            print(f"  [{i}] {r.method} {r.plan} ({r.input_form}): {r.note}")
    print()
    checks = check_against_reference(outputs)
    for line in checks:
        print(line)
    if checks:
        print()
    targets = target_lines(results)
    for line in targets:
        print(line)

    if args.json:
        write_json(
            args, (machine, versions), c, results, targets,
            benchmark="bench_flat", plans={k: list(v) for k, v in PLANS.items()}, checks=checks,
        )  # fmt: skip
    return 0


def write_json(
    args: argparse.Namespace,
    header: tuple[dict, dict],
    c: Corpus,
    results: list[Result],
    targets: list[str],
    **extra: object,
) -> None:
    """Every measurement of a run, with the machine, library versions and corpus."""
    machine, versions = header
    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "conditions": conditions.end(args.started),
        "machine": machine,
        "versions": versions,
        "corpus": {"messages": c.n, "payload_bytes": c.payload_bytes, "seed": args.seed},
        "timing": {"repeat": args.repeat, "min_time": args.min_time},
        "results": [asdict(r) for r in results],
        "targets": targets,
        **extra,
    }
    args.json.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
