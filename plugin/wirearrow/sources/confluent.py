"""Records in the Confluent Schema Registry wire format (what every Confluent serializer
writes to Kafka): magic byte 0, the schema id (4 bytes big-endian), the message-index
array (a zigzag varint count, then that many zigzag varint indexes; a single 0 byte means
``[0]``), then the protobuf payload.

The prefix is read in C over the whole batch (``_core.framing.confluent_prefixes``): the
payload is decoded where it lies, only each record's start moves. Which schema ids are
accepted, and which index path each must carry, is decided here once per schema id: the
path of the plan's message within the file the id names (nested types included). A record
whose schema id is not mapped, whose magic byte is not 0, whose prefix is cut short or
whose index path names another message is a bad record with that reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

import numpy as np
from google.protobuf.descriptor import Descriptor, FileDescriptor

from wirearrow._core.framing import (
    CONFLUENT_BAD_INDEX,
    CONFLUENT_BAD_MAGIC,
    CONFLUENT_OK,
    CONFLUENT_TRUNCATED,
    CONFLUENT_UNKNOWN_ID,
    confluent_prefixes,
)
from wirearrow.schema import Schema
from wirearrow.sources.varint import read_varint, varint, zigzag

__all__ = ["SchemaIds", "SchemaLookup", "confluent_prefix", "message_index", "refused", "strip_prefixes"]

SchemaLookup = Mapping[int, Schema] | Callable[[int], Schema | None]

# An id whose file does not hold the plan's message: a path no record can carry.
_NO_PATH = (-1,)


class SchemaIds:
    """Which Confluent schema ids a transcoder accepts, and the schema each one names.

    ``schemas``: a ``{schema_id: Schema}`` mapping (the schema of each registered version:
    its root message's file is the file the message-index path is resolved in), or a
    function ``schema_id -> Schema | None`` (e.g. a registry client look-up; None: not
    accepted), called once per new id and remembered. Several ids (versions of a topic)
    can name compatible schemas: every record is decoded with the transcoder's plan, the
    id only has to say the record holds the plan's message.
    """

    def __init__(self, schemas: SchemaLookup) -> None:
        if isinstance(schemas, SchemaIds):
            schemas = schemas._source
        if not isinstance(schemas, Mapping) and not callable(schemas):
            raise TypeError(
                "schemas must be a {schema_id: Schema} mapping or a function schema_id -> "
                f"Schema, not {type(schemas).__name__}"
            )
        self._source = schemas
        self._lock = threading.Lock()
        self._known: dict[int, Schema | None] = {}
        self._why: dict[int, str] = {}  # ids a look-up refused, and why
        self._tables: dict[str, tuple[int, np.ndarray, np.ndarray, np.ndarray]] = {}
        if isinstance(schemas, Mapping):
            for sid, schema in schemas.items():
                self._known[_checked_id(sid)] = _checked_schema(sid, schema)

    def __reduce__(self) -> tuple:
        return (SchemaIds, (self._source,))

    def schema(self, schema_id: int) -> Schema | None:
        """The schema of ``schema_id`` (None: not accepted).

        A look-up function refuses an id by returning None, or by raising ``LookupError``
        saying why (a registry that does not know it): the records of that id are bad
        records with that reason. Any other exception (a registry that cannot be reached)
        propagates.
        """
        with self._lock:
            if schema_id in self._known:
                return self._known[schema_id]
        found = None
        if not isinstance(self._source, Mapping):
            try:
                found = _checked_schema(schema_id, self._source(schema_id))
            except LookupError as err:
                with self._lock:
                    self._why[schema_id] = str(err) or f"unknown schema id {schema_id}"
        with self._lock:
            self._known[schema_id] = found
            self._tables.clear()
        return found

    @property
    def generation(self) -> int:
        """A number that changes whenever an id is learned."""
        return len(self._known)

    def accepted(self) -> tuple[int, dict[int, Schema]]:
        """(a number that changes whenever an id is learned, {id: schema} of the ids
        accepted so far)."""
        with self._lock:
            return len(self._known), {sid: s for sid, s in self._known.items() if s is not None}

    def learn(self, schema_ids: Iterable[int]) -> bool:
        """Look up ids not seen yet (a look-up function only); True when any was new."""
        if isinstance(self._source, Mapping):
            return False
        new = [int(s) for s in schema_ids if int(s) not in self._known]
        for sid in new:
            self.schema(sid)
        return bool(new)

    def tables(self, message: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sorted ids, path offsets, path values) for the C prefix reader: the index path
        of ``message`` within each accepted id's file."""
        with self._lock:
            cached = self._tables.get(message)
            if cached is not None and cached[0] == len(self._known):
                return cached[1], cached[2], cached[3]
            known = sorted((sid, s) for sid, s in self._known.items() if s is not None)
        paths = [_path_in_file(schema, message) or _NO_PATH for _, schema in known]
        ids = np.array([sid for sid, _ in known], dtype=np.int64)
        offsets = np.zeros(len(paths) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(p) for p in paths])
        values = np.array([i for p in paths for i in p], dtype=np.int32)
        with self._lock:
            self._tables[message] = (len(self._known), ids, offsets, values)
        return ids, offsets, values

    def reason(self, status: int, record: bytes, message: str) -> str:
        """Why a record's prefix was refused, in words (the rare path: per bad record)."""
        if status == CONFLUENT_BAD_MAGIC:
            return f"not Confluent framing: magic byte {record[0]:#04x}, not 0"
        if status == CONFLUENT_TRUNCATED:
            return f"truncated Confluent prefix ({len(record)} bytes)"
        if status == CONFLUENT_BAD_INDEX:
            return "bad Confluent message-index array"
        sid = int.from_bytes(record[1:5], "big")
        if status == CONFLUENT_UNKNOWN_ID:
            why = self._why.get(sid)
            if why is not None:
                return f"Confluent schema id {sid}: {why}"
            return f"Confluent schema id {sid} is not mapped to a schema"
        path = _read_path(record)
        schema = self.schema(sid)
        named = _message_at(schema.descriptor.file, path) if schema is not None else None
        what = f"{named}" if named else "no message of its file"
        return (
            f"Confluent schema id {sid}, message index {list(path)} names {what}, "
            f"not {message}"
        )


