"""Schemas: a root message plus the ``FileDescriptorSet`` that defines it.

A :class:`Schema` is what travels to workers, so its state is exactly two values: the
serialized set (every file, imports included, dependencies before dependents) and the root
message's full name. Descriptors are rebuilt from them on first use, in a private
``DescriptorPool`` per set: never the process-wide default pool, so the user's generated
classes and our descriptors can never clash over a file name.

Five ways in:

* :meth:`Schema.from_proto` compiles ``.proto`` source with the ``protoc`` bundled in
  ``grpcio-tools`` (no protoc binary needed; ``google/protobuf/*.proto`` are built in);
* :meth:`Schema.from_sources` compiles ``.proto`` texts held in memory (a schema
  registry's), in process;
* :meth:`Schema.from_descriptor_set` takes a serialized set (``protoc --descriptor_set_out``,
  ``buf build -o``);
* :meth:`Schema.from_message` takes a generated message class or instance;
* :meth:`Schema.from_module` takes a generated ``_pb2`` module (or its dotted name).

:meth:`Schema.load` picks one of them for a name given on a command line.

The same message reached any of these ways has the same :attr:`Schema.fingerprint`: it
hashes a canonical form of the files the message's file needs (see :func:`_canonical`).

Messages are named by full name (``pkg.Outer.Inner``) or by any dot-separated suffix of it
that is unique in the set (``Inner``, ``Outer.Inner``).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import importlib
import importlib.resources
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import DecodeError

from wirearrow.errors import MAX_QUOTED, SchemaError, quoted

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
        raise SchemaError(f"message {quoted(query)} not found in {where}; {self._suggest(query)}")

    def _suggest(self, query: str) -> str:
        names = sorted(full for full, (_, is_entry) in self.messages.items() if not is_entry)
        if not names:
            return "it defines no messages"
        if len(query) > MAX_QUOTED:  # no message name is that long
            return f"messages defined: {_listing(names)}"
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


def _file_closure(file: FileDescriptor) -> list[descriptor_pb2.FileDescriptorProto]:
    """``file`` and everything it imports, transitively, each after its imports."""
    files: list[descriptor_pb2.FileDescriptorProto] = []
    seen: set[str] = set()
    stack: list[tuple[FileDescriptor, bool]] = [(file, False)]
    while stack:  # iterative: import chains can be long
        current, imports_done = stack.pop()
        if imports_done:
            files.append(descriptor_pb2.FileDescriptorProto.FromString(current.serialized_pb))
            continue
        if current.name in seen:
            continue
        seen.add(current.name)
        stack.append((current, True))
        stack.extend((dep, False) for dep in reversed(current.dependencies) if dep.name not in seen)
    return files


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


# The sets protoc compiled in this process, each with the files it was compiled from
# (virtual name, sha256 of the bytes). A compile costs a process start and protoc's run (0.1
# to 0.2 s of CPU); loading the same schema again (the playground on every edit, the CLI's
# check then transcode, a worker's plans, a copy of the same files elsewhere) reuses the set
# when each of its files resolves over the include directories of the new call to the same
# bytes: exactly when protoc would write the same set, since it reads nothing else.
# A set is kept only when none of its files changed from shortly before protoc started
# (their mtime): an edit during the run could otherwise pair the new bytes with a set of
# the old ones. Failures are not kept. Bounded: the least recently used goes first.
_Sources = tuple[tuple[str, bytes], ...]
_COMPILED: OrderedDict[tuple[str, _Sources], bytes] = OrderedDict()
_COMPILED_MAX = 64
_COMPILED_LOCK = threading.Lock()
# File timestamps come from a clock that may lag the one time.time_ns reads by a tick.
_MTIME_SLACK_NS = 50_000_000


def _digest(name: str, include_dirs: Sequence[str]) -> tuple[bytes, int] | None:
    """The sha256 and mtime of ``name`` where protoc finds it (the first include directory
    holding it); None when none does."""
    for directory in include_dirs:
        try:
            with open(os.path.join(directory, name), "rb") as stream:
                return hashlib.sha256(stream.read()).digest(), os.fstat(stream.fileno()).st_mtime_ns
        except OSError:
            continue
    return None


def _protoc(name: str, include_dirs: Sequence[str]) -> bytes:
    """Compile ``name`` (import-path relative) into a serialized FileDescriptorSet, or
    reuse the set compiled from the same bytes (``_COMPILED``)."""
    bundled = str(importlib.resources.files("grpc_tools") / "_proto")
    dirs = (*include_dirs, bundled)
    with _COMPILED_LOCK:
        candidates = [key for key in _COMPILED if key[0] == name]
    for key in candidates:
        if all((_digest(file, dirs) or (b"",))[0] == digest for file, digest in key[1]):
            with _COMPILED_LOCK:
                data = _COMPILED.get(key)
                if data is not None:
                    _COMPILED.move_to_end(key)
                    return data
    started = time.time_ns()
    data = _run_protoc(name, dirs)
    sources = []
    for file in descriptor_pb2.FileDescriptorSet.FromString(data).file:
        found = _digest(file.name, dirs)
        if found is None or found[1] >= started - _MTIME_SLACK_NS:
            return data  # read from where we cannot see, or changed just now: not kept
        sources.append((file.name, found[0]))
    with _COMPILED_LOCK:
        _COMPILED[(name, tuple(sources))] = data
        while len(_COMPILED) > _COMPILED_MAX:
            _COMPILED.popitem(last=False)
    return data


def _run_protoc(name: str, include_dirs: Sequence[str]) -> bytes:
    """protoc on ``name`` over ``include_dirs``: the serialized FileDescriptorSet.

    A subprocess rather than ``grpc_tools.protoc.main()`` in-process: protoc writes its
    diagnostics to the C-level stderr, which only a separate process lets us capture.
    """
    with tempfile.TemporaryDirectory(prefix="wirearrow-protoc-") as workdir:
        out = os.path.join(workdir, "set.binpb")
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            *(f"--proto_path={directory}" for directory in include_dirs),
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


_COMPILE_LOCK = threading.Lock()


def _compile_sources(sources: Mapping[str, str], root: str) -> list[descriptor_pb2.FileDescriptorProto]:
    """``root`` and its imports compiled from ``sources`` (``{name: text}``), in process.

    grpcio-tools' ``get_protos`` runs protoc's parser and returns each file's generated
    Python module, whose one ``AddSerializedFile(b"...")`` argument is the serialized
    FileDescriptorProto: that literal is read with :mod:`ast` (the code is never run).
    Its errors come back as values (file, line, column, message), unlike ``protoc.main``'s,
    which go to the C-level stderr.
    """
    from grpc_tools import _protoc_compiler

    bundled = str(importlib.resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="wirearrow-sources-") as workdir:
        for name, text in sources.items():
            parts = name.split("/")
            if not name or name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
                raise SchemaError(f"{name!r} is not a relative .proto import path")
            if not isinstance(text, str):
                raise SchemaError(f"the source of {name!r} is a {type(text).__name__}, not text")
            path = os.path.join(workdir, *parts)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as out:
                out.write(text)
        try:
            with _COMPILE_LOCK:  # protoc's importer state is not documented thread-safe
                generated = _protoc_compiler.get_protos(
                    root.encode(), [workdir.encode(), bundled.encode()]
                )
        except _protoc_compiler.ProtocErrors as err:
            lines = [
                f"{e.filename.decode(errors='replace')}:{e.line + 1}:{e.column + 1}: "
                f"{e.message.decode(errors='replace')}"
                for e in err.errors()
            ]
            raise SchemaError(f"protoc could not compile {root!r}:\n" + "\n".join(lines)) from None
    files = []
    for module, code in generated:
        serialized = _serialized_file(code)
        if serialized is None:
            raise SchemaError(f"no serialized descriptor in protoc's {module.decode()}")
        files.append(descriptor_pb2.FileDescriptorProto.FromString(serialized))
    return files


def _serialized_file(code: bytes) -> bytes | None:
    """The bytes literal passed to ``AddSerializedFile`` in a generated ``_pb2`` module."""
    for node in ast.walk(ast.parse(code)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            return node.args[0].value
    return None


def _default_json_name(name: str) -> str:
    """protoc's default ``json_name`` (``ToJsonName``): underscores dropped, the letter
    after each one upper-cased."""
    out: list[str] = []
    upper = False
    for char in name:
        if char == "_":
            upper = True
        elif upper:
            out.append(char.upper())
            upper = False
        else:
            out.append(char)
    return "".join(out)


def _canonical(file: descriptor_pb2.FileDescriptorProto) -> bytes:
    """``file`` serialized without what differs between equal schemas built different ways.

    ``protoc --descriptor_set_out`` writes every field's ``json_name``, generated modules
    (``serialized_pb``) only the ones set by hand, and either may carry source info; none of
    that changes what the wire bytes mean or how they are read, so it is dropped (a
    hand-set ``json_name`` is kept: protojson reads it).
    """
    copy = descriptor_pb2.FileDescriptorProto()
    copy.CopyFrom(file)
    copy.ClearField("source_code_info")
    messages = list(copy.message_type)
    fields = list(copy.extension)
    while messages:
        message = messages.pop()
        messages.extend(message.nested_type)
        fields.extend(message.field)
        fields.extend(message.extension)
    for field in fields:
        if field.HasField("json_name") and field.json_name == _default_json_name(field.name):
            field.ClearField("json_name")
    return copy.SerializeToString(deterministic=True)


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# How a FileDescriptorSet starts: field 1 (file), length-delimited.
_SET_TAG = 0x0A


def _descriptor_set_bytes(path: str) -> bool:
    """Whether the file at ``path`` holds a serialized FileDescriptorSet, not .proto text.

    A set starts with the tag of its ``file`` field (a newline, as .proto text may) and
    parses, every file named ``*.proto``: text that happens to parse so is not a real risk.
    """
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError:
        return False
    if not data or data[0] != _SET_TAG:
        return False
    try:
        proto = descriptor_pb2.FileDescriptorSet.FromString(data)
    except DecodeError:
        return False
    return bool(proto.file) and all(file.name.endswith(".proto") for file in proto.file)


def _restore(
    file_descriptor_set: bytes, message_name: str, custom: tuple[tuple[int, int], ...] = ()
) -> Schema:
    """Unpickle: as cheap as possible, descriptors are rebuilt on first use."""
    schema = Schema._make(_FileSet(file_descriptor_set), message_name)
    schema._custom = custom or None
    return schema


def _rescope(message: descriptor_pb2.DescriptorProto, old: str, new: str) -> None:
    """Point every type reference inside ``message`` (its nested types' too) that names a
    type nested in ``old`` (``.pkg.Msg.X``) at the copy nested in ``new`` (``.New.X``):
    map entries and nested types must be declared in the scope of the message using them."""
    prefix, target = f".{old}.", f".{new}."
    pending = [message]
    while pending:
        current = pending.pop()
        pending.extend(current.nested_type)
        for field in current.field:
            if field.type_name.startswith(prefix):
                field.type_name = target + field.type_name[len(prefix) :]


def _is_synthetic(message: descriptor_pb2.DescriptorProto, index: int) -> bool:
    """Whether oneof ``index`` is the synthetic one of a proto3 ``optional`` field."""
    members = [f for f in message.field if f.HasField("oneof_index") and f.oneof_index == index]
    return len(members) == 1 and members[0].proto3_optional


def _merge_messages(
    base: Descriptor, custom: Descriptor
) -> tuple[descriptor_pb2.FileDescriptorProto, tuple[tuple[int, int], ...]]:
    """The file of ``<Base>Custom``: base's fields, then custom's renumbered from base's
    highest number + 1 in declaration order (bufarrow-behaviour §6), nested types and
    enums of both re-scoped into it. Returns it and (custom number, merged number) pairs."""
    base_file = descriptor_pb2.FileDescriptorProto.FromString(base.file.serialized_pb)
    custom_file = descriptor_pb2.FileDescriptorProto.FromString(custom.file.serialized_pb)
    if (base_file.syntax, base_file.edition) != (custom_file.syntax, custom_file.edition) or (
        base_file.options.features != custom_file.options.features
    ):
        raise SchemaError(
            f"the custom message {custom.full_name} ({custom_file.syntax or 'proto2'}) and "
            f"the base message {base.full_name} ({base_file.syntax or 'proto2'}) must have "
            "the same syntax (and edition features) to be merged"
        )
    merged = descriptor_pb2.DescriptorProto()
    base.CopyToProto(merged)
    extra = descriptor_pb2.DescriptorProto()
    custom.CopyToProto(extra)
    name = f"{base.name}Custom"
    merged.name = name
    _rescope(merged, base.full_name, name)
    _rescope(extra, custom.full_name, name)
    taken = {f.name for f in merged.field}
    for field in extra.field:
        if field.name in taken:
            raise SchemaError(f"field name conflict: {field.name} (in both {base.full_name} and {custom.full_name})")
    types = {t.name for t in merged.nested_type} | {e.name for e in merged.enum_type}
    for kind, names in (("nested type", extra.nested_type), ("enum", extra.enum_type)):
        for item in names:
            if item.name in types:
                raise SchemaError(f"{kind} name conflict: {item.name} (in both {base.full_name} and {custom.full_name})")
    merged.nested_type.extend(extra.nested_type)
    merged.enum_type.extend(extra.enum_type)
    # Oneofs: real ones first, then the synthetic ones of proto3 optional fields, as
    # descriptors require; each field's oneof_index follows its oneof.
    sources = [(merged, i, o) for i, o in enumerate(merged.oneof_decl)]
    sources += [(extra, i, o) for i, o in enumerate(extra.oneof_decl)]
    ordered = sorted(sources, key=lambda s: _is_synthetic(s[0], s[1]))
    where = {(id(m), i): k for k, (m, i, _) in enumerate(ordered)}
    oneofs = [descriptor_pb2.OneofDescriptorProto() for _ in ordered]
    for k, (_, _, decl) in enumerate(ordered):
        oneofs[k].CopyFrom(decl)
    for field in merged.field:
        if field.HasField("oneof_index"):
            field.oneof_index = where[(id(merged), field.oneof_index)]
    start = max((f.number for f in merged.field), default=0) + 1
    numbers = []
    for k, field in enumerate(extra.field):
        numbers.append((field.number, start + k))
        field.number = start + k
        if field.HasField("oneof_index"):
            field.oneof_index = where[(id(extra), field.oneof_index)]
    merged.field.extend(extra.field)
    del merged.oneof_decl[:]
    merged.oneof_decl.extend(oneofs)
    dependencies = dict.fromkeys(
        [*base_file.dependency, base_file.name, *custom_file.dependency, custom_file.name]
    )
    out = descriptor_pb2.FileDescriptorProto(
        name=f"{name}.proto", dependency=list(dependencies), message_type=[merged]
    )
    if base_file.HasField("syntax"):
        out.syntax = base_file.syntax
    if base_file.HasField("edition"):
        out.edition = base_file.edition
    if base_file.options.HasField("features"):
        out.options.features.CopyFrom(base_file.options.features)
    return out, tuple(numbers)


class Schema:
    """A protobuf message type, self-contained and picklable.

    Build one with :meth:`from_proto`, :meth:`from_descriptor_set` or :meth:`from_message`.
    Equal schemas have equal :attr:`fingerprint` (same files, same root message).
    """

    __slots__ = ("__weakref__", "_custom", "_descriptor", "_files", "_fingerprint", "_message_name")

    _files: _FileSet
    _message_name: str
    _descriptor: Descriptor | None
    _fingerprint: str | None
    _custom: tuple[tuple[int, int], ...] | None

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
        self._custom = None
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
        protoc's ``file:line:col: message`` lines. The same files compiled again in this
        process (the same bytes, wherever they are) reuse the first compilation.
        """
        roots = [os.path.abspath(os.fspath(root)) for root in import_paths]
        name, include_dirs = _locate(path, roots)
        found = next(
            (os.path.join(d, name) for d in include_dirs if os.path.isfile(os.path.join(d, name))),
            None,
        )
        if found is not None and _descriptor_set_bytes(found):
            raise SchemaError(
                f"{os.fspath(path)!r} is a serialized FileDescriptorSet, not .proto source: "
                "read it with Schema.from_descriptor_set() (in a YAML plan: "
                "proto: {descriptor_set: ..., message: ...})"
            )
        data = _protoc(name, include_dirs)
        files = descriptor_pb2.FileDescriptorSet.FromString(data).file
        return cls._build(files, message, f"{name} and its imports", prefer_file=name)

    @classmethod
    def from_sources(
        cls, sources: Mapping[str, str], file: str, message: str | None = None
    ) -> Schema:
        """Compile ``.proto`` texts held in memory, ``{file name: text}`` (a schema
        registry's schema and its references), and take ``message`` from ``file`` (None:
        the first message ``file`` declares).

        Compiled in this process by the protoc library of ``grpcio-tools`` (no binary, no
        subprocess); ``google/protobuf/*.proto`` imports need no source. File names are
        import paths (``shop/common.proto``): relative, without ``..``. Errors are a
        :class:`SchemaError` carrying protoc's ``file:line:col: message`` lines.
        """
        if file not in sources:
            raise SchemaError(f"{file!r} is not one of the sources ({', '.join(sorted(sources))})")
        files = _compile_sources(sources, file)
        where = f"{file} and its imports"
        if message is None:
            root = next((f for f in files if f.name == file), None)
            if root is None or not root.message_type:
                raise SchemaError(f"{file} declares no message")
            package = f"{root.package}." if root.package else ""
            message = f"{package}{root.message_type[0].name}"
        return cls._build(files, message, where, prefer_file=file)

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
        return cls._build(
            _file_closure(descriptor.file),
            descriptor.full_name,
            f"{descriptor.file.name} and its imports",
        )

    @classmethod
    def from_module(cls, module: Any, message: str) -> Schema:
        """Take ``message`` from a generated ``_pb2`` module or the files it imports.

        ``module`` is the module or its dotted name (``opentelemetry.proto.trace.v1.trace_pb2``),
        imported if need be -- which runs the module's code, as any import does: name only
        modules you would import yourself (a YAML plan naming one is trusted code, like a
        pickle). ``message`` is named as in :meth:`from_proto` (``Span``,
        ``opentelemetry.proto.trace.v1.Span``); the module's own file wins a short name.
        """
        if isinstance(module, str):
            name = module.strip()
            if not _MODULE_NAME.fullmatch(name):
                raise SchemaError(f"{module!r} is not a Python module name (a.b.c_pb2)")
            try:
                module = importlib.import_module(name)
            except Exception as exc:  # an import runs the module's code: anything can fail
                raise SchemaError(f"cannot import module {name!r}: {exc}") from exc
        file = getattr(module, "DESCRIPTOR", None)
        if not isinstance(file, FileDescriptor):
            raise SchemaError(
                f"module {getattr(module, '__name__', module)!r} is not a generated protobuf "
                "module (it has no file DESCRIPTOR)"
            )
        return cls._build(
            _file_closure(file), message, f"{file.name} and its imports", prefer_file=file.name
        )

    @classmethod
    def load(
        cls,
        source: str | os.PathLike[str],
        message: str,
        *,
        import_paths: Sequence[str | os.PathLike[str]] = (),
    ) -> Schema:
        """The schema named on a command line: ``source`` is a ``.proto`` file, a file
        holding a serialized FileDescriptorSet (recognised by its bytes), or, when no such
        file exists, the dotted name of a generated module (:meth:`from_module`)."""
        raw = os.fspath(source)
        on_disk = os.path.isfile(raw) or any(
            os.path.isfile(os.path.join(os.fspath(root), raw)) for root in import_paths
        )
        if not on_disk and _MODULE_NAME.fullmatch(raw) and not raw.endswith(".proto"):
            return cls.from_module(raw, message)
        if os.path.isfile(raw) and _descriptor_set_bytes(raw):
            return cls.from_descriptor_set(raw, message)
        return cls.from_proto(raw, message, import_paths=import_paths)

    def with_custom_message(self, custom: Schema) -> Schema:
        """This message merged with a custom message, as the reference's schema merging
        (bufarrow-behaviour §6): a message ``<Name>Custom`` (no package) holding this
        message's fields unchanged, then ``custom``'s renumbered consecutively from this
        message's highest field number + 1, in declaration order; the nested types and
        enums of both are nested in it. Unlike the reference, map fields work.

        Records of the merged schema are (base, custom) pairs of serialized messages:
        ``Transcoder.transcode(base_records, custom=custom_records)``. A custom record with
        a field number ``custom`` does not declare is a bad record, never merged into a
        base field. :attr:`custom_numbers` says how the numbers moved. Both messages must
        have the same syntax; a field, nested type or enum name in both is an error.
        """
        if not isinstance(custom, Schema):
            raise TypeError(f"custom must be a Schema, not {type(custom).__name__}")
        if self._custom is not None:
            raise SchemaError(f"{self.message_name} is already merged with a custom message")
        merged_file, numbers = _merge_messages(self.descriptor, custom.descriptor)
        files = [
            *descriptor_pb2.FileDescriptorSet.FromString(self.file_descriptor_set).file,
            *descriptor_pb2.FileDescriptorSet.FromString(custom.file_descriptor_set).file,
            merged_file,
        ]
        schema = Schema._build(files, merged_file.message_type[0].name, "the merged schema")
        schema._custom = numbers
        return schema

    @property
    def custom_numbers(self) -> tuple[tuple[int, int], ...] | None:
        """For a schema from :meth:`with_custom_message`: (custom field number, merged field
        number) of each custom field; None for any other schema."""
        return self._custom

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
        """Hex SHA-256 of the root message name and the files its file needs; stable across
        processes, and the same however the schema was built (``.proto`` source, descriptor
        set, generated class or module): files the message does not reach, source info and
        default ``json_name`` values do not count."""
        if self._fingerprint is None:
            digest = hashlib.sha256()
            name = self._message_name.encode("utf-8")
            digest.update(len(name).to_bytes(8, "little"))
            digest.update(name)
            for data in sorted(_canonical(file) for file in self._closure()):
                digest.update(len(data).to_bytes(8, "little"))
                digest.update(data)
            if self._custom is not None:  # how custom records are renumbered
                digest.update(repr(self._custom).encode("ascii"))
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    def _closure(self) -> list[descriptor_pb2.FileDescriptorProto]:
        """The root message's file and every file it imports, transitively."""
        by_name = {file.name: file for file in self._files.proto.file}
        root = self._files.messages[self._message_name][0]
        pending, seen = [root], {root}
        closure: list[descriptor_pb2.FileDescriptorProto] = []
        while pending:
            file = by_name[pending.pop()]
            closure.append(file)
            for dependency in file.dependency:
                if dependency not in seen:
                    seen.add(dependency)
                    pending.append(dependency)
        return closure

    def __reduce__(self) -> tuple[Any, tuple[bytes, str, tuple[tuple[int, int], ...]]]:
        return _restore, (self._files.data, self._message_name, self._custom or ())

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
