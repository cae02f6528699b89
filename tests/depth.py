"""How hard the randomized tests try: one knob for every hypothesis test and the fuzz slice.

A test states what the unit tier runs (``@randomized(8)``: 8 examples); the environment
variable ``WIREARROW_TEST_DEPTH`` multiplies it. The default, 1, keeps ``python -m pytest``
under a minute; ``./run test release`` runs the unit tier again at depth 8 (CI: at least
the examples each test ran before the tiers); a longer hunt for a bug is
``WIREARROW_TEST_DEPTH=50 python -m pytest tests/test_differential.py``.
``WIREARROW_DERANDOMIZE=1`` makes a run repeatable; ``WIREARROW_HYPOTHESIS_SHRINK=0``
reports the first failing example as found (shrinking a failure can take minutes).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

DEPTH = float(os.environ.get("WIREARROW_TEST_DEPTH", "1"))


def examples(n: int) -> int:
    """``n`` (what the unit tier runs) at this run's depth."""
    return max(1, round(n * DEPTH))


# A hypothesis test that states no count of its own (tests/conftest.py imports this module).
settings.register_profile("depth", max_examples=examples(13))
settings.load_profile("depth")


def randomized(n: int, *, shrink: bool = True) -> settings:
    """The settings of a test that draws schemas, plans or records: ``n`` examples at this
    run's depth; no deadline (a first compile is slow); no example database (a failure is
    reported with its example, and a run does not depend on the last one's); no health
    checks (drawing a schema and its messages is slow and large by design).
    ``shrink=False`` where shrinking takes minutes and the unshrunk example is readable."""
    shrink = shrink and os.environ.get("WIREARROW_HYPOTHESIS_SHRINK", "1") != "0"
    return settings(
        max_examples=examples(n),
        deadline=None,
        database=None,
        derandomize=os.environ.get("WIREARROW_DERANDOMIZE") == "1",
        phases=list(Phase) if shrink else [p for p in Phase if p is not Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
