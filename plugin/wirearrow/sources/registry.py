"""Schemas from a Confluent-compatible schema registry: the ``schemas=`` of Confluent records.

A :class:`Registry` is a look-up ``schema_id -> Schema`` (what
:class:`~wirearrow.sources.confluent.SchemaIds` calls for an id it has not seen): it fetches
the schema's ``.proto`` text and, transitively, the texts of its references, compiles them
in this process (:meth:`Schema.from_sources`: no protoc binary) and keeps the result for
the life of the process. A URL, a client configuration or a confluent-kafka
``SchemaRegistryClient`` (or its ``MockSchemaRegistryClient``) can be one.

Built from a URL or a configuration, a Registry pickles as that configuration: each worker
process (Ray, Beam) builds its own client and fetches each id once, the schemas cached
process-wide by (configuration, id). A client object pickles as its configuration too; a
mock client lives in one process and does not pickle.

An id the registry does not know (HTTP 404), a schema that is not PROTOBUF, or text that
does not compile makes the records of that id bad records saying so (a LookupError, which
SchemaIds turns into their reason); a registry that cannot be reached raises: a job should
stop or retry, not dead-letter everything.
"""

from __future__ import annotations

import base64
import re
import threading
from collections.abc import Mapping
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from wirearrow.errors import SchemaError
from wirearrow.schema import Schema

__all__ = ["Registry", "registry_source"]

# Schemas by (configuration key, id), for every Registry of this process built from a
# configuration: a worker fetches and compiles each id once, however many tasks it runs.
_SCHEMAS: dict[tuple[tuple, int], Schema] = {}
_FETCH_LOCK = threading.Lock()
_MAX_REFERENCES = 1000  # references followed per schema (a loop or a huge graph: refused)


class Registry:
    """A Confluent-compatible schema registry as the schemas of Confluent schema ids.

    ``registry``: the registry's URL (``http://host:8081``; several comma-separated, as
    confluent-kafka takes them), a confluent-kafka client configuration (a mapping with
    ``url``, ``basic.auth.user.info``, ``ssl.*``...), or a client object with
    ``get_schema(id)`` and ``get_version(subject, version)`` (confluent-kafka's
    ``SchemaRegistryClient`` or ``MockSchemaRegistryClient``). A URL or configuration needs
    confluent-kafka (``pip install 'confluent-kafka[schemaregistry]'``).
    """

    def __init__(self, registry: str | Mapping[str, Any] | Any) -> None:
        self._client: Any = None
        self._conf: dict[str, Any] | None = None
        self._own: dict[int, Schema] = {}  # a client object's schemas (not shared)
        self._lock = threading.Lock()
        if isinstance(registry, Registry):
            self._conf, self._client = registry._conf, registry._client
            self._own = registry._own
        elif isinstance(registry, str):
            if not registry.strip():
                raise ValueError("a schema registry URL cannot be empty")
            self._conf = {"url": registry.strip()}
        elif isinstance(registry, Mapping):
            if not isinstance(registry.get("url"), str):
                raise ValueError("a schema registry configuration needs a 'url'")
            self._conf = dict(registry)
        elif callable(getattr(registry, "get_schema", None)) and callable(
            getattr(registry, "get_version", None)
        ):
            self._client = registry
        else:
            raise TypeError(
                "a schema registry is a URL, a client configuration or a client with "
                f"get_schema() and get_version(), not {type(registry).__name__}"
            )
        self._key = None if self._conf is None else tuple(sorted(self._conf.items()))

    @property
    def url(self) -> str:
        """The registry's URL (a mock client's ``mock://...``; ``?`` when unknown)."""
        conf = self._conf if self._conf is not None else _client_conf(self._client) or {}
        return str(conf.get("url", "?"))

    def __repr__(self) -> str:
        return f"Registry({self.url!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Registry):
            return NotImplemented
        if self._key is not None:
            return self._key == other._key
        return self._client is other._client

    def __hash__(self) -> int:
        return hash(self._key) if self._key is not None else id(self._client)

    def __reduce__(self) -> tuple:
        if self._conf is not None:
            return (Registry, (self._conf,))
        conf = _client_conf(self._client)
        if conf is None or str(conf.get("url", "")).startswith("mock://"):
            raise TypeError(
                f"{type(self._client).__name__} lives in this process and cannot be sent to "
                "another: give the registry's URL or configuration instead"
            )
        return (Registry, (dict(conf),))

    def client(self) -> Any:
        """The client (built from the configuration on first use, in each process)."""
        with self._lock:
            if self._client is None:
                try:
                    from confluent_kafka.schema_registry import SchemaRegistryClient
                except ImportError as err:
                    raise ImportError(
                        "a schema registry given by URL needs confluent-kafka: pip install "
                        "'confluent-kafka[schemaregistry]'"
                    ) from err
                self._client = SchemaRegistryClient(dict(self._conf or {}))
            return self._client

    def __call__(self, schema_id: int) -> Schema:
        """The schema of ``schema_id``, rooted at the first message of its file (the
        message-index path of each record names its message). LookupError: the registry
        does not know it, or it is not a protobuf schema that compiles."""
        held = self._held(schema_id)
        if held is not None:
            return held
        with _FETCH_LOCK:  # one fetch per id even when several threads meet it at once
            held = self._held(schema_id)
            if held is not None:
                return held
            schema = self._fetch(schema_id)
            if self._key is not None:
                _SCHEMAS[(self._key, schema_id)] = schema
            else:
                self._own[schema_id] = schema
            return schema

    def _held(self, schema_id: int) -> Schema | None:
        if self._key is not None:
            return _SCHEMAS.get((self._key, schema_id))
        return self._own.get(schema_id)

    def _fetch(self, schema_id: int) -> Schema:
        client = self.client()
        try:
            schema = client.get_schema(schema_id)
        except Exception as err:
            if _not_found(err):
                raise LookupError(f"not registered at {self.url}") from err
            raise
        kind = getattr(schema, "schema_type", None) or "AVRO"  # the registry's default type
        if kind != "PROTOBUF":
            raise LookupError(f"a {kind} schema at {self.url}, not PROTOBUF")
        sources = {_ROOT: schema.schema_str}
        self._add_references(client, schema, sources, f"schema id {schema_id}")
        described = {name: _described(text) for name, text in sources.items()}
        if all(d is not None for d in described.values()):
            return _from_descriptors(described, self.url)
        if any(d is not None for d in described.values()):
            raise LookupError(
                f"its files at {self.url} mix .proto text and serialized descriptors"
            )
        try:
            return Schema.from_sources(sources, _ROOT)
        except SchemaError as err:
            raise LookupError(f"its .proto text at {self.url} does not compile: {err}") from err

    def _add_references(self, client: Any, schema: Any, sources: dict[str, str], what: str) -> None:
        """Every file ``schema`` imports through registry references, transitively."""
        pending = [(what, ref) for ref in (getattr(schema, "references", None) or [])]
        seen: set[tuple[str, int]] = set()
        while pending:
            owner, ref = pending.pop()
            key = (ref.subject, int(ref.version))
            if key in seen:
                continue
            seen.add(key)
            if len(seen) > _MAX_REFERENCES:
                raise LookupError(f"{what} has more than {_MAX_REFERENCES} references")
            try:
                registered = client.get_version(ref.subject, ref.version)
            except Exception as err:
                if _not_found(err):
                    raise LookupError(
                        f"{owner} imports {ref.name!r} as subject {ref.subject!r} version "
                        f"{ref.version}, which {self.url} does not have"
                    ) from err
                raise
            if ref.name == _ROOT:
                raise LookupError(f"{owner} imports a file named {_ROOT!r}, the name kept for itself")
            sources[ref.name] = registered.schema.schema_str
            owner = f"{ref.name} ({ref.subject} v{ref.version})"
            pending.extend((owner, r) for r in (registered.schema.references or []))


