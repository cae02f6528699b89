from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import wirearrow as wa  # noqa: E402

EXAMPLES = ROOT / "examples" / "schema"


@pytest.fixture(scope="session")
def bid_schema() -> wa.Schema:
    return wa.Schema.from_proto(
        EXAMPLES / "bidrequest.proto", "BidRequestEvent", import_paths=[EXAMPLES]
    )


@pytest.fixture(scope="session")
def bid_corpus() -> list[bytes]:
    import corpus

    return corpus.generate(300, seed=7)


@pytest.fixture(scope="session")
def bid_class(bid_schema: wa.Schema):
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(bid_schema.descriptor)


@pytest.fixture
def compile_proto(tmp_path: Path):
    """compile_proto(source, message) -> (Schema, message class) of a .proto written to tmp."""
    from google.protobuf import message_factory

    counter = iter(range(1000))

    def build(source: str, message: str) -> tuple[wa.Schema, type]:
        path = tmp_path / f"t{next(counter)}.proto"
        path.write_text(source)
        schema = wa.Schema.from_proto(path, message)
        return schema, message_factory.GetMessageClass(schema.descriptor)

    return build


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


# ---- test processes: Ray's tests in one, Beam's in another, everything else spread -------

# Modules whose tests start Ray, Beam's multi-process runner, a broker or a notebook kernel,
# whether or not they carry the ray/beam marks (a docs page's examples, the pipelines).
ENGINE_MODULES = {
    "test_docs", "test_notebook", "test_pipelines", "test_protojson_engines", "test_kafka",
    "test_cache",
}  # fmt: skip
RAY_MARKS = ("ray", "cluster")
RAY_FIXTURES = ("ray_local", "_ray_for_the_session", "kafka_broker")


# tryfirst: xdist's worker reads the xdist_group marks in its own modifyitems hook (it appends
# "@group" to each node id, which is what its loadgroup scheduler groups by); a conftest hook
# is otherwise called after it, and marks added then were never seen.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n 2 --dist loadgroup``, as ``./run test`` runs the suite) every
    test that runs Ray or a broker goes to one worker, in collection order: they share that
    worker's one local Ray and broker, and two Rays never compete for the 2 CPUs each
    claims. Beam's tests (FnApiRunner processes, no Ray) go to another worker together: they
    share no state with Ray's, and one worker for both was most of the suite's time. The rest
    (most of the suite, single-threaded Python) runs on the other workers meanwhile. Without
    xdist the marks do nothing."""
    for item in items:
        module = item.module.__name__ if item.module is not None else ""
        ray = any(item.get_closest_marker(m) for m in RAY_MARKS) or any(
            f in item.fixturenames for f in RAY_FIXTURES
        )
        beam = item.get_closest_marker("beam") is not None
        if beam and not ray:
            item.add_marker(pytest.mark.xdist_group("beam"))
        elif ray or module in ENGINE_MODULES:
            item.add_marker(pytest.mark.xdist_group("engines"))


_GROUPING_LOST = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """On a worker of ``--dist loadgroup``, after xdist's own hook: a test whose group did
    not reach its node id fails (below) instead of running on whichever worker. On pytest
    9.2 xdist's suffix no longer takes effect (pytest-dev/pytest-xdist#1386): every group is
    silently spread over the workers, and two sdist builds in the checkout, or two local
    Rays, run at once. (A worker's UsageError would be an INTERNALERROR without its text.)"""
    if not getattr(session.config.option, "loadgroup", False):  # set only on such a worker
        return
    why = (
        f"--dist loadgroup is not grouping this test on pytest {pytest.__version__} "
        "(pytest-dev/pytest-xdist#1386): install the pytest that pyproject.toml's test "
        "group names, or run with -n 0"
    )
    for item in session.items:
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid:
            item.stash[_GROUPING_LOST] = why


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    why = item.stash.get(_GROUPING_LOST, None)
    if why is not None:  # before any fixture: a module's sdist build would race already
        pytest.fail(why, pytrace=False)
