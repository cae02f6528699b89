"""Confluent-framed test records, written by confluent-kafka's own ProtobufSerializer
against its in-process mock registry: exactly the bytes real producers put on Kafka."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import wirearrow as wa

PROTOS = Path(__file__).resolve().parent / "protos" / "confluent"


@functools.cache  # once a process: protoc is a subprocess
def schemas() -> tuple[wa.Schema, wa.Schema]:
    """(v1, v2) of shop.Order, as two separately compiled files."""
    v1 = wa.Schema.from_proto(PROTOS / "shop_v1.proto", "shop.Order", import_paths=[PROTOS])
    v2 = wa.Schema.from_proto(PROTOS / "shop_v2.proto", "shop.Order", import_paths=[PROTOS])
    return v1, v2


class Producer:
    """Serializes messages of any schema's classes with one mock registry (ids from 1)."""

    def __init__(self) -> None:
        pytest.importorskip("confluent_kafka.schema_registry.protobuf")
        from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
            MockSchemaRegistryClient,
        )

        self.registry = MockSchemaRegistryClient({"url": "mock://wirearrow-tests"})
        self._serializers: dict[tuple[str, str], object] = {}

    def serialize(self, message, topic: str = "orders") -> bytes:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        key = (topic, message.DESCRIPTOR.file.name + "/" + message.DESCRIPTOR.full_name)
        ser = self._serializers.get(key)
        if ser is None:
            ser = self._serializers[key] = ProtobufSerializer(type(message), self.registry, {})
        return ser(message, SerializationContext(topic, MessageField.VALUE))  # type: ignore[operator]


def orders(v1: wa.Schema, v2: wa.Schema, n: int = 40) -> tuple[list[bytes], list[bytes], list[int]]:
    """n Confluent-framed orders alternating v1 and v2 (schema ids 1 and 2), their payloads
    (what the protobuf runtime serializes), and the schema id of each."""
    from google.protobuf import message_factory

    producer = Producer()
    classes = [message_factory.GetMessageClass(s.descriptor) for s in (v1, v2)]
    framed, payloads, ids = [], [], []
    for i in range(n):
        version = i % 2
        m = classes[version](id=f"o{i}")
        for j in range(i % 4):
            line = m.lines.add(sku=f"s{j}", qty=j + i)
            if version:
                line.note.text = f"n{i}.{j}"
        if version:
            m.total = i * 1.5
        framed.append(producer.serialize(m))
        payloads.append(m.SerializeToString())
        ids.append(version + 1)
    return framed, payloads, ids
