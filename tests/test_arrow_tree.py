"""buffers.ArrowTree: a batch's whole-record columns imported as one tree of arrays through
the Arrow C data interface, over the decoder's buffers (no copy), alive until Arrow lets go."""

from __future__ import annotations

import gc

import numpy as np
import pyarrow as pa

import wirearrow as wa
from wirearrow._core.buffers import ArrowTree

FIXED, BOOL, BINARY, STRUCT, LIST, ENTRIES, GIVEN = range(7)


def node(kind: int, group: int, column: int = -1, valid: int = -1, offsets: int = -1,
         child0: int = 0, nchild: int = 0, width: int = 0) -> list[int]:
    # [kind, column, validity column, validity key, group, offsets group, child0, nchild, width]
    return [kind, column, valid, valid, group, offsets, child0, nchild, width]


def struct_list_string_bool_given() -> tuple[list[list[int]], list, list, list]:
    """The nodes of a struct (int32, bool, list of strings) and a given array (node 5), and
    the decoder buffers of its four columns for three rows (test_accelerator builds on them)."""
    rows = [
        node(STRUCT, 0, valid=3, child0=0, nchild=3),
        node(FIXED, 0, column=0, valid=0, width=4),
        node(BOOL, 0, column=1),
        node(LIST, 0, offsets=1, child0=3, nchild=1),
        node(BINARY, 1, column=2, valid=2),
        node(GIVEN, 0),
    ]
    col_values = [
        np.array([7, 8, 9], dtype=np.int32),
        np.array([1, 0, 5], dtype=np.uint8),  # any non-zero byte is True
        np.array([0, 1, 3, 3, 6], dtype=np.uint32),  # the decoder's string offsets
        None,
    ]
    col_valid = [
        np.array([1, 0, 1], dtype=np.uint8),
        np.ones(3, dtype=np.uint8),
        np.array([1, 1, 0, 1], dtype=np.uint8),
        np.array([1, 1, 0], dtype=np.uint8),
    ]
    col_arena = [None, None, np.frombuffer(b"abcdef", dtype=np.uint8), None]
    return rows, col_values, col_valid, col_arena


def test_tree_of_struct_list_string_bool_and_a_given_array() -> None:
    entry = pa.struct([("a", pa.int32()), ("b", pa.bool_()), ("c", pa.list_(pa.utf8()))])
    tags = pa.array(["x", None, "y"]).dictionary_encode()
    schema = pa.schema([("s", entry), ("t", tags.type)])
    rows, col_values, col_valid, col_arena = struct_list_string_bool_given()
    prog = np.array(rows, dtype=np.int64)
    tree = ArrowTree(prog, np.array([1, 2, 3, 4], dtype=np.int64), np.array([0, 5]), schema,
                     pa.RecordBatch._import_from_c)
    offsets = {1: pa.py_buffer(np.array([0, 2, 2, 4], dtype=np.int32))}
    s, t = tree.build(col_values, col_valid, col_arena, [3, 4], offsets, {5: tags})
    del col_values, col_valid, col_arena, offsets, tags  # the arrays keep what they read
    gc.collect()
    s.validate(full=True)
    t.validate(full=True)
    assert s.type == entry and s.null_count == 1
    assert s.to_pylist() == [
        {"a": 7, "b": True, "c": ["a", "bc"]},
        {"a": None, "b": False, "c": []},
        None,
    ]
    assert s.field("c").to_pylist() == [["a", "bc"], [], [None, "def"]]
    assert t.to_pylist() == ["x", None, "y"]


def test_whole_messages_are_built_over_the_decoders_buffers(bid_schema: wa.Schema) -> None:
    import corpus

    records = pa.array(corpus.generate(500, seed=4), pa.binary())
    tc = wa.Transcoder(bid_schema)
    tc.transcode(records)
    before = pa.total_allocated_bytes()
    batch = tc.transcode(records)
    # Arrow allocated next to nothing (small dictionaries, a few hundred bytes): the
    # columns' buffers are the decoder's, and the bitmaps packed from its validity bytes.
    assert pa.total_allocated_bytes() - before < batch.nbytes // 1000
    batch.validate(full=True)


