"""GIL-held time per batch, one thread: what bounds two threads' scaling, measured without
a quiet machine.

A thread's batch runs partly with the GIL released (the decode, bit packing, takes) and
partly holding it (the Python around the core). Two threads on two cores overlap only the
released parts, so the held share s bounds the scaling near 2 / (1 + s) (Amdahl; two
threads can do somewhat better when one's held part overlaps the other's released part).
Wall-clock scaling needs two idle cores; this needs none: a shim preloaded into the
process (compiled here with ``cc`` into ``benchmarks/data/``) times, in thread CPU time,
every stretch between ``PyEval_SaveThread`` and ``PyEval_RestoreThread`` called from an
extension module (Cython's and pyarrow's ``nogil``), and the rest of a batch's CPU time is
the GIL-held time. Other load still slows both (caches), so compare builds in one session.

Then the same batches on two threads of one ``Transcoder``: the shim also times, in wall
time, every ``PyEval_RestoreThread`` (a thread taking the GIL back after a released
stretch, blocked while the other thread holds it). That wait is what the GIL costs two
threads: the ``wait`` column gives it per batch and as a share of a thread's time per
batch (two threads, each half the batches). Time lost to a slower machine when both of its
CPUs run is not in it; ``bench_threads.py`` measures that against its references.

    python benchmarks/gil_held.py                          # nested, flat-15, flat-4; 8k
    python benchmarks/gil_held.py --plans nested --batch 32768 --repeat 40
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import corpus

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>
static __thread int64_t released, since, calls;
static _Atomic int64_t waited;  /* summed over threads */
static void* (*save)(void);
static void (*restore)(void*);
static int64_t cpu(void) {
    struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
void* PyEval_SaveThread(void) {
    if (!save) save = dlsym(RTLD_NEXT, "PyEval_SaveThread");
    void* s = save(); since = cpu(); calls++; return s;
}
static int64_t wall(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
void PyEval_RestoreThread(void* s) {
    if (!restore) restore = dlsym(RTLD_NEXT, "PyEval_RestoreThread");
    released += cpu() - since;
    int64_t t0 = wall(); restore(s); waited += wall() - t0;
}
int64_t gil_released_ns(void) { return released; }
int64_t gil_releases(void) { return calls; }
int64_t gil_waited_ns(void) { return waited; }
"""


def shim() -> Path:
    out = corpus.REPO_ROOT / "benchmarks" / "data" / "gil_shim.so"
    src = out.with_suffix(".c")
    # Rebuilt when the shim's source changed (an older shim lacks the wait counters).
    if not out.exists() or not src.exists() or src.read_text() != SHIM:
        out.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(SHIM)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(out), str(src), "-ldl"],
                       check=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", nargs="+", default=["nested", "flat-15", "flat-4"])
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=25, help="passes over 4 batches")
    args = parser.parse_args(argv)
    lib = shim()
    if str(lib) not in os.environ.get("LD_PRELOAD", ""):
        env = {**os.environ, "LD_PRELOAD": f"{lib} {os.environ.get('LD_PRELOAD', '')}".strip()}
        return subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env).returncode
    import pyarrow as pa

    from bench_flat import import_wirearrow
    from bench_threads import make_transcoder

    wa = import_wirearrow()
    # PyDLL: the counters are read holding the GIL (CDLL would release it around each
    # read, and the shim would count those releases as the batch's).
    meter = ctypes.PyDLL(None)
    for counter in ("gil_released_ns", "gil_releases", "gil_waited_ns"):
        getattr(meter, counter).restype = ctypes.c_int64
    array = pa.array(corpus.generate(4 * args.batch, 0), pa.binary())
    batches = [array.slice(i * args.batch, args.batch) for i in range(4)]
    print(f"wirearrow {wa.__file__}; batches of {args.batch:,} records; median of "
          f"{4 * args.repeat} batches (min in brackets)")
    print(f"{'plan':<9} {'CPU ms':>13} {'GIL held ms':>13} {'held':>6} {'releases':>8} "
          f"{'2/(1+s)':>8}  {'2 threads: wait ms':>18} {'of time':>7}")
    for plan in args.plans:
        tc = make_transcoder(wa, plan)
        for b in batches:  # warm: plan caches, learned sizes, the buffer pool
            tc.transcode(b)
        cpu, held, calls = [], [], 0
        for _ in range(args.repeat):
            for b in batches:
                r0, c0, t0 = meter.gil_released_ns(), meter.gil_releases(), time.thread_time_ns()
                out = tc.transcode(b)
                del out  # dropping the batch is part of a batch's cost
                t1, r1 = time.thread_time_ns(), meter.gil_released_ns()
                cpu.append(t1 - t0)
                held.append((t1 - t0) - (r1 - r0))
                calls = meter.gil_releases() - c0
        cpu.sort()
        held.sort()
        c, h = cpu[len(cpu) // 2] / 1e6, held[len(held) // 2] / 1e6
        wait, share = gil_wait(tc, batches * args.repeat, meter)
        print(f"{plan:<9} {c:6.2f} [{cpu[0] / 1e6:5.2f}] {h:6.3f} [{held[0] / 1e6:5.3f}] "
              f"{h / c:6.1%} {calls:8d} {2 / (1 + h / c):7.2f}x  {wait:18.3f} {share:7.1%}")
    return 0


def gil_wait(tc: Any, todo: list[Any], meter: Any) -> tuple[float, float]:
    """Two threads transcoding half of `todo` each: the wall time spent taking the GIL
    back, in ms per batch, and as a share of a thread's time per batch (2 * wall / batches:
    each thread does half of them)."""
    from bench_threads import run_threads, transcode_all

    half = len(todo) // 2
    w0 = meter.gil_waited_ns()
    elapsed = run_threads([transcode_all(tc, todo[:half]), transcode_all(tc, todo[half:])])
    waited = (meter.gil_waited_ns() - w0) / len(todo) / 1e6
    return waited, waited / (2 * elapsed * 1e3 / len(todo))


if __name__ == "__main__":
    raise SystemExit(main())
