"""wirearrow.ray on a local 2-CPU Ray: results equal the in-process transcoder's.

One Ray session for the whole file (session fixture, shut down at the end). Ray may
reorder rows, so comparisons are order-insensitive (sorted row reprs) unless the test is
about order. The data is small (hundreds of records): each Ray job costs ~1-2 s of
scheduling here, whatever its size.
"""

from __future__ import annotations

import itertools
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from wirearrow.config import load_plan

ray = pytest.importorskip("ray")
war = pytest.importorskip("wirearrow.ray")

pytestmark = [
    pytest.mark.ray,
    # Ray warns about its own internals (DataContext fields it deprecates, ...): not ours.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
]

ROOT = Path(__file__).resolve().parent.parent
FLAT = ROOT / "transforms" / "openrtb_flat.yaml"
NESTED = ROOT / "transforms" / "openrtb_nested.yaml"


# ---- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture(scope="session")
def records() -> list[bytes]:
    return corpus.generate(400, seed=11)


def framed(messages: list[bytes], framing: str = "varint") -> bytes:
    return b"".join(corpus.frame(messages, framing))


def in_process(plan: object, messages: list[bytes], on_error: str | None = None) -> pa.Table:
    config = load_plan(plan)  # type: ignore[arg-type]
    if on_error is not None:
        config = config.with_options(on_error=on_error)
    return pa.Table.from_batches([config.transcoder().transcode(messages)])


def rows_of(table: pa.Table) -> list[str]:
    """Order-insensitive form of a table: its rows' reprs, sorted."""
    return sorted(map(repr, table.to_pylist()))


def collect(ds) -> pa.Table:
    blocks = [ray.get(ref) for ref in ds.to_arrow_refs()]
    blocks = [b for b in blocks if b.num_rows] or blocks[:1]
    return pa.concat_tables(blocks) if blocks else pa.table({})


def dead_rows(job) -> pa.Table:
    """A job's dead letters: read from its files directly when it wrote any (a second
    ray.data.read_parquet in one process trips over fsspec's http module when aiohttp is
    missing, as in this venv), else from the ledger."""
    files = job.job_stats().dead_letter_files
    if files:
        return pa.concat_tables(pq.read_table(f) for f in files)
    return collect(job.dead_letters)


def corrupt(messages: list[bytes], bad: set[int]) -> list[bytes]:
    """Records at ``bad`` made invalid: a field whose length runs past the record's end."""
    return [m + b"\x0a\x7f" if i in bad else m for i, m in enumerate(messages)]


# ---- no Ray needed ---------------------------------------------------------------------------


def test_import_does_not_import_ray() -> None:
    """wirearrow.ray is the lazy boundary: the package itself never imports Ray."""
    code = "import sys, wirearrow; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_transcode_class_compiles_once(
    records: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The actor's life in one process: unpickle the plan once, then only decode."""
    from wirearrow import cache as cache_module

    compiles = []
    real = cache_module.compile_plan

    def counting(*args, **kwargs):
        compiles.append(1)
        return real(*args, **kwargs)

    shipped = pickle.dumps(wa.load_plan(FLAT).transcoder())  # what ray.put stores
    monkeypatch.setattr(cache_module, "compile_plan", counting)
    # a fresh process: its default cache has not compiled this plan yet
    monkeypatch.setattr(cache_module, "_DEFAULT", cache_module.ParserCache())
    fn = war.Transcode(pickle.loads(shipped), column="value")
    assert len(compiles) == 1
    table = pa.table({"value": pa.array(records, pa.binary())})
    out = [fn(table.slice(i, 100)) for i in range(0, len(records), 100)]
    assert len(compiles) == 1  # four batches, no more compiles
    assert rows_of(pa.concat_tables(out)) == rows_of(in_process(FLAT, records))
    assert fn.stats.batches == 4 and fn.stats.records_in == len(records)
    assert len(shipped) < 20_000  # schema bytes + column spec, not decoder tables