def test_a_fan_outs_columns_are_built_in_wirearrows_blocks(bid_schema: wa.Schema) -> None:
    import corpus

    records = pa.array(corpus.generate(500, seed=4), pa.binary())
    tc = wa.Transcoder(bid_schema, columns=["id", "imp[*].id", "imp[*].bidfloor", "imp[*].pmp.private_auction",
                                            "device.geo.country"])
    expected = tc.transcode(records)
    before = pa.total_allocated_bytes()
    batch = tc.transcode(records)
    # The gathered number and bool columns too (they were Arrow's, whose allocator gave
    # their pages back between two threads' batches, to be faulted in again).
    assert pa.total_allocated_bytes() - before < batch.nbytes // 1000
    batch.validate(full=True)
    assert batch.num_rows > len(records) and batch.equals(expected)


def test_a_child_outlives_its_batch_and_the_reused_pool(bid_schema: wa.Schema) -> None:
    import corpus

    batches = [pa.array(corpus.generate(3000, seed=s), pa.binary()) for s in (5, 6)]
    tc = wa.Transcoder(bid_schema)
    batch = tc.transcode(batches[0])
    imp = batch.column("imp")
    child = imp.values.field("id")  # a leaf deep in the tree
    expected = child.take(pa.array(range(len(child))))  # a copy in buffers of its own
    del batch, imp
    gc.collect()
    for _ in range(3):  # freed blocks would be handed out and overwritten here
        tc.transcode(batches[1])
    child.validate(full=True)
    assert child.equals(expected)


def _gather_tree(types: list[pa.DataType], columns: list[int] | None = None) -> ArrowTree:
    """One scalar root a type over group 0, reading decoder column `columns[i]` (default i;
    _gather_columns: int64, bool, utf8, float32, int16)."""
    columns = columns or list(range(len(types)))
    kinds = {pa.int64(): (FIXED, 8), pa.bool_(): (BOOL, 0), pa.utf8(): (BINARY, 0),
             pa.float32(): (FIXED, 4), pa.int16(): (FIXED, 2)}
    prog = np.array(
        [node(kinds[t][0], 0, column=c, valid=c, width=kinds[t][1]) for c, t in zip(columns, types, strict=True)],
        dtype=np.int64,
    )
    schema = pa.schema([(str(i), t) for i, t in enumerate(types)])
    return ArrowTree(prog, np.zeros(0, dtype=np.int64), np.arange(len(types)), schema,
                     pa.RecordBatch._import_from_c)


def _gather_columns():
    col_values = [
        np.array([10, -2, 30, 40], dtype=np.int64),
        np.array([1, 0, 7, 1], dtype=np.uint8),
        np.array([0, 1, 3, 3, 7], dtype=np.uint32),
        np.array([0.5, 1.5, 2.5, 3.5], dtype=np.float32),
        np.array([1, -1, 300, -300], dtype=np.int16),
    ]
    col_valid = [np.array([1, 1, 0, 1], dtype=np.uint8) for _ in col_values]
    col_arena = [None, None, np.frombuffer(b"abcdefg", dtype=np.uint8), None, None]
    return col_values, col_valid, col_arena


def test_rows_gather_each_root_as_arrow_take_would() -> None:
    types = [pa.int64(), pa.bool_(), pa.utf8(), pa.float32(), pa.int16()]
    tree = _gather_tree(types)
    col_values, col_valid, col_arena = _gather_columns()
    leaves = tree.build(*_gather_columns(), [4], {}, {})  # the elements themselves
    for dtype in (np.int32, np.int64):
        table = np.array([3, 3, -1, 0, 2, 1, 1, 3], dtype=dtype)
        before = pa.total_allocated_bytes()
        got = tree.build(col_values, col_valid, col_arena, [4], {}, {},
                         rows=[table] * len(types), drops=[()] * len(types))
        # Every root in wirearrow's blocks, none in Arrow's pool (mimalloc: on two threads
        # it purged them between batches, and each batch faulted them in again).
        assert pa.total_allocated_bytes() == before
        want_indices = pa.array(table.tolist(), pa.int64(), mask=table < 0)
        for arr, leaf in zip(got, leaves, strict=True):
            arr.validate(full=True)
            assert len(arr) == len(table) and arr.equals(leaf.take(want_indices))
    # A root left to None, and a 0 .. n-1 table, are the decoder's buffers as they are.
    got = tree.build(col_values, col_valid, col_arena, [4], {}, {},
                     rows=[None, np.arange(4, dtype=np.int32), None, None, None])
    assert all(a.equals(b) for a, b in zip(got, leaves, strict=True))
    assert got[1].buffers()[1] is not None and got[0].buffers()[1].address == \
        col_values[0].ctypes.data


