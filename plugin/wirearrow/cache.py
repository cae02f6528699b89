"""The parser cache: compile each plan once per process, learn its buffer sizes, share them.

A :class:`ParserCache` maps (schema fingerprint, plan fingerprint) to one compiled plan.
However many transcoders, threads, DoFns or Ray actors of a process ask for the same plan,
it is compiled once; every transcoder of that plan shares the entry (the compiled decoder
tables are immutable). Transcoders built without ``cache=`` use the process-wide
:func:`default_cache`.

Each entry also keeps the buffer sizes of its plan: the elements per record of each group
and the string bytes per record of each column, from the last batch any transcoder of the
plan decoded -- or, before the first batch of a process, from a loaded or shared profile. Each batch allocates its buffers once, at their final size, instead of growing
them (for whole messages of large records: +36 % on a new process's first batch,
docs/cache.md). These counts come free from every decode. A sampled walker that profiled
field order and presence was built and measured too, and removed: nothing it learnt made
decoding faster (issue #13, docs/cache.md).

A *profile* is the sums behind those sizes (records, elements per group, string bytes per
column); sums merge by addition, so the profile of many workers is the sum of theirs.
Profiles persist with :meth:`ParserCache.save` / :meth:`ParserCache.load` (versioned JSON,
checked against both fingerprints and the plan's table layout: a profile recorded for
another schema or plan is ignored with a warning, never applied). Processes share them
through an ``exchange`` (``ParserCache(exchange=...)``): a function every process of a job
calls with the sums it decoded since its last call, which returns the sums of every
process's calls. :class:`ProfileHub` is the other end: ``hub.exchange`` in one process
(threads), or behind an actor (``wirearrow.ray.share_with_ray``).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wirearrow.plan.compiler import CompiledPlan, compile_plan
from wirearrow.spec import TranscodeSpec

__all__ = ["FORMAT", "FORMAT_VERSION", "ParserCache", "ProfileHub", "default_cache", "resolve_profile"]

FORMAT = "wirearrow-profile"
FORMAT_VERSION = 2  # 2: sizes only (1 held the walker's field statistics)
SHARE_EVERY = 100_000  # records a process decodes between two calls of its exchange


# ---- the profile ---------------------------------------------------------------------------


def _layout(plan: CompiledPlan) -> list[Any]:
    """What a profile's arrays are indexed by: a profile fits a plan only if this matches."""
    return [
        len(plan.group_parents),
        len(plan.column_groups),
        list(plan.group_parents),
        list(plan.column_groups),
        [n.message.full_name for n in plan.nodes],
    ]


@dataclass
class _Sums:
    """What the decoder counted, summed over batches: merges by addition."""

    records: int = 0
    batches: int = 0
    elements: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per group
    arena: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per column

    @classmethod
    def empty(cls, plan: CompiledPlan) -> _Sums:
        return cls(
            elements=np.zeros(len(plan.group_parents), np.int64),
            arena=np.zeros(len(plan.column_groups), np.int64),
        )

    def add(self, other: _Sums) -> None:
        self.records += other.records
        self.batches += other.batches
        self.elements += other.elements
        self.arena += other.arena

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "batches": self.batches,
            "elements": self.elements.tolist(),
            "arena": self.arena.tolist(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], plan: CompiledPlan) -> _Sums:
        out = cls(int(data["records"]), int(data["batches"]))
        for name, n in (("elements", len(plan.group_parents)), ("arena", len(plan.column_groups))):
            values = np.asarray(data[name], dtype=np.int64)
            if values.shape != (n,) or (values < 0).any():
                raise ValueError(f"profile array {name!r} does not fit the plan")
            setattr(out, name, values)
        if out.records < 0 or out.batches < 0:
            raise ValueError("negative counts")
        return out


# ---- entries ---------------------------------------------------------------------------------

# Up to this many groups + string columns, capacities() is computed without numpy.
_SMALL = 64


