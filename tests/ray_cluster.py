"""A real multi-node Ray cluster on loopback for the tests: ``ray start --head`` plus
``ray start --address`` for each further node, each a separate raylet with its own ports.

Other people run Ray on the same machine, so this never runs ``ray stop`` (which stops
every Ray process of the machine) and never uses Ray's default ports or ``/tmp/ray``:

* every port is chosen here (a block found free on this machine) and passed to
  ``ray start``: the GCS, the raylets' node manager and object manager, the worker port
  range, the agents, the metrics exporter, the Ray client server and the dashboard;
* the session lives in its own ``--temp-dir``: a short directory under /tmp, as Ray puts
  unix sockets in it and a socket path is limited to 107 bytes (pytest's ``tmp_path``
  plus Ray's ``session_<date>_<pid>/sockets/plasma_store`` runs past that);
* every process of the cluster carries a marker in its environment (``ray start`` passes
  its environment to the daemons it starts, and the raylet to its workers): :meth:`stop`
  finds them by the marker and terminates them by PID, nothing else.

Ray 2.60 turns token authentication on for a new cluster and, by default, writes the
token to ``~/.ray/auth_token``, shared by everyone on the machine. Here the cluster gets
``RAY_AUTH_MODE=token`` and a fresh ``RAY_AUTH_TOKEN`` in the environment (as Ray's own
tests do: ``ray._private.authentication_test_utils``), which the nodes and the drivers
read instead of the file: :attr:`env` is what a driver needs to connect.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

MARKER = "WIREARROW_TEST_RAY_CLUSTER"

# Ports one node takes: node manager, object manager, two dashboard-agent ports, the
# runtime-env agent and the metrics exporter; then WORKER_PORTS for its worker processes.
NODE_PORTS = 6
WORKER_PORTS = 24
# The head's own: the GCS, the Ray client server and the dashboard.
HEAD_PORTS = 3


class ClusterUnavailable(RuntimeError):
    """``ray start`` could not start a node here (ports taken, resources): not a bug of ours."""


def _free(port: int) -> bool:
    for host in ("0.0.0.0", "127.0.0.1"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def _free_block(size: int, attempts: int = 50) -> int:
    """The first port of ``size`` consecutive ports free on this machine now (below the
    kernel's ephemeral range, so that outgoing connections do not land in it meanwhile)."""
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(20_000, 32_000 - size)
        if all(_free(p) for p in range(base, base + size)):
            return base
    raise ClusterUnavailable(f"no block of {size} free ports in 20000..32000")


class LocalRayCluster:
    """``nodes`` Ray nodes of ``cpus`` CPUs each on this machine; use as a context manager.

    ``env``: extra environment of the nodes (and so of their worker processes), e.g.
    ``PYTHONPATH``. :attr:`address` and :attr:`env` are what a driver needs.
    """

    def __init__(self, nodes: int = 2, cpus: int = 1, env: dict[str, str] | None = None) -> None:
        self.nodes = nodes
        self.cpus = cpus
        self.temp_dir = Path(tempfile.mkdtemp(prefix="wa-ray-", dir="/tmp"))
        self._marker = uuid.uuid4().hex
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env: dict[str, str] = {
            **base,
            **(env or {}),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "RAY_USAGE_STATS_ENABLED": "0",
            MARKER: self._marker,
        }
        self.address = ""
        self.log: list[str] = []

    # ---- start -------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> None:
        """Start the nodes and wait until all are alive (whatever started is stopped again
        if one fails: ClusterUnavailable)."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        first = _free_block(HEAD_PORTS + self.nodes * (NODE_PORTS + WORKER_PORTS))
        ports = iter(range(first, first + HEAD_PORTS + self.nodes * (NODE_PORTS + WORKER_PORTS)))
        gcs, client, dashboard = next(ports), next(ports), next(ports)
        self.address = f"127.0.0.1:{gcs}"
        for node in range(self.nodes):
            own = [next(ports) for _ in range(NODE_PORTS)]
            workers = [next(ports) for _ in range(WORKER_PORTS)]
            args = [
                f"--node-manager-port={own[0]}",
                f"--object-manager-port={own[1]}",
                f"--dashboard-agent-listen-port={own[2]}",
                f"--dashboard-agent-grpc-port={own[3]}",
                f"--runtime-env-agent-port={own[4]}",
                f"--metrics-export-port={own[5]}",
                f"--min-worker-port={workers[0]}",
                f"--max-worker-port={workers[-1]}",
                f"--num-cpus={self.cpus}",
                f"--temp-dir={self.temp_dir}",
                "--disable-usage-stats",
            ]
            if node == 0:
                args = [
                    "--head",
                    f"--port={gcs}",
                    f"--ray-client-server-port={client}",
                    "--include-dashboard=false",
                    f"--dashboard-port={dashboard}",
                    *args,
                ]
            else:
                args = [f"--address={self.address}", *args]
            self._ray_start(args, timeout)
        self._wait_for_nodes(timeout)

    def _ray_start(self, args: list[str], timeout: float) -> None:
        ray = Path(sys.executable).with_name("ray")
        cmd = [str(ray) if ray.exists() else "ray", "start", *args]
        try:
            done = subprocess.run(
                cmd, env=self.env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as err:
            raise ClusterUnavailable(f"`ray start` did not return in {timeout:.0f} s") from err
        self.log.append(done.stdout + done.stderr)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-3:])
            raise ClusterUnavailable(
                f"`{' '.join(cmd[:3])} ...` failed:\n{tail}\n{self._raylet_log()}"
            )

    def _raylet_log(self, lines: int = 12) -> str:
        """The end of the newest raylet log: why a node did not come up."""
        logs = sorted(self.temp_dir.glob("session_*/logs/raylet*.out"), key=os.path.getmtime)
        if not logs:
            return "(no raylet log)"
        text = logs[-1].read_text(errors="replace").strip().splitlines()[-lines:]
        return f"{logs[-1].name}:\n" + "\n".join(text)

    def _wait_for_nodes(self, timeout: float) -> None:
        """Until the GCS lists every node alive (`ray start` of a worker returns when its
        raylet runs, not when the head has registered it)."""
        script = (
            "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False, "
            "configure_logging=False); print(sum(n['Alive'] for n in ray.nodes()))"
        )
        deadline = time.monotonic() + timeout
        alive = ""
        while time.monotonic() < deadline:
            done = subprocess.run(
                [sys.executable, "-c", script, self.address],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            alive = done.stdout.strip()
            if alive == str(self.nodes):
                return
            time.sleep(1)
        raise ClusterUnavailable(f"{alive or 'no'} of {self.nodes} nodes alive after {timeout:.0f} s")

    # ---- stop --------------------------------------------------------------------------

    def processes(self) -> list[psutil.Process]:
        """The processes of this cluster: those with its marker in their environment, and
        their descendants (Ray renames its agents' processes, which overwrites what
        ``/proc/<pid>/environ`` shows of them)."""
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and proc.environ().get(MARKER) == self._marker:
                    found[proc.pid] = proc
                    found.update((c.pid, c) for c in proc.children(recursive=True))
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        found.pop(os.getpid(), None)
        return list(found.values())

    def stop(self, grace: float = 5.0) -> list[int]:
        """Terminate this cluster's processes (SIGTERM, then SIGKILL after ``grace``
        seconds) and remove its temp dir; the PIDs that were stopped."""
        stopped: list[int] = []
        for _ in range(3):  # a process may start a child while the others stop
            procs = self.processes()
            if not procs:
                break
            for proc in procs:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.send_signal(signal.SIGTERM)
            _, alive = psutil.wait_procs(procs, timeout=grace)
            for proc in alive:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
            psutil.wait_procs(alive, timeout=grace)
            stopped += [p.pid for p in procs]
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return stopped

    def __enter__(self) -> LocalRayCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
