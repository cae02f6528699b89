"""The engines tier's fixtures (tests/conftest.py imports them): a Kafka-protocol broker, one
local Ray for the session, Beam's direct runner with every bundle's metrics."""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[str]:
    """The bootstrap address of a real Kafka-protocol broker (noida-db) on a free loopback
    port, for the session; stopped by its PID. Skipped only when the binary cannot start."""
    sys.path.insert(0, str(ROOT / "pipelines"))
    from local_kafka import BrokerUnavailable, LocalKafka

    broker = LocalKafka()
    try:
        broker.__enter__()
    except BrokerUnavailable as err:
        pytest.skip(f"no Kafka broker: {err}")
    try:
        yield broker.bootstrap
    finally:
        broker.__exit__(None, None, None)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The SQLAlchemy URL of a real Postgres database (noida-db) on a free loopback port,
    for the session; stopped by its PID. Skipped only when the binary cannot start."""
    sys.path.insert(0, str(ROOT / "pipelines"))
    from local_kafka import BrokerUnavailable, LocalPostgres

    server = LocalPostgres()
    try:
        server.__enter__()
    except BrokerUnavailable as err:
        pytest.skip(f"no Postgres: {err}")
    try:
        yield server.url
    finally:
        server.__exit__(None, None, None)


# ---- one local Ray for the session ---------------------------------------------------------

RAY_CPUS = 2  # the laptop case; the machine has 2 cores
RAY_IDLE_WAIT = 120.0  # seconds a test waits for the CPUs the previous one left busy


def _start_ray(ray: Any) -> None:
    ray.init(num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False


@pytest.fixture(scope="session")
def _ray_for_the_session() -> Iterator[Any]:
    """A private local Ray of RAY_CPUS CPUs, started by the first test that needs it and
    shut down after the session: one start-up instead of one per module."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # someone else's Ray (a docs page's): not ours to reuse
        ray.shutdown()
    _start_ray(ray)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def ray_local(_ray_for_the_session: Any) -> Iterator[None]:
    """The session's local Ray, every CPU free when the test starts.

    Ray Data leaves the tasks an early-stopped execution (``take()``, ``schema()``,
    ``show()``) still had in flight alive, holding their actor and its CPUs, until Python's
    garbage collector breaks a reference cycle of its executor (``StreamingExecutor`` <->
    ``IssueDetectorManager``). A later job that needs an actor beside a task (an actor of
    0.5 CPU and a read task of 1 on the 1 CPU left) then waits forever, and a test that
    is waiting allocates nothing, so the collector never runs. Hence: collect, then wait
    until every CPU is free; a test that finds them still busy after RAY_IDLE_WAIT
    seconds fails, naming what holds them, instead of hanging CI."""
    ray = _ray_for_the_session
    if not ray.is_initialized():  # a docs page ran its own Ray meanwhile, and stopped it
        _start_ray(ray)
    deadline = time.monotonic() + RAY_IDLE_WAIT
    while True:
        gc.collect()
        free = ray.available_resources().get("CPU", 0.0)
        total = ray.cluster_resources().get("CPU", 0.0)
        if free >= total:
            break
        if time.monotonic() > deadline:
            pytest.fail(
                f"the local Ray still has {total - free:g} of {total:g} CPUs busy "
                f"{RAY_IDLE_WAIT:.0f} s after the previous test: something it started "
                "is still running (an actor pool not released, a task that never returns)"
            )
        time.sleep(0.2)
    yield


# ---- Beam ---------------------------------------------------------------------------------


@pytest.fixture
def complete_direct_metrics(monkeypatch) -> None:
    """The direct runner's streaming engine with every bundle's metrics, not the first's.

    Its TransformExecutor makes a MetricsContainer per bundle and passes it to its
    thread's ``StateSampler.scoped_state(step, "process", metrics_container=...)``, which
    caches the ScopedState by step and state name and ignores the container on later
    calls: from a step's second bundle on a thread, counters go into the first bundle's
    container, already committed, and are lost (Beam 2.77,
    ``runners/direct/executor.py``, ``runners/worker/statesampler.py``; docs/beam.md).
    This drops the cached state when it holds another container (a no-op once Beam
    passes each bundle's container on)."""
    from apache_beam.runners.worker import statesampler

    scoped = statesampler.StateSampler.scoped_state

    def fresh(self, name_context, state_name, io_target=None, metrics_container=None):
        state = scoped(self, name_context, state_name, io_target, metrics_container)
        if metrics_container is not None and state.metrics_container is not metrics_container:
            self._states_by_name.clear()
            state = scoped(self, name_context, state_name, io_target, metrics_container)
        return state

    monkeypatch.setattr(statesampler.StateSampler, "scoped_state", fresh)
