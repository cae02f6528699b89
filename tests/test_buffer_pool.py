"""The pool of large column buffers: reuse across batches, never under a live batch."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import wirearrow as wa


@pytest.fixture(scope="module")
def big_corpora() -> list[pa.Array]:
    import corpus

    # 3000 records of ~1 KB: most decoder buffers are over the pool's 64 KiB floor.
    return [pa.array(corpus.generate(3000, seed=seed), pa.binary()) for seed in (1, 2, 3)]


def copied(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` in buffers of its own (through an IPC stream): what it holds now, whatever
    later becomes of the pool's blocks."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return pa.ipc.open_stream(sink.getvalue()).read_next_batch()


@pytest.fixture
def pool_limit() -> Iterator[None]:
    before = wa.buffer_pool()["limit"]
    yield
    wa.buffer_pool(limit=before)


@pytest.mark.parametrize("columns", [None, ["id", "imp[*].id", "device.ua", "imp[*].tagid"]])
def test_live_batch_survives_reuse(
    bid_schema: wa.Schema, big_corpora: list[pa.Array], columns: list[str] | None
) -> None:
    tc = wa.Transcoder(bid_schema, columns=columns)
    kept = tc.transcode(big_corpora[0])
    expected = copied(kept)
    hits = wa.buffer_pool()["hits"]
    for _ in range(3):  # other content through the same sizes: dropped, pooled, reused
        for other in big_corpora[1:]:
            tc.transcode(other)
    assert wa.buffer_pool()["hits"] > hits
    kept.validate(full=True)
    assert kept.equals(expected)
    assert tc.transcode(big_corpora[0]).equals(expected)


def test_dropped_batch_buffers_are_reused(
    bid_schema: wa.Schema, big_corpora: list[pa.Array], pool_limit: None
) -> None:
    tc = wa.Transcoder(bid_schema)
    wa.buffer_pool(limit=0)
    wa.buffer_pool(limit=256 << 20)
    tc.transcode(big_corpora[0])  # sizes learned; its buffers go to the pool when dropped
    held = wa.buffer_pool()
    assert held["bytes"] > 0 and held["blocks"] > 0
    tc.transcode(big_corpora[1])
    after = wa.buffer_pool()
    assert after["hits"] - held["hits"] >= held["blocks"] // 2


def test_limit_bounds_what_is_held(
    bid_schema: wa.Schema, big_corpora: list[pa.Array], pool_limit: None
) -> None:
    tc = wa.Transcoder(bid_schema)
    expected = tc.transcode(big_corpora[2]).to_pylist()
    wa.buffer_pool(limit=1 << 20)
    held = wa.buffer_pool()  # the limit holds once per thread that decoded at once
    assert held["threads"] >= 1 and held["bytes"] <= held["threads"] << 20
    for corpus in big_corpora:
        tc.transcode(corpus)
        held = wa.buffer_pool()
        assert held["bytes"] <= held["threads"] << 20
    stats = wa.buffer_pool(limit=0)
    assert stats["bytes"] == 0 and stats["blocks"] == 0 and stats["limit"] == 0
    assert tc.transcode(big_corpora[2]).to_pylist() == expected  # no pool: plain malloc
    assert wa.buffer_pool()["bytes"] == 0
    with pytest.raises(ValueError):
        wa.buffer_pool(limit=-1)


@pytest.mark.parametrize("pooled", [True, False])
def test_decoder_buffers_pooled_only_when_asked(
    bid_schema: wa.Schema, big_corpora: list[pa.Array], pool_limit: None, pooled: bool
) -> None:
    # Flat plans decode unpooled: they drop most decoder buffers within the call, and
    # pooled blocks would lift the call's peak memory while Arrow allocates the output.
    from wirearrow._core.decoder import POLICY_SKIP, decode
    from wirearrow.sources.records import RecordReader

    tc = wa.Transcoder(bid_schema)
    records = RecordReader(bid_schema).read(big_corpora[0], wa.RecordFormat())
    data, starts, ends = records.data, records.starts, records.ends
    sizes = [3000 * 4] * tc._plan.program.n_groups  # room for every element up front
    wa.buffer_pool(limit=0)
    wa.buffer_pool(limit=256 << 20)
    result = decode(tc._plan.program, data, starts, ends, POLICY_SKIP, 0, sizes, None, pooled)
    assert result.records == 3000
    del result
    assert (wa.buffer_pool()["bytes"] > 0) == pooled


@pytest.mark.parametrize("columns", [None, ["id", "imp[*].id", "device.ua", "imp[*].tagid"]])
def test_a_warm_batch_takes_no_new_large_block(
    bid_schema: wa.Schema, big_corpora: list[pa.Array], pool_limit: None, columns: list[str] | None
) -> None:
    # A batch of the same size on a warmed transcoder finds every large block it needs in
    # the pool: no new allocation of a large block, so no fresh pages to fault in and
    # nothing handed back to the kernel (what two threads fought over: docs/memory.md).
    tc = wa.Transcoder(bid_schema, columns=columns)
    wa.buffer_pool(limit=0)
    wa.buffer_pool(limit=256 << 20)
    for _ in range(2):  # sizes learned, then every block pooled at those sizes
        tc.transcode(big_corpora[0])
    before = wa.buffer_pool()
    for _ in range(3):
        tc.transcode(big_corpora[0])
    after = wa.buffer_pool()
    assert after["hits"] > before["hits"]
    assert after["misses"] == before["misses"]
    assert after["bytes"] == before["bytes"] and after["blocks"] == before["blocks"]


@pytest.mark.parametrize("columns", [None, ["id", "imp[*].id", "device.ua", "imp[*].tagid"]])
def test_a_slightly_larger_batch_takes_no_new_large_block(
    bid_schema: wa.Schema, pool_limit: None, columns: list[str] | None
) -> None:
    # Batches of a stream differ a little in size. New large blocks are rounded up to a size
    # class, so a batch 1% larger than the last still fits the blocks it gave back (exact
    # sizes missed the pool, and faulted a fresh block in, on every batch that grew).
    import corpus

    records = corpus.generate(3030, seed=1)
    tc = wa.Transcoder(bid_schema, columns=columns)
    wa.buffer_pool(limit=0)
    wa.buffer_pool(limit=256 << 20)
    for _ in range(2):
        tc.transcode(pa.array(records[:3000], pa.binary()))
    before = wa.buffer_pool()
    larger = pa.array(records, pa.binary())
    for _ in range(2):
        tc.transcode(larger)
    after = wa.buffer_pool()
    assert after["hits"] > before["hits"]
    assert after["misses"] == before["misses"]


def test_each_decoder_buffer_gets_its_own_block_back(
    bid_schema: wa.Schema, big_corpora: list[pa.Array], pool_limit: None
) -> None:
    # Batch after batch, each of the decoder's large buffers (a column's values, validity,
    # string bytes; a group's parents) is handed the block it had last, which is written as
    # far as that buffer writes. Sized as a stream sizes them (what the last batch held,
    # plus headroom), a buffer's own block used to lose to a block another column had
    # written further; that column then wrote past the block it got, a page fault per 4 KiB
    # (issue 34 item 5: 43 faults a 65k-record batch on one thread, up to 67 on two).
    from wirearrow._core.decoder import POLICY_SKIP, decode
    from wirearrow.sources.records import RecordReader

    tc = wa.Transcoder(bid_schema)
    program = tc._plan.program
    reader = RecordReader(bid_schema)
    batches = [reader.read(corpus, wa.RecordFormat()) for corpus in big_corpora]
    wa.buffer_pool(limit=0)
    wa.buffer_pool(limit=256 << 20)

    Sizes = tuple[list[int], list[int]]

    def blocks(records: Any, sizes: Sizes | None) -> tuple[dict[tuple[str, int], int], Sizes]:
        """Decode with capacities from `sizes` (what the last batch held); where each large
        buffer is, by which buffer it is, and this batch's sizes (its result dropped)."""
        caps = arena = None
        if sizes is not None:
            caps = [int(n * 1.05) + 16 for n in sizes[0]]
            arena = [int(n * 1.05) + 64 if n else 0 for n in sizes[1]]
        result = decode(program, records.data, records.starts, records.ends, POLICY_SKIP, 0,
                        caps, arena)
        where = {}
        for kind, buffers in (("values", result.col_values), ("valid", result.col_valid),
                              ("arena", result.col_arena), ("parents", result.group_parents)):
            for i, b in enumerate(buffers):
                if b is not None and len(b) >= 64 * 1024:
                    where[kind, i] = pa.py_buffer(b).address
        return where, (list(result.group_counts), result.arena_bytes.tolist())

    _, last = blocks(batches[0], None)
    seen = []
    for k in range(1, 7):  # the batches differ a little, as a stream's do
        where, last = blocks(batches[k % 3], last)
        seen.append(where)
    # From the second sized batch on, every buffer large in both is where it was the batch
    # before (one a little under 64 KiB in one batch is malloc's, not the pool's).
    for before, now in itertools.pairwise(seen[1:]):
        both = before.keys() & now.keys()
        assert len(both) >= 10
        assert {k: now[k] for k in both} == {k: before[k] for k in both}


