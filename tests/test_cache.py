"""The parser cache: compile once, profile, retune, persist, share (Ray, Beam).

Tuning never changes output: the differential tests run random schemas, plans and wire
variations through a cache that samples every record and retunes after every batch, and
compare with the oracle and with an untuned transcoder.
"""

from __future__ import annotations

import json
import pickle
import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from oracle import assert_rows_equal, expected_rows
from schemagen import compile_source, messages, plans, schema_specs, wire_bytes
from wirearrow._core.profile import walk
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


def eager() -> ParserCache:
    """A cache that walks every record and retunes after every batch."""
    return ParserCache(tune="auto", sample_rate=1.0, retune_every=1)


# ---- compile once -------------------------------------------------------------------------


def test_one_compile_per_plan_however_many_transcoders(schema: wa.Schema) -> None:
    cache = ParserCache(tune="off")
    a = wa.Transcoder(schema, columns=PLAN, cache=cache)
    b = wa.Transcoder(schema, columns=list(PLAN), cache=cache)
    c = wa.Transcoder(schema, columns=PLAN[:2], cache=cache)  # another plan
    d = wa.Transcoder(schema, columns=PLAN, cache=cache, timestamp_unit="ms")  # other options
    stats = cache.stats()
    assert (stats["compiles"], stats["hits"]) == (3, 1)
    assert a._plan is b._plan and a._plan is not c._plan and a._plan is not d._plan


def test_one_compile_under_threads(schema: wa.Schema) -> None:
    cache = ParserCache(tune="off")
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


def test_default_cache_is_process_wide_and_does_not_profile(schema: wa.Schema) -> None:
    a = wa.Transcoder(schema, columns=["id", "tmax"])
    b = wa.Transcoder(schema, columns=["id", "tmax"])
    assert a.cache is default_cache() and a._plan is b._plan
    assert default_cache().tune == "off"


def test_plan_errors_are_not_cached(schema: wa.Schema) -> None:
    cache = ParserCache()
    for _ in range(2):
        with pytest.raises(wa.PlanError):
            wa.Transcoder(schema, columns=["nope"], cache=cache)
    assert cache.stats()["compiles"] == 0


def test_bad_settings() -> None:
    with pytest.raises(ValueError, match="tune"):
        ParserCache(tune="always")
    with pytest.raises(ValueError, match="sample_rate"):
        ParserCache(sample_rate=2)
    with pytest.raises(ValueError, match="retune_every"):
        ParserCache(retune_every=0)


# ---- profile and retune ---------------------------------------------------------------------


def test_profile_sees_the_wire_order_and_sizes(schema: wa.Schema, skewed: pa.Array) -> None:
    cache = ParserCache(sample_rate=0.5, retune_every=500)
    tc = wa.Transcoder(schema, columns=PLAN, cache=cache)
    tc.transcode(skewed)
    plan = cache.stats()["plans"][0]
    assert plan["tuning_version"] == 1
    root = plan["profile"]["nodes"][0]
    assert root["message"] == "BidRequestEvent"
    order = [f["number"] for f in root["fields"]]
    assert order[:6] == [16, 17, 8, 7, 18, 1]  # the skewed producer's order, not 1, 2, 3...
    ext = next(f for f in root["fields"] if f["field"] == "ext")
    assert not ext["planned"] and ext["bytes_per_message"] > 200 and ext["per_message"] > 1
    assert plan["profile"]["batch_size"] == {"mean": 600.0, "min": 600, "max": 600}
    assert plan["effect_records_per_second"]["untuned"] > 0


def test_off_does_not_profile(schema: wa.Schema, skewed: pa.Array) -> None:
    cache = ParserCache(tune="off", retune_every=1)
    wa.Transcoder(schema, columns=PLAN, cache=cache).transcode(skewed)
    plan = cache.stats()["plans"][0]
    assert plan["tuning_version"] == 0 and plan["records_profiled"] == 0


def test_tuning_does_not_change_output(schema: wa.Schema, skewed: pa.Array) -> None:
    plan = [*PLAN, "imp[*].pmp.deals[*].id", "site.publisher.id", "timestamp"]
    tuned = wa.Transcoder(schema, columns=plan, cache=eager())
    plain = wa.Transcoder(schema, columns=plan, cache=ParserCache(tune="off"))
    for _ in range(3):
        assert tuned.transcode(skewed).equals(plain.transcode(skewed))
    assert tuned.cache.stats()["plans"][0]["tuning_version"] == 3