def test_carry_keeps_error_semantics(records: list[bytes]) -> None:
    """carry= feeds prefixed records: the dead letters must be exactly those without it."""
    messages = corrupt(records[:60], {3, 17, 40})
    messages[25] = b"\x0a\x7f" + records[25]  # broken at its very first byte
    table = pa.table(
        {"value": pa.array(messages, pa.binary()), "n": pa.array(range(60), pa.int64())}
    )
    ledger = _ListLedger()
    plain = war.Transcode(FLAT, on_error="dead_letter", ledger=ledger)
    keyed = war.Transcode(FLAT, carry=["n"], on_error="dead_letter", ledger=ledger)
    a, b = plain(table), keyed(table)
    assert b.drop_columns(["n"]).equals(a)
    dead_a, dead_b = ledger.dead
    assert dead_a.equals(dead_b)
    assert dead_a.column("index").to_pylist() == [3, 17, 25, 40]
    assert dead_a.column("raw").to_pylist() == [messages[i] for i in (3, 17, 25, 40)]
    assert dead_a.column("source").to_pylist() == [{"n": i} for i in (3, 17, 25, 40)]
    assert keyed.stats.bytes_in == plain.stats.bytes_in


class _ListLedger(war.Ledger):
    """Keeps the dead letters it is sent, in a list."""

    def __init__(self) -> None:
        self.dead: list[pa.Table] = []

    def report(self, stats, batch, dead, file) -> None:
        if dead is not None:
            self.dead.append(dead)


def test_dead_letters_need_a_sink() -> None:
    with pytest.raises(ValueError, match="dead_letters"):
        war.Transcode(FLAT, on_error="dead_letter")


def test_a_plans_input_is_the_columns_default_format(records: list[bytes]) -> None:
    """A YAML plan's input: is how a column's records arrive unless input= or keywords say
    otherwise; its file framing (openrtb_nested.yaml: u32le) is read_delimited's business,
    never applied to a column of one record per row."""
    table = pa.table({"value": pa.array(records[:50], pa.binary())})
    nested = war.Transcode(NESTED, on_error="raise")
    assert rows_of(nested(table)) == rows_of(in_process(NESTED, records[:50]))
    with pytest.raises(ValueError, match="one record per row"):
        war.Transcode(FLAT, framing="u32le")
    with pytest.raises(ValueError, match="one record per row"):
        war.Transcode(FLAT, wa.RecordFormat(framing="confluent", schemas={}, delimited_by="varint"))


def test_what_put_plan_ships_keeps_the_plans_input(records: list[bytes]) -> None:
    """put_plan ships the resolved plan -- its transcoder and its input: -- so the actors
    read the records as the plan says (here: a column the default would not pick)."""
    from wirearrow.plans import Resolved

    tc = wa.load_plan(FLAT).transcoder()
    shipped = pickle.dumps(Resolved(tc, wa.RecordFormat(column="payload"), None))
    fn = war.Transcode(pickle.loads(shipped))  # what an actor does with put_plan's ref
    table = pa.table({"payload": pa.array(records[:40], pa.binary()), "n": range(40)})
    assert rows_of(fn(table)) == rows_of(in_process(FLAT, records[:40]))


def test_pool_size_leaves_a_cpu_for_tasks() -> None:
    assert war.pool_size(2) == war.PoolSize(1, 1, 1.0)
    assert war.pool_size(8) == war.PoolSize(1, 7, 1.0)
    assert war.pool_size(2, concurrency=2) == war.PoolSize(2, 2, 0.5)
    assert war.pool_size(2, concurrency=(1, 4)) == war.PoolSize(1, 4, 0.25)
    assert war.pool_size(1) == war.PoolSize(1, 1, 0.0)
    assert war.pool_size(2, concurrency=2, num_cpus=1) == war.PoolSize(2, 2, 1)


def test_index_splits_on_record_boundaries(records: list[bytes], tmp_path: Path) -> None:
    """The pieces read_delimited's planning cuts a large file into (sources.files)."""
    from wirearrow.sources.files import file_pieces

    path = tmp_path / "r.varint"
    path.write_bytes(framed(records))
    size = path.stat().st_size
    pieces, tail = file_pieces(str(path), size, "varint", "auto", 20_000, lambda: path.open("rb"))
    assert tail is None
    assert len(pieces) > 5
    assert pieces[0].start == 0 and pieces[-1].end == path.stat().st_size
    assert all(a.end == b.start for a, b in itertools.pairwise(pieces))
    assert sum(p.records for p in pieces) == len(records)
    data = path.read_bytes()
    got = [r for p in pieces for r in wa.read_delimited(data[p.start : p.end]).to_pylist()]
    assert got == records


# ---- on Ray ----------------------------------------------------------------------------------