class _Entry:
    """One compiled plan and its sizes. ``plan`` and ``sizes`` are read without a lock (one
    attribute load each); the sums change under ``lock``."""

    def __init__(
        self, cache: ParserCache, key: tuple[str, str], plan: CompiledPlan, message: str
    ) -> None:
        self.cache = cache
        self.key = key
        self.message = message
        self.plan = plan
        self.layout = _layout(plan)
        self.n_groups = len(plan.group_parents)
        self.lock = threading.Lock()
        # The profile is known + delta: kept apart so that a batch adds to one sum only.
        self.known = _Sums.empty(plan)  # loaded, or merged by the exchange (our pushes included)
        self.delta = _Sums.empty(plan)  # decoded here since the last push to the exchange
        self.decoded = 0  # records decoded in this process
        self.pulled = False  # asked the exchange for sizes before the first batch
        # Elements per record of each group and string bytes per record of each column:
        # what the last batch of any transcoder of this plan held, or (before any batch) what
        # a loaded or merged profile says. Sizes the next batch's buffers up front, so that
        # they are neither grown (copied) nor faulted in twice. One tuple, swapped whole.
        self.sizes: tuple[np.ndarray, np.ndarray] | None = None

    def capacities(self, n: int) -> tuple[Sequence[int] | np.ndarray, Sequence[int] | np.ndarray | None]:
        """(elements per group, string bytes per column) to allocate for a batch of n."""
        sizes = self.sizes
        if sizes is None and self.cache.exchange is not None and not self.pulled:
            # A process's first batch of the plan: start from the job-wide sizes, if any.
            self.pulled = True
            self._exchange()
            sizes = self.sizes
        if sizes is None:
            # Nothing known: one element per record everywhere. The buffers are calloc'd, so
            # pages a group never fills are never touched (and cost no resident memory).
            return [n] * self.n_groups, None
        per_record, bytes_per_record = sizes
        scale = n * 1.05
        if len(per_record) + len(bytes_per_record) <= _SMALL:
            # A flat plan's handful of groups and columns: plain floats cost a few
            # microseconds less than numpy's per-call overhead, with the GIL held (other
            # threads' batches wait). The same float products, truncated the same way.
            return (
                [int(x * scale) + 16 for x in per_record.tolist()],
                [int(x * scale) + 64 if x > 0 else 0 for x in bytes_per_record.tolist()],
            )
        # (vectorised: a whole message has a few hundred groups and columns, every batch)
        # As int64 arrays, which the decoder reads as they are (a list would be converted
        # back: ~100 instructions an entry, 16,000 columns in a wide recursive plan).
        groups = (per_record * scale).astype(np.int64) + 16
        arena = np.where(bytes_per_record > 0, (bytes_per_record * scale).astype(np.int64) + 64, 0)
        return groups, arena

    def learn_sizes(
        self,
        records: int,
        group_counts: Sequence[int] | np.ndarray,
        arena_bytes: Sequence[int] | np.ndarray,
    ) -> None:
        """Account one decoded batch: its sizes size the next batch; its counts join the sums
        (and are pushed to the exchange every ``share_every`` records when sharing)."""
        if records <= 0:
            return
        elements = np.asarray(group_counts, dtype=np.int64)
        arena = np.asarray(arena_bytes, dtype=np.int64)
        self.sizes = (elements / records, arena / records)
        with self.lock:
            self.decoded += records
            delta = self.delta
            delta.records += records
            delta.batches += 1
            delta.elements += elements
            delta.arena += arena
            due = delta.records >= self.cache.share_every
        if due and self.cache.exchange is not None:
            self._exchange()

    def _seed_sizes(self) -> None:
        # A profile sizes the first batch of a process that has decoded nothing yet.
        p = self.known
        if self.sizes is None and p.records > 0:
            self.sizes = (p.elements / p.records, p.arena / p.records)

    def profile(self) -> _Sums:
        """Everything known of the plan's sizes (call holding ``lock``)."""
        total = _Sums.empty(self.plan)
        total.add(self.known)
        total.add(self.delta)
        return total

    # -- sharing -------------------------------------------------------------------------

    def export(self, sums: _Sums | None = None) -> dict[str, Any]:
        with self.lock:
            return {
                "schema": self.key[0],
                "plan": self.key[1],
                "message": self.message,
                "layout": self.layout,
                "profile": (sums if sums is not None else self.profile()).to_json(),
            }

    def absorb(self, data: dict[str, Any], where: str) -> bool:
        """Add a saved or shipped profile of this plan; False (and a warning) if it does not fit."""
        if data.get("layout") != self.layout:
            warnings.warn(
                f"profile from {where} was recorded for another table layout of this plan "
                "(another wirearrow version?): ignored",
                RuntimeWarning,
                stacklevel=4,
            )
            return False
        try:
            sums = _Sums.from_json(data["profile"], self.plan)
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            warnings.warn(
                f"profile from {where} is malformed ({err}): ignored", RuntimeWarning, stacklevel=4
            )
            return False
        with self.lock:
            self.known.add(sums)
            self._seed_sizes()
        return True

    def _exchange(self) -> None:
        """Push what this process decoded since its last push; take the merged sums back."""
        with self.lock:
            delta, self.delta = self.delta, _Sums.empty(self.plan)
        try:
            merged = self.cache.exchange(self.export(delta))  # type: ignore[misc]
        except Exception as err:  # an exchange that went away costs sharing, never a batch
            with self.lock:
                self.delta.add(delta)  # still ours to push
            warnings.warn(
                f"profile exchange failed ({err}); sizing locally", RuntimeWarning, stacklevel=3
            )
            return
        if merged is None:
            return  # it holds another layout of this plan (another wirearrow version)
        sums = _Sums.from_json(merged["profile"], self.plan)
        with self.lock:
            # The merged sum holds every push, ours included; self.delta what arrived meanwhile.
            self.known = sums
            self._seed_sizes()


