"""The published benchmark figures: the page and the README quote only benchmarks/results/figures.json,
and only runs that may be published (full runs, a quiet machine) get there. Unit tier: reads
files and calls pure functions of benchmarks/plot.py (matplotlib, Ray and Beam not imported)."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import conditions  # benchmarks/, put on sys.path by conftest.py
import plot

ROOT = Path(__file__).resolve().parent.parent
FIGURES = json.loads((ROOT / "benchmarks" / "results" / "figures.json").read_text())
PAGE = (ROOT / "docs" / "benchmark-figures.md").read_text()
README = (ROOT / "README.md").read_text()


def _run(quick: bool = False, before: float = 0.1, after: float = 1.1, busy: float = 1) -> dict:
    return {
        "benchmark": "bench_flat",
        "conditions": {
            "date": "2026-12-08 03:10 UTC", "started": "2026-12-08T03:10:04+00:00",
            "machine": {"cpu": "Test CPU 9000", "cores": 2, "memory_gb": 23.4},
            "versions": {"wirearrow": "0.9.0", "pyarrow": "18.1.0", "pybufarrow": "0.4.1"},
            "quick": quick, "busy_cores": busy, "seconds": 412,
            "load_before": [before, 0.31, 0.4], "load_after": [after, 0.93, 0.52],
        },
        "results": [
            {"method": "wirearrow", "plan": "flat-4", "input_form": "BinaryArray",
             "status": "ok", "msg_per_s": 2_650_000.0, "ratio": 31.94},
            {"method": "pybufarrow flat", "plan": "flat-4", "input_form": "list[bytes]",
             "status": "ok", "msg_per_s": 83_000.0, "ratio": 1.0},
        ],
        "targets": ["4-col vs pybufarrow: 31.9x (target >= 20x)  [best vs best: 30.2x]"],
    }  # fmt: skip


def _figures(**runs: dict) -> dict:
    return {"thresholds": conditions.thresholds(), "runs": runs}


# ------------------------------------------------------------------ what is committed


def test_the_page_is_the_committed_figures_written_out() -> None:
    assert plot.page_text(FIGURES) == PAGE, "regenerate: python benchmarks/plot.py --publish"
    assert plot.readme_block(README).strip("\n").splitlines() == plot.readme_lines(FIGURES)


def test_every_number_the_page_and_the_readme_quote_is_in_the_committed_json() -> None:
    assert plot.unquoted_numbers(PAGE, FIGURES) == []
    assert plot.unquoted_numbers(plot.readme_block(README), FIGURES) == []


def test_the_readme_quotes_performance_only_in_its_figures_block() -> None:
    head, _, rest = README.partition(plot.README_BEGIN)
    _, _, tail = rest.partition(plot.README_END)
    claim = re.compile(r"msg/s|records/s|\d(\.\d+)?\s*[x×]\s+(faster|pybufarrow|ptars|protarrow)")
    assert [ln for ln in (head + tail).splitlines() if claim.search(ln)] == []


def test_every_committed_run_may_be_published() -> None:
    assert plot.refusals(FIGURES) == {}
    for name, run in (FIGURES.get("runs") or {}).items():
        assert run["conditions"]["quick"] is False, name
    if not FIGURES.get("runs"):
        assert "awaiting a quiet full run" in PAGE


# ------------------------------------------------------------------ the drift check itself


def test_a_quote_that_differs_from_the_json_is_found() -> None:
    figures = _figures(flat=_run())
    page = plot.page_text(figures)
    assert plot.unquoted_numbers(page, figures) == []
    assert "31.9x" in page and "Test CPU 9000, 2 cores, 23.4 GB" in page
    assert "0.10 / 0.31 / 0.40 before, 1.10 / 0.93 / 0.52 after" in page
    assert plot.unquoted_numbers(page.replace("31.9x", "3.4x"), figures) == ["3.4"]
    assert plot.unquoted_numbers(page + "\nflat-4 at 266k msg/s\n", figures) == ["266k"]
    assert plot.unquoted_numbers("flat-4 at 2.65M msg/s", figures) == []  # 2,650,000
    assert plot.unquoted_numbers("flat-4 at 2.66M msg/s", figures) == ["2.66M"]
    drifted = copy.deepcopy(figures)
    drifted["runs"]["flat"]["targets"][0] = "4-col vs pybufarrow: 17.2x (target >= 20x)"
    drifted["runs"]["flat"]["results"][0]["ratio"] = 17.2
    assert plot.unquoted_numbers(page, drifted) == ["31.9", "30.2"]


def test_every_ratio_on_the_page_carries_its_runs_conditions() -> None:
    page = plot.page_text(_figures(flat=_run()))
    quoted = [ln for ln in page.splitlines() if ln.startswith("- ")]
    assert quoted == [
        "- 4-col vs pybufarrow: 31.9x (target >= 20x)  [best vs best: 30.2x] "
        "(2026-12-08 03:10 UTC, load 0.10 before, 1.10 after)"
    ]
    readme = plot.readme_lines(_figures(flat=_run()))
    assert readme[-1].startswith("- flat: 4-col vs pybufarrow: 31.9x") and "load 0.10" in readme[-1]


# ------------------------------------------------------------------ what may be published


def test_a_quick_run_is_refused() -> None:
    assert conditions.refusals(_run(quick=True)["conditions"]) == [
        "a --quick run (a smoke test: small corpus, short timings)"
    ]
    assert list(plot.refusals(_figures(flat=_run(quick=True)))) == ["flat"]


def test_a_run_on_a_loaded_machine_is_refused() -> None:
    # 2 cores: others may add 0.5 to the 1-minute load; the run itself its busy cores.
    assert conditions.allowed_load(_run()["conditions"]) == (0.5, 1.5)
    assert conditions.refusals(_run(before=0.5, after=1.5)["conditions"]) == []
    assert conditions.refusals(_run(before=2.31)["conditions"]) == [
        "1-minute load 2.31 before the run, above 0.50"
    ]
    assert conditions.refusals(_run(after=1.62)["conditions"]) == [
        "1-minute load 1.62 after the run, above 1.50"
    ]
    assert conditions.refusals(_run(after=2.4, busy=2)["conditions"]) == []  # Ray on 2 CPUs


def test_cpu_used_by_others_replaces_the_load_after_the_run() -> None:
    # Ray's daemons linger in the load average after its run: where others' CPU during the
    # run was measured, that decides, not the load after.
    ray = {**_run(after=2.98, busy=2)["conditions"], "others_cores": 0.12}
    assert conditions.refusals(ray) == []
    busy = {**ray, "others_cores": 0.83}
    assert conditions.refusals(busy) == [
        "other processes used 0.83 cores during the run, above 0.50"
    ]
    assert conditions.refusals({**busy, "load_before": [0.9, 0, 0]}) == [
        "1-minute load 0.90 before the run, above 0.50",
        "other processes used 0.83 cores during the run, above 0.50",
    ]


def test_others_cores_is_what_other_sessions_used(monkeypatch) -> None:
    # ({pid: CPU seconds of a process of another session}, monotonic seconds)
    samples = iter([({7: 1.0, 9: 5.0}, 10.0), ({7: 3.0, 9: 5.5, 11: 4.5}, 14.0)])
    monkeypatch.setattr(conditions, "_others_cpu", lambda: next(samples))
    run = conditions.end(conditions.begin(quick=False, busy_cores=2))
    assert run["others_cores"] == 1.75  # (2 + 0.5 + 4.5, a process new in the run) / 4 s
    assert "_cpu" not in run


def _cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SPIN = "import time\ne = time.monotonic() + 1.0\nwhile time.monotonic() < e: pass"


def test_others_cores_counts_other_sessions_not_the_runs() -> None:
    # Ray's processes are the run's session; a neighbour's build is another session.
    if not Path("/proc/stat").exists():
        pytest.skip("needs /proc")
    stranger = subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True)
    own = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.1)
        sample = conditions._others_cpu()
        assert sample is not None
        assert stranger.pid in sample[0] and own.pid not in sample[0]
        before, t0 = _cpu_of(stranger.pid), time.monotonic()
        started = conditions.begin(quick=False, busy_cores=1)
        time.sleep(0.5)
        run = conditions.end(started)
        t1, used = time.monotonic(), _cpu_of(stranger.pid) - before
    finally:
        stranger.wait()
        own.wait()
    # At least what the stranger used in the run (less a clock tick each side and rounding).
    assert run["others_cores"] * (t1 - t0) >= used - 0.03, (run, used)


def test_a_run_without_conditions_is_refused() -> None:
    assert conditions.refusals(None) != []
    old = _run()["conditions"]
    del old["load_after"]
    assert conditions.refusals(old) == ["no load average recorded after the run"]
    unknown = {**_run()["conditions"]}
    del unknown["quick"]
    assert "a --quick run" in conditions.refusals(unknown)[0]  # not said: not published


def test_publish_refuses_and_writes_nothing(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    figures.write_text(json.dumps(_figures(flat=_run(before=3.0))))
    page, readme = tmp_path / "page.md", tmp_path / "README.md"
    readme.write_text(f"x\n{plot.README_BEGIN}\nold\n{plot.README_END}\n")
    with pytest.raises(plot.Unpublishable, match=re.escape("flat: 1-minute load 3.00 before")):
        plot.publish(figures, page=page, images=tmp_path / "img", readme=readme)
    assert not page.exists() and "old" in readme.read_text()
    assert plot.main([str(figures), "--publish"]) == 2


def test_conditions_of_this_machine_are_recorded() -> None:
    started = conditions.begin(quick=False, busy_cores=1, compared=("orjson",))
    got = conditions.end(started)
    assert set(got["versions"]) >= {
        "wirearrow",
        "pyarrow",
        "protobuf",
        "ray",
        "apache-beam",
        "orjson",
    }
    assert len(got["load_before"]) == 3 and len(got["load_after"]) == 3
    assert got["machine"]["cores"] and got["machine"]["cpu"] and got["quick"] is False
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", got["date"])
