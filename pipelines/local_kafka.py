"""A real Kafka-protocol broker (and a Postgres server) on this machine, for the pipelines
and their tests.

``noida-db`` (PyPI) is a single binary that speaks the Kafka protocol and Postgres's, among
others: each service started on a free loopback port with a temporary data directory,
ready when the port accepts connections, stopped by its PID (never by name: other brokers
may run on the machine). The ``noida-db`` command is a Python launcher that runs the binary
as its child: the server starts in a session of its own, and stopping it signals that
session's process group (the launcher and the binary, nothing else).

:class:`LocalKafka` gives a broker's bootstrap address, :class:`LocalPostgres` a database
URL (the Iceberg SQL catalog's real-database case).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


class BrokerUnavailable(RuntimeError):
    """The broker binary is missing or could not start here."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary() -> str:
    found = shutil.which("noida-db")
    if found is None:  # installed in this interpreter's environment, not on PATH
        candidate = Path(sys.executable).parent / "noida-db"
        if candidate.exists():
            found = str(candidate)
    if found is None:
        raise BrokerUnavailable("noida-db is not installed (pip install noida-db)")
    return found


class LocalService:
    """One noida-db service (``service``) for a ``with`` block's duration, on ``port``."""

    service = ""

    def __init__(self, ready_seconds: float = 20.0) -> None:
        self.ready_seconds = ready_seconds
        self.port = 0
        self.bootstrap = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._data_dir: str | None = None

    def __enter__(self) -> LocalService:
        binary = _binary()
        self._data_dir = tempfile.mkdtemp(prefix="wirearrow-kafka-")
        self.port = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        service = self.service
        log = open(os.path.join(self._data_dir, "broker.log"), "wb")
        try:
            self._process = subprocess.Popen(
                [
                    binary,
                    "start",
                    "--data-dir",
                    os.path.join(self._data_dir, "data"),
                    "--host",
                    "127.0.0.1",
                    "--only",
                    service,
                    f"--{service}-port",
                    str(self.port),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as err:
            self._cleanup()
            raise BrokerUnavailable(f"noida-db cannot start: {err}") from err
        finally:
            log.close()
        deadline = time.monotonic() + self.ready_seconds
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                output = Path(self._data_dir, "broker.log").read_text(errors="replace")
                self._cleanup()
                raise BrokerUnavailable(f"noida-db exited at start: {output[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.__exit__(None, None, None)
        raise BrokerUnavailable(f"noida-db did not listen on {self.bootstrap} in time")

    def __exit__(self, *exc: object) -> None:
        process, self._process = self._process, None
        if process is not None:
            self._signal(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._signal(process.pid, signal.SIGKILL)
                process.wait()
        self._cleanup()

    @staticmethod
    def _signal(pid: int, sig: int) -> None:
        """Signal the broker's own process group (its session leader is ``pid``)."""
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(pid, sig)

    def _cleanup(self) -> None:
        if self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None


class LocalKafka(LocalService):
    """``with LocalKafka() as kafka: kafka.bootstrap`` -- a broker for the block's duration."""

    service = "kafka"

    def __enter__(self) -> LocalKafka:
        super().__enter__()
        return self


class LocalPostgres(LocalService):
    """``with LocalPostgres() as pg: pg.url`` -- a Postgres database for the block's
    duration (user ``postgres``, database ``postgres``, no password)."""

    service = "postgres"

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the database (what pyiceberg's SQL catalog takes)."""
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def __enter__(self) -> LocalPostgres:
        super().__enter__()
        return self