def test_gathered_number_roots_are_pool_blocks_returned_when_arrow_drops_them() -> None:
    # Large enough for pooled blocks (64 KiB and up): 20,000 rows of int64 and of bools.
    types = [pa.int64(), pa.bool_(), pa.int16()]
    tree = _gather_tree(types, [0, 1, 4])
    table = np.tile(np.array([3, 3, -1, 0, 2, 1, 1, 3], dtype=np.int32), 2500)
    want_indices = pa.array(table.tolist(), pa.int64(), mask=table < 0)
    leaves = tree.build(*_gather_columns(), [4], {}, {})

    def gather() -> list[pa.Array]:
        return tree.build(*_gather_columns(), [4], {}, {}, rows=[table] * 3)

    kept = gather()
    wanted = [leaf.take(want_indices) for leaf in leaves]
    dropped = gather()
    held = wa.buffer_pool()
    assert all(a.equals(w) for a, w in zip(dropped, wanted, strict=True))
    del dropped
    gc.collect()
    back = wa.buffer_pool()
    assert back["blocks"] > held["blocks"]  # the int64 root's block went back to the pool
    for _ in range(3):  # and is handed out again, never a block of a batch still held
        again = gather()
        assert wa.buffer_pool()["hits"] > back["hits"]
        assert all(a.equals(w) for a, w in zip(again, wanted, strict=True))
        del again
    for arr, want in zip(kept, wanted, strict=True):
        arr.validate(full=True)
        assert arr.equals(want)


def test_rows_drop_what_the_last_reader_read_and_refuse_bad_tables() -> None:
    import pytest

    tree = _gather_tree([pa.int64(), pa.utf8()], [0, 2])
    col_values, col_valid, col_arena = _gather_columns()
    table = np.array([1, 0], dtype=np.int32)
    a, b = tree.build(col_values, col_valid, col_arena, [4], {}, {},
                      rows=[table, table], drops=[(0,), (2, 4)])
    assert a.to_pylist() == [-2, 10] and b.to_pylist() == ["bc", "a"]
    # Gathered, the columns let go of the decoder's buffers their drops name.
    assert [v is None for v in col_values] == [True, False, True, False, True]
    assert col_valid[0] is None and col_arena[2] is None and col_valid[1] is not None
    col_values, col_valid, col_arena = _gather_columns()
    with pytest.raises(ValueError, match="outside its group"):
        tree.build(col_values, col_valid, col_arena, [4], {}, {},
                   rows=[np.array([0, 4], dtype=np.int64), table])
    col_values[2] = np.array([0, 1, 9, 3, 7], dtype=np.uint32)  # an offset past the arena
    with pytest.raises(ValueError, match="outside the arena"):
        tree.build(col_values, col_valid, col_arena, [4], {}, {},
                   rows=[table, np.array([1, 2], dtype=np.int32)])
    with pytest.raises(ValueError, match="one entry a root"):
        tree.build(col_values, col_valid, col_arena, [4], {}, {}, rows=[None])