def test_each_thread_that_decodes_has_a_pool_of_its_own_until_it_ends(
    bid_schema: wa.Schema, big_corpora: list[pa.Array], pool_limit: None
) -> None:
    # A thread's first decode call gives it a pool of its own (the limit holds once per such
    # thread: two threads each transcoding a batch keep two batches' blocks). When the
    # thread ends, its blocks are shared: the next thread takes them instead of new ones.
    import threading

    tc = wa.Transcoder(bid_schema)
    wa.buffer_pool(limit=0)
    wa.buffer_pool(limit=256 << 20)
    tc.transcode(big_corpora[0])  # sizes learned on this thread
    threads = wa.buffer_pool()["threads"]
    go_on = threading.Event()
    seen: list[dict[str, int]] = []

    def work() -> None:
        tc.transcode(big_corpora[0])
        seen.append(wa.buffer_pool())
        go_on.wait(30)

    first = threading.Thread(target=work)
    first.start()
    while not seen and first.is_alive():
        first.join(0.01)
    assert seen[0]["threads"] == threads + 1
    go_on.set()
    first.join(30)
    assert wa.buffer_pool()["threads"] == threads
    before = wa.buffer_pool()
    second = threading.Thread(target=work)  # takes what the first one left
    second.start()
    second.join(30)
    after = wa.buffer_pool()
    assert after["hits"] > before["hits"] and after["misses"] == before["misses"]