def strip_prefixes(
    schema_ids: SchemaIds, message: str, data: memoryview, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(payload starts, schema ids, statuses) of the records ``data[starts[i]:ends[i]]``.

    A look-up function is asked about the ids of the batch it has not seen, and the batch
    read again (once per new id over a transcoder's life).
    """
    while True:
        ids, offsets, values = schema_ids.tables(message)
        out = confluent_prefixes(data, starts, ends, ids, offsets, values)
        payload = np.frombuffer(memoryview(out[0]), dtype=np.int64)
        found = np.frombuffer(memoryview(out[1]), dtype=np.int64)
        status = np.frombuffer(memoryview(out[2]), dtype=np.uint8)
        unknown = status == CONFLUENT_UNKNOWN_ID
        if not unknown.any() or not schema_ids.learn(np.unique(found[unknown]).tolist()):
            return payload, found, status


def refused(status: np.ndarray) -> np.ndarray:
    """Positions of the records whose prefix was refused."""
    return np.flatnonzero(status != CONFLUENT_OK)


def message_index(schema: Schema) -> tuple[int, ...]:
    """The message-index path of ``schema``'s root message within its own file (what a
    Confluent serializer writes before its records: ``(0,)`` for the file's first message,
    nested types included)."""
    path = _path_in_file(schema, schema.message_name)
    assert path is not None  # a schema's root message is always in its own file
    return path


def confluent_prefix(schema_id: int, index: Iterable[int] = (0,)) -> bytes:
    """The Confluent prefix of every record of schema id ``schema_id`` whose message is at
    ``index`` in the schema's file: magic 0, the id (4 bytes big-endian), the index array
    (zigzag varint count then indexes; ``[0]`` as the single byte 0, as Confluent's
    serializers write it)."""
    sid = _checked_id(schema_id)
    path = [int(i) for i in index]
    if not path or any(i < 0 for i in path):
        raise ValueError(f"a message index is a non-empty path of indexes >= 0, not {path!r}")
    out = bytearray(b"\0" + sid.to_bytes(4, "big"))
    if path == [0]:
        out.append(0)
        return bytes(out)
    for value in [len(path), *path]:
        out += varint(zigzag(value))
    return bytes(out)


def _checked_id(sid: object) -> int:
    if isinstance(sid, bool) or not isinstance(sid, int | np.integer) or not 0 <= sid < 2**32:
        raise ValueError(f"a Confluent schema id is an unsigned 32-bit integer, not {sid!r}")
    return int(sid)


def _checked_schema(sid: object, schema: object) -> Schema | None:
    if schema is not None and not isinstance(schema, Schema):
        raise TypeError(
            f"schema id {sid!r} maps to a {type(schema).__name__}, not a wirearrow.Schema"
        )
    return schema


def _path_in_file(schema: Schema, message: str) -> tuple[int, ...] | None:
    """The message-index path of ``message`` in the file of ``schema``'s root message."""
    file = schema.descriptor.file
    try:
        target: Descriptor = file.pool.FindMessageTypeByName(message)
    except KeyError:
        return None
    if target.file.name != file.name:
        return None
    path: list[int] = []
    node = target
    while node.containing_type is not None:
        parent = node.containing_type
        path.append([d.full_name for d in parent.nested_types].index(node.full_name))
        node = parent
    path.append([d.full_name for d in file.message_types_by_name.values()].index(node.full_name))
    return tuple(reversed(path))


def _message_at(file: FileDescriptor, path: tuple[int, ...]) -> str | None:
    types = list(file.message_types_by_name.values())
    found = None
    for i in path:
        if i >= len(types):
            return None
        found = types[i]
        types = list(found.nested_types)
    return found.full_name if found is not None else None


def _read_path(record: bytes) -> tuple[int, ...]:
    def signed(at: int) -> tuple[int, int]:
        value, at = read_varint(record, at)
        return (value >> 1) ^ -(value & 1), at  # ZigZag back

    count, pos = signed(5)
    if count == 0:
        return (0,)
    path = []
    for _ in range(count):
        index, pos = signed(pos)
        path.append(index)
    return tuple(path)
