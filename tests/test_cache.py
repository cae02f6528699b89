"""The parser cache: compile once, learn buffer sizes, persist and share them (Ray, Beam).

Sizes never change output: the differential test runs random schemas, plans and wire
variations through transcoders whose buffers are sized by an earlier batch (or not at all)
and compares them with the oracle and with each other.
"""

from __future__ import annotations

import json
import pickle
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from depth import examples
from oracle import assert_rows_equal, expected_rows
from schemagen import compile_source, messages, plans, schema_specs, wire_bytes
from wirearrow import cache as cache_module
from wirearrow.cache import ParserCache, default_cache

PLAN = ["id", "imp[*].id", "imp[*].bidfloor", "device.geo.country", "user.id"]


@pytest.fixture(scope="module")
def schema() -> wa.Schema:
    return wa.Schema.from_proto(
        str(corpus.PROTO_FILE), corpus.MESSAGE_NAME, import_paths=[str(corpus.SCHEMA_DIR)]
    )


@pytest.fixture(scope="module")
def skewed() -> pa.BinaryArray:
    return pa.array(corpus.generate_skewed(600, seed=3), pa.binary())


# ---- compile once -------------------------------------------------------------------------


def test_one_compile_per_plan_however_many_transcoders(schema: wa.Schema) -> None:
    cache = ParserCache()
    a = wa.Transcoder(schema, columns=PLAN, cache=cache)
    b = wa.Transcoder(schema, columns=list(PLAN), cache=cache)
    c = wa.Transcoder(schema, columns=PLAN[:2], cache=cache)  # another plan
    d = wa.Transcoder(schema, columns=PLAN, cache=cache, timestamp_unit="ms")  # other options
    stats = cache.stats()
    assert (stats["compiles"], stats["hits"]) == (3, 1)
    assert a._plan is b._plan and a._plan is not c._plan and a._plan is not d._plan


def test_one_compile_under_threads(schema: wa.Schema) -> None:
    cache = ParserCache()
    barrier = threading.Barrier(8)
    built: list[Any] = []

    def build() -> None:
        barrier.wait()
        built.append(wa.Transcoder(schema, columns=PLAN, cache=cache)._plan)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.stats()["compiles"] == 1 and cache.stats()["hits"] == 7
    assert all(p is built[0] for p in built)


def test_default_cache_is_process_wide(schema: wa.Schema) -> None:
    a = wa.Transcoder(schema, columns=["id", "tmax"])
    b = wa.Transcoder(schema, columns=["id", "tmax"])
    assert a.cache is default_cache() and a._plan is b._plan
    assert default_cache().exchange is None  # never shared unless asked


def test_plan_errors_are_not_cached(schema: wa.Schema) -> None:
    cache = ParserCache()
    for _ in range(2):
        with pytest.raises(wa.PlanError):
            wa.Transcoder(schema, columns=["nope"], cache=cache)
    assert cache.stats()["compiles"] == 0


def test_bad_settings() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        ParserCache(max_entries=0)
    with pytest.raises(ValueError, match="share_every"):
        ParserCache(share_every=0)
    with pytest.raises(TypeError):
        ParserCache(tune="auto")  # type: ignore[call-arg]  # the walker's settings are gone


def test_least_recently_used_plans_are_dropped(schema: wa.Schema) -> None:
    cache = ParserCache(max_entries=2)
    a = wa.Transcoder(schema, columns=["id"], cache=cache)
    wa.Transcoder(schema, columns=["tmax"], cache=cache)
    wa.Transcoder(schema, columns=["id"], cache=cache)  # a hit: "id" is now the most recent
    b = wa.Transcoder(schema, columns=["at"], cache=cache)  # drops "tmax"
    held = [p["plan"] for p in cache.stats()["plans"]]
    assert held == [a.spec.plan_key[1][:12], b.spec.plan_key[1][:12]]
    wa.Transcoder(schema, columns=["tmax"], cache=cache)
    assert cache.stats()["compiles"] == 4 and cache.stats()["hits"] == 1


# ---- persistence ----------------------------------------------------------------------------


