from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

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