class ProfileHub:
    """The other end of an ``exchange``: the sums of every push, per (schema, plan), each with
    a version bumped per push. Plain dicts in and out, never a cache: it can run anywhere
    (``wirearrow.ray`` runs one as a named actor)."""

    def __init__(self) -> None:
        self._plans: dict[tuple[str, str], dict[str, Any]] = {}

    def exchange(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """Add a push; the merged plan back (None if its layout differs from the held one)."""
        key = (payload["schema"], payload["plan"])
        held = self._plans.get(key)
        if held is not None and held["layout"] != payload["layout"]:
            return None  # another wirearrow version's layout: neither side is merged
        if held is None:
            held = self._plans[key] = {**payload, "version": 0}
        else:
            a, b = held["profile"], payload["profile"]
            merged = {name: a[name] + b[name] for name in ("records", "batches")}
            for name in ("elements", "arena"):
                merged[name] = [x + y for x, y in zip(a[name], b[name], strict=True)]
            held["profile"] = merged
        held["version"] += 1
        return held

    def snapshot(self) -> list[dict[str, Any]]:
        """Every merged profile (the ``plans`` of a saved profile)."""
        return list(self._plans.values())


# ---- the cache -------------------------------------------------------------------------------

_REGISTRY: weakref.WeakValueDictionary[str, ParserCache] = weakref.WeakValueDictionary()
_REGISTRY_LOCK = threading.Lock()


class ParserCache:
    """Compiled plans, at most one compile per (schema, plan) per process; thread-safe.

    ``max_entries``: plans kept (least recently used ones are dropped; transcoders holding
    one keep it alive). ``exchange``: how the processes of a job share their profiles -- a
    picklable function (it travels with the cache) that takes the sums a process decoded of
    a plan since its last call (one plan of :meth:`dumps`) and returns the sums of every
    call so far, or None when it holds another layout of that plan
    (``wirearrow.ray.share_with_ray`` sets one). It is called every ``share_every`` records
    of a plan, and before a process's first batch of it (a new worker starts from the
    job-wide sizes).

    A cache pickles by identity: unpickled in a process that already holds it (same id),
    it is that same object, so every transcoder shipped to a worker shares its compiles.
    """

    def __init__(
        self,
        *,
        max_entries: int = 256,
        exchange: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
        share_every: int = SHARE_EVERY,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be positive, not {max_entries!r}")
        if share_every < 1:
            raise ValueError(f"share_every must be positive, not {share_every!r}")
        self.max_entries = int(max_entries)
        self.share_every = int(share_every)
        self.exchange = exchange
        self.id = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._compiling: dict[tuple[str, str], threading.Lock] = {}
        self._pending: dict[tuple[str, str], list[tuple[dict[str, Any], str]]] = {}
        self._by_plan: dict[str, list[tuple[str, str]]] = {}  # plan fp -> pending keys
        self._compiles = 0
        self._hits = 0
        self._compile_seconds = 0.0
        with _REGISTRY_LOCK:
            _REGISTRY[self.id] = self

    def __repr__(self) -> str:
        shared = f", exchange={self.exchange!r}" if self.exchange is not None else ""
        return f"ParserCache(plans={len(self._entries)}, max_entries={self.max_entries}{shared})"

    # -- compile once ----------------------------------------------------------------------

    def entry(self, spec: TranscodeSpec) -> _Entry:
        """The entry of a spec's plan: compiled here if no thread of this process has."""
        key = spec.plan_key
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._hits += 1
                self._entries.move_to_end(key)
                return found
            compiling = self._compiling.setdefault(key, threading.Lock())
        with compiling:
            with self._lock:
                found = self._entries.get(key)
                if found is not None:
                    self._hits += 1
                    return found
            started = time.perf_counter()
            plan = compile_plan(
                spec.schema.descriptor, spec.plan_columns(), spec, whole=spec.columns is None
            )  # errors: not cached
            found = _Entry(self, key, plan, spec.schema.message_name)
            with self._lock:
                self._compile_seconds += time.perf_counter() - started
                self._compiles += 1
                self._entries[key] = found
                self._compiling.pop(key, None)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
                pending = self._pending.pop(key, [])
                stale = [k for k in self._by_plan.get(key[1], []) if k[0] != key[0]]
        for data, where in pending:
            found.absorb(data, where)
        for k in stale:
            warnings.warn(
                f"profile from {self._pending_where(k)} was recorded for another schema "
                f"(fingerprint {k[0][:12]}, this one {key[0][:12]}): ignored",
                RuntimeWarning,
                stacklevel=3,
            )
        return found

    def _pending_where(self, key: tuple[str, str]) -> str:
        items = self._pending.get(key)
        return items[0][1] if items else "a loaded profile"

    # -- stats -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """compiles, hits, compile seconds, and per plan: the records decoded here, the
        records its profile holds (loaded, merged and decoded) and the sizes per record the
        next batch is allocated with (None before anything is known)."""
        with self._lock:
            entries = list(self._entries.values())
            out: dict[str, Any] = {
                "compiles": self._compiles,
                "hits": self._hits,
                "compile_seconds": round(self._compile_seconds, 6),
                "pending_profiles": sum(len(v) for v in self._pending.values()),
            }
        plans = []
        for e in entries:
            with e.lock:
                decoded, records = e.decoded, e.known.records + e.delta.records
            sizes = e.sizes
            plans.append(
                {
                    "message": e.message,
                    "schema": e.key[0][:12],
                    "plan": e.key[1][:12],
                    "records_decoded": decoded,
                    "records_profiled": records,
                    "elements_per_record": (
                        [round(float(x), 3) for x in sizes[0]] if sizes is not None else None
                    ),
                    "string_bytes_per_record": (
                        [round(float(x), 1) for x in sizes[1]] if sizes is not None else None
                    ),
                }
            )
        out["plans"] = plans
        return out

    # -- persistence -----------------------------------------------------------------------

    def dumps(self) -> str:
        with self._lock:
            entries = list(self._entries.values())
            # profiles loaded for plans no transcoder asked for yet are kept as they came
            pending = [item for items in self._pending.values() for item, _ in items]
        doc = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "plans": [e.export() for e in entries] + pending,
        }
        return json.dumps(doc, separators=(",", ":"))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write every plan's profile (JSON); :meth:`load` starts a job with its sizes."""
        text = self.dumps()
        path = os.fspath(path)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], **settings: Any) -> ParserCache:
        """A new cache (``settings``: its keywords) holding the profiles saved at ``path``.

        A profile is applied when a transcoder asks for its plan, after checking the
        schema fingerprint, the plan fingerprint and the table layout; one recorded for
        another schema is ignored with a warning. A file that is not a profile raises.
        """
        with open(os.fspath(path), encoding="utf-8") as f:
            text = f.read()
        return cls.loads(text, where=os.fspath(path), **settings)

    @classmethod
    def loads(cls, text: str, *, where: str = "a string", **settings: Any) -> ParserCache:
        doc = _parse(text, where)
        cache = cls(**settings)
        cache.add_profiles(doc, where)
        return cache

    def add_profiles(
        self, doc: str | dict[str, Any], where: str = "a profile", *, replace: bool = False
    ) -> None:
        """Add saved profiles (a :meth:`dumps` text or its parsed form) to this cache;
        ``replace``: each one replaces what this cache knew of its plan (the sums of an
        exchange, which hold this process's pushes already)."""
        if isinstance(doc, str):
            doc = _parse(doc, where)
        plans = doc.get("plans", [])
        if not isinstance(plans, list):
            raise ValueError(f"{where} is not a wirearrow profile (its plans are not a list)")
        for item in plans:
            schema = item.get("schema") if isinstance(item, dict) else None
            plan = item.get("plan") if isinstance(item, dict) else None
            if not isinstance(schema, str) or not isinstance(plan, str):
                warnings.warn(
                    f"profile from {where} holds a plan without fingerprints: ignored",
                    RuntimeWarning,
                    stacklevel=2,
                )
                continue
            key = (schema, plan)
            with self._lock:
                found = self._entries.get(key)
                if found is None:
                    if replace:
                        self._pending.pop(key, None)
                    self._pending.setdefault(key, []).append((item, where))
                    self._by_plan.setdefault(plan, []).append(key)
                    continue
            if replace:
                with found.lock:
                    found.known = _Sums.empty(found.plan)
            found.absorb(item, where)

    # -- pickling by identity ----------------------------------------------------------------

    def __reduce__(self) -> tuple:
        settings = {
            "max_entries": self.max_entries,
            "exchange": self.exchange,
            "share_every": self.share_every,
        }
        return (_restore_cache, (self.id, settings, self.dumps()))


