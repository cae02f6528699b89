"""The Beam batch job through Beam's portable job API: a local job service and external SDK
worker processes (pipelines/local_beam.py), as a runner with separate workers runs it,
with a wheel staged by ``--extra_package`` that each worker installs offline.

The job is ``pipelines/beam_batch.py`` with the portable runner's flags; its Parquet rows
must be the transcoder's, its dead letters the broken records, and its counts (Beam
metrics, which travel back through the job service) the job's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa

pytest.importorskip("apache_beam")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pipelines"))
from local_beam import LocalPortableBeam, ServicesUnavailable  # noqa: E402

pytestmark = [pytest.mark.beam]

PLAN = ROOT / "transforms" / "openrtb_flat.yaml"
ENV = {"PYTHONPATH": str(ROOT / "plugin")}


@pytest.fixture(scope="module")
def services() -> Iterator[LocalPortableBeam]:
    # install=True: each worker installs the job's --extra_package wheels first, offline.
    beam = LocalPortableBeam(env={**ENV, "PIP_NO_INDEX": "1"}, install=True)
    try:
        beam.__enter__()
    except ServicesUnavailable as err:
        pytest.skip(f"no local Beam job service: {err}")
    try:
        yield beam
    finally:
        beam.stop()
        assert all(p.poll() is not None for p in beam._procs)


def _probe_wheel(directory: Path) -> Path:
    """A one-module pure-Python wheel: what an --extra_package wheel is to pip, built in
    milliseconds (wirearrow's own wheel takes minutes to compile: WIREARROW_WHEEL=path
    stages that one instead)."""
    path = directory / "wa_probe-0.1-py3-none-any.whl"
    files = {
        "wa_probe.py": "STAGED = True\n",
        "wa_probe-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: wa-probe\nVersion: 0.1\n",
        "wa_probe-0.1.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    files["wa_probe-0.1.dist-info/RECORD"] = "".join(f"{name},,\n" for name in [*files, "wa_probe-0.1.dist-info/RECORD"])
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


def test_batch_job_on_the_portable_runner_with_external_workers(services, tmp_path) -> None:
    n, seed, bad = 3_000, 4, 6
    wheel = Path(os.environ.get("WIREARROW_WHEEL") or _probe_wheel(tmp_path))
    done = subprocess.run(
        [sys.executable, str(ROOT / "pipelines" / "beam_batch.py"), "--n", str(n),
         "--seed", str(seed), "--corrupt", str(bad), "--files", "3",
         "--out", str(tmp_path / "out"), *services.pipeline_args, "--extra_package", str(wheel)],
        cwd=ROOT,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]

    records = corpus.generate(n, seed)
    corpus.break_records(records, bad)
    plan = wa.load_plan(PLAN)
    expected = wa.Transcoder(plan.schema(), plan.columns, on_error="dead_letter").transcode(records)
    table = pq.read_table(tmp_path / "out" / "parquet")
    assert table.num_rows == expected.num_rows
    as_rows = lambda t: Counter(repr(tuple(r.values())) for r in t.to_pylist())  # noqa: E731
    assert as_rows(table.select(expected.schema.names)) == as_rows(expected)
    letters = [
        json.loads(line)
        for f in (tmp_path / "out" / "dead_letters").glob("*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert len(letters) == bad
    # The counters are Beam metrics: reported by the SDK workers, returned by the service.
    assert f"{n:,} records -> {expected.num_rows:,} rows, {bad:,} dead letters" in done.stdout

    # The job went through the job service, and the bundles ran in SDK worker processes
    # the pool started (not in the submitting process).
    assert "with state DONE" in services.log("job_service")
    pool = services.log("worker_pool")
    assert "Starting worker with command" in pool
    # Each worker fetched the staged wheel from the runner and installed it, offline.
    assert f"boot: installed {wheel.name} into" in pool, pool[-3000:]
    if wheel.name.startswith("wirearrow-"):
        assert re.search(r"boot: wirearrow from \S+/site/wirearrow/__init__\.py", pool), pool[-3000:]
