"""Schemas: a root message plus the ``FileDescriptorSet`` that defines it.

A :class:`Schema` is what travels to workers, so its state is exactly two values: the
serialized set (every file, imports included, dependencies before dependents) and the root
message's full name. Descriptors are rebuilt from them on first use, in a private
``DescriptorPool`` per set: never the process-wide default pool, so the user's generated
classes and our descriptors can never clash over a file name.

Three ways in:

* :meth:`Schema.from_proto` compiles ``.proto`` source with the ``protoc`` bundled in
  ``grpcio-tools`` (no protoc binary needed; ``google/protobuf/*.proto`` are built in);
* :meth:`Schema.from_descriptor_set` takes a serialized set (``protoc --descriptor_set_out``,
  ``buf build -o``);
* :meth:`Schema.from_message` takes a generated message class or instance.

Messages are named by full name (``pkg.Outer.Inner``) or by any dot-separated suffix of it
that is unique in the set (``Inner``, ``Outer.Inner``).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.resources
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import DecodeError

from wirearrow.errors import SchemaError

__all__ = ["Schema"]

# How many message names an error message lists before eliding the rest.
_MAX_LISTED = 20
_WKT_PREFIX = "google/protobuf/"


class _FileSet:
    """One serialized descriptor set and what is derived from it, built on first use.

    Shared by every :class:`Schema` that :meth:`Schema.message` derives from the same set,
    so they share one pool and their descriptors are the same objects.
    """

    __slots__ = ("_lock", "_messages", "_pool", "_proto", "data")

    def __init__(self, data: bytes, proto: descriptor_pb2.FileDescriptorSet | None = None) -> None:
        self.data = data
        self._proto = proto
        self._messages: dict[str, tuple[str, bool]] | None = None
        self._pool: descriptor_pool.DescriptorPool | None = None
        # Two threads building the pool at once would hand out descriptors from two
        # different pools, which protobuf treats as unrelated types.
        self._lock = threading.Lock()

    @property
    def proto(self) -> descriptor_pb2.FileDescriptorSet:
        if self._proto is None:
            self._proto = descriptor_pb2.FileDescriptorSet.FromString(self.data)
        return self._proto

    @property
    def messages(self) -> dict[str, tuple[str, bool]]:
        """Full name → (file name, is a synthetic map-entry type), for every message."""
        if self._messages is None:
            found: dict[str, tuple[str, bool]] = {}
            for file in self.proto.file:
                prefix = f"{file.package}." if file.package else ""
                pending = [(prefix, message) for message in file.message_type]
                while pending:
                    scope, message = pending.pop()
                    full_name = scope + message.name
                    found[full_name] = (file.name, message.options.map_entry)
                    pending.extend((full_name + ".", nested) for nested in message.nested_type)
            self._messages = found
        return self._messages

    @property
    def pool(self) -> descriptor_pool.DescriptorPool:
        with self._lock:
            if self._pool is None:
                pool = descriptor_pool.DescriptorPool()
                for file in self.proto.file:  # already in dependency order
                    try:
                        pool.Add(file)
                    except (TypeError, ValueError) as exc:
                        raise SchemaError(f"invalid descriptor for {file.name!r}: {exc}") from exc
                self._pool = pool
            return self._pool

    def resolve(self, name: str, where: str, prefer_file: str | None = None) -> str:
        """The full name of the message ``name`` refers to, or a :class:`SchemaError`.

        ``name`` is a full name (a leading ``.`` is allowed, as in descriptors) or a suffix
        of one on a ``.`` boundary, map-entry types excluded. A suffix must match one message;
        when it matches several and exactly one is in ``prefer_file`` (the file the user
        compiled), that one wins, so ``Duration`` in a file that imports
        ``google/protobuf/duration.proto`` means the user's own.
        """
        messages = self.messages
        query = name.strip()
        if query.startswith("."):
            if query[1:] in messages:
                return query[1:]
        elif query in messages:
            return query
        else:
            matches = sorted(
                full
                for full, (_, is_map_entry) in messages.items()
                if not is_map_entry and full.endswith("." + query)
            )
            if prefer_file is not None and len(matches) > 1:
                preferred = [full for full in matches if messages[full][0] == prefer_file]
                if len(preferred) == 1:
                    return preferred[0]
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise SchemaError(
                    f"message name {query!r} is ambiguous in {where}; use one of the full "
                    f"names: {_listing(matches)}"
                )
        raise SchemaError(f"message {query!r} not found in {where}; {self._suggest(query)}")

    def _suggest(self, query: str) -> str:
        names = sorted(full for full, (_, is_entry) in self.messages.items() if not is_entry)
        if not names:
            return "it defines no messages"
        by_short = {full.rsplit(".", 1)[-1]: full for full in names}
        close = difflib.get_close_matches(query.lstrip("."), names, n=5)
        close += [
            by_short[short]
            for short in difflib.get_close_matches(query.rsplit(".", 1)[-1], by_short, n=5)
            if by_short[short] not in close
        ]
        if close:
            return f"did you mean {_listing(close)}?"
        return f"messages defined: {_listing(names)}"


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    more = len(names) - _MAX_LISTED
    return f"{shown}, … and {more} more" if more > 0 else shown


def _bundled_file(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    """``google/protobuf/x.proto`` as shipped in the protobuf runtime, or None."""
    if not (name.startswith(_WKT_PREFIX) and name.endswith(".proto")):
        return None
    module_name = "google.protobuf." + name[len(_WKT_PREFIX) : -6].replace("/", ".") + "_pb2"
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    return descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)


def _in_dependency_order(
    files: Iterable[descriptor_pb2.FileDescriptorProto], where: str
) -> list[descriptor_pb2.FileDescriptorProto]:
    """Every file once, each after its imports, missing well-known imports filled in.

    Sets written by ``protoc --include_imports`` are already ordered and complete and come
    out unchanged. Others (hand-assembled, or built without ``--include_imports``) are
    repaired when the only missing files are protobuf's own, and rejected otherwise.
    """
    by_name: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for file in files:
        known = by_name.setdefault(file.name, file)
        if known is not file and known != file:
            raise SchemaError(f"{where} holds two different files named {file.name!r}")

    ordered: list[descriptor_pb2.FileDescriptorProto] = []
    done: set[str] = set()
    visiting: list[str] = []

    def visit(name: str, importer: str | None) -> None:
        if name in done:
            return
        if name in visiting:
            cycle = " -> ".join([*visiting[visiting.index(name) :], name])
            raise SchemaError(f"import cycle in {where}: {cycle}")
        file = by_name.get(name)
        if file is None:
            file = _bundled_file(name)
        if file is None:
            raise SchemaError(
                f"{where} lacks {name!r}, imported by {importer!r}; "
                "build it with protoc --include_imports"
            )
        visiting.append(name)
        for dependency in file.dependency:
            visit(dependency, name)
        visiting.pop()
        done.add(name)
        ordered.append(file)

    for name in by_name:
        visit(name, None)
    return ordered


def _locate(path: str | os.PathLike[str], import_paths: Sequence[str]) -> tuple[str, list[str]]:
    """The name protoc should compile ``path`` as, and the include directories to pass.

    ``path`` is looked up, in order: relative to each import path (protoc ``-I`` semantics,
    as the reference's YAML ``file:``); then as a file on disk, relative to the CWD or
    absolute, named relative to the first import path that holds it, or by its base name
    with its directory added as an import path when none does.
    """
    raw = os.fspath(path)
    virtual = os.path.normpath(raw).replace(os.sep, "/")
    tried: list[str] = []
    # protoc refuses virtual names with "..", ".", or an absolute root.
    if not os.path.isabs(raw) and not virtual.startswith("../"):
        for root in import_paths:
            candidate = os.path.join(root, virtual)
            if os.path.isfile(candidate):
                return virtual, list(import_paths)
            tried.append(candidate)
    disk = os.path.abspath(raw)
    if os.path.isfile(disk):
        for root in import_paths:
            if os.path.commonpath([disk, root]) == root:
                return os.path.relpath(disk, root).replace(os.sep, "/"), list(import_paths)
        # First, so that a same-named file on the user's import path cannot shadow it.
        return os.path.basename(disk), [os.path.dirname(disk), *import_paths]
    tried.append(disk)
    raise SchemaError(f"proto file {raw!r} not found; tried: {', '.join(tried)}")


def _protoc(name: str, include_dirs: Sequence[str]) -> bytes:
    """Compile ``name`` (import-path relative) into a serialized FileDescriptorSet.

    A subprocess rather than ``grpc_tools.protoc.main()`` in-process: protoc writes its
    diagnostics to the C-level stderr, which only a separate process lets us capture.
    """
    bundled = str(importlib.resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="wirearrow-protoc-") as workdir:
        out = os.path.join(workdir, "set.binpb")
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            *(f"--proto_path={directory}" for directory in [*include_dirs, bundled]),
            "--include_imports",
            f"--descriptor_set_out={out}",
            name,
        ]
        # protoc first tries an input as a path relative to its CWD and renames it to match
        # an import path; running in an empty directory makes it take ``name`` as given.
        result = subprocess.run(
            command,
            cwd=workdir,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            check=False,
        )
        if result.returncode != 0:
            details = result.stderr.strip() or result.stdout.strip() or f"exit {result.returncode}"
            raise SchemaError(f"protoc could not compile {name!r}:\n{details}")
        with open(out, "rb") as stream:
            return stream.read()


def _restore(file_descriptor_set: bytes, message_name: str) -> Schema:
    """Unpickle: as cheap as possible, descriptors are rebuilt on first use."""
    return Schema._make(_FileSet(file_descriptor_set), message_name)


class Schema:
    """A protobuf message type, self-contained and picklable.

    Build one with :meth:`from_proto`, :meth:`from_descriptor_set` or :meth:`from_message`.
    Equal schemas have equal :attr:`fingerprint` (same files, same root message).
    """

    __slots__ = ("__weakref__", "_descriptor", "_files", "_fingerprint", "_message_name")

    _files: _FileSet
    _message_name: str
    _descriptor: Descriptor | None
    _fingerprint: str | None

    def __init__(self) -> None:
        raise TypeError(
            "use Schema.from_proto(), Schema.from_descriptor_set() or Schema.from_message()"
        )

    @classmethod
    def _make(cls, files: _FileSet, message_name: str) -> Schema:
        self = object.__new__(cls)
        self._files = files
        self._message_name = message_name
        self._descriptor = None
        self._fingerprint = None
        return self

    @classmethod
    def _build(
        cls,
        files: Iterable[descriptor_pb2.FileDescriptorProto],
        message: str,
        where: str,
        prefer_file: str | None = None,
    ) -> Schema:
        ordered = _in_dependency_order(files, where)
        proto = descriptor_pb2.FileDescriptorSet(file=ordered)
        file_set = _FileSet(proto.SerializeToString(deterministic=True), proto)
        schema = cls._make(file_set, file_set.resolve(message, where, prefer_file))
        # Build the pool now: a broken set should fail here, not later on a worker.
        _ = schema.descriptor
        return schema

    @classmethod
    def from_proto(
        cls,
        path: str | os.PathLike[str],
        message: str,
        *,
        import_paths: Sequence[str | os.PathLike[str]] = (),
    ) -> Schema:
        """Compile a ``.proto`` file and take ``message`` from it (or from its imports).

        ``path`` is relative to one of ``import_paths`` (protoc ``-I``), or a path on disk.
        ``google/protobuf/*.proto`` imports need no import path. proto2, proto3 and editions
        files are accepted. Compilation errors are raised as :class:`SchemaError` carrying
        protoc's ``file:line:col: message`` lines.
        """
        roots = [os.path.abspath(os.fspath(root)) for root in import_paths]
        name, include_dirs = _locate(path, roots)
        data = _protoc(name, include_dirs)
        files = descriptor_pb2.FileDescriptorSet.FromString(data).file
        return cls._build(files, message, f"{name} and its imports", prefer_file=name)

    @classmethod
    def from_descriptor_set(
        cls, data: bytes | bytearray | memoryview | str | os.PathLike[str], message: str
    ) -> Schema:
        """Take ``message`` from a serialized ``google.protobuf.FileDescriptorSet``.

        ``data`` is the serialized set itself (bytes) or the path of a file holding it (str
        or path-like). Imports must be included, except protobuf's own well-known files.
        """
        if isinstance(data, (bytes, bytearray, memoryview)):
            raw, where = bytes(data), "the descriptor set"
        else:
            filename = os.fspath(data)
            where = f"descriptor set {filename!r}"
            try:
                with open(filename, "rb") as stream:
                    raw = stream.read()
            except OSError as exc:
                raise SchemaError(f"cannot read {where}: {exc.strerror or exc}") from exc
        try:
            proto = descriptor_pb2.FileDescriptorSet.FromString(raw)
        except DecodeError as exc:
            raise SchemaError(
                f"{where} is not a serialized google.protobuf.FileDescriptorSet: {exc}"
            ) from exc
        if not proto.file:
            raise SchemaError(f"{where} holds no files")
        return cls._build(proto.file, message, where)

    @classmethod
    def from_message(cls, message: Any) -> Schema:
        """The schema of a generated message class, an instance of one, or a ``Descriptor``.

        The set holds the message's file and everything it imports, transitively.
        """
        descriptor = getattr(message, "DESCRIPTOR", message)
        if not isinstance(descriptor, Descriptor):
            raise TypeError(
                f"expected a protobuf message class, instance or Descriptor, got {message!r}"
            )
        files: list[descriptor_pb2.FileDescriptorProto] = []
        seen: set[str] = set()

        def collect(file: FileDescriptor) -> None:
            if file.name in seen:
                return
            seen.add(file.name)
            for dependency in file.dependencies:
                collect(dependency)
            files.append(descriptor_pb2.FileDescriptorProto.FromString(file.serialized_pb))

        collect(descriptor.file)
        return cls._build(files, descriptor.full_name, f"{descriptor.file.name} and its imports")

    def message(self, name: str) -> Schema:
        """Another message of the same descriptor set, sharing this schema's descriptors.

        Named as in the constructors; a short name matching several messages resolves to the
        one in this schema's file when there is exactly one such.
        """
        own_file = self._files.messages.get(self._message_name, ("", False))[0]
        full_name = self._files.resolve(name, "the descriptor set", prefer_file=own_file)
        return self._make(self._files, full_name)

    @classmethod
    def declared_in(
        cls, path: str | os.PathLike[str], *, import_paths: Sequence[str | os.PathLike[str]] = ()
    ) -> list[Schema]:
        """Every message a ``.proto`` file declares (nested ones too, map entries not), sorted
        by full name: one compilation, as :meth:`from_proto` does it, shared by all."""
        roots = [os.path.abspath(os.fspath(root)) for root in import_paths]
        name, include_dirs = _locate(path, roots)
        files = descriptor_pb2.FileDescriptorSet.FromString(_protoc(name, include_dirs)).file
        ordered = _in_dependency_order(files, f"{name} and its imports")
        proto = descriptor_pb2.FileDescriptorSet(file=ordered)
        file_set = _FileSet(proto.SerializeToString(deterministic=True), proto)
        declared = sorted(
            full_name
            for full_name, (file, map_entry) in file_set.messages.items()
            if file == name and not map_entry
        )
        schemas = [cls._make(file_set, full_name) for full_name in declared]
        if schemas:
            _ = schemas[0].descriptor  # a broken set fails here, as in from_proto
        return schemas

    @property
    def message_name(self) -> str:
        """The root message's full name, e.g. ``pkg.BidRequest`` (no package: ``BidRequest``)."""
        return self._message_name

    @property
    def descriptor(self) -> Descriptor:
        """The root message's descriptor, from this schema's private pool."""
        if self._descriptor is None:
            try:
                self._descriptor = self._files.pool.FindMessageTypeByName(self._message_name)
            except KeyError as exc:
                raise SchemaError(
                    f"message {self._message_name!r} is not in the descriptor set"
                ) from exc
        return self._descriptor

    @property
    def file_descriptor_set(self) -> bytes:
        """Serialized ``google.protobuf.FileDescriptorSet``, imports included, in dependency order."""
        return self._files.data

    @property
    def fingerprint(self) -> str:
        """Hex SHA-256 of the descriptor set and the root message name; stable across processes."""
        if self._fingerprint is None:
            digest = hashlib.sha256()
            data = self._files.data
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
            digest.update(self._message_name.encode("utf-8"))
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    def __reduce__(self) -> tuple[Any, tuple[bytes, str]]:
        return _restore, (self._files.data, self._message_name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schema):
            return NotImplemented
        return self.fingerprint == other.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        file_name = self._files.messages.get(self._message_name, ("?", False))[0]
        return (
            f"Schema({self._message_name!r}, file={file_name!r}, "
            f"fingerprint={self.fingerprint[:12]!r})"
        )
