"""The README's main job on a real two-node Ray cluster (tests/ray_cluster.py): the same
rows as a local run, each worker process compiling the plan once, token authentication
on; and a package shipped to the workers by ``runtime_env``.

The cluster is two ``ray start`` nodes of one CPU each on this machine, with their own
ports and temp dir, stopped by PID at the end (never ``ray stop``: other Ray users share
the machine). Skipped, with ``ray start``'s message, when a node cannot start here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytest.importorskip("ray")
pytest.importorskip("psutil")

from ray_cluster import ClusterUnavailable, LocalRayCluster

pytestmark = [pytest.mark.ray, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "plugin"
JOB = ROOT / "pipelines" / "ray_pipeline.py"
RECORDS = 20_000  # the README's --n
JOB_TIMEOUT = 300  # generous: two cores shared with other jobs


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    # The nodes import this checkout's wirearrow, as a cluster's image would have it.
    # A second attempt on other ports: one may have been taken between the check and Ray.
    for attempt in (1, 2):
        nodes = LocalRayCluster(nodes=2, cpus=1, env={"PYTHONPATH": str(PLUGIN)})
        try:
            nodes.start()
            break
        except ClusterUnavailable as err:
            if attempt == 2:
                pytest.skip(f"no local Ray cluster: {err}")
    try:
        yield nodes
    finally:
        stopped = nodes.stop()
        assert stopped, "the cluster had no processes to stop"
        assert not nodes.processes(), "cluster processes survived stop()"


def _run(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


def _rows(directory: Path) -> Counter[str]:
    """The rows of a Parquet directory as a multiset (Ray writes blocks in any order)."""
    table = pq.read_table(directory)
    return Counter(repr(tuple(row.values())) for row in table.to_pylist())


def _local_env() -> dict[str, str]:
    """The environment of a user's shell: no cluster address, no cluster token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "PYTHONPATH": str(PLUGIN)}


def test_readme_job_on_two_nodes_writes_the_rows_of_a_local_run(cluster, tmp_path) -> None:
    # The README's command, unchanged; RAY_ADDRESS (and the token) say where the cluster is.
    on_cluster = _run(
        [str(JOB), "--n", str(RECORDS), "--out", str(tmp_path / "cluster")],
        {**cluster.env, "RAY_ADDRESS": cluster.address},
    )
    work = re.search(
        r"on (\d+) worker\(s\) on (\d+) node\(s\) \((\d+) plan compile\(s\)\)", on_cluster
    )
    assert work, on_cluster
    workers, nodes, compiles = map(int, work.groups())
    # One CPU per node and more blocks than nodes: both nodes transcode.
    assert nodes == 2, on_cluster
    # Every worker process compiles the plan once (each counts at least its first one).
    assert compiles == workers >= 2, on_cluster
    assert "check:  every record is in the rows or in the dead letters" in on_cluster

    local = _run([str(JOB), "--n", str(RECORDS), "--out", str(tmp_path / "local")], _local_env())
    assert "on 1 node(s)" in local
    # Where the time went: Ray's start, the plan, the run; in the run's tasks, the stages.
    assert re.search(r"time:   [\d.]+ s in all: Ray start [\d.]+ s, plan [\d.]+ s, run [\d.]+ s", local)
    assert re.search(r"tasks:  read [\d.]+ s, transcode [\d.]+ s, write [\d.]+ s", local), local
    rows = _rows(tmp_path / "cluster" / "rows")
    assert rows == _rows(tmp_path / "local" / "rows")
    assert sum(rows.values()) > RECORDS  # the flat plan fans out (53,980 rows for 20,000)


def test_a_driver_without_the_clusters_token_is_refused(cluster) -> None:
    script = "import ray, sys; ray.init(address=sys.argv[1])"
    # One attempt to reach the GCS instead of Ray's 20 (one a second): the refusal is
    # the same, 20 s earlier.
    env = {**cluster.env, "RAY_AUTH_TOKEN": "0" * 64, "RAY_gcs_server_port_wait_time_s": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, cluster.address],
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    assert done.returncode != 0
    assert "AuthenticationError" in done.stderr and "InvalidAuthToken" in done.stderr


# A driver that ships a package to the workers with runtime_env and transcodes there:
# it prints where each worker process imported wirearrow from and the rows it got.
SHIP = """
import json, sys
import ray
import wirearrow as wa

address, plan, package = sys.argv[1:4]
ray.init(address=address, runtime_env={"py_modules": [package]}, log_to_driver=False)

@ray.remote(num_cpus=1)
def transcode(records):
    import os, wirearrow
    tc = wa.load_plan(plan).transcoder()
    return wirearrow.__file__, os.getpid(), tc.transcode(records).num_rows

import corpus
records = corpus.generate(200, seed=3)
done = ray.get([transcode.remote(records) for _ in range(4)])
print(json.dumps(done))
"""


def test_runtime_env_ships_the_package_to_the_workers(cluster, tmp_path) -> None:
    import json

    import corpus
    import wirearrow as wa

    plan = ROOT / "transforms" / "openrtb_flat.yaml"
    env = {**cluster.env, "PYTHONPATH": os.pathsep.join([str(PLUGIN), str(ROOT / "benchmarks")])}
    out = _run(["-c", SHIP, cluster.address, str(plan), str(PLUGIN / "wirearrow")], env)
    done = json.loads(out.strip().splitlines()[-1])
    expected = wa.load_plan(plan).transcoder().transcode(corpus.generate(200, seed=3)).num_rows
    assert [rows for _, _, rows in done] == [expected] * 4
    # The workers imported the copy Ray unpacked into the session, not the checkout.
    for file, _, _ in done:
        assert file.startswith(str(cluster.temp_dir)), file
        assert "runtime_resources" in file, file
