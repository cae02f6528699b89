"""The README's quick start, walked as a newcomer walks it.

The walk (release tier) copies the checkout's files (what a fresh clone holds, with the
working tree's edits; no ``.venv``, no ``out/``, no built extension) into a scratch
directory and runs every command of the README's "Quick start" ```bash blocks there, in
order, in one environment as a user's shell carries it (``. .venv/bin/activate`` and ``cd``
apply to the commands after them), with the test's own virtualenv off ``PATH``: the
README's commands must make every environment they use. A block preceded by
``<!-- walk: skip (why) -->`` is left out; each command of a ``<!-- walk: serve -->`` block
serves until stopped: it is started, the first ``http://`` address it prints is fetched,
then it is stopped. Each step must exit 0 without a traceback, and what it names with
``--out``/``-o`` must exist. The notebook step runs in a venv that holds only
``[ray,notebook]`` (the demo's ``[ray]`` and the notebook's extra; Beam comes after).

The steps and their times are written to ``out/ci-artifacts/readme-walk.txt`` in the
checkout (a newcomer's first hour, measured), what each printed to ``readme-walk.log``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ARTIFACT = ROOT / "out" / "ci-artifacts" / "readme-walk.txt"
TRANSCRIPT = ARTIFACT.with_suffix(".log")  # every step's command and output
BLOCK = re.compile(
    r"^(?:<!-- walk: (?:skip \((?P<why>[^)]+)\)|(?P<serve>serve)) -->\n)?```bash\n(?P<body>.*?)^```$",
    re.S | re.M,
)
MARKER = re.compile(r"<!-- walk: (.*?) -->")
STEP_TIMEOUT = 1800  # seconds: a fresh ./run demo took 15 min 38 s on a loaded machine
SERVE_TIMEOUT = 180  # seconds until a serving command prints its address
# Shell state a later command depends on: carried into every command after it.
CARRIED = ("cd ", ". ", "source ", "export ")


@dataclass(frozen=True)
class Step:
    command: str
    serve: bool = False


def quick_start(text: str) -> str:
    start = text.index("\n## Quick start")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def walk_steps(text: str) -> tuple[list[Step], list[str]]:
    """The quick start's commands in order, and the skipped blocks' reasons."""
    section = quick_start(text)
    steps: list[Step] = []
    skipped: list[str] = []
    for block in BLOCK.finditer(section):
        if block["why"]:
            skipped.append(block["why"])
            continue
        for line in block["body"].splitlines():
            command = re.sub(r"\s+#\s.*$", "", line).strip()
            if command and not command.startswith("#"):
                steps.append(Step(command, serve=bool(block["serve"])))
    return steps, skipped


def test_the_walk_reads_every_block_of_the_quick_start() -> None:
    """Every ```bash block of the quick start is walked or skipped with a reason; the order
    is one a newcomer can follow (the demo makes the venv; each extra before its use)."""
    section = quick_start(README.read_text())
    markers = MARKER.findall(section)
    assert all(re.fullmatch(r"skip \(.+\)|serve", m) for m in markers), markers
    assert len(BLOCK.findall(section)) == section.count("```bash")
    steps, skipped = walk_steps(README.read_text())
    commands = [s.command for s in steps]
    assert commands[0] == "./run demo"
    assert all(why.strip() for why in skipped)

    def first(prefix: str) -> int:
        return next(i for i, c in enumerate(commands) if c.startswith(prefix))

    assert first(". .venv/bin/activate") < first("python ") < first('pip install -e ".[beam]"')
    assert first('pip install -e ".[ray,notebook]"') < first("jupyter ")
    assert first("jupyter execute") < first('pip install -e ".[beam]"')  # only [ray,notebook]
    assert first('pip install -e ".[beam]"') < first("python pipelines/beam_batch.py")
    assert {s.command.split()[0] for s in steps if s.serve} == {"wirearrow", "jupyter"}


def _copy_checkout(dest: Path) -> None:
    """The checkout's files as a clone has them, with the working tree's edits."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


def _newcomer_env(home: Path) -> dict[str, str]:
    """This environment without the test's virtualenv, Ray address or Python paths."""
    env = dict(os.environ)
    venv = env.pop("VIRTUAL_ENV", None)
    for name in ("PYTHONPATH", "PYTHONHOME", "RAY_ADDRESS", "WIREARROW_VENV", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    for name in list(env):
        if name.startswith(("PYTEST_", "COV_")):
            env.pop(name)
    drop = {str(Path(venv) / "bin")} if venv else set()
    drop.add(str(Path(sys.executable).parent))
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p not in drop)
    env["BROWSER"] = "true"  # a serving command's "open a browser": nothing to open here
    if os.geteuid() == 0:  # CI runs as root, which Jupyter's server refuses; a user is not
        config = home / "jupyter-config"
        config.mkdir()
        (config / "jupyter_server_config.json").write_text('{"ServerApp": {"allow_root": true}}')
        env["JUPYTER_CONFIG_DIR"] = str(config)
    return env