def test_save_load_round_trip(schema: wa.Schema, skewed: pa.Array, tmp_path: Any) -> None:
    cache = ParserCache()
    wa.Transcoder(schema, columns=PLAN, cache=cache).transcode(skewed)
    cache.save(tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["format"] == "wirearrow-profile" and doc["version"] == 2
    assert doc["plans"][0]["profile"]["records"] == len(skewed)

    loaded = ParserCache.load(tmp_path / "p.json")
    assert loaded.stats()["pending_profiles"] == 1
    tc = wa.Transcoder(schema, columns=PLAN, cache=loaded)
    plan = loaded.stats()["plans"][0]
    assert plan["records_profiled"] == len(skewed) and plan["records_decoded"] == 0
    original = cache.entry(tc.spec)
    assert plan["elements_per_record"] == cache.stats()["plans"][0]["elements_per_record"]
    assert original.profile().to_json() == tc._entry.profile().to_json()
    assert tc.transcode(skewed).equals(
        wa.Transcoder(schema, columns=PLAN, cache=ParserCache()).transcode(skewed)
    )


def test_buffer_sizes_are_shared_and_seeded_from_a_profile(
    schema: wa.Schema, skewed: pa.Array, tmp_path: Any
) -> None:
    cache = ParserCache()
    first = wa.Transcoder(schema, cache=cache)  # whole messages: many groups and strings
    entry = first._entry
    groups, arenas = entry.capacities(len(skewed))
    assert groups == [len(skewed)] * entry.n_groups and arenas is None  # nothing known
    want = first.transcode(skewed)
    # What one transcoder decoded sizes the next one's first batch (same plan, same entry).
    second = wa.Transcoder(schema, cache=cache)
    assert second._entry is entry
    groups, arenas = entry.capacities(len(skewed))
    imp = [g for g, parent in enumerate(entry.plan.group_parents) if parent == 0]
    assert max(groups[g] for g in imp) > len(skewed)  # several impressions a request
    assert arenas is not None and sum(arenas) > skewed.nbytes / 2  # the strings' bytes
    assert second.transcode(skewed).equals(want)
    # A new process starts from a saved profile's sizes, before any batch.
    cache.save(tmp_path / "p.json")
    loaded = ParserCache.load(tmp_path / "p.json")
    fresh = wa.Transcoder(schema, cache=loaded)
    assert fresh._entry.capacities(len(skewed))[1] is not None
    assert fresh._entry.capacities(len(skewed))[0] == pytest.approx(groups, rel=0.01, abs=2)
    assert fresh.transcode(skewed).equals(want)


def test_a_loaded_profile_sizes_the_first_batch(
    schema: wa.Schema, skewed: pa.Array, tmp_path: Any
) -> None:
    n = len(skewed)
    recorder = ParserCache()
    wa.Transcoder(schema, cache=recorder).transcode(skewed.slice(0, n // 2))
    recorder.save(tmp_path / "p.json")
    rest = skewed.slice(n // 2)  # other records of the same traffic
    for cache, grows in ((ParserCache(), True), (ParserCache.load(tmp_path / "p.json"), False)):
        tc = wa.Transcoder(schema, cache=cache)
        groups, arenas = tc._entry.capacities(len(rest))
        want = wa.Transcoder(schema, cache=ParserCache()).transcode(rest)
        assert tc.transcode(rest).equals(want)
        # what the batch held: the entry's sizes are now its exact counts per record
        per_record, bytes_per_record = tc._entry.sizes
        counts = [round(x * len(rest)) for x in per_record]
        arena = [round(x * len(rest)) for x in bytes_per_record]
        fits = all(c <= g for c, g in zip(counts, groups, strict=True)) and arenas is not None
        fits = fits and all(b <= a for b, a in zip(arena, arenas, strict=True))
        assert fits is not grows  # cold, lists of several per record outgrow n elements
        if not grows:
            # allocated once, and not far beyond what was needed (the profile's margin)
            assert sum(groups) < 1.2 * sum(counts) + 16 * len(groups)


def test_stale_profile_is_ignored_with_a_warning(
    schema: wa.Schema, skewed: pa.Array, tmp_path: Any, compile_proto: Any
) -> None:
    cache = ParserCache()
    wa.Transcoder(schema, columns=["id"], cache=cache).transcode(skewed)
    cache.save(tmp_path / "p.json")
    other, _ = compile_proto(
        'syntax = "proto3"; message BidRequestEvent { string id = 1; }', "BidRequestEvent"
    )
    loaded = ParserCache.load(tmp_path / "p.json")
    with pytest.warns(RuntimeWarning, match="another schema"):
        tc = wa.Transcoder(other, columns=["id"], cache=loaded)
    assert loaded.stats()["plans"][0]["records_profiled"] == 0
    assert loaded.stats()["plans"][0]["elements_per_record"] is None
    assert tc.transcode([b"\x0a\x01x"]).to_pylist() == [{"id": "x"}]
    # a profile whose layout does not fit the plan it names
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["plans"][0]["layout"][0] += 1
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.warns(RuntimeWarning, match="layout"):
        wa.Transcoder(schema, columns=["id"], cache=ParserCache.load(tmp_path / "bad.json"))
    # counts that do not fit the layout they claim
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["plans"][0]["profile"]["arena"].append(5)
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.warns(RuntimeWarning, match="malformed"):
        tc = wa.Transcoder(schema, columns=["id"], cache=ParserCache.load(tmp_path / "bad.json"))
    assert tc._entry.sizes is None


def test_not_a_profile(tmp_path: Any) -> None:
    (tmp_path / "x.json").write_text('{"format": "something"}')
    with pytest.raises(ValueError, match="not a wirearrow profile"):
        ParserCache.load(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"format": "wirearrow-profile", "version": 99}')
    with pytest.raises(ValueError, match="version 99"):
        ParserCache.load(tmp_path / "y.json")
    # a profile of the walker's days (version 1) is refused by name, not misread
    (tmp_path / "v1.json").write_text('{"format": "wirearrow-profile", "version": 1}')
    with pytest.raises(ValueError, match="version 1 profile; this wirearrow reads version 2"):
        ParserCache.load(tmp_path / "v1.json")


def test_malformed_profiles_never_crash(schema: wa.Schema, skewed: pa.Array, tmp_path: Any) -> None:
    head = '{"format": "wirearrow-profile", "version": 2, "plans": '
    with pytest.raises(ValueError, match="not a list"):
        ParserCache.loads(head + "5}")
    with pytest.warns(RuntimeWarning, match="without fingerprints"):
        ParserCache.loads(head + '[1, {"schema": 2, "plan": "x"}]}')
    cache = ParserCache()
    tc = wa.Transcoder(schema, columns=PLAN, cache=cache)
    tc.transcode(skewed)
    doc = json.loads(cache.dumps())
    for bad in ([10**30] * 2, [[1, 2]] * 2, "xy", [-1] * 2, None):
        doc["plans"][0]["profile"]["elements"] = bad
        with pytest.warns(RuntimeWarning, match="malformed"):
            loaded = ParserCache.loads(json.dumps(doc))
            other = wa.Transcoder(schema, columns=PLAN, cache=loaded)
        assert other._entry.sizes is None
        assert other.transcode(skewed).equals(tc.transcode(skewed))


def test_cache_pickles_by_identity(schema: wa.Schema) -> None:
    cache = ParserCache()
    tc = wa.Transcoder(schema, columns=PLAN, cache=cache)
    copy = pickle.loads(pickle.dumps(tc))
    assert copy.cache is cache and copy._plan is tc._plan
    tc.transcode(corpus.generate_skewed(50, seed=1))
    # in a process that does not hold it, a copy with the sender's id and sizes
    text = pickle.dumps(cache)
    registry = cache_module._REGISTRY
    del registry[cache.id]
    try:
        elsewhere = pickle.loads(text)
        assert elsewhere is not cache and elsewhere.id == cache.id
        assert pickle.loads(text) is elsewhere
        assert elsewhere.entry(tc.spec).sizes is not None
    finally:
        registry[cache.id] = cache
    plain = pickle.loads(pickle.dumps(wa.Transcoder(schema, columns=PLAN)))
    assert plain.cache is default_cache()


# ---- differential: sized buffers vs the oracle -------------------------------------------------


@settings(
    max_examples=examples(5),
    deadline=None,
    database=None,
    phases=[p for p in Phase if p is not Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_sized_buffers_match_oracle_on_random_schemas(data: st.DataObject) -> None:
    spec = data.draw(schema_specs(), label="schema")
    compiled = compile_source(spec.render())
    root = compiled.message_class(spec.root)
    plan = data.draw(plans(root.DESCRIPTOR), label="plan")
    batches = [
        [data.draw(wire_bytes(value)) for value in values]
        for values in data.draw(
            st.lists(st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=4), min_size=2, max_size=3)
        )
    ]
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    # one cache across the batches: each batch is sized by the one before it (other records,
    # too small or too large), and once more through a saved profile of all of them
    sized = wa.Transcoder(schema, columns=plan, cache=ParserCache(), on_error="skip")
    for wire in [*batches, *batches[:1]]:
        try:
            want = expected_rows(root, wire, plan)
        except Exception:
            want = None
        plain = wa.Transcoder(schema, columns=plan, cache=ParserCache(), on_error="skip")
        a, b = sized.transcode(wire), plain.transcode(wire)
        assert_rows_equal(a.schema, a.to_pylist(), b.to_pylist(), "sized vs unsized")
        if want is not None and sized.stats.records_failed == 0:
            assert_rows_equal(a.schema, a.to_pylist(), want, "sized vs oracle")
    loaded = ParserCache.loads(sized.cache.dumps())
    again = wa.Transcoder(schema, columns=plan, cache=loaded, on_error="skip")
    assert again._entry.sizes is not None or sized._entry.sizes is None
    a = again.transcode(batches[0])
    b = wa.Transcoder(schema, columns=plan, cache=ParserCache(), on_error="skip").transcode(batches[0])
    assert_rows_equal(a.schema, a.to_pylist(), b.to_pylist(), "profile-sized vs unsized")


# ---- sharing: Ray and Beam ---------------------------------------------------------------------


def test_the_cache_imports_no_engine() -> None:
    """One-way: wirearrow.ray's profile hub uses the cache's exchange seam; the cache knows
    no Ray (nor any other engine), not even in a function."""
    import ast

    tree = ast.parse(Path(cache_module.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    engines = ("ray", "apache_beam", "wirearrow.ray", "wirearrow.beam")
    assert not [m for m in imported if m.split(".")[0] in engines or m.startswith(engines)]


def test_profile_hub_sums_pushes() -> None:
    from wirearrow.cache import ProfileHub

    hub = ProfileHub()
    push = {"schema": "s", "plan": "p", "message": "M", "layout": [2, 1]}
    sums = {"records": 10, "batches": 1, "elements": [10, 30], "arena": [400]}
    assert hub.exchange({**push, "profile": sums})["version"] == 1
    merged = hub.exchange({**push, "profile": {**sums, "records": 5, "elements": [5, 1]}})
    assert merged["version"] == 2
    assert merged["profile"] == {"records": 15, "batches": 2, "elements": [15, 31], "arena": [800]}
    assert hub.exchange({**push, "layout": [3, 1], "profile": sums}) is None  # another layout
    assert [p["profile"]["records"] for p in hub.snapshot()] == [15]


def test_a_new_process_starts_from_the_hubs_sizes(schema: wa.Schema, skewed: pa.Array) -> None:
    """The sharing protocol without Ray: two processes' caches, one hub in between (its
    exchange, called in process where Ray would call the actor)."""
    from wirearrow.cache import ProfileHub

    hub = ProfileHub()

    def pull(cache: ParserCache) -> ParserCache:  # what wirearrow.ray.pull_from_ray does
        cache.add_profiles({"plans": hub.snapshot()}, "the hub", replace=True)
        return cache

    first = ParserCache(share_every=200, exchange=hub.exchange)
    tc = wa.Transcoder(schema, cache=first)
    want = tc.transcode(skewed)  # 600 records: pushed
    assert hub.snapshot()[0]["profile"]["records"] == len(skewed)
    # another process: its first batch is sized by what the first one pushed
    second = ParserCache(share_every=200, exchange=hub.exchange)
    other = wa.Transcoder(schema, cache=second)
    groups, arenas = other._entry.capacities(len(skewed))
    assert arenas is not None and list(groups) == list(tc._entry.capacities(len(skewed))[0])
    assert other.transcode(skewed).equals(want)
    assert hub.snapshot()[0]["profile"]["records"] == 2 * len(skewed)
    # the driver's pull: every process's pushes, nothing counted twice
    merged = pull(ParserCache(exchange=hub.exchange))
    wa.Transcoder(schema, cache=merged)
    assert merged.stats()["plans"][0]["records_profiled"] == 2 * len(skewed)
    pull(pull(merged))  # pulled again: replaced, not added
    assert merged.stats()["plans"][0]["records_profiled"] == 2 * len(skewed)
    pull(first)
    assert first.stats()["plans"][0]["records_profiled"] == 2 * len(skewed)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_ray_workers_merge_profiles_in_one_actor(
    schema: wa.Schema, tmp_path: Any, ray_local: None
) -> None:
    ray = pytest.importorskip("ray")
    war = pytest.importorskip("wirearrow.ray")
    records = corpus.generate_skewed(2000, seed=5)
    ds = ray.data.from_arrow(pa.table({"value": pa.array(records, pa.binary())}))
    ds = ds.repartition(4)
    cache = war.share_with_ray(ParserCache(share_every=200), "wa-test-hub")
    tc = wa.Transcoder(schema, columns=PLAN)
    out = war.transcode(ds, tc, profile=cache, batch_size=250).rows.to_arrow_refs()
    rows = pa.concat_tables(ray.get(out))
    assert rows.num_rows == wa.Transcoder(schema, columns=PLAN).transcode(records).num_rows
    merged = war.pull_from_ray(war.share_with_ray(ParserCache(), "wa-test-hub"))
    assert merged.stats()["pending_profiles"] == 1
    merged.save(tmp_path / "job.json")
    # the next job starts from the saved, job-wide profile
    loaded = ParserCache.load(tmp_path / "job.json")
    tc = wa.Transcoder(schema, columns=PLAN, cache=loaded)
    plan = loaded.stats()["plans"][0]
    # pushed by the workers every 200 records; a worker's last pushes may still be due
    assert 1000 <= plan["records_profiled"] <= len(records)
    # the merged sizes are the job's: they size the next job's first batch
    local = ParserCache()
    wa.Transcoder(schema, columns=PLAN, cache=local).transcode(records)
    assert plan["elements_per_record"] == pytest.approx(
        local.stats()["plans"][0]["elements_per_record"], rel=0.1
    )
    assert tc._entry.capacities(100)[1] is not None


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.beam
def test_beam_dofns_share_the_process_cache(schema: wa.Schema) -> None:
    beam = pytest.importorskip("apache_beam")
    wab = pytest.importorskip("wirearrow.beam")
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    records = corpus.generate_skewed(800, seed=6)
    cache = ParserCache()
    tc = wa.Transcoder(schema, columns=PLAN)
    rows = wa.Transcoder(schema, columns=PLAN).transcode(records).num_rows
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions()) as p:
        result = p | beam.Create(records) | wab.ToArrow(tc, batch_size=100, profile=cache)
        counts = result.batches | beam.Map(lambda b: b.num_rows) | beam.CombineGlobally(sum)
        assert_that(counts, equal_to([rows]))
    stats = cache.stats()  # in-process runner: the DoFns' cache is this very object
    assert stats["compiles"] == 1
    assert stats["plans"][0]["records_profiled"] == len(records)
    assert stats["plans"][0]["records_decoded"] == len(records)
    assert stats["plans"][0]["elements_per_record"] is not None


@given(
    per_record=st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=8),
    bytes_per_record=st.lists(st.floats(0, 1e5, allow_nan=False), max_size=8),
    n=st.integers(1, 1 << 20),
)
@settings(max_examples=examples(25), deadline=None)
def test_small_capacities_match_the_vectorised_ones(
    schema: wa.Schema, per_record: list[float], bytes_per_record: list[float], n: int
) -> None:
    """A flat plan's capacities, computed without numpy, are the numbers the vectorised
    path gives (the same truncated float products)."""
    import numpy as np

    tc = wa.Transcoder(schema, columns=["id"], cache=ParserCache())
    entry = tc._entry
    entry.sizes = (np.array(per_record), np.array(bytes_per_record))
    small = entry.capacities(n)
    old, cache_module._SMALL = cache_module._SMALL, -1  # every plan the vectorised way
    try:
        groups, arenas = entry.capacities(n)  # (int64 arrays, as the decoder takes them)
        assert arenas is not None and small == (list(groups), list(arenas))
    finally:
        cache_module._SMALL = old