def _rows_dropped(tc: wa.Transcoder, records: pa.Array) -> int:
    # One call on the submitting pool's thread, its batch dropped there before returning.
    return tc.transcode(records).num_rows


def test_two_threads_need_no_new_block_when_their_batches_first_overlap(
    bid_schema: wa.Schema, big_corpora: list[pa.Array], pool_limit: None
) -> None:
    # Two threads of a pool that have so far run one after the other, then for the first
    # time at once (here: the first thread's batch still held while the second decodes).
    # With one pool for both they had shared one set of blocks, and the second thread made
    # new ones -- fresh pages faulted in -- at that moment, whenever it came (issue 34 item
    # 5: flat-4, 16k records, two threads, 0.1 / 12.8 / 0.2 faults a batch in three runs).
    # Each with a pool of its own, each thread's blocks were made in its first batch.
    from concurrent.futures import ThreadPoolExecutor

    for columns in (None, ["id", "imp[*].id", "imp[*].bidfloor", "device.geo.country"]):
        tc = wa.Transcoder(bid_schema, columns=columns)
        records = pa.concat_arrays([big_corpora[0]] * 2)  # 6,000: gathered blocks too
        wa.buffer_pool(limit=0)
        wa.buffer_pool(limit=256 << 20)
        with ThreadPoolExecutor(1) as a, ThreadPoolExecutor(1) as b:
            for _ in range(3):  # one after the other: never two batches at once
                a.submit(_rows_dropped, tc, records).result()
                b.submit(_rows_dropped, tc, records).result()
            before = wa.buffer_pool()
            held = a.submit(tc.transcode, records).result()  # out on loan from a's blocks
            b.submit(_rows_dropped, tc, records).result()
            after = wa.buffer_pool()
            del held
        assert after["hits"] > before["hits"]
        assert after["misses"] == before["misses"], columns


def test_threads_share_the_pool(bid_schema: wa.Schema, big_corpora: list[pa.Array]) -> None:
    # The GIL is released while decoding and encoding: blocks are taken and given back by
    # several threads at once.
    from concurrent.futures import ThreadPoolExecutor

    tc = wa.Transcoder(bid_schema)
    expected = [tc.transcode(c) for c in big_corpora]
    encoded = [tc.encode(batch) for batch in expected]

    def work(k: int) -> bool:
        ok = True
        for j in range(3):
            corpus = big_corpora[(k + j) % len(big_corpora)]
            batch = tc.transcode(corpus)
            ok &= batch.equals(expected[(k + j) % len(big_corpora)])
            ok &= tc.encode(batch).equals(encoded[(k + j) % len(big_corpora)])
        return ok

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(8)))