# The file name the registered schema itself is compiled under (its references keep theirs).
_ROOT = "registry_schema.proto"


_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")


def _described(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """A schema registered as a base64 serialized FileDescriptorProto (what confluent-kafka's
    ProtobufSerializer sends; Confluent's server turns it into text, its mock keeps it as
    given), else None: .proto text."""
    if not isinstance(text, str) or not _BASE64.fullmatch(text):
        return None
    try:
        file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=False))
    except (ValueError, DecodeError):
        return None
    return file if file.name else None


def _from_descriptors(files: dict[str, descriptor_pb2.FileDescriptorProto], url: str) -> Schema:
    root = files[_ROOT]
    named = []
    for name, file in files.items():
        if name != _ROOT and file.name != name:  # imports are by the reference's name
            file.name = name
        named.append(file)
    if not root.message_type:
        raise LookupError(f"its file at {url} declares no message")
    package = f"{root.package}." if root.package else ""
    data = descriptor_pb2.FileDescriptorSet(file=named).SerializeToString()
    try:
        return Schema.from_descriptor_set(data, f"{package}{root.message_type[0].name}")
    except SchemaError as err:
        raise LookupError(f"its descriptors at {url} do not build: {err}") from err


def _client_conf(client: Any) -> dict[str, Any] | None:
    config = getattr(client, "config", None)
    try:
        conf = config() if callable(config) else None
    except Exception:
        return None
    return dict(conf) if isinstance(conf, Mapping) else None


def _not_found(err: Exception) -> bool:
    """Whether a client's error says the id (or subject version) does not exist: HTTP 404,
    or the mock client's own SchemaRegistryError with that status."""
    status = getattr(err, "http_status_code", None)
    return status == 404


def registry_source(value: object) -> Registry | None:
    """``value`` as a Registry when it names one (a URL string or a client object), else
    None: what ``RecordFormat(schemas=...)`` accepts beside mappings and functions."""
    if isinstance(value, Registry):
        return value
    if isinstance(value, str):
        return Registry(value)
    if not isinstance(value, Mapping) and callable(getattr(value, "get_schema", None)):
        return Registry(value)
    return None