def _parse(text: str, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where} is not a wirearrow profile: {err}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{where} is not a wirearrow profile (format {FORMAT!r})")
    if doc.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"{where} is a version {doc.get('version')} profile; this wirearrow reads "
            f"version {FORMAT_VERSION}"
        )
    return doc


def _restore_cache(cache_id: str, settings: dict[str, Any], text: str) -> ParserCache:
    with _REGISTRY_LOCK:
        found = _REGISTRY.get(cache_id)
    if found is not None:
        return found
    cache = ParserCache(**settings)
    with _REGISTRY_LOCK:
        # keep the sender's id: every later copy of it in this process resolves here
        _REGISTRY.pop(cache.id, None)
        cache.id = cache_id
        _REGISTRY[cache_id] = cache
    cache.add_profiles(text, "the pickled cache")
    return cache


_DEFAULT: ParserCache | None = None
_DEFAULT_LOCK = threading.Lock()


def default_cache() -> ParserCache:
    """The process-wide cache of transcoders built without ``cache=``: it compiles each plan
    once per process and learns its sizes; it is never saved or shared."""
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = ParserCache()
    return _DEFAULT


def resolve_profile(profile: Any) -> ParserCache:
    """A ``profile=`` option of the engine plugins: a ParserCache, or the path of a saved
    profile (loaded here, on the machine that builds the job: workers need not see it)."""
    if isinstance(profile, ParserCache):
        return profile
    if isinstance(profile, str | os.PathLike):
        return ParserCache.load(profile)
    raise TypeError(f"profile must be a ParserCache or a path, not {type(profile).__name__}")
