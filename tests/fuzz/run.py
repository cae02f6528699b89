"""Run the fuzz harness for a while and print what it tried and found (docs/fuzzing.md).

    python tests/fuzz/run.py --minutes 20 --seed 1            # structure-aware, seeded
    python tests/fuzz/run.py --atheris --minutes 20           # coverage-guided (atheris)

Exit status 1 when anything failed (an escape, broken accounting, an unexplained
disagreement with upb); each failure is printed with its record in hex.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

if "--atheris" in sys.argv:
    import atheris

    # Python coverage of wirearrow only (instrumenting everything loaded takes minutes);
    # the Cython core, built by gcc, has no libFuzzer counters.
    with atheris.instrument_imports(include=["wirearrow"]):
        import harness
else:
    import harness


def _print(report: harness.Report, elapsed: float, out=sys.stdout) -> None:
    print(
        f"{elapsed:7.0f} s  records {report.records:,} (mutated {report.mutated:,}): "
        f"accepted {report.accepted:,}, rejected {report.rejected:,}, "
        f"failures {len(report.failures)}",
        file=out,
        flush=True,
    )


def _summary(report: harness.Report, elapsed: float) -> None:
    _print(report, elapsed)
    print("mutations applied:", dict(sorted(report.mutations.items())))
    print("documented disagreements with upb:")
    for why, count in report.known.most_common():
        print(f"  {count:8,}  {why}")
    for failure in report.failures[:50]:
        print("FAIL", failure)


def _atheris(args: argparse.Namespace) -> None:
    """libFuzzer-driven: the input bytes pick the target, the seeds and the mutations, so
    coverage of the Python side (plan assembly, accounting, encode) steers the search."""
    import atheris

    targets = harness.load_targets(args.target)
    report = harness.Report()
    started = time.monotonic()

    def one(data: bytes) -> None:
        rng = random.Random(data)
        target = targets[rng.randrange(len(targets))]
        harness.check(target, harness.batch(target, rng, args.batch, report), report)
        if report.failures:
            _summary(report, time.monotonic() - started)
            raise RuntimeError(report.failures[0])

    atheris.Setup([sys.argv[0], f"-max_total_time={int(args.minutes * 60)}", *args.libfuzzer], one)
    atheris.Fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--batches", type=int, default=None, help="stop after N batches")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=32, help="records per batch")
    parser.add_argument("--target", action="append", help="only these messages (repeatable)")
    parser.add_argument("--atheris", action="store_true", help="coverage-guided, via atheris")
    parser.add_argument("libfuzzer", nargs="*", help="extra libFuzzer flags (with --atheris)")
    args = parser.parse_args()
    if args.atheris:
        _atheris(args)
        return 0
    started = time.monotonic()
    report = harness.run(
        seconds=args.minutes * 60 if args.batches is None else None,
        batches=args.batches,
        seed=args.seed,
        batch_size=args.batch,
        names=args.target,
        progress=_print,
    )
    _summary(report, time.monotonic() - started)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
