"""The parser cache: compile each plan once per process, profile the traffic, share it.

A :class:`ParserCache` maps (schema fingerprint, plan fingerprint) to one compiled plan.
However many transcoders, threads, DoFns or Ray actors of a process ask for the same plan,
it is compiled once; every transcoder of that plan shares the entry (the compiled decoder
tables are immutable). Transcoders built without ``cache=`` use the process-wide
:func:`default_cache`.

With ``tune="auto"`` each entry also keeps a *profile* of the records it decodes: a sample
(``sample_rate``) of every batch is walked again by a small Cython walker
(``wirearrow._core.profile``) that counts, per message node of the plan and field number,
presence, occurrences (repeated counts), payload bytes, the first field and the field that
follows each field (the order on the wire); batch sizes and the exact elements and string
bytes per record come free from each decode. Every ``retune_every`` records the entry
publishes a new, immutable :class:`Tuning` (a version number and the profile summary);
transcoders read it once per batch, so a swap never lands inside a batch.

What the tuning changes: the sizes of the decoder's buffers. Every entry keeps the elements
per record of each group and the string bytes per record of each column, from the last
batch any transcoder of the plan decoded, or -- before the first batch of a process -- from
a loaded or merged profile; each batch allocates its buffers once, at their final size,
instead of growing them (for whole messages of large records: +36 % on a new process's
first batch, docs/cache.md). Expected-next-field prediction in the dispatch was built and
measured too, and removed: it did not beat the noise (the dense field table already makes
dispatch one load).

Profiles persist with :meth:`ParserCache.save` / :meth:`ParserCache.load` (versioned JSON,
checked against both fingerprints and the plan's table layout: a profile recorded for
another schema or plan is ignored with a warning, never applied).
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
import uuid
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wirearrow._core.profile import walk
from wirearrow.plan.compiler import CompiledPlan, compile_plan
from wirearrow.spec import TranscodeSpec

__all__ = ["FORMAT", "FORMAT_VERSION", "ParserCache", "Tuning", "default_cache"]

FORMAT = "wirearrow-profile"
FORMAT_VERSION = 1
_MAX_WIDTH = 256  # field numbers >= this (per message) share one profile bucket
TUNE = ("auto", "off")


# ---- the profile ---------------------------------------------------------------------------


class _Layout:
    """Where each (node, field number) of a plan lives in the profile arrays."""

    def __init__(self, plan: CompiledPlan) -> None:
        nodes = plan.nodes
        self.widths = np.asarray(
            [min(max([f.number for f in n.message.fields] + [0]) + 1, _MAX_WIDTH) for n in nodes],
            dtype=np.int32,
        )
        self.base = np.concatenate([[0], np.cumsum(self.widths)[:-1]]).astype(np.int32)
        self.fbase = np.concatenate([[0], np.cumsum(self.widths.astype(np.int64) ** 2)[:-1]])
        self.fbase = self.fbase.astype(np.int64)
        self.n_fields = int(self.widths.sum())
        self.n_follow = int((self.widths.astype(np.int64) ** 2).sum())
        self.child = np.full(self.n_fields, -1, dtype=np.int32)
        for i, node in enumerate(nodes):
            for number, spec in node.fields.items():
                child = spec.child
                # Only length-delimited sub-messages are walked into (groups are skipped).
                if (
                    child is not None
                    and number < self.widths[i]
                    and spec.field.type != spec.field.TYPE_GROUP
                ):
                    self.child[self.base[i] + number] = child.index
        self.names = [n.message.full_name for n in nodes]
        self.n_groups = len(plan.group_parents)
        self.n_cols = len(plan.column_groups)
        self.signature = [
            len(nodes),
            self.n_groups,
            self.n_cols,
            [int(w) for w in self.widths],
            self.names,
        ]


@dataclass
class _Counters:
    """Sums that merge by addition: a profile from any number of workers is their sum."""

    batches: int = 0
    records: int = 0  # records decoded
    sampled: int = 0  # records walked
    batch_min: int = 0
    batch_max: int = 0
    visits: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    present: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    nbytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    first: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    follow: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    elements: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per group
    arena: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per column

    @classmethod
    def empty(cls, layout: _Layout) -> _Counters:
        nn = len(layout.widths)
        return cls(
            visits=np.zeros(nn, np.int64),
            present=np.zeros(layout.n_fields, np.int64),
            count=np.zeros(layout.n_fields, np.int64),
            nbytes=np.zeros(layout.n_fields, np.int64),
            first=np.zeros(layout.n_fields, np.int64),
            follow=np.zeros(layout.n_follow, np.int64),
            elements=np.zeros(layout.n_groups, np.int64),
            arena=np.zeros(layout.n_cols, np.int64),
        )

    _ARRAYS = ("visits", "present", "count", "nbytes", "first", "follow", "elements", "arena")

    def add(self, other: _Counters) -> None:
        self.batches += other.batches
        self.records += other.records
        self.sampled += other.sampled
        if other.batches:
            self.batch_min = (
                other.batch_min
                if not self.batches - other.batches
                else min(self.batch_min, other.batch_min)
            )
            self.batch_max = max(self.batch_max, other.batch_max)
        for name in self._ARRAYS:
            getattr(self, name)[:] += getattr(other, name)

    def copy(self) -> _Counters:
        out = _Counters(self.batches, self.records, self.sampled, self.batch_min, self.batch_max)
        for name in self._ARRAYS:
            setattr(out, name, getattr(self, name).copy())
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "batches": self.batches,
            "records": self.records,
            "sampled": self.sampled,
            "batch_min": self.batch_min,
            "batch_max": self.batch_max,
        }
        for name in self._ARRAYS:
            arr = getattr(self, name)
            nz = np.flatnonzero(arr)  # sparse: the follow matrices are mostly zeros
            out[name] = [nz.tolist(), arr[nz].tolist()]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], layout: _Layout) -> _Counters:
        out = cls.empty(layout)
        out.batches = int(data["batches"])
        out.records = int(data["records"])
        out.sampled = int(data["sampled"])
        out.batch_min = int(data["batch_min"])
        out.batch_max = int(data["batch_max"])
        for name in cls._ARRAYS:
            index, values = data[name]
            arr = getattr(out, name)
            index = np.asarray(index, dtype=np.int64)
            if len(index) and (index.min() < 0 or index.max() >= len(arr)):
                raise ValueError(f"profile array {name!r} does not fit the plan")
            arr[index] = np.asarray(values, dtype=np.int64)
        return out


@dataclass(frozen=True, eq=False)
class Tuning:
    """One published tuning of a plan: immutable, swapped whole between batches."""

    version: int
    records: int  # records in the profile it was derived from
    profile: _Counters = field(repr=False)  # a snapshot: the tuning never changes
    entry: _Entry = field(repr=False)

    @functools.cached_property
    def summary(self) -> dict[str, Any]:
        """The profile in words; computed when asked (stats()), never on the hot path."""
        return _summary(self.entry.layout, self.entry.plan, self.profile)


def _summary(layout: _Layout, plan: CompiledPlan, c: _Counters) -> dict[str, Any]:
    """The profile in words: per message node, fields in wire order with their statistics."""
    nodes = []
    for i, node in enumerate(plan.nodes):
        visits = int(c.visits[i])
        if not visits:
            continue
        w, b, fb = int(layout.widths[i]), int(layout.base[i]), int(layout.fbase[i])
        follow = c.follow[fb : fb + w * w].reshape(w, w)
        present = c.present[b : b + w]
        by_number = {f.number: f.name for f in node.message.fields}
        # Wire order: from the most frequent first field, the most frequent successor each
        # time (a field already placed is not placed again).
        order: list[int] = []
        at = int(c.first[b : b + w].argmax()) if c.first[b : b + w].any() else -1
        while at > 0 and at not in order:
            order.append(at)
            row = follow[at].copy()
            row[order] = 0
            at = int(row.argmax()) if row.any() else -1
        order += [n for n in np.flatnonzero(present).tolist() if n not in order and n > 0]
        fields = []
        for n in order:
            p = int(present[n])
            fields.append(
                {
                    "field": by_number.get(n, f"#{n}"),
                    "number": n,
                    "planned": n in node.fields,
                    "presence": round(p / visits, 4),
                    "per_message": round(int(c.count[b + n]) / p, 3) if p else 0.0,
                    "bytes_per_message": round(int(c.nbytes[b + n]) / p, 1) if p else 0.0,
                }
            )
        nodes.append({"node": i, "message": layout.names[i], "visits": visits, "fields": fields})
    records = max(c.records, 1)
    return {
        "records": c.records,
        "sampled": c.sampled,
        "batches": c.batches,
        "batch_size": {
            "mean": round(c.records / c.batches, 1) if c.batches else 0.0,
            "min": c.batch_min,
            "max": c.batch_max,
        },
        "elements_per_record": [round(int(x) / records, 3) for x in c.elements],
        "string_bytes_per_record": [round(int(x) / records, 1) for x in c.arena],
        "nodes": nodes,
    }


# ---- entries ---------------------------------------------------------------------------------


class _Entry:
    """One compiled plan and its profile. ``plan`` and ``tuning`` are read without a lock
    (one attribute load each); everything else changes under ``lock``."""

    def __init__(
        self, cache: ParserCache, key: tuple[str, str], plan: CompiledPlan, message: str
    ) -> None:
        self.cache = cache
        self.key = key
        self.message = message
        self.plan = plan
        self.layout = _Layout(plan)
        self.lock = threading.Lock()
        self.profile = _Counters.empty(self.layout)  # everything known (loaded + seen)
        self.delta = _Counters.empty(self.layout)  # seen here since the last push (sharing)
        self.tuning: Tuning | None = None
        self.since_retune = 0
        self.stamp = np.zeros(self.layout.n_fields, np.int64)  # walker scratch
        self.phase = 0  # sampling offset, rotated every batch
        # measured effect: decode seconds and records, before and after the first tuning
        self.timing = {"untuned": [0.0, 0], "tuned": [0.0, 0]}
        self.walk_seconds = 0.0
        self.hub_version = 0  # version of the merged profile last taken from a Ray hub
        # Elements per record of each group and string bytes per record of each column:
        # what the last batch of any transcoder of this plan held, or (before any batch) what
        # a loaded or merged profile says. Sizes the next batch's buffers up front, so that
        # they are neither grown (copied) nor faulted in twice. One tuple, swapped whole.
        self.sizes: tuple[np.ndarray, np.ndarray] | None = None

    def capacities(self, n: int) -> tuple[list[int], list[int] | None]:
        """(elements per group, string bytes per column) to allocate for a batch of n."""
        sizes = self.sizes
        if sizes is None:
            # Nothing known: one element per record everywhere. The buffers are calloc'd, so
            # pages a group never fills are never touched (and cost no resident memory).
            return [n] * self.layout.n_groups, None
        per_record, bytes_per_record = sizes
        return (
            [int(x * n * 1.05) + 16 for x in per_record],
            [int(x * n * 1.05) + 64 if x > 0 else 0 for x in bytes_per_record],
        )

    def learn_sizes(
        self, records: int, group_counts: Sequence[int], arena_bytes: Sequence[int]
    ) -> None:
        if records > 0:
            self.sizes = (
                np.asarray(group_counts, dtype=np.float64) / records,
                np.asarray(arena_bytes, dtype=np.float64) / records,
            )

    def _seed_sizes(self) -> None:
        # A profile sizes the first batch of a process that has decoded nothing yet.
        if self.sizes is None and self.profile.records > 0:
            self.learn_sizes(self.profile.records, self.profile.elements, self.profile.arena)

    def observe(
        self,
        tuning: Tuning | None,
        seconds: float,
        data: Any,
        starts: np.ndarray,
        ends: np.ndarray,
        records: int,
        group_counts: Sequence[int],
        arena_bytes: Sequence[int],
    ) -> None:
        """Account one decoded batch; sample it into the profile; retune when due."""
        cache = self.cache
        if cache.tune == "off" or records <= 0:
            return
        n = len(starts)
        stride = max(round(1.0 / cache.sample_rate), 1) if cache.sample_rate > 0 else 0
        with self.lock:
            slot = self.timing["tuned" if tuning is not None else "untuned"]
            slot[0] += seconds
            slot[1] += records
            batch = _Counters.empty(self.layout)
            batch.batches, batch.records = 1, records
            batch.batch_min = batch.batch_max = records
            batch.elements[:] = np.asarray(group_counts, dtype=np.int64)
            batch.arena[:] = np.asarray(arena_bytes, dtype=np.int64)
            if stride and n:
                sample = np.arange(self.phase % stride, n, stride, dtype=np.int64)
                self.phase += 1
                if len(sample):
                    t0 = time.perf_counter()
                    batch.sampled = walk(
                        data,
                        starts,
                        ends,
                        sample,
                        self.layout.child,
                        self.layout.base,
                        self.layout.widths,
                        self.layout.fbase,
                        batch.visits,
                        batch.present,
                        batch.count,
                        batch.nbytes,
                        batch.first,
                        batch.follow,
                        self.stamp,
                    )
                    self.walk_seconds += time.perf_counter() - t0
            self.profile.add(batch)
            self.delta.add(batch)
            self.since_retune += records
            due = self.since_retune >= cache.retune_every
        if due:
            self.retune()

    def retune(self) -> Tuning:
        """Publish a new tuning from the profile so far (and exchange it with a hub)."""
        hub = self.cache._hub()
        if hub is not None:
            self._exchange(hub)
        with self.lock:
            self.since_retune = 0
            version = (self.tuning.version if self.tuning is not None else 0) + 1
            tuning = Tuning(version, self.profile.records, self.profile.copy(), self)
            self.tuning = tuning  # the atomic swap: transcoders read it once per batch
        with self.cache._lock:
            self.cache._retunes += 1
        return tuning

    # -- sharing -------------------------------------------------------------------------

    def export(self) -> dict[str, Any]:
        with self.lock:
            return {
                "schema": self.key[0],
                "plan": self.key[1],
                "message": self.message,
                "layout": self.layout.signature,
                "tuning_version": self.tuning.version if self.tuning is not None else 0,
                "profile": self.profile.to_json(),
            }

    def absorb(self, data: dict[str, Any], where: str) -> bool:
        """Add a saved or shipped profile of this plan; False (and a warning) if it does not fit."""
        if data.get("layout") != self.layout.signature:
            warnings.warn(
                f"profile from {where} was recorded for another table layout of this plan "
                "(another wirearrow version?): ignored",
                RuntimeWarning,
                stacklevel=4,
            )
            return False
        try:
            counters = _Counters.from_json(data["profile"], self.layout)
        except (KeyError, TypeError, ValueError) as err:
            warnings.warn(
                f"profile from {where} is malformed ({err}): ignored", RuntimeWarning, stacklevel=4
            )
            return False
        with self.lock:
            self.profile.add(counters)
            self._seed_sizes()
        self.retune()
        return True

    def _exchange(self, hub: Any) -> None:
        """Push what this process saw since the last push; take the merged profile back."""
        with self.lock:
            delta, self.delta = self.delta, _Counters.empty(self.layout)
        payload = {
            "schema": self.key[0],
            "plan": self.key[1],
            "message": self.message,
            "layout": self.layout.signature,
            "profile": delta.to_json(),
        }
        try:
            merged = self.cache._ray_get(hub.exchange.remote(payload))
        except Exception as err:  # a hub that went away costs sharing, never a batch
            warnings.warn(
                f"profile hub unreachable ({err}); profiling locally", RuntimeWarning, stacklevel=3
            )
            return
        if merged is None:
            return
        counters = _Counters.from_json(merged["profile"], self.layout)
        with self.lock:
            # The hub's sum holds every push, ours included; keep what arrived meanwhile.
            self.profile = counters
            self.profile.add(self.delta)
            self.hub_version = merged["version"]
            self._seed_sizes()


# ---- the cache -------------------------------------------------------------------------------

_REGISTRY: weakref.WeakValueDictionary[str, ParserCache] = weakref.WeakValueDictionary()
_REGISTRY_LOCK = threading.Lock()


class ParserCache:
    """Compiled plans, at most one compile per (schema, plan) per process; thread-safe.

    ``tune``: "auto" profiles a ``sample_rate`` fraction of the records of every batch and
    publishes a new :class:`Tuning` every ``retune_every`` records; "off" only caches.
    ``max_entries``: plans kept (least recently used ones are dropped; transcoders holding
    one keep it alive). ``hub``: the name of a Ray actor that merges the profiles of every
    process using a cache with this name (:meth:`share_with_ray`).

    A cache pickles by identity: unpickled in a process that already holds it (same id),
    it is that same object, so every transcoder shipped to a worker shares its compiles.
    """

    def __init__(
        self,
        tune: str = "auto",
        sample_rate: float = 0.01,
        retune_every: int = 100_000,
        *,
        max_entries: int = 256,
        hub: str | None = None,
    ) -> None:
        if tune not in TUNE:
            raise ValueError(f"tune must be one of {TUNE}, not {tune!r}")
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in [0, 1], not {sample_rate!r}")
        if retune_every < 1:
            raise ValueError(f"retune_every must be positive, not {retune_every!r}")
        self.tune = tune
        self.sample_rate = float(sample_rate)
        self.retune_every = int(retune_every)
        self.max_entries = int(max_entries)
        self.hub = hub
        self.id = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._compiling: dict[tuple[str, str], threading.Lock] = {}
        self._pending: dict[tuple[str, str], list[tuple[dict[str, Any], str]]] = {}
        self._by_plan: dict[str, list[tuple[str, str]]] = {}  # plan fp -> pending keys
        self._compiles = 0
        self._hits = 0
        self._retunes = 0
        self._compile_seconds = 0.0
        self._hub_handle: Any = None
        with _REGISTRY_LOCK:
            _REGISTRY[self.id] = self

    def __repr__(self) -> str:
        return (
            f"ParserCache(tune={self.tune!r}, sample_rate={self.sample_rate}, "
            f"retune_every={self.retune_every}, plans={len(self._entries)})"
        )

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
            plan = compile_plan(spec.schema.descriptor, spec.plan_columns(), spec)  # errors: not cached
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
        """compiles, hits, retunes, and per plan: its tuning version, profile summary and
        the measured effect (decode records/s before and after its first tuning)."""
        with self._lock:
            entries = list(self._entries.values())
            out: dict[str, Any] = {
                "tune": self.tune,
                "compiles": self._compiles,
                "hits": self._hits,
                "retunes": self._retunes,
                "compile_seconds": round(self._compile_seconds, 6),
                "pending_profiles": sum(len(v) for v in self._pending.values()),
            }
        plans = []
        for e in entries:
            with e.lock:
                tuning = e.tuning
                timing = {k: list(v) for k, v in e.timing.items()}
                decoded = e.profile.records
                walk_seconds = e.walk_seconds
            effect = {k: round(v[1] / v[0], 1) if v[0] > 0 else None for k, v in timing.items()}
            decode_seconds = timing["untuned"][0] + timing["tuned"][0]
            plans.append(
                {
                    "message": e.message,
                    "schema": e.key[0][:12],
                    "plan": e.key[1][:12],
                    "records_profiled": decoded,
                    "tuning_version": tuning.version if tuning is not None else 0,
                    "profile": tuning.summary if tuning is not None else None,
                    "effect_records_per_second": effect,
                    "profiling_overhead": (
                        round(walk_seconds / decode_seconds, 4) if decode_seconds else None
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
            "settings": {
                "tune": self.tune,
                "sample_rate": self.sample_rate,
                "retune_every": self.retune_every,
            },
            "plans": [e.export() for e in entries] + pending,
        }
        return json.dumps(doc, separators=(",", ":"))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write every plan's profile (JSON); :meth:`load` starts a job already profiled."""
        text = self.dumps()
        path = os.fspath(path)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], **settings: Any) -> ParserCache:
        """A cache holding the profiles saved at ``path`` (settings too, unless given).

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
        kwargs = {**doc.get("settings", {}), **settings}
        cache = cls(**kwargs)
        cache.add_profiles(doc, where)
        return cache

    def add_profiles(self, doc: str | dict[str, Any], where: str = "a profile") -> None:
        """Add saved profiles (a :meth:`dumps` text or its parsed form) to this cache."""
        if isinstance(doc, str):
            doc = _parse(doc, where)
        for item in doc.get("plans", []):
            key = (item.get("schema"), item.get("plan"))
            with self._lock:
                found = self._entries.get(key)  # type: ignore[arg-type]
                if found is None:
                    self._pending.setdefault(key, []).append((item, where))  # type: ignore[arg-type]
                    self._by_plan.setdefault(key[1], []).append(key)  # type: ignore[arg-type]
                    continue
            found.absorb(item, where)

    # -- pickling by identity ----------------------------------------------------------------

    def __reduce__(self) -> tuple:
        settings = {
            "tune": self.tune,
            "sample_rate": self.sample_rate,
            "retune_every": self.retune_every,
            "max_entries": self.max_entries,
            "hub": self.hub,
        }
        return (_restore_cache, (self.id, settings, self.dumps()))

    # -- Ray ---------------------------------------------------------------------------------

    def share_with_ray(self, name: str = "wirearrow-profile-hub") -> ParserCache:
        """Merge this cache's profiles across Ray workers through the named actor ``name``.

        Each process pushes what it profiled at every retune and takes back the sum of
        every process's pushes (versioned); the actor is created on first use (detached
        from no job: it lives as long as the job). Returns self.
        """
        self.hub = name
        self._hub_handle = None
        return self

    def pull_from_ray(self) -> ParserCache:
        """Add the hub's merged profiles (every worker's) to this cache, e.g. to ``save``."""
        hub = self._hub()
        if hub is None:
            raise ValueError("this cache does not share with Ray: call share_with_ray() first")
        for item in self._ray_get(hub.snapshot.remote()):
            key = (item["schema"], item["plan"])
            with self._lock:
                found = self._entries.get(key)
            if found is not None:
                with found.lock:
                    found.delta = _Counters.empty(found.layout)  # the hub holds it already
                    found.profile = _Counters.empty(found.layout)
            self.add_profiles({"plans": [item]}, f"Ray actor {self.hub!r}")
        return self

    def _hub(self) -> Any:
        if self.hub is None:
            return None
        if self._hub_handle is None:
            from wirearrow.profile_hub import hub_actor  # imports Ray

            self._hub_handle = hub_actor(self.hub)
        return self._hub_handle

    @staticmethod
    def _ray_get(ref: Any) -> Any:
        import ray

        return ray.get(ref, timeout=30)


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
    """The process-wide cache of transcoders built without ``cache=``.

    It compiles each plan once per process and does not profile (``tune="off"``): pass a
    ``ParserCache(tune="auto")`` to profile.
    """
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = ParserCache(tune="off")
    return _DEFAULT


def resolve_profile(profile: Any) -> ParserCache:
    """A ``profile=`` option of the engine plugins: a ParserCache, or the path of a saved
    profile (loaded here, on the machine that builds the job: workers need not see it)."""
    if isinstance(profile, ParserCache):
        return profile
    if isinstance(profile, str | os.PathLike):
        return ParserCache.load(profile)
    raise TypeError(f"profile must be a ParserCache or a path, not {type(profile).__name__}")
