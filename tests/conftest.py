from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import depth  # noqa: E402, F401 (the hypothesis profile of a test that states no count)
import wirearrow as wa  # noqa: E402
from engine_fixtures import (  # noqa: E402, F401 (the engines tier's fixtures, for every module)
    _ray_for_the_session,
    complete_direct_metrics,
    kafka_broker,
    postgres_url,
    ray_local,
)

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


# ---- tiers -------------------------------------------------------------------------------

# A test's tier follows from what it uses: the marks it carries, and the marks its fixtures
# imply. The unit tier is the default (pyproject.toml's addopts: -m unit); README "Tests".
FIXTURE_MARKS = {
    "ray_local": "ray", "kafka_broker": "kafka", "postgres_url": "postgres",
    "complete_direct_metrics": "beam",
}
ENGINES = {"ray", "beam", "kafka", "postgres"}
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
    try:
        module = ast.parse(collection_path.read_bytes())
    except SyntaxError:
        return None  # pytest's import reports it
    marks = {
        node.attr
        for statement in module.body
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