def test_rows_gather_a_given_fixed_width_root_as_arrow_take_would() -> None:
    import pytest

    # Roots built in Python (as a Timestamp's epoch values are): a timestamp with nulls,
    # sliced so that its values and bitmap start at an offset, and a date without nulls.
    types = [pa.timestamp("us", tz="UTC"), pa.date32(), pa.int64()]
    prog = np.array([node(GIVEN, 0), node(GIVEN, 0), node(FIXED, 0, column=0, valid=0, width=8)],
                    dtype=np.int64)
    tree = ArrowTree(prog, np.zeros(0, dtype=np.int64), np.arange(3),
                     pa.schema([(str(i), t) for i, t in enumerate(types)]),
                     pa.RecordBatch._import_from_c)
    col_values, col_valid, col_arena = _gather_columns()
    stamps = pa.array([None, 5, 6, None, 8, 9, 10, 11, 12, None], types[0]).slice(3, 4)
    dates = pa.array([100, 200, 300, 400], types[1])
    table = np.array([3, 3, -1, 0, 2, 1, 1, 0, 3], dtype=np.int32)
    want_indices = pa.array(table.tolist(), pa.int64(), mask=table < 0)
    given = {0: stamps, 1: dates}
    got = tree.build(col_values, col_valid, col_arena, [4], {}, given,
                     rows=[table, table.astype(np.int64), table])
    for arr, source in zip(got[:2], (stamps, dates), strict=True):
        arr.validate(full=True)
        assert arr.type == source.type and arr.equals(source.take(want_indices))
    assert got[0].null_count == 3 and got[1].null_count == 1  # -1 and the two None reads
    # A 0 .. n-1 table: the given array as it is; one not fixed width is refused.
    got = tree.build(col_values, col_valid, col_arena, [4], {}, {0: stamps, 1: dates},
                     rows=[np.arange(4, dtype=np.int32), None, None])
    assert got[0].equals(stamps)
    strings = ArrowTree(np.array([node(GIVEN, 0)], dtype=np.int64), np.zeros(0, dtype=np.int64),
                        np.arange(1), pa.schema([("0", pa.utf8())]), pa.RecordBatch._import_from_c)
    with pytest.raises(ValueError, match="not a fixed-width array"):
        strings.build(col_values, col_valid, col_arena, [4], {}, {0: pa.array(list("abcd"))},
                      rows=[table])


_RECURSIVE = """
syntax = "proto3";
import "google/protobuf/timestamp.proto";
message Leaf { string key = 1; int64 value = 2; repeated string labels = 3; }
message Node {
  string name = 1;
  int32 rank = 2;
  optional string note = 3;
  repeated int64 ids = 4;
  map<string, Leaf> leaves = 5;
  google.protobuf.Timestamp at = 6;
  Leaf leaf = 7;
  Node child = 8;
  repeated Node children = 9;
  oneof pick { Leaf a = 10; Leaf b = 11; }
}
"""


def recursive_batches(cls) -> list[list]:
    """Batches of _RECURSIVE's messages (class `cls`) that make every kind of sparse tree:
    maps, a oneof, a timestamp, lists of messages, absent subtrees, an empty batch."""
    a = cls(name="a", rank=1, ids=[1, 2], child=cls(name="b", note="n"))
    a.leaves["k"].key = "v"
    a.at.seconds = 5
    a.children.add(name="c").b.key = "x"
    b = cls(name="z")
    b.a.key = "first"
    b.b.key = "then b"  # (a oneof: `a` is unset again, its fields stay written below it)
    c = cls()
    return [[a], [b], [c], [a, b, c], [c, c], []]


def test_absent_subtrees_are_arrays_made_once_and_the_output_is_the_same(
    compile_proto, monkeypatch
) -> None:
    """A recursive plan read at max_depth 3 in a small batch: the subtrees no record holds
    (no elements, or null everywhere) are built from arrays made once per plan, the rest
    node by node; the output is the one the whole tree builds, value for value."""
    import wirearrow.plan.assemble as assemble

    monkeypatch.setattr(assemble, "_SPARSE_PLAN", 0)
    schema, cls = compile_proto(_RECURSIVE, "Node")
    tc = wa.Transcoder(schema, max_depth=3)
    for records in recursive_batches(cls):
        arr = pa.array([m.SerializeToString() for m in records], pa.binary())
        monkeypatch.setattr(assemble, "_ABSENT_NODES", 10**9)
        whole = tc.transcode(arr)
        monkeypatch.setattr(assemble, "_ABSENT_NODES", 2)
        sparse = tc.transcode(arr)
        sparse.validate(full=True)
        assert sparse.to_pylist() == whole.to_pylist()
        assert sparse.equals(whole)
        assert sparse.to_pylist() == tc.transcode(arr).to_pylist()  # (from the cache)


