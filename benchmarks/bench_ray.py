"""The end-to-end Ray Data pipeline -- files -> transcode -> Parquet -- against the alternatives.

Every row is the same job on the same corpus file, in this one run: read the file of
length-delimited ``BidRequestEvent`` records with ``wirearrow.ray.read_delimited``, turn
the records into rows in a ``map_batches`` step, write the rows with
``Dataset.write_parquet``. Only the map step differs:

* ``identity``: returns its input (the raw bytes are written): the engine's floor, what
  reading, moving and writing the data costs in Ray with no work at all;
* ``wirearrow``: ``wirearrow.ray.transcode`` with ``transforms/openrtb_flat.yaml``
  (16 columns, nested fan-out, expressions);
* ``DIY protobuf``: what a Ray user writes today -- parse each record with the protobuf
  runtime and build the same 16 columns in Python lists (checked equal to wirearrow's);
* ``pybufarrow``: ``append_denorm`` per record + ``flush_denorm`` per batch, with a
  HyperType, on the plan's 13 path columns (it cannot compute the expressions, and
  cross-joins the nested fan-out: more rows, less work per row).

Each runs on Ray tasks (a function; for wirearrow, ``transcode``'s default
``compute="tasks"``) and on fixed pools of 1 and 2 actors (a callable class;
``compute="actors"``), sized by ``wirearrow.ray.pool_size``: on 2 CPUs two actors get 0.5
CPU each, as a pool holding every CPU would hang the job. Each (method, pool) pair runs in
a fresh local Ray (``ray.init(num_cpus=--cpus)``): one cold job (worker processes start,
modules import), then ``--reps`` warm jobs; the warm median is the headline.

Ray Data's per-operator resource reservation is left at Ray's default (on) for the other
rows, and ``transcode`` sets its own (off on <= 4 CPUs); ``--reservation on|off`` forces
one setting on every row. Where the time goes comes from Ray's task timeline: busy seconds
of the read tasks, the map step and the write tasks; ``idle`` is the CPU-seconds of the
wall time no stage used (scheduling, process start-up, waiting).

Run ``python benchmarks/bench_ray.py --help``; ``--quick`` is a smoke run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pyarrow as pa

import conditions
import corpus

REPO = corpus.REPO_ROOT
PLAN = REPO / "transforms" / "openrtb_flat.yaml"
FRAMING = "u32le"
BATCH_SIZE = 16_384
# The path columns of openrtb_flat.yaml that pybufarrow can read (it rejects has() on a
# message, and ext["gdpr"] breaks its batch): the same leaves, without the expressions.
PYBUFARROW_COLUMNS = [
    "id",
    "timestamp",
    "auction_type",
    "site.domain",
    "site.publisher.id",
    "device.geo.country",
    "imp[*].id",
    "imp[*].bidfloor",
    "imp[*].bidfloorcur",
    "imp[*].banner.w",
    "imp[*].banner.h",
    "imp[*].pmp.deals[*].id",
    "imp[*].pmp.deals[*].bidfloor",
]


# --------------------------------------------------------------------------- map steps
# Callable classes for map_batches(batch_format="pyarrow"): the one-off work (compiling a
# schema) happens once per actor, in __init__, for every method alike.


class Identity:
    """The floor: no work at all; the records themselves are written."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        return batch


FLAT_SCHEMA = pa.schema(
    [
        ("request_id", pa.string()),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("auction_type", pa.int32()),
        ("auction_type_name", pa.string()),
        ("domain", pa.string()),
        ("publisher_id", pa.string()),
        ("country", pa.string()),
        ("hour", pa.int64()),
        ("gdpr", pa.string()),
        ("total_floor", pa.float64()),
        ("imp_id", pa.string()),
        ("format", pa.string()),
        ("currency", pa.string()),
        ("banner_size", pa.string()),
        ("deal_id", pa.string()),
        ("floor", pa.float64()),
    ]
)