def test_threads_share_a_fanned_out_plan_and_its_stats(
    bid_schema: wa.Schema, big_corpora: list[pa.Array]
) -> None:
    # Fan-out (takes over the row tables), strings, a Timestamp and a deduplicated map read
    # by several threads through one transcoder: the same rows as one thread gives, and
    # stats that add up exactly (they are updated under the transcoder's lock).
    from concurrent.futures import ThreadPoolExecutor

    columns = ["id", "imp[*].id", "imp[*].pmp.deals[*].id", "imp[*].bidfloor",
               "device.geo.country", "timestamp", "user.id"]
    one = wa.Transcoder(bid_schema, columns=columns)
    expected = [one.transcode(c) for c in big_corpora]
    shared = wa.Transcoder(bid_schema, columns=columns)

    def work(k: int) -> bool:
        c = k % len(big_corpora)
        return shared.transcode(big_corpora[c]).equals(expected[c])

    with ThreadPoolExecutor(2) as pool:
        assert all(pool.map(work, range(12)))
    rounds = 12 // len(big_corpora)
    assert shared.stats.records_in == rounds * one.stats.records_in
    assert shared.stats.rows_out == rounds * one.stats.rows_out
    assert shared.stats.bytes_in == rounds * one.stats.bytes_in


def test_each_row_table_gets_its_own_block_back_on_either_thread(
    bid_schema: wa.Schema, big_corpora: list[pa.Array], pool_limit: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A flat plan's row tables (row -> element of each selection: an int per output row,
    # several per fan-out) are a batch's largest temporaries. From malloc, each thread's
    # came from its own arena, whose pages went back and faulted in again (issue 34 item
    # 5: flat-4, 65k records, 3.3 faults a batch on two threads, 0.1 on one). From the
    # pool, each table is handed the block it had last on its thread (a thread that ended
    # leaves its blocks to the next one), and gives it back when dropped.
    import threading

    from wirearrow.plan import assemble

    records = pa.concat_arrays([big_corpora[0]] * 6)  # 18,000: every table over 64 KiB
    tc = wa.Transcoder(bid_schema, columns=["id", "imp[*].id", "imp[*].bidfloor"])
    seen: list[dict[int, int]] = []
    rows = assemble.Assembler.rows

    def spy(self: Any, selections: Any) -> Any:
        table, expanded = rows(self, selections)
        seen.append({k: t.__array_interface__["data"][0] for k, t in table.items()
                     if t.nbytes >= 64 * 1024})
        return table, expanded

    monkeypatch.setattr(assemble.Assembler, "rows", spy)
    wa.buffer_pool(limit=0)
    wa.buffer_pool(limit=256 << 20)

    def run() -> None:
        assert tc.transcode(records).num_rows > len(records)  # a fan-out: every table made

    for on_thread in (False, True) * 3:
        if on_thread:  # a new thread each time: it takes what the last one left
            t = threading.Thread(target=run)
            t.start()
            t.join()
        else:
            run()
    # (The first round's blocks are the first batches' sizes: the next round settles.)
    assert len(seen[2]) >= 2 and len(seen[3]) >= 2
    assert seen[4] == seen[2] and seen[5] == seen[3]


def test_a_growing_stream_of_flat_batches_takes_no_new_large_block(
    bid_schema: wa.Schema, pool_limit: None
) -> None:
    # A stream's batches grow and shrink a little. Every large block a flat plan's batch
    # takes -- the decoder's buffers, the row tables, the gathered columns of its Arrow
    # tree (unnamed) -- was made with room over its first request, so batches a little
    # larger than the first keep fitting the blocks they gave back. Unnamed blocks made at
    # their size class alone missed whenever a batch crossed the class (issue 34 item 5:
    # flat-4, 16k records, two threads, a fresh block and its pages faulted in).
    import corpus

    records = corpus.generate(3060, seed=2)
    tc = wa.Transcoder(bid_schema, columns=["id", "imp[*].id", "imp[*].bidfloor"])
    wa.buffer_pool(limit=0)
    wa.buffer_pool(limit=256 << 20)
    for _ in range(2):
        tc.transcode(pa.array(records[:3000], pa.binary()))
    before = wa.buffer_pool()
    for n in range(3006, 3061, 6):  # 0.2% more each batch, 2% in all
        tc.transcode(pa.array(records[:n], pa.binary()))
    after = wa.buffer_pool()
    assert after["hits"] > before["hits"]
    assert after["misses"] == before["misses"]


# -- what a flat call holds while its output is built (bench_flat.py's peak memory) ----


@pytest.mark.parametrize("wide", [False, True])
def test_an_arrays_records_hold_one_bounds_buffer_and_no_index_until_read(
    bid_schema: wa.Schema, wide: bool
) -> None:
    # Held through the whole call: starts and ends are two views of one buffer of n + 1
    # bounds, and the records' index (0 .. n-1 without nulls) is made only when read.
    import numpy as np

    from wirearrow.sources.records import RecordReader

    messages = [b"ab", b"", b"cde", b"f", b"gh", b"ijk"]
    arr = pa.array(messages, pa.large_binary() if wide else pa.binary()).slice(1, 4)
    records = RecordReader(bid_schema).read(arr, wa.RecordFormat())
    assert np.shares_memory(records.starts, records.ends)
    assert records.given_index is None and records.n_in == 4
    got = [bytes(records.data[s:e]) for s, e in zip(records.starts, records.ends, strict=True)]
    assert got == messages[1:5]
    assert records.index.tolist() == [0, 1, 2, 3]
    # A null record is refused: the others keep their positions in the input.
    nulls = pa.array([b"ab", None, b"cde", b""], pa.large_binary() if wide else pa.binary())
    records = RecordReader(bid_schema).read(nulls, wa.RecordFormat())
    assert records.index.tolist() == [0, 2, 3] and records.n_in == 4
    got = [bytes(records.data[s:e]) for s, e in zip(records.starts, records.ends, strict=True)]
    assert got == [b"ab", b"cde", b""]
    empty = RecordReader(bid_schema).read(pa.array([], pa.binary()), wa.RecordFormat())
    assert len(empty.starts) == len(empty.ends) == len(empty.index) == empty.n_in == 0


def test_a_flat_plan_lets_its_selection_offsets_go_before_gathering(
    bid_schema: wa.Schema, big_corpora: list[pa.Array], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fan-out's offsets (an int64 a parent element) are read by the row tables and the
    # plan's checks only: held through the gathers, they lifted the call's peak memory.
    from wirearrow.plan.assemble import Assembler

    held: list[int] = []
    gathered = Assembler._gathered

    def spy(self: Any, gather: Any, table: Any) -> Any:
        held.append(len(self._offsets))
        return gathered(self, gather, table)

    monkeypatch.setattr(Assembler, "_gathered", spy)
    tc = wa.Transcoder(bid_schema, columns=["id", "imp[*].id", "imp[*].bidfloor", "device.geo.country"])
    expected = copied(tc.transcode(big_corpora[0]))
    assert held == [0]
    assert tc.transcode(big_corpora[0]).equals(expected)


def _fixed_width_leaves(arr: pa.Array) -> Iterator[pa.Array]:
    if isinstance(arr, pa.StructArray):
        for i in range(arr.type.num_fields):
            yield from _fixed_width_leaves(arr.field(i))
    elif isinstance(arr, pa.MapArray):
        yield from _fixed_width_leaves(arr.keys)
        yield from _fixed_width_leaves(arr.items)
    elif isinstance(arr, (pa.ListArray, pa.LargeListArray)):
        yield from _fixed_width_leaves(arr.values)
    elif pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
        yield arr


def test_values_under_nulls_are_zero_in_a_reused_block(
    bid_schema: wa.Schema, big_corpora: list[pa.Array], pool_limit: None
) -> None:
    # A pooled block holds the last batch's bytes; the decoder zeroes its slots as the
    # stores reach them (zero_ahead), so a slot no record wrote reads 0 under its null, the
    # same bytes call after call, whatever the block held before.
    import numpy as np

    tc = wa.Transcoder(bid_schema)
    wa.buffer_pool(limit=0)
    wa.buffer_pool(limit=256 << 20)
    for other in big_corpora[1:]:  # sizes learned, the blocks written with other values
        tc.transcode(other)
    hits = wa.buffer_pool()["hits"]
    batch = tc.transcode(big_corpora[0])
    assert wa.buffer_pool()["hits"] > hits
    checked = 0
    for column in batch.columns:
        for leaf in _fixed_width_leaves(column):
            if leaf.null_count == 0:
                continue
            validity, values = leaf.buffers()[:2]
            width = leaf.type.bit_width // 8
            raw = np.frombuffer(values, dtype=np.uint8)
            raw = raw[leaf.offset * width : (leaf.offset + len(leaf)) * width].reshape(-1, width)
            bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
            null = bits[leaf.offset : leaf.offset + len(leaf)] == 0
            assert not raw[null].any(), leaf.type
            checked += int(null.sum())
    assert checked > 1000
