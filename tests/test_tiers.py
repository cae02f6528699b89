"""The tiers of tests/conftest.py, on a small suite of their own in a subprocess: marks and
fixtures choose a test's tier, the unit tier is the default and never imports an engines
module, a unit test that imports Ray fails, and a run that selects nothing exits 5."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # three pytest processes: the release tier

SUITE = {
    "test_core.py": """
import pytest

def test_plain():
    pass

@pytest.mark.ray
def test_marked_ray():
    pass

def test_uses_the_broker(kafka_broker):
    pass

@pytest.mark.packaging
def test_builds():
    pass

def test_imports_ray_unmarked():
    import ray  # noqa: F401 (the stand-in below)
""",
    "test_engine_module.py": """
import os
import pytest

pytestmark = [pytest.mark.beam]
if not os.environ.get("TIERS_IMPORT_OK"):
    raise RuntimeError("the unit tier imported an engines module")

def test_in_beam():
    pass
""",
    "ray.py": "# a stand-in for Ray: importing it is what the unit tier refuses\n",
}


def pytest_run(suite: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=suite, capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip


def test_tiers_follow_marks_and_fixtures(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    for name in ("conftest.py", "depth.py", "engine_fixtures.py"):
        shutil.copy(ROOT / "tests" / name, tests / name)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for name, text in SUITE.items():
        (tests / name).write_text(text)

    unit = pytest_run(tmp_path, "-rA")
    assert unit.returncode == 1, unit.stdout + unit.stderr
    assert "PASSED tests/test_core.py::test_plain" in unit.stdout
    assert "FAILED tests/test_core.py::test_imports_ray_unmarked" in unit.stdout
    assert "a unit-tier test that imports ray: mark it ray or beam" in unit.stdout
    assert "1 failed, 1 passed, 3 deselected" in unit.stdout  # the engines module unread

    def selected(*args: str) -> list[str]:
        proc = pytest_run(tmp_path, "--co", "-q", *args, TIERS_IMPORT_OK="1")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return [line.split("::")[1] for line in proc.stdout.splitlines() if "::" in line]

    assert selected("-m", "engines") == ["test_marked_ray", "test_uses_the_broker", "test_in_beam"]
    assert selected("-m", "release") == ["test_builds"]
    assert len(selected("-m", "")) == 6

    nothing = pytest_run(tmp_path, "-k", "no_such_test")
    assert nothing.returncode == 5, nothing.stdout  # .ci/run's set -e fails on it
