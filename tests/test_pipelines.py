"""The pipelines/ jobs: the same ``--n``, ``--seed`` and ``--corrupt`` give the same data on
Ray and on Beam, and the Beam job's output is the transcoder's on that data."""

from __future__ import annotations

import importlib.util
import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "transforms" / "openrtb_flat.yaml"


def _job(name: str):
    spec = importlib.util.spec_from_file_location(f"pipeline_{name}", ROOT / "pipelines" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.ray
@pytest.mark.beam
@pytest.mark.parametrize("framing", ["varint", "u32le"])
def test_ray_and_beam_jobs_generate_the_same_records(tmp_path, framing) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("apache_beam")
    n, seed, bad = 301, 5, 4
    ray_file = tmp_path / "ray" / f"events.{framing}"
    assert _job("ray_pipeline").generate_input(ray_file, n, seed, framing, bad) == n
    pattern = _job("beam_batch").generate_input(tmp_path / "beam", n, 3, framing, seed, bad)
    beam_files = sorted(Path(pattern).parent.glob(Path(pattern).name))
    assert len(beam_files) == 3
    ray_records = corpus.read_corpus(ray_file, framing)
    beam_records = [r for f in beam_files for r in corpus.read_corpus(f, framing)]
    assert beam_records == ray_records
    # The records are the corpus's, with the same ones broken.
    expected = corpus.generate(n, seed)
    broken = corpus.break_records(expected, bad)
    assert ray_records == expected and len(broken) == bad
    assert all(ray_records[i].endswith(b"\x0a\x7f") for i in broken)


@pytest.mark.beam
def test_beam_job_writes_the_transcoders_rows(tmp_path) -> None:
    pytest.importorskip("apache_beam")
    n, seed, bad = 300, 2, 3
    out = io.StringIO()
    with redirect_stdout(out):
        code = _job("beam_batch").main(
            ["--n", str(n), "--seed", str(seed), "--corrupt", str(bad), "--files", "2",
             "--out", str(tmp_path)]
        )
    assert code == 0
    records = corpus.generate(n, seed)
    corpus.break_records(records, bad)
    plan = wa.load_plan(PLAN)
    tc = wa.Transcoder(plan.schema(), plan.columns, on_error="dead_letter")
    expected = tc.transcode(records)
    table = pq.read_table(tmp_path / "parquet")
    assert table.num_rows == expected.num_rows
    assert sorted(table.column("request_id").to_pylist()) == sorted(
        expected.column("request_id").to_pylist()
    )
    letters = [
        json.loads(line)
        for f in (tmp_path / "dead_letters").glob("*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert len(letters) == bad
    assert f"{n:,} records -> {expected.num_rows:,} rows, {bad:,} dead letters" in out.getvalue()
    # Where the time went: the driver's stages, and the runner's time of each step.
    times = re.search(r"time: ([\d.]+) s in all: build ([\d.]+) s, run ([\d.]+) s", out.getvalue())
    assert times, out.getvalue()
    total, build, run = map(float, times.groups())
    # Each figure is printed rounded to 0.01 s: parts can add up to a little over the whole
    # (0.17 + 0.25 against 0.42 failed once), by at most half a hundredth a figure.
    assert 0 < build + run <= total + 0.015, out.getvalue()
    steps = re.search(
        r"steps: read and transcode ([\d.]+) s, write ([\d.]+) s, dead letters ([\d.]+) s",
        out.getvalue(),
    )
    assert steps and 0 < sum(map(float, steps.groups())) <= run + 0.02, out.getvalue()


def test_stage_times() -> None:
    import time

    stage_times = _job("stage_times")
    clock = stage_times.Clock()
    with clock.stage("a"):
        time.sleep(0.01)
    for _ in range(2):
        with clock.stage("b"):
            pass
    assert list(clock.stages) == ["a", "b"] and clock.stages["a"] >= 0.01
    assert re.fullmatch(r"[\d.]+ s in all: a 0\.0\d s, b 0\.00 s", clock.line())

    class Counter:
        def __init__(self, step: str, name: str, msecs: int) -> None:
            self.key = type("Key", (), {"step": step, "metric": type("M", (), {"name": name})})
            self.committed = msecs

    class Result:
        def monitoring_metrics(self):
            return self

        def query(self):
            total = "beam:metric:ptransform_execution_time:total_msecs:v1"
            return {"counters": [
                Counter("Read/ReadChunks", total, 700), Counter("Read/Match", total, 30),
                Counter("ReadMore", total, 5000), Counter("Write", total, 250),
                Counter("Write", "beam:metric:pardo_execution_time:process_bundle_msecs:v1", 9),
            ]}  # fmt: skip

    seconds = stage_times.beam_step_seconds(Result(), {"read": "Read", "write": "Write", "x": "X"})
    assert seconds == {"read": 0.73, "write": 0.25, "x": 0.0}
    assert stage_times.beam_step_seconds(object(), {"read": "Read"}) == {"read": 0.0}


def test_the_jobs_drop_only_rays_notices_about_its_defaults(caplog) -> None:
    # Ray's notice that a new local cluster chose token authentication, and its notice that
    # progress bars are off (the jobs' --progress turns them on), are dropped; every other
    # warning on the same loggers, the one about a cluster *without* authentication among
    # them, is kept.
    import logging

    local_ray, stage_times = _job("local_ray"), _job("stage_times")
    local_ray.drop_default_mode_notice()
    local_ray.drop_default_mode_notice()  # twice: one filter
    auth = logging.getLogger(local_ray.AUTH_LOGGER)
    assert len(auth.filters) == 1
    stage_times.drop_progress_disabled_notice()
    progress = logging.getLogger(stage_times.RAY_PROGRESS_LOGGER)
    with caplog.at_level(logging.WARNING):
        auth.warning("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=...")
        auth.warning("Token authentication is disabled for this Ray cluster. Anyone with ...")
        progress.warning("Progress bars disabled. To enable, set ...")
        progress.warning("Progress bars for operators disabled. To enable, ...")
    assert [r.getMessage().split(".")[0] for r in caplog.records] == [
        "Token authentication is disabled for this Ray cluster",
        "Progress bars for operators disabled",
    ]