def test_retune_under_concurrent_transcoding(schema: wa.Schema, skewed: pa.Array) -> None:
    cache = ParserCache(sample_rate=0.2, retune_every=300)
    errors: list[BaseException] = []
    chunks = [skewed.slice(i, 150) for i in range(0, len(skewed), 150)]
    want = [
        wa.Transcoder(schema, columns=PLAN, cache=ParserCache(tune="off")).transcode(c)
        for c in chunks
    ]

    def work() -> None:
        try:
            tc = wa.Transcoder(schema, columns=PLAN, cache=cache)
            for _ in range(5):
                for chunk, out in zip(chunks, want, strict=True):
                    assert tc.transcode(chunk).equals(out)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    stats = cache.stats()
    assert stats["compiles"] == 1
    assert stats["plans"][0]["records_profiled"] == 4 * 5 * len(skewed)
    assert stats["retunes"] >= 30 and stats["plans"][0]["tuning_version"] == stats["retunes"]


# ---- persistence ----------------------------------------------------------------------------


def test_save_load_round_trip(schema: wa.Schema, skewed: pa.Array, tmp_path: Any) -> None:
    cache = ParserCache(sample_rate=0.5, retune_every=10_000)
    wa.Transcoder(schema, columns=PLAN, cache=cache).transcode(skewed)
    cache.save(tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["format"] == "wirearrow-profile" and doc["version"] == 1

    loaded = ParserCache.load(tmp_path / "p.json")
    assert loaded.stats()["pending_profiles"] == 1
    tc = wa.Transcoder(schema, columns=PLAN, cache=loaded)
    plan = loaded.stats()["plans"][0]
    assert plan["tuning_version"] == 1 and plan["records_profiled"] == len(skewed)
    original = cache.entry(tc.spec)
    assert original.profile.to_json() == tc._entry.profile.to_json()
    assert tc.transcode(skewed).equals(
        wa.Transcoder(schema, columns=PLAN, cache=ParserCache(tune="off")).transcode(skewed)
    )


def test_buffer_sizes_are_shared_and_seeded_from_a_profile(
    schema: wa.Schema, skewed: pa.Array, tmp_path: Any
) -> None:
    cache = ParserCache(sample_rate=0.1, retune_every=10_000)
    first = wa.Transcoder(schema, cache=cache)  # whole messages: many groups and strings
    entry = first._entry
    groups, arenas = entry.capacities(len(skewed))
    assert groups == [len(skewed)] * entry.layout.n_groups and arenas is None  # nothing known
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


def test_stale_profile_is_ignored_with_a_warning(
    schema: wa.Schema, skewed: pa.Array, tmp_path: Any, compile_proto: Any
) -> None:
    cache = ParserCache(sample_rate=0.5)
    wa.Transcoder(schema, columns=["id"], cache=cache).transcode(skewed)
    cache.save(tmp_path / "p.json")
    other, _ = compile_proto(
        'syntax = "proto3"; message BidRequestEvent { string id = 1; }', "BidRequestEvent"
    )
    loaded = ParserCache.load(tmp_path / "p.json")
    with pytest.warns(RuntimeWarning, match="another schema"):
        tc = wa.Transcoder(other, columns=["id"], cache=loaded)
    assert loaded.stats()["plans"][0]["tuning_version"] == 0
    assert tc.transcode([b"\x0a\x01x"]).to_pylist() == [{"id": "x"}]
    # a profile whose layout does not fit the plan it names
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["plans"][0]["layout"][0] += 1
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.warns(RuntimeWarning, match="layout"):
        wa.Transcoder(schema, columns=["id"], cache=ParserCache.load(tmp_path / "bad.json"))


def test_not_a_profile(tmp_path: Any) -> None:
    (tmp_path / "x.json").write_text('{"format": "something"}')
    with pytest.raises(ValueError, match="not a wirearrow profile"):
        ParserCache.load(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"format": "wirearrow-profile", "version": 99}')
    with pytest.raises(ValueError, match="version 99"):
        ParserCache.load(tmp_path / "y.json")


def test_cache_pickles_by_identity(schema: wa.Schema) -> None:
    cache = ParserCache()
    tc = wa.Transcoder(schema, columns=PLAN, cache=cache)
    copy = pickle.loads(pickle.dumps(tc))
    assert copy.cache is cache and copy._plan is tc._plan
    plain = pickle.loads(pickle.dumps(wa.Transcoder(schema, columns=PLAN)))
    assert plain.cache is default_cache()


# ---- the walker on anything ------------------------------------------------------------------


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.binary(max_size=64), min_size=1, max_size=8))
def test_walker_survives_any_bytes(records: list[bytes]) -> None:
    arr = pa.array(records, pa.binary())
    _, offsets, data = arr.buffers()
    off = np.frombuffer(offsets, np.int32)[: len(records) + 1].astype(np.int64)
    view = memoryview(data if data is not None else b"\0").cast("B")
    widths = np.array([8, 8], np.int32)
    child = np.full(16, -1, np.int32)
    child[2] = 1  # field 2 of the root descends into node 1
    child[8 + 3] = 0  # field 3 of node 1 back into the root (a cycle)
    counters = [np.zeros(16, np.int64) for _ in range(5)]
    walk(
        view,
        off[:-1].copy(),
        off[1:].copy(),
        np.arange(len(records), dtype=np.int64),
        child,
        np.array([0, 8], np.int32),
        widths,
        np.array([0, 64], np.int64),
        np.zeros(2, np.int64),
        *counters[:4],
        np.zeros(128, np.int64),
        counters[4],
    )


