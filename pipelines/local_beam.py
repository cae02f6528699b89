"""Beam's portable job API on this machine: a local job service and a pool of external SDK
worker processes, the closest offline stand-in for a runner with separate workers
(Dataflow, Flink, Spark).

    python pipelines/local_beam.py        # starts both, prints the pipeline flags, waits
    python pipelines/local_beam.py --install   # workers install --extra_package wheels

    with LocalPortableBeam() as beam_services:
        subprocess.run([sys.executable, "pipelines/beam_batch.py", "--out", "out/beam",
                        *beam_services.pipeline_args])

* the job service: ``python -m apache_beam.runners.portability.local_job_service_main``
  (Beam's own, in the SDK: it takes the job, stages its artifacts and runs it on
  FnApiRunner, which asks the worker pool for SDK workers);
* the worker pool: ``python -m apache_beam.runners.worker.worker_pool_main``, which starts
  one SDK harness process per worker the runner asks for (``--environment_type=EXTERNAL``).

With ``install=True`` (``--install`` on the command line) the pool starts each worker
through :func:`boot`, which does what the SDK container's boot program does on Dataflow:
it fetches the job's staged artifacts and installs the ``--extra_package`` wheels
(offline) before the harness starts. Without it the workers import what the pool's
environment has, and staged wheels are ignored (as ``worker_pool_main`` alone does).

Both pick a free port themselves (port 0; the job service writes it to ``--port_file``,
the pool logs it) and run in a session of their own: stopping one signals its process
group, i.e. the service and the worker processes it started, nothing else on the machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


class ServicesUnavailable(RuntimeError):
    """A Beam service did not start here."""


class LocalPortableBeam:
    """The job service and the worker pool; :attr:`pipeline_args` are the flags that send a
    pipeline to them. ``env``: the services' environment (the SDK workers inherit it: they
    import the pipeline's code, wirearrow included, from it)."""

    def __init__(
        self, env: dict[str, str] | None = None, timeout: float = 60.0, install: bool = False
    ) -> None:
        self.env = {**os.environ, **(env or {})}
        # worker_pool_main starts each SDK worker as a bare `python -c ...` from PATH: put
        # this interpreter's directory first, or a venv's Python that was not activated
        # (`.venv/bin/python -m pytest`) starts workers without Beam and the job hangs.
        bindir = os.path.dirname(sys.executable)
        self.env["PATH"] = os.pathsep.join([bindir, self.env.get("PATH", "")])
        self.install = install
        self.timeout = timeout
        self.dir = Path(tempfile.mkdtemp(prefix="wa-beam-"))
        self._procs: list[subprocess.Popen[bytes]] = []
        self.job_port = self.worker_port = 0

    @property
    def pipeline_args(self) -> list[str]:
        return [
            "--runner=PortableRunner",
            f"--job_endpoint=localhost:{self.job_port}",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{self.worker_port}",
        ]

    def log(self, name: str) -> str:
        """What a service wrote (``job_service`` or ``worker_pool``)."""
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> None:
        """Start both services and wait until they listen (stopped again if one fails)."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        port_file = self.dir / "job_service.port"
        self._spawn(
            "job_service",
            "apache_beam.runners.portability.local_job_service_main",
            "--port=0",
            f"--port_file={port_file}",
            f"--staging_dir={self.dir / 'staging'}",
        )
        pool = ["--service_port=0"]
        if self.install:
            # The pool runs this executable per worker, as it would the SDK image's boot.
            boot = self.dir / "boot"
            me = Path(__file__).resolve()
            boot.write_text(
                f'#!/bin/sh\nexec "{sys.executable}" "{me}" boot --root="{self.dir}" "$@"\n'
            )
            boot.chmod(0o755)
            pool.append(f"--container_executable={boot}")
        self._spawn("worker_pool", "apache_beam.runners.worker.worker_pool_main", *pool)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and not (self.job_port and self.worker_port):
            for proc in self._procs:
                if proc.poll() is not None:
                    raise ServicesUnavailable(f"{proc.args[2]} exited: {self._tails()}")
            if port_file.exists() and port_file.read_text().strip():
                self.job_port = int(port_file.read_text())
            found = re.search(r"worker pool servicer at port: \S+:(\d+)", self.log("worker_pool"))
            if found:
                self.worker_port = int(found.group(1))
            time.sleep(0.2)
        if not (self.job_port and self.worker_port):
            raise ServicesUnavailable(f"not listening after {self.timeout:.0f} s: {self._tails()}")

    def _spawn(self, name: str, module: str, *args: str) -> None:
        with open(self.dir / f"{name}.log", "wb") as log:
            self._procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", module, *args],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def _tails(self) -> str:
        return " | ".join(
            f"{name}: {self.log(name).strip()[-600:]}" for name in ("job_service", "worker_pool")
        )

    def stop(self) -> None:
        """SIGTERM to each service's process group; after up to 10 s, SIGKILL to whatever
        is left in those groups (SDK workers the pool did not stop)."""
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalPortableBeam:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def boot(argv: list[str]) -> None:
    """An SDK worker's boot, as the SDK container's does it: fetch the job's staged
    artifacts (``--extra_package`` wheels among them) from the runner, install the wheels
    offline (``pip --no-index --no-deps``: their dependencies are the environment's), then
    run the SDK harness with them first on ``sys.path``."""
    import argparse

    import grpc
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import (
        beam_artifact_api_pb2_grpc,
        beam_provision_api_pb2,
        beam_provision_api_pb2_grpc,
        beam_runner_api_pb2,
    )
    from apache_beam.runners.portability import artifact_service

    parser = argparse.ArgumentParser()
    for name in (
        "root",
        "id",
        "logging_endpoint",
        "artifact_endpoint",
        "provision_endpoint",
        "control_endpoint",
    ):
        parser.add_argument(f"--{name}", required=True)
    args, _ = parser.parse_known_args(argv)
    provision = beam_provision_api_pb2_grpc.ProvisionServiceStub(
        grpc.insecure_channel(args.provision_endpoint)
    )
    info = provision.GetProvisionInfo(
        beam_provision_api_pb2.GetProvisionInfoRequest(), metadata=[("worker_id", args.id)]
    ).info
    work = Path(tempfile.mkdtemp(prefix=f"{args.id}-", dir=args.root))
    retrieval = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(
        grpc.insecure_channel(args.artifact_endpoint)
    )
    wheels = []
    for artifact in artifact_service.resolve_artifacts(info.dependencies, retrieval, work):
        if artifact.role_urn != common_urns.artifact_roles.STAGING_TO.urn:
            continue
        name = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
            artifact.role_payload
        ).staged_name
        path = beam_runner_api_pb2.ArtifactFilePayload.FromString(artifact.type_payload).path
        os.replace(path, work / name)
        if name.endswith(".whl"):
            wheels.append(str(work / name))
    site = work / "site"
    if wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-index",
                "--no-deps",
                f"--target={site}",
                *wheels,
            ],
            check=True,
        )
        # stderr: the pool keeps the worker's stdout in a pipe it never reads.
        print(
            f"boot: installed {' '.join(Path(w).name for w in wheels)} into {site}",
            file=sys.stderr,
            flush=True,
        )
    sys.path.insert(0, str(site))
    if any(Path(w).name.startswith("wirearrow-") for w in wheels):
        import wirearrow

        print(f"boot: wirearrow from {wirearrow.__file__}", file=sys.stderr, flush=True)
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    SdkHarness(args.control_endpoint, worker_id=args.id).run()


if __name__ == "__main__" and sys.argv[1:2] == ["boot"]:
    boot(sys.argv[2:])
elif __name__ == "__main__":
    with LocalPortableBeam(install="--install" in sys.argv[1:]) as services:
        print("Beam job service and worker pool running; pipeline flags:")
        print("  " + " ".join(services.pipeline_args))
        print(f"logs: {services.dir}/*.log  (Ctrl-C stops both)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
