"""Take the full benchmark runs and publish them: benchmarks/results/figures.json, the docs
page docs/benchmark-figures.md (with its PNGs) and the README's performance lines.

    python benchmarks/publish.py                 # every benchmark, full runs (~1 h 15 min)
    python benchmarks/publish.py --dry-run       # the commands it would run, nothing else
    python benchmarks/publish.py --from out/bench  # publish runs already taken (their JSON)

Run it on a quiet machine (benchmarks/README.md, "Publishing the figures"), from a checkout
whose wirearrow is built in place, then commit what it wrote. Each script runs as its own
process, one after the other, with ``--json out/bench/NAME.json``; before each one it waits
(up to ``--wait`` minutes) for the 1-minute load average to fall to what
``conditions.refusals`` allows, so that one run's own load has died down before the next
starts. Every script records its conditions (date, machine, versions, load before and
after) in its JSON; a run taken with ``--quick`` or above the allowed load is refused, and
then nothing is published (figures.json, the page and the README stay as they were).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import conditions
import plot

HERE = Path(__file__).resolve().parent

# name -> the script's arguments for its full run (its defaults are the full run).
BENCHMARKS: dict[str, list[str]] = {
    "flat": ["bench_flat.py"],
    "nested": ["bench_nested.py"],
    "encode": ["bench_encode.py"],
    "json": ["bench_json.py"],
    "threads": ["bench_threads.py"],
    "ray": ["bench_ray.py"],
    "beam": ["bench_beam.py"],
}


def wait_for_quiet(minutes: float) -> list[float]:
    """Wait until the 1-minute load allows a run (at most ``minutes``); the load then."""
    limit, _ = conditions.allowed_load(
        {"machine": conditions.machine(), "busy_cores": 0}
    )  # fmt: skip
    deadline = time.monotonic() + minutes * 60
    while True:
        load = conditions.load_average()
        if load[0] <= limit or time.monotonic() >= deadline:
            return load
        print(f"  load {load[0]:.2f} > {limit:.2f}: waiting ...", file=sys.stderr, flush=True)
        time.sleep(15)


def take(names: Sequence[str], out: Path, wait: float, dry_run: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        cmd = [sys.executable, str(HERE / BENCHMARKS[name][0]), *BENCHMARKS[name][1:],
               "--json", str(out / f"{name}.json")]  # fmt: skip
        print("$ " + " ".join(cmd), flush=True)
        if dry_run:
            continue
        load = wait_for_quiet(wait)
        print(f"  load before: {load}", file=sys.stderr, flush=True)
        started = time.monotonic()
        subprocess.run(cmd, check=True, cwd=HERE.parent)
        print(f"  {name}: {(time.monotonic() - started) / 60:.1f} min", file=sys.stderr)


def collect(names: Sequence[str], out: Path, previous: dict | None) -> dict:
    """figures.json's content: the runs' JSON in ``out`` over the previously published runs."""
    runs = dict((previous or {}).get("runs") or {})
    for name in names:
        data = json.loads((out / f"{name}.json").read_text())
        runs[name] = data
    return {
        "written_by": "python benchmarks/publish.py (benchmarks/README.md: Publishing the figures)",
        "thresholds": conditions.thresholds(),
        "runs": runs,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="source", type=Path, default=None,
                   help="publish the NAME.json runs in this directory instead of running")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("out/bench"), help="where the runs' JSON go")
    p.add_argument("--only", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS),
                   help="these benchmarks only (the others stay as published)")  # fmt: skip
    p.add_argument("--wait", type=float, default=20.0,
                   help="minutes to wait for a quiet machine before each run (default 20)")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    p.add_argument("--figures", type=Path, default=plot.FIGURES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.out = args.out.resolve()  # the scripts run from the checkout's root
    source = args.source or args.out
    if args.source is None:
        take(args.only, args.out, args.wait, args.dry_run)
    if args.dry_run:
        return 0
    previous = args.figures.read_text() if args.figures.exists() else None
    figures = collect(args.only, source, json.loads(previous) if previous else None)
    refused = plot.refusals(figures)
    if refused:
        for name, reasons in refused.items():
            print(f"not published: {name}: {'; '.join(reasons)}", file=sys.stderr)
        print(f"(the runs are in {source}; nothing was written)", file=sys.stderr)
        return 2
    args.figures.parent.mkdir(parents=True, exist_ok=True)
    args.figures.write_text(json.dumps(figures, indent=1) + "\n")
    try:
        written = plot.publish(args.figures)
    except Exception:
        if previous is None:
            args.figures.unlink()
        else:
            args.figures.write_text(previous)
        raise
    for path in [args.figures, *written]:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