class DIYProtobuf:
    """openrtb_flat.yaml by hand: protobuf runtime parse, Python lists, pa.table.

    The plan's semantics, spelled out: one row per deal next to its impression (an
    impression without deals, a request without impressions: one row of nulls); absent
    sub-messages give nulls; ``coalesce``/``default`` skip nulls and zero values;
    ``concat`` renders a null as ''.
    """

    def __init__(self) -> None:
        _, cls = corpus.load_schema()
        self.from_string = cls.FromString
        enum = cls.DESCRIPTOR.fields_by_name["auction_type"].enum_type
        self.enum_names: dict[int, str] = {}
        for value in enum.values:
            self.enum_names.setdefault(value.number, value.name)

    def __call__(self, batch: pa.Table) -> pa.Table:
        cols: list[list[Any]] = [[] for _ in FLAT_SCHEMA]
        per_record, per_row = cols[:10], cols[10:]
        from_string, names = self.from_string, self.enum_names
        for raw in batch.column("value").to_pylist():
            m = from_string(raw)
            has = m.HasField
            ts = None
            hour = None
            if has("timestamp"):
                ts = m.timestamp.seconds * 1_000_000 + m.timestamp.nanos // 1000
                hour = (m.timestamp.seconds // 3600) % 24
            site = m.site if has("site") else None
            domain = site.domain if site is not None else None
            publisher = (
                site.publisher.id if site is not None and site.HasField("publisher") else None
            )
            device = m.device if has("device") else None
            country = device.geo.country if device is not None and device.HasField("geo") else None
            gdpr = m.ext.get("gdpr")
            imps = m.imp
            total = sum(imp.bidfloor for imp in imps) if imps else None
            # (imp id, format, currency, banner size, deal id, floor) per row
            rows: list[tuple[Any, ...]] = []
            for imp in imps:
                fmt = "video" if imp.HasField("video") else "banner"
                currency = imp.bidfloorcur or "USD"
                size = f"{imp.banner.w}x{imp.banner.h}" if imp.HasField("banner") else "x"
                deals = imp.pmp.deals  # an absent pmp reads as no deals
                if not deals:
                    rows.append((imp.id, fmt, currency, size, None, imp.bidfloor or None))
                for d in deals:
                    rows.append(
                        (imp.id, fmt, currency, size, d.id, d.bidfloor or imp.bidfloor or None)
                    )
            if not rows:
                rows.append((None, "banner", "USD", "x", None, None))
            at = m.auction_type
            record = (m.id, ts, at, names.get(at), domain, publisher, country, hour, gdpr, total)
            for row in rows:
                for col, value in zip(per_record, record, strict=True):
                    col.append(value)
                for col, value in zip(per_row, row, strict=True):
                    col.append(value)
        return pa.table(cols, schema=FLAT_SCHEMA)


class Pybufarrow:
    """pybufarrow's denormalizer with a HyperType: one ctypes call per record."""

    def __init__(self) -> None:
        import pybufarrow

        args = (corpus.PROTO_FILE.name, corpus.MESSAGE_NAME, [str(corpus.SCHEMA_DIR)])
        self.tc = pybufarrow.Transcoder.from_proto_file(
            *args, denorm_columns=PYBUFARROW_COLUMNS, hyper_type=pybufarrow.HyperType(*args)
        )

    def __call__(self, batch: pa.Table) -> pa.Table:
        append = self.tc.append_denorm
        for raw in batch.column("value").to_pylist():
            append(raw)
        # Its columns are named by their last field ("id" four times): name them by path.
        return pa.Table.from_batches([self.tc.flush_denorm()]).rename_columns(PYBUFARROW_COLUMNS)


# --------------------------------------------------------------------------- jobs


@dataclass
class Run:
    wall: float
    rows: int
    busy: dict[str, float] = field(default_factory=dict)


@dataclass
class Result:
    method: str
    actors: int
    num_cpus: float = 0.0
    cold: Run | None = None
    warm: list[Run] = field(default_factory=list)
    status: str = "ok"
    note: str = ""

    @property
    def warm_wall(self) -> float | None:
        return statistics.median(r.wall for r in self.warm) if self.warm else None

    @property
    def warm_best(self) -> float | None:
        return min(r.wall for r in self.warm) if self.warm else None

    def busy(self, stage: str) -> float | None:
        if not self.warm:
            return None
        return statistics.median(r.busy.get(stage, 0.0) for r in self.warm)


CLASSES: dict[str, type] = {
    "identity": Identity,
    "DIY protobuf": DIYProtobuf,
    "pybufarrow": Pybufarrow,
}
_TASK_INSTANCES: dict[str, Any] = {}


def task_fn(batch: pa.Table, method: str) -> pa.Table:
    """A method's map step as a plain function (Ray tasks): built once per worker process,
    as a user's module-level setup would be."""
    fn = _TASK_INSTANCES.get(method)
    if fn is None:
        fn = _TASK_INSTANCES[method] = CLASSES[method]()
    return fn(batch)


def job(
    method: str, path: Path, actors: int, cpus: float, reservation: bool | None, out: Path
) -> int:
    """Run one job (read -> map -> write Parquet); returns the rows written.

    ``actors``: 0 for Ray tasks (Ray's default compute for a function), -1 for tasks one
    at a time, else the size of a fixed actor pool.
    """
    import ray

    import wirearrow.ray as war

    ds = war.read_delimited(str(path), framing=FRAMING)
    common: dict[str, Any] = {
        "batch_format": "pyarrow",
        "zero_copy_batch": True,
        "batch_size": BATCH_SIZE,
    }
    if method == "wirearrow":
        rows = war.transcode(
            ds,
            str(PLAN),
            compute="actors" if actors > 0 else "tasks",
            concurrency=abs(actors) or None,
            batch_size=BATCH_SIZE,
            resource_reservation=reservation,
        ).rows
    elif actors <= 0:
        if actors < 0:
            common["compute"] = ray.data.TaskPoolStrategy(size=1)
        rows = ds.map_batches(task_fn, fn_kwargs={"method": method}, **common)
    else:
        pool = war.pool_size(cpus, concurrency=actors)  # the same pool as transcode()'s
        rows = ds.map_batches(
            CLASSES[method], compute=pool.compute(), num_cpus=pool.num_cpus, **common
        )
    shutil.rmtree(out, ignore_errors=True)
    rows.write_parquet(str(out))
    return sum(f.metadata.num_rows for f in _parquet_files(out))


def _parquet_files(out: Path) -> list[Any]:
    import pyarrow.parquet as pq

    return [pq.ParquetFile(p) for p in sorted(out.glob("*.parquet"))]


def busy_seconds(events: list[dict[str, Any]], start: float, end: float) -> dict[str, float]:
    """Busy seconds per stage in [start, end] (epoch s) from ray.timeline() events."""
    busy = {"read": 0.0, "map": 0.0, "actor start": 0.0, "write": 0.0}
    for e in events:
        if e.get("ph") != "X":
            continue
        t0 = e["ts"] / 1e6
        if t0 < start or t0 > end:
            continue
        cat = str(e.get("cat", ""))
        duration = e["dur"] / 1e6
        if cat.startswith("task::MapBatches(") or (cat.startswith("task::Read") and "->Map" in cat):
            # A task map step, fused by Ray with the read or the write: counted as map.
            busy["map"] += duration
        elif cat.startswith("task::Read"):
            busy["read"] += duration
        elif cat.startswith("task::MapWorker(") and cat.endswith(".submit"):
            busy["map"] += duration
        elif cat.startswith("task::MapWorker(") and cat.endswith(".__init__"):
            busy["actor start"] += duration
        elif cat.startswith("task::Write"):
            busy["write"] += duration
    return busy


def run_config(method: str, actors: int, args: argparse.Namespace, path: Path) -> Result:
    import ray

    import wirearrow.ray as war

    result = Result(method, actors)
    out = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        if args.reserve is not None:
            ctx.op_resource_reservation_enabled = args.reserve
        result.num_cpus = (
            war.pool_size(args.cpus, concurrency=actors).num_cpus if actors > 0 else 1.0
        )
        windows = []
        for i in range(1 + args.reps):
            t0 = time.time()
            rows = job(method, path, actors, args.cpus, args.reserve, out / f"run{i}")
            t1 = time.time()
            run = Run(t1 - t0, rows)
            windows.append((t0, t1, run))
            if i == 0:
                result.cold = run
            else:
                result.warm.append(run)
            print(f"    {method}, pool {actors}, run {i}: {t1 - t0:.2f} s", file=sys.stderr)
        time.sleep(1.5)  # task events reach the GCS about once a second
        try:
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                ray.timeline(f.name)
                events = json.loads(Path(f.name).read_text())
            for t0, t1, run in windows:
                run.busy = busy_seconds(events, t0, t1)
        except Exception as err:  # the breakdown is a bonus; the timings stand without it
            result.note = f"no timeline: {err}"
    except Exception as err:
        result.status = f"failed: {type(err).__name__}: {str(err).splitlines()[0][:120]}"
    finally:
        ray.shutdown()
        shutil.rmtree(out, ignore_errors=True)
    return result


# --------------------------------------------------------------------------- checks


def check_equal(n: int) -> str:
    """DIY protobuf vs wirearrow on the first n records, in-process: the same rows?"""
    import wirearrow as wa

    messages = corpus.generate(n, seed=0)
    table = pa.table({"value": pa.array(messages, pa.binary())})
    ours = pa.Table.from_batches([wa.load_plan(PLAN).transcoder().transcode(table["value"])])
    diy = DIYProtobuf()(table)
    same = ours.schema.equals(diy.schema) and sorted(map(repr, ours.to_pylist())) == sorted(
        map(repr, diy.to_pylist())
    )
    verdict = "identical rows" if same else "ROWS DIFFER"
    return f"DIY protobuf vs wirearrow on {n:,} records: {verdict} ({ours.num_rows:,} rows)"


# --------------------------------------------------------------------------- report


def _s(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def render(results: Sequence[Result], n: int, cpus: float) -> str:
    header = (
        "method", "pool", "cpu/worker", "cold s", "warm s", "best s", "warm rec/s", "rows",
        "read", "map", "write", "idle", "vs floor",
    )  # fmt: skip
    floor = {r.actors: r.warm_wall for r in results if r.method == "identity"}
    label = {0: "tasks", -1: "1 task"}
    lines = []
    for r in results:
        if r.status != "ok" or r.warm_wall is None:
            lines.append(
                (r.method, label.get(r.actors, str(r.actors)), _s(r.num_cpus, 2), r.status)
            )
            continue
        wall = r.warm_wall
        busy = {k: r.busy(k) or 0.0 for k in ("read", "map", "actor start", "write")}
        idle = wall * cpus - sum(busy.values())
        base = floor.get(r.actors)
        lines.append(
            (
                r.method,
                label.get(r.actors, str(r.actors)),
                _s(r.num_cpus, 2),
                _s(r.cold.wall if r.cold else None),
                _s(wall),
                _s(r.warm_best),
                f"{n / wall:,.0f}",
                f"{r.warm[0].rows:,}",
                _s(busy["read"]),
                _s(busy["map"] + busy["actor start"]),
                _s(busy["write"]),
                _s(max(idle, 0.0)),
                f"{wall / base:.2f}x" if base else "-",
            )
        )
    full = [header, *(x for x in lines if len(x) == len(header))]
    widths = [max(len(x[i]) for x in full) for i in range(len(header))]

    def fmt(row: tuple[str, ...]) -> str:
        cells = [
            row[i].ljust(widths[i]) if i == 0 else row[i].rjust(widths[i])
            for i in range(min(len(row), len(header)))
        ]
        if len(row) < len(header):
            cells = [*cells[:3], row[3]]
        return "  ".join(cells).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), sep, *map(fmt, lines)])