# ---- differential: tuned vs the oracle ---------------------------------------------------------


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    phases=[p for p in Phase if p is not Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_tuned_matches_oracle_on_random_schemas(data: st.DataObject) -> None:
    spec = data.draw(schema_specs(), label="schema")
    compiled = compile_source(spec.render())
    root = compiled.message_class(spec.root)
    plan = data.draw(plans(root.DESCRIPTOR), label="plan")
    values = data.draw(st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=4))
    wire = [data.draw(wire_bytes(value)) for value in values]
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    try:
        want = expected_rows(root, wire, plan)
    except Exception:
        want = None
    tuned = wa.Transcoder(schema, columns=plan, cache=eager(), on_error="skip")
    plain = wa.Transcoder(schema, columns=plan, cache=ParserCache(tune="off"), on_error="skip")
    for _ in range(2):  # the second batch runs on the first one's tuning
        a, b = tuned.transcode(wire), plain.transcode(wire)
        assert_rows_equal(a.schema, a.to_pylist(), b.to_pylist(), "tuned vs untuned")
        if want is not None and tuned.stats.records_failed == 0:
            assert_rows_equal(a.schema, a.to_pylist(), want, "tuned vs oracle")


# ---- sharing: Ray and Beam ---------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_ray_workers_merge_profiles_in_one_actor(schema: wa.Schema, tmp_path: Any) -> None:
    ray = pytest.importorskip("ray")
    war = pytest.importorskip("wirearrow.ray")
    if ray.is_initialized():  # pragma: no cover
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        records = corpus.generate_skewed(2000, seed=5)
        ds = ray.data.from_arrow(pa.table({"value": pa.array(records, pa.binary())}))
        ds = ds.repartition(4)
        cache = ParserCache(sample_rate=0.5, retune_every=200).share_with_ray("wa-test-hub")
        tc = wa.Transcoder(schema, columns=PLAN)
        out = war.transcode(ds, tc, profile=cache, batch_size=250).rows.to_arrow_refs()
        rows = pa.concat_tables(ray.get(out))
        assert rows.num_rows == wa.Transcoder(schema, columns=PLAN).transcode(records).num_rows
        merged = ParserCache(tune="off").share_with_ray("wa-test-hub").pull_from_ray()
        assert merged.stats()["pending_profiles"] == 1
        merged.save(tmp_path / "job.json")
        # the next job starts from the saved, job-wide profile
        loaded = ParserCache.load(tmp_path / "job.json")
        wa.Transcoder(schema, columns=PLAN, cache=loaded)
        plan = loaded.stats()["plans"][0]
        assert plan["records_profiled"] >= 1000  # pushed by the workers at their retunes
        assert plan["tuning_version"] >= 1
    finally:
        ray.shutdown()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_beam_dofns_share_the_process_cache(schema: wa.Schema) -> None:
    beam = pytest.importorskip("apache_beam")
    wab = pytest.importorskip("wirearrow.beam")
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    records = corpus.generate_skewed(800, seed=6)
    cache = ParserCache(sample_rate=0.5, retune_every=100)
    tc = wa.Transcoder(schema, columns=PLAN)
    rows = wa.Transcoder(schema, columns=PLAN).transcode(records).num_rows
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions()) as p:
        result = p | beam.Create(records) | wab.ToArrow(tc, batch_size=100, profile=cache)
        counts = result.batches | beam.Map(lambda b: b.num_rows) | beam.CombineGlobally(sum)
        assert_that(counts, equal_to([rows]))
    stats = cache.stats()  # in-process runner: the DoFns' cache is this very object
    assert stats["compiles"] == 1
    assert stats["plans"][0]["records_profiled"] == len(records)
    assert stats["plans"][0]["tuning_version"] >= 1