def test_flat_equals_in_process(ray_local, records: list[bytes], tmp_path: Path) -> None:
    path = tmp_path / "events.varint"
    path.write_bytes(framed(records))
    ds = war.read_delimited(str(path), framing="varint", bytes_per_task=64_000)
    out = war.transcode(ds, str(FLAT), batch_size=100, compute="actors")
    got = collect(out.rows)
    expected = in_process(FLAT, records)
    assert got.schema.names == expected.schema.names
    assert rows_of(got) == rows_of(expected)
    stats = out.job_stats()
    assert (stats.records_in, stats.records_failed) == (len(records), 0)
    assert stats.rows_out == expected.num_rows
    # One local node; each actor compiled the plan once (tests/test_ray_cluster.py: 2 nodes).
    assert stats.nodes == 1 and stats.compiles == stats.workers >= 1


def test_nested_equals_in_process(ray_local, records: list[bytes]) -> None:
    # openrtb_nested.yaml keeps dead letters: transcode() collects them (none here).
    ds = ray.data.from_arrow(pa.table({"value": pa.array(records, pa.binary())}))
    out = war.transcode(ds, str(NESTED), batch_size=150)
    got = collect(out.rows)
    expected = in_process(NESTED, records)
    assert got.schema == expected.schema
    assert rows_of(got) == rows_of(expected)
    assert out.job_stats().records_ok == len(records)
    assert out.dead_letters.count() == 0


def test_dead_letters_nothing_lost(ray_local, records: list[bytes], tmp_path: Path) -> None:
    bad = {0, 7, 150, 151, 399}
    messages = corrupt(records, bad)
    path = tmp_path / "bad.u32be"
    path.write_bytes(framed(messages, "u32be"))
    ds = war.read_delimited(path, framing="u32be", include_location=True, bytes_per_task=90_000)
    out = war.transcode(ds, FLAT, on_error="dead_letter", dead_letters=tmp_path / "dead")
    rows = collect(out.rows)
    good = [m for i, m in enumerate(messages) if i not in bad]
    assert rows_of(rows) == rows_of(in_process(FLAT, good))

    stats = out.job_stats()
    assert stats.records_in == len(messages)
    assert stats.records_ok + stats.records_failed == stats.records_in
    assert stats.records_failed == stats.dead_letters == len(bad)
    assert stats.rows_out == rows.num_rows

    dead = collect(out.dead_letters)  # read back from the Parquet files written
    assert len(stats.dead_letter_files) >= 1
    assert sorted(dead.column("raw").to_pylist()) == sorted(messages[i] for i in bad)
    data = path.read_bytes()
    for row in dead.to_pylist():
        source = row["source"]
        assert source["file"] == str(path)
        size = int.from_bytes(data[source["offset"] : source["offset"] + 4], "big")
        assert data[source["offset"] + 4 : source["offset"] + 4 + size] == row["raw"]
        assert row["reason"] == "length prefix runs past the end of the enclosing message"


def test_dead_letters_as_a_dataset(ray_local, records: list[bytes]) -> None:
    messages = corrupt(records[:120], {5, 60})
    ds = ray.data.from_arrow(pa.table({"value": pa.array(messages, pa.binary())}))
    out = war.transcode(ds, FLAT, on_error="dead_letter", batch_size=40)
    n_rows = out.rows.count()  # executes the job
    dead = collect(out.dead_letters)
    assert dead.num_rows == 2 and sorted(dead.column("raw").to_pylist()) == sorted(
        messages[i] for i in (5, 60)
    )
    assert out.job_stats().rows_out == n_rows


@pytest.mark.parametrize("compute", ["actors", "tasks"])
def test_plan_travels_once(ray_local, records: list[bytes], compute: str) -> None:
    """One compile per actor (or per worker process, with tasks), whatever the batches."""
    table = pa.table({"value": pa.array(records, pa.binary())})
    ds = ray.data.from_arrow([table.slice(i, 100) for i in range(0, len(records), 100)])
    concurrency = (1, 2) if compute == "actors" else 2
    out = war.transcode(ds, FLAT, batch_size=50, compute=compute, concurrency=concurrency)
    assert rows_of(collect(out.rows)) == rows_of(in_process(FLAT, records))
    stats = out.job_stats()
    assert stats.batches >= len(records) // 50
    assert 1 <= stats.workers < stats.batches  # workers are reused across batches
    assert stats.compiles == stats.workers
    for worker in stats.per_worker:
        assert worker.compiles == 1 and worker.batches >= 1


