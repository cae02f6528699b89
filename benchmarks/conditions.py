"""The conditions a benchmark run was taken under, and whether its figures may be published.

Every benchmark script's ``--json`` output carries ``"conditions"``: the date, the machine
(CPU model, cores, memory), the versions of wirearrow, pyarrow, protobuf, Ray, Beam and of
the alternatives it compares, the code's commit, whether it was a ``--quick`` run, how many
cores the run itself keeps busy, the load average (1/5/15 min) just before and just
after it, and the CPU the rest of the machine used while it ran (``others_cores``: the
CPU time of the processes of every other session, per second of the run: the run's own
session, Ray's processes included, is not counted). ``plot.py`` and ``publish.py`` refuse to publish a run that ``refusals`` objects
to: on this shared 2-core VM a neighbour's build can halve a row and not the next one, and
a ``--quick`` run is a smoke test (small corpus, short timings), so neither gives figures a
visitor should compare products by. The thresholds are defined here once and stated in
benchmarks/README.md ("Publishing the figures").
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "QUIET_LOAD_FLOOR",
    "QUIET_LOAD_PER_CORE",
    "allowed_load",
    "begin",
    "end",
    "load_average",
    "refusals",
    "thresholds",
]

# What others may add to the 1-minute load average, per core, before or during a published
# run (never less than 0.5 in all: an idle VM's own daemons). 0.25 per core is 0.5 on the
# 2-core VM: a neighbour busy for a quarter of the time at most; a build or a test run of
# someone else's (one core or more) is refused.
QUIET_LOAD_PER_CORE = 0.25
QUIET_LOAD_FLOOR = 0.5

# Always recorded: what the product is built on and runs in.
CORE_DISTRIBUTIONS = ("wirearrow", "pyarrow", "protobuf", "ray", "apache-beam")


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded to 2 decimals."""
    return [round(x, 2) for x in os.getloadavg()]


def _memory_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        return None
    return round(kib / 1024**2, 1)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """CPU model, cores (all and usable by this process), memory, Python, OS."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gb": _memory_gb(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
    }


def versions(compared: Iterable[str] = ()) -> dict[str, str]:
    """Installed versions (package metadata, nothing imported) of the core and ``compared``."""
    out = {}
    for dist in dict.fromkeys([*CORE_DISTRIBUTIONS, *compared]):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}{' (modified)' if dirty else ''}"


def _others_cpu() -> tuple[dict[int, float], float] | None:
    """CPU seconds so far of every process outside this run's session, and the clock.

    A load average cannot tell a run's own processes from a neighbour's: Ray's job keeps its
    GCS, raylet and dashboard in the 1-minute load after the run, and its workers' time
    never reaches this process's children's (Ray's shutdown leaves them to others to
    reap). A run is its session (the benchmark scripts, what they start, Ray's processes):
    what processes of other sessions used -- their own time and their reaped children's,
    except init's, which reaps orphans of every session -- is what others used.
    """
    try:
        hz = os.sysconf("SC_CLK_TCK")
        ours = os.getsid(0)
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except (OSError, ValueError, AttributeError):
        return None
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) == ours:  # (fields from the state on: [3] is the session)
            continue
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        if pid != 1:
            ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
        out[pid] = ticks / hz
    return out, time.monotonic()


def begin(*, quick: bool, busy_cores: float, compared: Iterable[str] = ()) -> dict[str, Any]:
    """The conditions at the start of a run: call it before the first measurement.

    ``busy_cores``: how many cores the run itself keeps busy (1 for a single-threaded
    script; Ray's and Beam's jobs and the thread benchmark use every core), which the load
    after the run includes and ``refusals`` allows for.
    """
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "date": now.strftime("%Y-%m-%d %H:%M UTC"),
        "started": now.isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(compared),
        "commit": _commit(),
        "quick": bool(quick),
        "busy_cores": busy_cores,
        "load_before": load_average(),
        "_cpu": _others_cpu(),
    }


def end(started: dict[str, Any]) -> dict[str, Any]:
    """``started`` with the load after the run and the time it took: call it last."""
    began = datetime.datetime.fromisoformat(started["started"])
    took = datetime.datetime.now(datetime.timezone.utc) - began
    out = {k: v for k, v in started.items() if k != "_cpu"}
    first, last = started.get("_cpu"), _others_cpu()
    if first and last and last[1] > first[1]:
        before = first[0]
        others = sum(cpu - before.get(pid, 0.0) for pid, cpu in last[0].items())
        out["others_cores"] = round(max(0.0, others) / (last[1] - first[1]), 2)
    return {**out, "load_after": load_average(), "seconds": round(took.total_seconds())}


def allowed_load(conditions: dict[str, Any]) -> tuple[float, float]:
    """The highest 1-minute load average allowed before and after the run."""
    cores = (conditions.get("machine") or {}).get("cores") or 1
    others = max(QUIET_LOAD_FLOOR, QUIET_LOAD_PER_CORE * cores)
    return others, others + float(conditions.get("busy_cores") or 0)


def thresholds() -> dict[str, float]:
    """The rule, as figures.json records it next to the runs it admitted."""
    return {"quiet_load_per_core": QUIET_LOAD_PER_CORE, "quiet_load_floor": QUIET_LOAD_FLOOR}


def refusals(conditions: dict[str, Any] | None) -> list[str]:
    """Why a run's figures may not be published; empty when they may."""
    if not conditions:
        return ["no conditions recorded (run the benchmark with this tree's scripts)"]
    out = []
    if conditions.get("quick") is not False:
        out.append("a --quick run (a smoke test: small corpus, short timings)")
    before, after = allowed_load(conditions)
    others = conditions.get("others_cores")
    # Where the CPU others used during the run was measured, it replaces the load after
    # the run, which also counts the run's own lingering processes (Ray's daemons).
    checks = (("before", before),) if others is not None else (("before", before), ("after", after))
    for when, limit in checks:
        load = conditions.get(f"load_{when}")
        if not load:
            out.append(f"no load average recorded {when} the run")
        elif load[0] > limit:
            out.append(f"1-minute load {load[0]:.2f} {when} the run, above {limit:.2f}")
    if others is not None and others > before:
        out.append(f"other processes used {others:.2f} cores during the run, above {before:.2f}")
    return out