def targets(results: Sequence[Result], n: int) -> list[str]:
    def find(method: str, actors: int) -> Result | None:
        for r in results:
            if (r.method, r.actors) == (method, actors) and r.warm_wall is not None:
                return r
        return None

    def best(method: str) -> Result | None:
        found = [r for r in results if r.method == method and r.warm_wall is not None]
        return min(found, key=lambda r: r.warm_wall or 0.0) if found else None

    def pool(r: Result) -> str:
        return {0: "tasks", -1: "1 task at a time"}.get(r.actors, f"{r.actors} actor(s)")

    out = []
    wa_best, diy_best = best("wirearrow"), best("DIY protobuf")
    if wa_best and diy_best:
        ratio = (diy_best.warm_wall or 0) / (wa_best.warm_wall or 1)
        out.append(
            f"records/s vs DIY protobuf (warm, best pool of each): {ratio:.1f}x "
            f"(wirearrow {n / wa_best.warm_wall:,.0f}/s on {pool(wa_best)}, DIY "
            f"{n / diy_best.warm_wall:,.0f}/s on {pool(diy_best)}) (target >= 3x)"
        )
    for actors in (0, 1, 2):
        w, d, f = find("wirearrow", actors), find("DIY protobuf", actors), find("identity", actors)
        parts = []
        if w and d:
            parts.append(f"vs DIY {(d.warm_wall or 0) / (w.warm_wall or 1):.1f}x")
        if w and f:
            parts.append(
                f"wall / identity floor {(w.warm_wall or 0) / (f.warm_wall or 1):.2f}x "
                f"(best vs best {(w.warm_best or 0) / (f.warm_best or 1):.2f}x; target <= 1.3x)"
            )
        if parts:
            out.append(f"{'tasks' if not actors else f'{actors} actor(s)'}: " + "; ".join(parts))
    for method in ("identity", "wirearrow", "DIY protobuf"):
        one, two = find(method, 1), find(method, 2)
        if one and two:
            gain = (one.warm_wall or 0) / (two.warm_wall or 1)
            out.append(f"2nd actor, {method}: {gain:.2f}x the 1-actor speed")
        one, all_ = find(method, -1), find(method, 0)
        if one and all_:
            gain = (one.warm_wall or 0) / (all_.warm_wall or 1)
            out.append(f"tasks in parallel vs 1 at a time, {method}: {gain:.2f}x")
    return out


