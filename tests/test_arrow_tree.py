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


def test_tree_of_struct_list_string_bool_and_a_given_array() -> None:
    entry = pa.struct([("a", pa.int32()), ("b", pa.bool_()), ("c", pa.list_(pa.utf8()))])
    tags = pa.array(["x", None, "y"]).dictionary_encode()
    schema = pa.schema([("s", entry), ("t", tags.type)])
    prog = np.array(
        [
            node(STRUCT, 0, valid=3, child0=0, nchild=3),
            node(FIXED, 0, column=0, valid=0, width=4),
            node(BOOL, 0, column=1),
            node(LIST, 0, offsets=1, child0=3, nchild=1),
            node(BINARY, 1, column=2, valid=2),
            node(GIVEN, 0),
        ],
        dtype=np.int64,
    )
    tree = ArrowTree(prog, np.array([1, 2, 3, 4], dtype=np.int64), np.array([0, 5]), schema,
                     pa.RecordBatch._import_from_c)
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


def test_a_child_outlives_its_batch_and_the_reused_pool(bid_schema: wa.Schema) -> None:
    import corpus

    batches = [pa.array(corpus.generate(3000, seed=s), pa.binary()) for s in (5, 6)]
    tc = wa.Transcoder(bid_schema)
    batch = tc.transcode(batches[0])
    imp = batch.column("imp")
    child = imp.values.field("id")  # a leaf deep in the tree
    expected = child.to_pylist()
    del batch, imp
    gc.collect()
    for _ in range(3):  # freed blocks would be handed out and overwritten here
        tc.transcode(batches[1])
    child.validate(full=True)
    assert child.to_pylist() == expected
