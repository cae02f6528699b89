"""examples/ray_quickstart.ipynb runs, on a local 2-CPU Ray, and is stored with its outputs.

The notebook is executed with nbclient in a kernel of this interpreter, from examples/.
(tests/test_readme.py runs it too, as the README says, in a fresh venv holding only
wirearrow[ray,notebook]: that the notebook extra is enough.)
``WIREARROW_STORE_NOTEBOOK=1`` writes the executed notebook back over the stored one (how
its outputs are refreshed after an edit).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.notebook, pytest.mark.ray]  # a kernel running a local Ray

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("ray")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "ray_quickstart.ipynb"
CELL_TIMEOUT = 600


def _outputs(cell, kind: str) -> list:
    return [o for o in cell.get("outputs", []) if kind in o.get("data", {}) or o.get("name") == kind]


def _text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o["text"])
        elif "text/plain" in o.get("data", {}):
            parts.append(o["data"]["text/plain"])
    return "".join(parts)


def _cell(nb, starts: str):
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(starts))


def _check(nb) -> None:
    """What a notebook user sees: the accounting, its chart, the query, the data chart."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code)
    stats = _text(_cell(nb, "import shutil"))
    assert "records in 20,000, ok 19,980, failed 20 (20 dead letters)" in stats
    accounting = _cell(nb, "import matplotlib.pyplot as plt")
    assert _outputs(accounting, "image/png")  # the accounting chart
    assert "field" in _text(accounting) or "past" in _text(accounting)  # dead letters' reasons
    query = _cell(nb, "import duckdb")
    assert "requests" in _text(query) and "avg_floor" in _text(query)
    assert _outputs(_cell(nb, "fig, ax = plt.subplots(figsize=(8, 3))"), "image/png")
    assert _outputs(_cell(nb, "import pyarrow as pa"), "image/png")  # records/s


def test_the_notebook_runs_and_is_stored_with_its_outputs(monkeypatch) -> None:
    stored = nbformat.read(NOTEBOOK, as_version=4)
    _check(stored)  # stored with outputs, and those outputs are what the page promises
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT / "plugin"), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )  # fmt: skip
    client.execute()
    _check(nb)
    assert [c.source for c in nb.cells] == [c.source for c in stored.cells]
    if os.environ.get("WIREARROW_STORE_NOTEBOOK"):
        nbformat.write(nb, NOTEBOOK)