def test_building_block_with_put_plan(ray_local, records: list[bytes]) -> None:
    ds = ray.data.from_arrow(pa.table({"value": pa.array(records, pa.binary())}))
    plan_ref = war.put_plan(FLAT)
    out = ds.map_batches(
        war.Transcode,
        fn_constructor_kwargs={"plan": plan_ref, "column": "value"},
        batch_format="pyarrow",
        zero_copy_batch=True,
        batch_size=100,
        num_cpus=0.5,
        compute=ray.data.ActorPoolStrategy(min_size=1, max_size=2),
    )
    assert rows_of(collect(out)) == rows_of(in_process(FLAT, records))


def test_read_split_files(ray_local, records: list[bytes], tmp_path: Path) -> None:
    """Split across tasks and grouped small files: every record exactly once, located."""
    folder = tmp_path / "topic"
    folder.mkdir()
    parts = {"a.bin": records[:250], "b.bin": records[250:260], "c.bin": records[260:]}
    for name, part in parts.items():
        (folder / name).write_bytes(framed(part, "u32le"))
    (folder / "_SUCCESS").write_bytes(b"")  # skipped, as Ray's readers do
    source = war.DelimitedDatasource(folder, "u32le", include_location=True, bytes_per_task=50_000)
    assert len(source.get_read_tasks(1)) > 4  # a.bin alone is ~240 kB

    ds = war.read_delimited(folder, "u32le", include_location=True, bytes_per_task=50_000)
    got = collect(ds).sort_by([("file", "ascending"), ("offset", "ascending")])
    assert got.column("value").to_pylist() == records
    for name, part in parts.items():
        data = (folder / name).read_bytes()
        mine = got.filter(pa.compute.equal(got.column("file"), str(folder / name)))
        for offset, value in zip(mine["offset"].to_pylist(), part, strict=True):
            size = int.from_bytes(data[offset : offset + 4], "little")
            assert data[offset + 4 : offset + 4 + size] == value

    by_glob = war.read_delimited(str(folder / "*.bin"), "u32le", bytes_per_task=50_000)
    assert by_glob.count() == len(records)


def test_truncated_file_is_an_error(ray_local, records: list[bytes], tmp_path: Path) -> None:
    path = tmp_path / "cut.varint"
    path.write_bytes(framed(records[:50])[:-10])
    with pytest.raises(ValueError, match="truncated varint stream"):  # found by the index
        war.read_delimited(path, bytes_per_task=8_000)
    with pytest.raises(Exception, match="truncated varint stream"):  # found by the reader
        war.read_delimited(path).count()


def test_kafka_shaped_input(ray_local, records: list[bytes], bid_class) -> None:
    """A table shaped like ray.data.read_kafka's output (its KAFKA_MSG_SCHEMA, Ray 2.60);
    carry= carries columns onto each row of the record."""
    n = 200
    messages = corrupt(records[:n], {42})
    kafka = pa.table(
        {
            "offset": pa.array(range(1000, 1000 + n), pa.int64()),
            "key": pa.array([f"k{i}".encode() for i in range(n)], pa.binary()),
            "value": pa.array(messages, pa.binary()),
            "topic": pa.array(["bids"] * n),
            "partition": pa.array([i % 3 for i in range(n)], pa.int32()),
            "timestamp": pa.array([1_700_000_000_000 + i for i in range(n)], pa.int64()),
            "timestamp_type": pa.array([0] * n, pa.int32()),
            "headers": pa.array(
                [[("trace", b"t%d" % i)] for i in range(n)], pa.map_(pa.string(), pa.binary())
            ),
        }
    )
    ds = ray.data.from_arrow(kafka)
    out = war.transcode(ds, FLAT, carry=["partition", "offset"], on_error="dead_letter")
    got = collect(out.rows)
    expected = in_process(FLAT, messages, on_error="dead_letter")
    assert got.schema.names == [*expected.schema.names, "partition", "offset"]
    assert rows_of(got.drop_columns(["partition", "offset"])) == rows_of(expected)
    # Each row carries its own record's partition and offset.
    request_of = {bid_class.FromString(m).id: i for i, m in enumerate(records[:n])}
    for row in got.select(["request_id", "partition", "offset"]).to_pylist():
        i = request_of[row["request_id"]]
        assert (row["partition"], row["offset"]) == (i % 3, 1000 + i)
    dead = collect(out.dead_letters).to_pylist()
    assert len(dead) == 1 and dead[0]["raw"] == messages[42]
    assert dead[0]["source"]["offset"] == 1042 and dead[0]["source"]["key"] == b"k42"


