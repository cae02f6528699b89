"""Soak: millions of records through the Ray job while worker processes are killed.

Not a test (not in CI): it runs for minutes. Builds a corpus of ``--n`` records, each with
its own id (``rec-<i>``, protobuf field 1), ``--bad`` of them corrupt; runs
``wirearrow.ray.transcode`` with ``on_error="dead_letter"`` and ``write_parquet``; while it
runs, SIGKILLs a transcoding worker process (a pid from the ledger's per-worker stats) at
random moments, ``--kills`` times, and the job's ledger actor ``--ledger-kills`` times (its
pid asked of the actor, found by name). Then it reads the rows and dead letters back and
reports records in / rows / dead letters / duplicates / lost, and whether ``job_stats()``
equals the truth.

    python benchmarks/soak_ray.py --n 2000000 --kills 5 --ledger-kills 2
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import corpus

REPO = corpus.REPO_ROOT
PLAN = REPO / "transforms" / "openrtb_flat.yaml"


def build(path: Path, n: int, bad_every: int, seed: int) -> set[int]:
    """Write the corpus (varint-framed); return the indices of the corrupt records."""
    base = corpus.generate(2_000, seed=seed)
    bad: set[int] = set()
    with path.open("wb") as out:
        chunk: list[bytes] = []
        for i in range(n):
            ident = f"rec-{i}".encode()
            record = base[i % len(base)] + b"\x0a" + bytes([len(ident)]) + ident
            if bad_every and i % bad_every == 7:
                record += b"\x0a\x7f"  # a field whose length runs past the end
                bad.add(i)
            chunk.append(record)
            if len(chunk) == 50_000:
                out.write(b"".join(corpus.frame(chunk, "varint")))
                chunk = []
        out.write(b"".join(corpus.frame(chunk, "varint")))
    return bad


def ledger_pid() -> int:
    """The pid of this session's ledger actor (named; asked of the actor itself: Ray's
    state API needs the dashboard)."""
    import ray

    from wirearrow.ray.ledger import _LEDGER_NAME

    return ray.get(ray.get_actor(_LEDGER_NAME).__ray_call__.remote(lambda _self: os.getpid()))


def killer(job, kills: int, ledger_kills: int, rng: random.Random, done: threading.Event,
           log: list) -> None:
    """Kill a worker that reported a batch ``kills`` times, and the ledger ``ledger_kills``
    times, in random order at random moments."""
    victims = ["worker"] * kills + ["ledger"] * ledger_kills
    rng.shuffle(victims)
    for kind in victims:
        if done.wait(rng.uniform(1.0, 6.0)):
            return
        if kind == "ledger":
            pid = ledger_pid()
        else:
            workers = [w for w in job.job_stats().per_worker if w.batches]
            if not workers:
                continue
            pid = rng.choice(workers).pid
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # already gone (an earlier kill, or its task ended)
            continue
        if kind == "ledger":  # until the restarted ledger answers (the call is retried)
            started = time.perf_counter()
            ledger_pid()
            log.append((kind, pid, round(time.perf_counter() - started, 2)))
        else:
            log.append((kind, pid))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--bad-every", type=int, default=100, help="1 in N records corrupt")
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--ledger-kills", type=int, default=0, help="times to kill the ledger actor")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--compute", default="tasks", choices=["tasks", "actors"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import ray

    import wirearrow.ray as war
    from wirearrow.config import load_plan

    work = Path(tempfile.mkdtemp(prefix="wirearrow-soak-"))
    started = time.perf_counter()
    bad = build(work / "in.varint", args.n, args.bad_every, args.seed)
    print(f"corpus: {args.n:,} records ({len(bad):,} corrupt) in "
          f"{time.perf_counter() - started:.1f} s -> {work}")

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ds = war.read_delimited(work / "in.varint", bytes_per_task=32_000_000)
    job = war.transcode(ds, PLAN, on_error="dead_letter", dead_letters=work / "dead",
                        compute=args.compute)
    done, killed = threading.Event(), []
    thread = threading.Thread(target=killer, args=(job, args.kills, args.ledger_kills,
                                                   random.Random(args.seed), done, killed))
    started = time.perf_counter()
    thread.start()
    try:
        job.rows.write_parquet(str(work / "rows"))
    finally:
        done.set()
        thread.join()
    wall = time.perf_counter() - started
    stats = job.job_stats()
    ray.shutdown()

    ids = pq.read_table(work / "rows", columns=["request_id"]).column("request_id")
    per_record = set(pc.unique(ids).to_pylist())  # records with rows
    rows_per_id = pc.value_counts(ids)
    dead = pa.concat_tables(pq.read_table(f) for f in stats.dead_letter_files)
    dead_ids = [r[r.rfind(b"rec-"):-2].decode() for r in dead.column("raw").to_pylist()]
    expected_dead = {f"rec-{i}" for i in bad}
    seen = set(per_record) | set(dead_ids)
    duplicate_dead = len(dead_ids) - len(set(dead_ids))
    # Each record gives as many rows as its base record does in process: a record written
    # twice shows up as an id with more rows than that.
    base = corpus.generate(2_000, seed=args.seed)
    index = load_plan(PLAN).transcoder().transcode(base, record_index=True).column(-1)
    base_rows = collections.Counter(index.to_pylist())
    counts = dict(zip(rows_per_id.field("values").to_pylist(),
                      rows_per_id.field("counts").to_pylist(), strict=True))
    fan = collections.Counter(c == base_rows[int(ident[4:]) % 2_000] for ident, c in counts.items())
    ledgers = sum(kill[0] == "ledger" for kill in killed)
    print(f"job:    {wall:.1f} s, {len(killed) - ledgers} worker(s) and the ledger {ledgers} "
          f"time(s) killed ({killed}); "
          f"{stats.attempts:,} batch reports for {stats.batches:,} batches")
    print(f"in:     {args.n:,} records")
    print(f"rows:   {ids.length():,} rows of {len(per_record):,} records")
    print(f"dead:   {len(dead_ids):,} dead letters ({duplicate_dead} duplicates; "
          f"{'exactly the corrupt ones' if set(dead_ids) == expected_dead else 'WRONG SET'})")
    print(f"lost:   {args.n - len(seen):,}; records with more rows than their base: "
          f"{fan[False]:,}")
    print(f"stats:  {stats}")
    exact = (
        len(seen) == args.n
        and duplicate_dead == 0
        and fan[False] == 0
        and stats.records_in == args.n
        and stats.dead_letters == len(bad)
        and stats.rows_out == ids.length()
    )
    print("EXACT" if exact else "NOT EXACT")


if __name__ == "__main__":
    main()