def _serve(shell: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Start the command, fetch the first address it prints, stop it; what it printed."""
    with subprocess.Popen(
        shell, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    ) as proc:  # fmt: skip
        return _fetch_first_address(proc)


def _fetch_first_address(proc: subprocess.Popen[str]) -> str:
    seen: list[str] = []
    try:
        deadline = time.monotonic() + SERVE_TIMEOUT
        url = None
        assert proc.stdout is not None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(r"http://(?:127\.0\.0\.1|localhost)\S*", line)
            url = found.group(0) if found else None
        assert url, f"no address printed:\n{''.join(seen)}"
        for attempt in range(30):  # a server may print its address before it listens
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    assert response.status == 200
                    assert response.read()
                break
            except urllib.error.URLError:
                if attempt == 29 or proc.poll() is not None:
                    raise AssertionError(f"{url} not served:\n{''.join(seen)}") from None
                time.sleep(1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # its process group: the one started here
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return "".join(seen)


def _outputs(command: str) -> list[str]:
    return re.findall(r"(?:--out|-o)\s+(\S+)", command)


@pytest.mark.notebook  # it starts Ray (the demo, the notebook): with the release tier's Ray
@pytest.mark.slow
@pytest.mark.timeout(4 * STEP_TIMEOUT)
def test_a_fresh_clone_runs_every_command_of_the_quick_start(tmp_path: Path) -> None:
    steps, _ = walk_steps(README.read_text())
    clone = tmp_path / "wirearrow"
    _copy_checkout(clone)
    env = _newcomer_env(tmp_path)
    carried: list[str] = []
    times: list[tuple[str, float]] = []
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    transcript = TRANSCRIPT.open("w")
    try:
        for step in steps:
            script = "\n".join([*carried, step.command])
            shell = ["bash", "-euo", "pipefail", "-c", script]
            if step.command.startswith("jupyter execute"):
                # The notebook runs where only [ray,notebook] is installed: no Beam yet.
                probe = subprocess.run(
                    ["bash", "-c", "\n".join([*carried, "python -c 'import apache_beam'"])],
                    cwd=clone, env=env, capture_output=True,
                )  # fmt: skip
                assert probe.returncode != 0, "Beam is installed before the notebook's step"
            t0 = time.monotonic()
            if step.serve:
                output = _serve(shell, clone, env)
            else:
                done = subprocess.run(
                    shell, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    text=True, timeout=STEP_TIMEOUT,
                )  # fmt: skip
                output = done.stdout
                if done.returncode:
                    transcript.write(f"$ {step.command}\n{output}\n")
                assert done.returncode == 0, f"$ {step.command}\n{output}"
            times.append((step.command, time.monotonic() - t0))
            transcript.write(f"$ {step.command}\n{output}\n")
            transcript.flush()
            assert "Traceback (most recent call last)" not in output, f"$ {step.command}\n{output}"
            # Nothing the newcomer did not ask for: Ray's notices about its own defaults.
            for notice in ("Token authentication is enabled", "Progress bars disabled"):
                assert notice not in output, f"$ {step.command}\n{output}"
            for out in _outputs(step.command):
                assert (clone / out).exists(), f"$ {step.command}: no {out}\n{output}"
            if step.command.startswith(CARRIED):
                carried.append(step.command)
    finally:
        transcript.close()
        load = os.getloadavg()[0]
        lines = [f"{seconds:8.1f} s  {command}" for command, seconds in times]
        ARTIFACT.write_text(
            f"README quick start from a fresh copy, load average {load:.1f} at the end\n"
            + "\n".join(lines) + "\n"
        )  # fmt: skip
    ray_job = clone / "out" / "ray" / "rows"
    assert any(ray_job.rglob("*.parquet"))


TABLE_BLOCK = re.compile(r"^```sh\n(?P<body>.*?)^```$", re.S | re.M)


def _table_commands() -> list[str]:
    """The README's commands that land the demo in a local table (its ```sh blocks under
    "Into an Iceberg or Delta table"), continuation lines joined."""
    text = README.read_text()
    start = text.index("Into an Iceberg or Delta table")
    end = text.index("\n## ", start)
    commands = []
    for block in TABLE_BLOCK.finditer(text[start:end]):
        body = block["body"].replace("\\\n", " ")
        commands += [re.sub(r"\s+#\s.*$", "", line).strip() for line in body.splitlines() if line.strip()]
    return commands


@pytest.mark.slow
@pytest.mark.kafka
def test_the_readme_lands_the_demo_in_a_table(tmp_path: Path) -> None:
    """The README's table commands are true: in a scratch directory holding the checkout's
    transforms/, pipelines/, benchmarks/ and examples/ (and the quick start's corpus), each
    runs in this interpreter's environment; the file command lands rows in the Iceberg
    table and again skips them all, the Kafka one lands and checks every record once."""
    pytest.importorskip("pyiceberg")
    pytest.importorskip("confluent_kafka")
    commands = _table_commands()
    assert any(c.startswith("wirearrow transcode") for c in commands)
    assert any(c.startswith("python pipelines/kafka_tables.py") for c in commands)
    for name in ("transforms", "pipelines", "benchmarks", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run([sys.executable, "benchmarks/corpus.py", "--n", "2000", "--out", "out/events.u32le"],
                   cwd=tmp_path, env=env, check=True, capture_output=True)  # fmt: skip
    for command in commands:
        for _run in (1, 2) if command.startswith("wirearrow") else (1,):  # again: skips all
            done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=600)  # fmt: skip
            assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            if command.startswith("python pipelines/kafka_tables.py"):
                assert 'check: every produced record once: {"produced": 2000' in done.stdout
    from wirearrow import tables

    rows = tables.IcebergSink("events.bids", warehouse=str(tmp_path / "out" / "warehouse")).table()
    summary = rows.current_snapshot().summary  # the second run committed nothing new
    assert int(summary["total-records"]) > 0 and len(rows.snapshots()) == 1