def test_write_parquet(ray_local, records: list[bytes], tmp_path: Path) -> None:
    path = tmp_path / "in.varint"
    path.write_bytes(framed(records))
    out = war.transcode(war.read_delimited(path), FLAT)
    out.rows.write_parquet(str(tmp_path / "rows"))
    written = pq.read_table(tmp_path / "rows")
    assert rows_of(written) == rows_of(in_process(FLAT, records))
    assert out.job_stats().rows_out == written.num_rows


def test_raise_policy_fails_the_job(ray_local, records: list[bytes]) -> None:
    messages = corrupt(records[:30], {12})
    table = pa.table({"value": pa.array(messages, pa.binary()), "n": pa.array(range(30))})
    out = war.transcode(ray.data.from_arrow(table), FLAT)  # the plan's policy: raise
    with pytest.raises(Exception, match="record 12") as info:
        out.rows.materialize()
    assert "{'n': 12}" in str(info.value)  # the input row is named in a note


def test_every_option_survives_on_error_and_carry() -> None:
    """The plan's options reach the actor whole, whatever on_error= and carry= derive."""
    options = {
        "validate": "full",
        "timestamp_unit": "ns",
        "max_nesting": 17,
        "max_depth": 2,
        "enums": "name",
        "keep_unknown": True,
    }
    tc = wa.Transcoder(load_plan(NESTED).schema(), on_error="raise", **options)
    for kwargs in ({}, {"on_error": "skip"}, {"carry": ["n"]}, {"on_error": "skip", "carry": ["n"]}):
        fn = war.Transcode(pickle.loads(pickle.dumps(tc)), **kwargs)
        want = tc.spec.replace(on_error=kwargs.get("on_error", "raise"))
        assert fn.spec == want, kwargs


def test_confluent_framing_keeps_schema_ids_and_sources(ray_local) -> None:
    """Kafka values as Confluent's serializer writes them: rows, schema ids, dead letters."""
    pytest.importorskip("confluent_kafka.schema_registry.protobuf")
    import confluent_data

    v1, v2 = confluent_data.schemas()
    framed, payloads, ids = confluent_data.orders(v1, v2, n=30)
    values = [*framed, b"\x01junk", b"\x00\x00\x00\x00\x08\x00"]
    table = pa.table({"value": pa.array(values, pa.binary()), "offset": range(len(values))})
    tc = wa.Transcoder(v2, ["id", "lines[*].sku"], on_error="dead_letter")
    out = war.transcode(
        ray.data.from_arrow(table),
        tc,
        carry=["offset"],
        framing="confluent",
        schemas={1: v1, 2: v2},
        schema_id=True,
        batch_size=8,
    )
    got = collect(out.rows.materialize()).sort_by([("offset", "ascending")])
    want = wa.Transcoder(v2, ["id", "lines[*].sku"]).transcode(payloads, record_index=True)
    plan_columns = want.schema.names[:-1]
    assert got.select(plan_columns).to_pylist() == want.select(plan_columns).to_pylist()
    record = want.column("_record_index").to_pylist()
    assert got.column("offset").to_pylist() == record
    assert got.column("_schema_id").to_pylist() == [ids[i] for i in record]
    dead = collect(out.dead_letters).to_pylist()
    assert sorted((d["source"]["offset"], d["reason"]) for d in dead) == [
        (30, "not Confluent framing: magic byte 0x01, not 0"),
        (31, "Confluent schema id 8 is not mapped to a schema"),
    ]


# ---- one execution's counts, whatever ran twice ----------------------------------------------