def test_absent_names_the_nodes_a_batch_does_not_hold(compile_proto) -> None:
    import wirearrow.plan.assemble as assemble
    from wirearrow._core.decoder import POLICY_RAISE, decode

    schema, cls = compile_proto(_RECURSIVE, "Node")
    tc = wa.Transcoder(schema, max_depth=3)
    plan = tc._plan
    record = cls(name="only").SerializeToString()
    result = decode(plan.program, np.frombuffer(record, np.uint8), np.array([0]),
                    np.array([len(record)]), POLICY_RAISE)
    program = next(iter(assemble._facts(plan).trees.values()))
    mixed, full, absent, state = program.tree.absent(
        result.group_counts, result.col_valid, [], 2)
    # child, leaf, a, b (null), children's and leaves' elements (none) are absent
    assert len(absent) >= 6
    assert all(str(program.types[n]).startswith("struct") for n in absent.tolist())
    assert set(full.tolist()) & set(absent.tolist()) == set()
    assert (state == 0).sum() > (state > 0).sum()  # most of the plan is never looked at
    assert 0 < len(mixed) < len(full)


def test_columns_no_record_writes_take_no_memory(compile_proto) -> None:
    """The decoder gives a column its block when a record first writes to it: a column
    of a wide plan that no record of the batch touches is a view of one shared block of
    zeros (exact size: null values, empty strings)."""
    from wirearrow._core.decoder import POLICY_RAISE, decode

    schema, cls = compile_proto(_RECURSIVE, "Node")
    tc = wa.Transcoder(schema, max_depth=3)
    records = [cls(name="x", rank=3).SerializeToString(), cls(note="y").SerializeToString()]
    arr = pa.array(records, pa.binary())
    tc.transcode(arr)  # (sizes learned: the next call presizes as transcode does)
    program = tc._plan.program
    _, offsets, data = arr.buffers()
    off = np.frombuffer(offsets, np.int32)[:3].astype(np.int64)
    result = decode(program, np.frombuffer(data, np.uint8), off[:-1], off[1:], POLICY_RAISE,
                    0, [4] * program.n_groups, [64] * program.n_cols)
    sizes = [len(v) for v in result.col_valid]
    assert sizes == [result.group_counts[g] for g in _column_groups(program)]
    views = {id(v) for v in result.col_valid}
    assert len(views) < program.n_cols // 2  # untouched columns share views
    for values, valid, count in zip(result.col_values, result.col_valid, result.col_counts,
                                    strict=True):
        assert len(valid) == count
        assert values is None or len(values) in (count * w for w in (1, 4, 8)) or \
            len(values) == (count + 1) * 4


def _column_groups(program) -> list[int]:
    return [program.column(i).group for i in range(program.n_cols)]


def test_copy_entries_copies_in_order_and_refuses_indexes_outside() -> None:
    """Assembly's shared validity in C: a chain (2 <- 1 <- 0) sees each copy before the next."""
    import pytest

    from wirearrow._core.buffers import copy_entries

    values: list[object] = ["a", "b", "c", "d"]
    copy_entries(values, np.array([1, 2, 3], dtype=np.int64), np.array([0, 1, 0], dtype=np.int64))
    assert values == ["a", "a", "a", "a"]
    values = ["a", "b"]
    with pytest.raises(IndexError):
        copy_entries(values, np.array([2], dtype=np.int64), np.array([0], dtype=np.int64))
    with pytest.raises(IndexError):
        copy_entries(values, np.array([0], dtype=np.int64), np.array([-1], dtype=np.int64))
    with pytest.raises(ValueError):
        copy_entries(values, np.array([0, 1], dtype=np.int64), np.array([0], dtype=np.int64))
    assert values == ["a", "b"]
