"""A short deterministic slice of the fuzz harness (tests/fuzz/harness.py), run in CI.

Fixed seeds, every target schema: structure-aware mutations through transcode and encode
under every error policy. Fails on any exception that is not a wirearrow error, on broken
accounting, and on a disagreement with upb that docs/fuzzing.md does not explain. The
longer runs (and the ASan/UBSan build) are in docs/fuzzing.md.
"""

from __future__ import annotations

import faulthandler

import harness
import pytest

import wirearrow as wa
from depth import examples

pytestmark = pytest.mark.malformed

BATCHES = examples(8)  # 1 per target at depth 1 (tests/depth.py)


@pytest.mark.parametrize("seed", [11, 12])
def test_fuzz_slice(seed: int) -> None:
    faulthandler.dump_traceback_later(300, exit=True)  # a hang kills the run with a trace
    try:
        report = harness.run(batches=BATCHES, seed=seed, batch_size=24)
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert report.records == BATCHES * 24
    assert report.mutated > report.records // 2 and report.rejected and report.accepted
    assert not report.failures, "\n".join(report.failures[:20])


def test_the_issue_reproducers_are_per_record() -> None:
    """The records of issue 15 among good ones: each costs only itself."""
    (target,) = harness.load_targets(["Wkt"])
    report = harness.Report()
    records = [b"", bytes.fromhex("92010b120911000000000000f0ff"), bytes.fromhex("8a01052a0304b755")]
    harness.check(target, records, report)
    assert not report.failures, report.failures
    assert (report.accepted, report.rejected) == (2, 1)


def test_an_empty_level_below_the_cut_sent_twice() -> None:
    """``left{left{}, left{}}`` for Tree cut at max_depth=1: the second, empty occurrence of
    the cut level merges into the first while its column holds no bytes yet (memcpy of zero
    bytes to a NULL arena: undefined behaviour, which the sanitizer build stops on; CI runs
    this test under it, .ci/sanitize.sh)."""
    (target,) = harness.load_targets(["Tree"])
    record = bytes.fromhex("1204" "1200" "1200")
    tc = wa.Transcoder(target.schema, max_depth=1, keep_unknown=True, validate="full")
    rows = tc.transcode([record, b"\x12\x00" * 3]).to_pylist()
    assert [row["left"]["left"] for row in rows] == [b"", None]
    assert tc.encode(tc.transcode([record]))[0].as_py() == target.cls.FromString(
        record
    ).SerializeToString(deterministic=True)
    report = harness.Report()
    harness.check(target, [record, record * 2], report)
    assert not report.failures, report.failures