@pytest.mark.parametrize("compute", ["tasks", "actors"])
def test_counts_of_a_job_run_twice_are_one_runs(
    ray_local, records: list[bytes], tmp_path: Path, compute: str
) -> None:
    """schema() and take() before the write execute the pipeline again: the counts and the
    dead letters (files and ledger) stay those of one execution."""
    bad = {3, 77, 250}
    messages = corrupt(records, bad)
    path = tmp_path / "in.varint"
    path.write_bytes(framed(messages))

    def job(dead_letters):
        ds = war.read_delimited(path, bytes_per_task=40_000)
        return war.transcode(
            ds, FLAT, on_error="dead_letter", dead_letters=dead_letters, compute=compute
        )

    clean = job(None)
    clean.rows.write_parquet(str(tmp_path / "clean"))
    once = clean.job_stats()
    assert once.records_in == len(messages) and once.dead_letters == len(bad)

    for dead_dir in (None, tmp_path / "dead"):
        twice = job(dead_dir)
        twice.rows.schema()
        assert len(twice.rows.take(5)) == 5
        twice.rows.write_parquet(str(tmp_path / f"rows-{dead_dir is None}"))
        stats = twice.job_stats()
        assert stats.counts() == once.counts()
        assert stats.attempts > stats.batches  # it did run more than once
        raw = dead_rows(twice).column("raw").to_pylist()
        assert sorted(raw) == sorted(messages[i] for i in bad)
        if dead_dir is not None:
            assert sorted(p.name for p in dead_dir.iterdir()) == sorted(
                Path(f).name for f in stats.dead_letter_files
            )


def test_take_on_an_actor_job_gives_its_cpus_back(
    ray_local, records: list[bytes], tmp_path: Path
) -> None:
    """take() stops the execution early; the actor's task still in flight must not keep
    holding its CPU (Ray Data frees it only when the garbage collector runs, which a
    driver waiting on Ray never triggers: the next job on 2 CPUs would wait forever)."""
    import gc
    import time

    path = tmp_path / "in.varint"
    path.write_bytes(framed(records))
    job = war.transcode(war.read_delimited(path, bytes_per_task=4_000), FLAT, compute="actors")
    was_enabled = gc.isenabled()
    gc.disable()  # only the collections transcode's job runs itself may free the actor
    try:
        assert len(job.rows.take(5)) == 5
        deadline = time.monotonic() + 20
        while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ray.available_resources().get("CPU", 0) == 2
        # and the job still runs whole afterwards, on every CPU
        assert job.rows.count() == in_process(FLAT, records).num_rows
    finally:
        if was_enabled:
            gc.enable()


def test_the_rows_are_rays_own_dataset(ray_local, records: list[bytes]) -> None:
    """The result holds a plain ray.data.Dataset: whatever runs it (materialize, a derived
    Dataset) counts in the job's stats."""
    ds = ray.data.from_arrow(pa.table({"value": pa.array(records[:50], pa.binary())}))
    out = war.transcode(ds, FLAT)
    assert isinstance(out, war.TranscodeResult) and type(out.rows) is ray.data.Dataset
    assert out.rows.count() == out.job_stats().rows_out
    assert isinstance(out.rows.stats(), str)  # Ray's execution report
    done = out.rows.materialize()
    assert isinstance(done, ray.data.dataset.MaterializedDataset)
    assert out.job_stats().records_in == 50
    assert out.rows.limit(1000).count() == done.count()
    assert out.job_stats().records_in == 50  # run again, counted once
    assert type(pickle.loads(pickle.dumps(out.rows))) is ray.data.Dataset


def test_the_jobs_entry_lives_as_long_as_its_rows(ray_local, records: list[bytes]) -> None:
    """The ledger keeps a job (its counts, its journal) while its rows exist, whether or not
    the caller kept the result object; it forgets the job when they are gone."""
    import gc
    import time

    job = war.transcode(ray.data.from_arrow(pa.table({"value": pa.array(records[:30])})), FLAT)
    rows, key, actor = job.rows, job._ledger.job, job._ledger.actor
    del job
    gc.collect()
    assert rows.count() == in_process(FLAT, records[:30]).num_rows

    def jobs() -> list[str]:
        return ray.get(actor.__ray_call__.remote(lambda ledger: list(ledger._jobs)))

    assert key in jobs()
    del rows
    gc.collect()
    deadline = time.monotonic() + 30
    while key in jobs() and time.monotonic() < deadline:  # forget() is sent, not awaited
        time.sleep(0.1)
    assert key not in jobs()


def test_batch_key_names_the_input_not_the_attempt(records: list[bytes]) -> None:
    table = pa.table({"value": pa.array(records[:30], pa.binary()), "n": pa.array(range(30))})
    key = war.batch_key
    assert key(table, "value") == key(pa.Table.from_pylist(table.to_pylist(), table.schema))
    assert key(table) == key(pa.concat_tables([table.slice(0, 7), table.slice(7)]))  # blocks
    moved = table.set_column(1, "n", pa.array(range(1, 31)))
    assert key(moved) != key(table)
    assert key(table.slice(0, 29)) != key(table)