def library_versions() -> dict[str, str]:
    versions = {}
    for dist in ("ray", "pyarrow", "protobuf", "pybufarrow", "wirearrow"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


# --------------------------------------------------------------------------- main

METHODS = ("identity", "wirearrow", "DIY protobuf", "pybufarrow")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="records (default 200,000; --quick 20,000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a smoke run: small corpus, 1 warm job")
    p.add_argument("--reps", type=int, default=None, help="warm jobs per row (default 3)")
    p.add_argument(
        "--cpus", type=float, default=None, help="ray.init(num_cpus=...) (default: all cores)"
    )
    p.add_argument(
        "--pools",
        default="tasks,1,2",
        help="tasks (as many as Ray runs), tasks1 (one at a time), actor pool sizes "
        "(default tasks,1,2)",
    )
    p.add_argument("--only", default=None, help="regex: run the methods that match")
    p.add_argument(
        "--reservation",
        choices=("default", "on", "off"),
        default="default",
        help="DataContext.op_resource_reservation_enabled: default leaves Ray's (on) to the "
        "other rows and lets transcode() choose its own (off on <= 4 CPUs); on/off: every row",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    args.n = args.n or (20_000 if args.quick else 200_000)
    args.reps = args.reps or (1 if args.quick else 3)
    args.cpus = args.cpus or float(os.cpu_count() or 1)
    args.reserve = {"default": None, "on": True, "off": False}[args.reservation]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = conditions.begin(quick=args.quick, busy_cores=args.cpus, compared=("pybufarrow",))
    # Ray's workers start from the raylet's environment: let them import corpus (DIY rows).
    bench_dir = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [bench_dir, *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import logging

    logging.getLogger("ray").setLevel(logging.ERROR)

    path = corpus.DATA_DIR / f"ray-bench-{args.n}-s{args.seed}.{FRAMING}"
    if not path.exists():
        print(f"  writing the corpus to {path} ...", file=sys.stderr)
        corpus.write_corpus(path, args.n, seed=args.seed, framing=FRAMING)
    size = path.stat().st_size
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"python:  {platform.python_version()}; " + ", ".join(
        f"{k} {v}" for k, v in library_versions().items()
    ))  # fmt: skip
    print(f"corpus:  {args.n:,} BidRequestEvent records, {size / 1e6:.1f} MB ({path.name})")
    print(
        f"job:     read_delimited -> map_batches (batch {BATCH_SIZE:,}) -> write_parquet, "
        f"ray.init(num_cpus={args.cpus:g}), resource reservation {args.reservation}; "
        f"1 cold + {args.reps} warm jobs per row, fresh Ray per row\n",
        flush=True,
    )

    names = {"tasks": 0, "tasks1": -1}
    pools = [names[p] if p in names else int(p) for p in args.pools.split(",")]
    results = []
    for method in METHODS:
        if args.only and not re.search(args.only, method):
            continue
        if method == "pybufarrow":
            try:
                import pybufarrow  # noqa: F401
            except ImportError as err:
                results.append(Result(method, 1, status=f"not available ({err})"))
                continue
        for actors in pools:
            print(f"  running {method}, pool {actors} ...", file=sys.stderr, flush=True)
            results.append(run_config(method, actors, args, path))

    print(render(results, args.n, args.cpus))
    print(
        "\n  pool: Ray tasks, or a fixed pool of n actors. read / map / write: busy seconds of "
        "the read tasks, the map step\n  (actors: incl. their start; tasks: Ray fuses the map "
        "step with the write, counted as map) and the write tasks;\n  idle: CPU-seconds of "
        "the wall time no stage used (Ray scheduling, process start-up, waiting)."
    )
    for r in results:
        if r.note:
            print(f"  {r.method}, pool {r.actors}: {r.note}")
    print()
    if not args.only or re.search(args.only, "DIY protobuf"):
        print(check_equal(min(args.n, 5_000)))
    print(
        "pybufarrow computes 13 path columns, no expressions, and cross-joins the nested "
        "fan-out (more rows)."
    )
    print()
    lines = targets(results, args.n)
    for line in lines:
        print(line)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "benchmark": "bench_ray",
                    "conditions": conditions.end(started),
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "results": [asdict(r) for r in results],
                    "targets": lines,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
