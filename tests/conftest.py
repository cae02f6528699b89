from __future__ import annotations

import ast
import functools
import gc
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import depth  # noqa: E402, F401 (the hypothesis profile of a test that states no count)
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


@pytest.fixture(scope="session")
def compile_proto(tmp_path_factory: pytest.TempPathFactory):
    """compile_proto(source, message) -> (Schema, message class) of a .proto source: compiled
    once a session (protoc runs as a subprocess), as ``t<n>.proto`` in a directory of its own."""
    from google.protobuf import message_factory

    counter = iter(range(1 << 20))

    @functools.cache
    def build(source: str, message: str) -> tuple[wa.Schema, type]:
        path = tmp_path_factory.mktemp("proto") / f"t{next(counter)}.proto"
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


# ---- tiers -------------------------------------------------------------------------------

# A test's tier follows from what it uses: the marks it carries, and the marks its fixtures
# imply. The unit tier is the default (pyproject.toml's addopts: -m unit); README "Tests".
FIXTURE_MARKS = {"ray_local": "ray", "kafka_broker": "kafka", "complete_direct_metrics": "beam"}
ENGINES = {"ray", "beam", "kafka"}
RELEASE = {"cluster", "browser", "packaging", "notebook", "console", "bench", "slow"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks added here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, mark in FIXTURE_MARKS.items():
            if fixture in item.fixturenames:
                item.add_marker(mark)
        marks = {m.name for m in item.iter_markers()}
        item.add_marker("release" if marks & RELEASE else "engines" if marks & ENGINES else "unit")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The unit tier does not import a module whose module-level pytestmark puts all its
    tests in another tier: importing Ray or Beam only to deselect their tests would cost
    each worker seconds. (Read from the source: the module is not imported to find out.)"""
    if config.option.markexpr != "unit" or collection_path.suffix != ".py":
        return None
    marks = {
        node.attr
        for statement in ast.parse(collection_path.read_bytes()).body
        if isinstance(statement, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in statement.targets)
        for node in ast.walk(statement.value)
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "pytest.mark"
    }
    return bool(marks & (ENGINES | RELEASE)) or None


# A unit-tier run imports neither Ray nor Beam (the hook above keeps their test modules out),
# so a unit test that imports them, to start them or not, fails: it needs the mark for it.
ENGINE_MODULES = {"ray", "apache_beam"}
_IMPORTED = pytest.StashKey[set[str]]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_IMPORTED] = ENGINE_MODULES & sys.modules.keys()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    result = yield
    imported = (ENGINE_MODULES & sys.modules.keys()) - item.stash[_IMPORTED]
    if imported and item.get_closest_marker("unit"):
        pytest.fail(f"a unit-tier test that imports {', '.join(sorted(imported))}: mark it "
                    "ray or beam (the engines tier: -m engines)", pytrace=False)  # fmt: skip
    return result