def test_no_new_ray_at_exit(tmp_path: Path) -> None:
    """A job whose result outlives ray.shutdown() must not start Ray again to forget it."""
    script = tmp_path / "job.py"
    script.write_text(
        "import pyarrow as pa, ray, wirearrow.ray as war\n"
        "ray.init(num_cpus=1, include_dashboard=False)\n"
        "ds = ray.data.from_arrow(pa.table({'value': pa.array([b''] * 10, pa.binary())}))\n"
        f"job = war.transcode(ds, {str(FLAT)!r})\n"
        "job.rows.count()\n"
        "ray.shutdown()\n"
        "del job\n"
        "import gc; gc.collect()\n"
        "print('initialized after:', ray.is_initialized())\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "initialized after: False" in done.stdout
    assert done.stderr.count("Started a local Ray instance") <= 1


# ---- fault tests: every record exactly once -----------------------------------------------

FAULT_RECORDS = 50_000


def _with_id(message: bytes, i: int) -> bytes:
    """``message`` with its id (field 1) set to ``rec-<i>``: the last occurrence wins."""
    ident = f"rec-{i}".encode()
    return message + b"\x0a" + bytes([len(ident)]) + ident


@pytest.fixture(scope="module")
def fault_corpus(records: list[bytes], tmp_path_factory) -> tuple[Path, list[bytes], set[int]]:
    """FAULT_RECORDS records, each with its own id, ~1% of them corrupt, in one file."""
    messages = [_with_id(records[i % len(records)], i) for i in range(FAULT_RECORDS)]
    bad = set(range(37, FAULT_RECORDS, 97))
    messages = corrupt(messages, bad)
    path = tmp_path_factory.mktemp("fault") / "events.varint"
    path.write_bytes(framed(messages))
    return path, messages, bad


def _fault_job(path: Path, dead: Path | None = None):
    ds = war.read_delimited(path, bytes_per_task=2_000_000)
    return war.transcode(ds, FLAT, on_error="dead_letter", dead_letters=dead)


def _check_exactly_once(written: pa.Table, dead: pa.Table, messages, bad) -> None:
    """Rows + dead letters == records in; no record lost, none twice."""
    import collections

    per_record = collections.Counter(written.column("request_id").to_pylist())
    expected = in_process(FLAT, [m for i, m in enumerate(messages) if i not in bad])
    assert per_record == collections.Counter(expected.column("request_id").to_pylist())
    raw = dead.column("raw").to_pylist()
    assert len(raw) == len(set(raw)) == len(bad)
    assert set(raw) == {messages[i] for i in bad}
    assert len(per_record) + len(raw) == len(messages)


def _kill_a_map_worker(job, timeout: float = 120.0) -> int:
    """SIGKILL the worker process of a running transcode task right after it reported a
    batch of this execution (so that batch reached the ledger and its retry reports it
    again). Its pid comes from the ledger's per-worker stats: Ray's state API needs the
    dashboard, which the test session does not start."""
    import os
    import signal
    import time

    def batches() -> dict[int, int]:
        return {w.pid: w.batches for w in job.job_stats().per_worker}

    before = batches()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = batches()
        busy = [pid for pid, n in now.items() if n > before.get(pid, 0)]
        if busy:
            os.kill(busy[0], signal.SIGKILL)
            return busy[0]
        time.sleep(0.01)
    raise AssertionError(f"no transcode batch was reported within {timeout} s")


def test_exact_with_a_killed_worker(ray_local, fault_corpus, tmp_path: Path) -> None:

    path, messages, bad = fault_corpus
    clean = _fault_job(path)
    clean.rows.write_parquet(str(tmp_path / "clean"))
    once = clean.job_stats()
    assert once.records_in == len(messages) and once.dead_letters == len(bad)

    # Partial executions first, as docs/ray.md shows, then the write, during which a
    # worker is killed: three executions' worth of reports for one execution's counts.
    job = _fault_job(path, tmp_path / "dead")
    job.rows.schema()
    assert len(job.rows.take(3)) == 3
    rows_dir = tmp_path / "rows"
    writer, failure = _write_in_background(job, rows_dir)
    killed = _kill_a_map_worker(job)
    writer.join(timeout=300)
    assert not writer.is_alive() and not failure, failure
    stats = job.job_stats()
    assert killed and stats.attempts > stats.batches
    assert stats.counts() == once.counts()
    _check_exactly_once(pq.read_table(rows_dir), dead_rows(job), messages, bad)
    assert len(list((tmp_path / "dead").glob("dead-*.parquet"))) == len(stats.dead_letter_files)


def _write_in_background(job, rows_dir: Path):
    """``job.rows.write_parquet(rows_dir)`` on a thread (the test kills a process meanwhile):
    the thread, and the list its exception lands in."""
    import threading

    failure: list[BaseException] = []

    def write() -> None:
        try:
            job.rows.write_parquet(str(rows_dir))
        except BaseException as err:  # pragma: no cover - reported by the caller
            failure.append(err)

    writer = threading.Thread(target=write)
    writer.start()
    return writer, failure


def _ledger_pid(job) -> int:
    """The PID of the process of the job's ledger actor (Ray's state API needs the
    dashboard, which the test session does not start: asked of the actor itself)."""
    import os

    return ray.get(job._ledger.actor.__ray_call__.remote(lambda _self: os.getpid()))


def test_exact_with_a_killed_ledger(ray_local, fault_corpus, tmp_path: Path) -> None:
    """The ledger actor's process is killed mid-run: Ray restarts it, it replays its
    journal, the reports it had not answered are sent again -- the job goes on and its
    counts and dead letters (kept by the ledger: no dead_letters= path) stay exact."""
    import os
    import signal
    import time

    path, messages, bad = fault_corpus
    clean = _fault_job(path)
    clean.rows.write_parquet(str(tmp_path / "clean"))
    once = clean.job_stats()
    assert once.records_in == len(messages) and once.dead_letters == len(bad)

    job = _fault_job(path)
    pid = _ledger_pid(job)
    rows_dir = tmp_path / "rows"
    writer, failure = _write_in_background(job, rows_dir)
    deadline = time.monotonic() + 120
    while job.job_stats().batches < 2:  # mid-run: some batches in, most still to come
        assert time.monotonic() < deadline, "no transcode batch reached the ledger"
        time.sleep(0.01)
    before = job.job_stats()
    os.kill(pid, signal.SIGKILL)
    writer.join(timeout=300)
    assert not writer.is_alive() and not failure, failure
    stats = job.job_stats()
    assert _ledger_pid(job) != pid  # it did die, and came back
    assert 0 < before.batches < stats.batches
    assert stats.counts() == once.counts()
    _check_exactly_once(pq.read_table(rows_dir), dead_rows(job), messages, bad)


def test_ledger_journal_replays_and_cuts_a_torn_record(tmp_path: Path) -> None:
    """What a restarted ledger finds: every report that returned, the dead letters read
    back from the journal, and a record its death left half written cut off (that report
    never returned: Ray sends it again, and it replaces nothing twice)."""
    from wirearrow.ray.ledger import BatchResult, WorkerStats, _LedgerActor

    def result(key: str, n: int) -> BatchResult:
        return BatchResult(n, n - 1, 1, n, 10 * n, 1, key=key)

    worker = WorkerStats(worker="w", node="node", pid=1, compiles=1)
    dead = pa.table({"index": pa.array([0], pa.int64()), "reason": ["bad"]})
    first = _LedgerActor(str(tmp_path))
    first.report("job", worker, result("a", 5), dead, None)
    first.report("job", worker, result("b", 7), None, "dead-b.parquet")
    first.report("job", worker, result("a", 5), dead, None)  # a retry: replaces
    for out in first._out.values():  # its process dies: the OS closes the file
        out.close()
    journal = tmp_path / "job.journal"
    whole = journal.stat().st_size
    with journal.open("ab") as f:  # the start of a fourth report, then the kill
        f.write(b"\xff" * 20)

    second = _LedgerActor(str(tmp_path))
    assert journal.stat().st_size == whole
    assert second.summary("job").counts() == first.summary("job").counts() == (
        12, 10, 2, 12, 120, 2, 0, 0, 2,
    )
    assert second.summary("job").dead_letter_files == ("dead-b.parquet",)
    assert second.dead_letter_table("job", "a").equals(dead)
    second.report("job", worker, result("c", 3), None, None)
    assert _LedgerActor(str(tmp_path)).summary("job").records_in == 15
    second.forget("job")
    assert not journal.exists()
