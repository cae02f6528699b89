"""The pipelines/ jobs: the same ``--n``, ``--seed`` and ``--corrupt`` give the same data on
Ray and on Beam, and the Beam job's output is the transcoder's on that data."""

from __future__ import annotations

import importlib.util
import io
import json
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
