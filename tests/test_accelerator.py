"""The optional C++ accelerator (wirearrow.accelerator): it puts arrays and record batches
together without pyarrow's validation, so what it builds is validated here in full, and
compared with what the pure-pyarrow path (its fallback) builds from the same records in the
same process, shape by shape. Whether it is on, and why not, is visible and can be forced."""

from __future__ import annotations

import gc
import os
import sys
import types

import numpy as np
import pyarrow as pa
import pytest

import shapes
import wirearrow as wa
import wirearrow._core
import wirearrow.accelerator as accelerator

needs_accelerator = pytest.mark.skipif(
    not accelerator.accelerated, reason=f"accelerator {accelerator.accelerator_status()}"
)

_TRANSCODERS: dict[str, wa.Transcoder] = {}


def _transcoder(name: str) -> wa.Transcoder:
    tc = _TRANSCODERS.get(name)
    if tc is None:
        shape = shapes.SHAPES[name]
        kw = {} if shape.max_depth is None else {"max_depth": shape.max_depth}
        tc = _TRANSCODERS[name] = wa.Transcoder(wa.Schema.from_message(shape.message_class()), **kw)
    return tc


def _both(tc: wa.Transcoder, records: pa.Array, monkeypatch) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    built = accelerator.module
    fast = tc.transcode(records)
    with monkeypatch.context() as m:
        m.setattr(accelerator, "module", None)
        pure = tc.transcode(records)
    assert accelerator.module is built
    return fast, pure


@needs_accelerator
@pytest.mark.parametrize("n", [1, 3, 16])
@pytest.mark.parametrize(
    "name",
    # wide's plan (18,560 nodes) takes ~10 s to compile here: the release tier's; the unit
    # tier puts the same sparse trees together on a small recursive plan (below).
    [pytest.param(s, marks=pytest.mark.slow) if s == "wide" else s for s in shapes.SHAPES],
)
def test_accelerated_output_is_valid_and_equals_the_pure_paths(name, n, monkeypatch) -> None:
    records = shapes.SHAPES[name].generate(n, seed=5)
    if name == "large" or name == "large-msg":
        records = records[:2]  # (85 KB records: two say as much as sixteen here)
    arr = pa.array(records, pa.binary())
    tc = _transcoder(name)
    fast, pure = _both(tc, arr, monkeypatch)
    fast.validate(full=True)
    assert fast.schema == pure.schema
    assert fast.equals(pure)
    assert fast.to_pylist() == pure.to_pylist()
    # Encoding either back gives the same bytes (the encoder reads what the tree built).
    assert tc.encode(fast).to_pylist() == tc.encode(pure).to_pylist()


@needs_accelerator
def test_sparse_trees_put_together_in_cpp_equal_the_pure_ones(compile_proto, monkeypatch) -> None:
    """Every batch shape of a recursive plan (maps, oneofs, timestamps, lists of messages)
    through the sparse build, each absent subtree as small as 2 nodes: the nodes put together
    over C++ ArrayData are the arrays pa.Array.from_buffers makes."""
    import wirearrow.plan.assemble as assemble
    from test_arrow_tree import _RECURSIVE, recursive_batches

    monkeypatch.setattr(assemble, "_SPARSE_PLAN", 0)
    monkeypatch.setattr(assemble, "_ABSENT_NODES", 2)
    schema, cls = compile_proto(_RECURSIVE, "Node")
    tc = wa.Transcoder(schema, max_depth=3)
    for records in recursive_batches(cls):
        arr = pa.array([m.SerializeToString() for m in records], pa.binary())
        fast, pure = _both(tc, arr, monkeypatch)
        fast.validate(full=True)
        assert fast.equals(pure) and fast.to_pylist() == pure.to_pylist()


@needs_accelerator
def test_record_batch_checks_what_it_does_not_validate() -> None:
    schema = pa.schema([("a", pa.int64()), ("b", pa.utf8())])
    got = accelerator.record_batch([pa.array([1, 2]), pa.array(["x", None])], schema)
    got.validate(full=True)
    assert got.equals(pa.RecordBatch.from_arrays([pa.array([1, 2]), pa.array(["x", None])],
                                                 schema=schema))
    with pytest.raises(ValueError, match="rows"):
        accelerator.record_batch([pa.array([1, 2]), pa.array(["x"])], schema)
    with pytest.raises(TypeError, match="type"):
        accelerator.record_batch([pa.array([1, 2]), pa.array([1, 2])], schema)
    with pytest.raises(ValueError, match="columns"):
        accelerator.record_batch([pa.array([1, 2])], schema)
    empty = accelerator.record_batch([], pa.schema([]))
    assert empty.num_rows == 0 and empty.num_columns == 0


def test_another_pyarrow_release_means_the_pure_path(monkeypatch) -> None:
    """Arrow's C++ ABI changes between releases: a module built against another pyarrow is
    not used, and the status says which pyarrow it wanted."""
    fake = types.ModuleType("wirearrow._core.accelerator")
    fake.PYARROW_VERSION = "0.0.1"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wirearrow._core.accelerator", fake)
    monkeypatch.setattr(wirearrow._core, "accelerator", fake, raising=False)
    monkeypatch.delenv("WIREARROW_NO_ACCELERATOR", raising=False)
    module, status = accelerator._load()
    assert module is None
    assert status == (
        f"off: built against pyarrow 0.0.1, pyarrow {pa.__version__} is installed "
        "(reinstall wirearrow to rebuild it)"
    )
    monkeypatch.setenv("WIREARROW_NO_ACCELERATOR", "1")
    assert accelerator._load() == (None, "off: WIREARROW_NO_ACCELERATOR=1")


def test_the_package_says_whether_it_is_on() -> None:
    assert wa.accelerated == (accelerator.module is not None)
    assert wa.accelerator_status().startswith("on: " if wa.accelerated else "off: ")
    if os.environ.get("WIREARROW_NO_ACCELERATOR") == "1":
        assert not wa.accelerated


def _encode_both(tc: wa.Transcoder, batch: pa.RecordBatch, monkeypatch) -> tuple[object, object]:
    """tc.encode(batch) with the accelerator's export and with pyarrow's: the bytes, or the
    EncodeError's text (row and path), each way."""

    def run() -> object:
        try:
            return tc.encode(batch).to_pylist()
        except wa.EncodeError as e:
            return f"EncodeError: {e}"

    built = accelerator.module
    fast = run()
    with monkeypatch.context() as m:
        m.setattr(accelerator, "module", None)
        pure = run()
    assert accelerator.module is built
    return fast, pure


@needs_accelerator
@pytest.mark.parametrize("n", [1, 16])
@pytest.mark.parametrize(
    "name", [pytest.param(s, marks=pytest.mark.slow) if s == "wide" else s for s in shapes.SHAPES]
)
def test_encode_with_the_accelerators_export_gives_the_same_bytes(name, n, monkeypatch) -> None:
    """Every benchmark shape, whole and sliced: the export without the subtrees null in
    every row encodes to the bytes the full export does (how those bytes compare with the
    records read is test_encode_shapes.py's)."""
    records = shapes.SHAPES[name].generate(n, seed=7)
    if name == "large" or name == "large-msg":
        records = records[:2]
    tc = _transcoder(name)
    batch = tc.transcode(pa.array(records, pa.binary()))
    for part in (batch, batch.slice(1), batch.slice(0, 1)):
        fast, pure = _encode_both(tc, part, monkeypatch)
        assert fast == pure
    assert isinstance(fast, list) and len(fast) == 1 and fast[0]


def _recursive_rows(cls) -> list:
    """Records of _RECURSIVE with nulls at several depths: a child, a child's child, a list
    of children whose elements hold children, maps, oneofs, and rows that hold nothing."""
    a = cls(name="a", rank=1, ids=[1, 2], child=cls(name="b", note="n", child=cls(ids=[7])))
    a.leaves["k"].key = "v"
    a.at.seconds = 5
    a.children.add(name="c").b.key = "x"
    a.children.add().child.leaf.labels.append("deep")
    b = cls(name="z")
    b.a.key = "first"
    b.child.children.add(rank=3)
    c = cls()
    d = cls(child=cls(leaf=cls.DESCRIPTOR.fields_by_name["leaf"].message_type._concrete_class(
        key="k", labels=["l1", "l2"])))
    return [a, b, c, d]


@needs_accelerator
def test_encode_export_skips_all_null_subtrees_and_keeps_bytes_and_errors(
    compile_proto, monkeypatch
) -> None:
    """A recursive plan at max_depth 3: every combination of rows (so that subtrees are
    null in every row of some batches, in some rows of others), whole and sliced (a slice's
    struct is null in all its rows while its unsliced children hold values), encodes to the
    records' bytes both ways; a bad value, at several depths, gives the same error (row and
    path) both ways, and a bad value below a null parent none."""
    from test_arrow_tree import _RECURSIVE

    schema, cls = compile_proto(_RECURSIVE, "Node")
    tc = wa.Transcoder(schema, max_depth=3)
    a, b, c, d = _recursive_rows(cls)
    for records in ([a], [b], [c], [d], [a, b, c, d], [c, a, c], [c, c], [d, c, b], []):
        wire = [m.SerializeToString() for m in records]
        batch = tc.transcode(pa.array(wire, pa.binary()))
        for lo in range(len(records) + 1):
            for hi in range(lo, len(records) + 1):
                fast, pure = _encode_both(tc, batch.slice(lo, hi - lo), monkeypatch)
                assert fast == pure == wire[lo:hi], (records, lo, hi)

    # Bad values: a null element in a repeated field at depth 0, 1 and 2, and in a list of
    # messages; the same error either way, and none where the parent is null.
    batch = tc.transcode(pa.array([m.SerializeToString() for m in (c, a, c, d)], pa.binary()))
    rows = batch.to_pylist()
    cases = [
        (1, lambda r: r.__setitem__("ids", [1, None]), "ids[1]"),
        (1, lambda r: r["child"].__setitem__("ids", [None]), "child.ids"),
        (1, lambda r: r["child"]["child"].__setitem__("ids", [None]), "child.child.ids"),
        (1, lambda r: r["children"].append(None), "children"),
        # every element of the batch's only list of messages null (its element array null
        # in every slot: still bound, as its fields are)
        (1, lambda r: r.__setitem__("children", [None, None]), "children"),
        (3, lambda r: r["child"]["leaf"].__setitem__("labels", ["x", None]), "labels"),
    ]
    for row, spoil, where in cases:
        bad = [dict(r) for r in rows]
        bad[row] = _deep_copy(rows[row])
        spoil(bad[row])
        broken = pa.RecordBatch.from_pylist(bad, schema=batch.schema)
        for part, at in ((broken, row), (broken.slice(1), row - 1), (broken.slice(row, 1), 0)):
            fast, pure = _encode_both(tc, part, monkeypatch)
            assert fast == pure
            assert isinstance(fast, str) and f"row {at}," in fast and where in fast, fast
    # (a bad value under a null parent is never read: rows 0 and 2 hold no child)
    hidden = [dict(r) for r in rows]
    hidden[0] = _deep_copy(rows[1])
    hidden[0]["child"]["ids"] = [None]
    hidden_batch = pa.RecordBatch.from_pylist(hidden, schema=batch.schema)
    struct = hidden_batch.column("child")
    nulled = pa.StructArray.from_arrays(
        struct.flatten(), fields=list(struct.type), mask=pa.array([True, False, True, False])
    )
    masked = hidden_batch.set_column(hidden_batch.schema.get_field_index("child"), "child", nulled)
    masked = pa.RecordBatch.from_arrays(masked.columns, schema=batch.schema)
    no_child = cls()
    no_child.CopyFrom(a)
    no_child.ClearField("child")
    fast, pure = _encode_both(tc, masked.slice(0, 1), monkeypatch)
    assert fast == pure == [no_child.SerializeToString()]
    fast, pure = _encode_both(tc, masked, monkeypatch)
    assert fast == pure and isinstance(fast, list) and fast[0] == no_child.SerializeToString()


def _deep_copy(row: object) -> object:
    if isinstance(row, dict):
        return {k: _deep_copy(v) for k, v in row.items()}
    if isinstance(row, list):
        return [_deep_copy(v) for v in row]
    return row


@needs_accelerator
def test_the_encode_export_leaves_out_only_children_of_arrays_without_values() -> None:
    """What the export hands the encoder: a struct, list or map null in every slot (or with
    none) keeps its buffers, not its children; the rest as pyarrow exports it."""
    from pyarrow.cffi import ffi

    leaf = pa.struct([("x", pa.int64()), ("y", pa.list_(pa.utf8()))])
    batch = pa.RecordBatch.from_pydict(
        {
            "none": pa.array([None, None, None], leaf),
            "some": pa.StructArray.from_arrays(
                [pa.array([None, 1, None], pa.int64()), pa.array([None] * 3, pa.list_(pa.utf8()))],
                fields=list(leaf), mask=pa.array([True, False, True]),
            ),
            "lists": pa.array([None, None, None], pa.list_(leaf)),
            "maps": pa.array([None, [("k", 1)], None], pa.map_(pa.utf8(), pa.int64())),
            "n": pa.array([1, 2, 3]),
        }
    )

    def shape(arr) -> object:
        return (arr.length, arr.null_count, arr.offset, arr.n_buffers,
                [shape(arr.children[i]) for i in range(arr.n_children)])

    def exported(part: pa.RecordBatch, fn) -> object:
        out = ffi.new("struct ArrowArray*")
        fn(part, int(ffi.cast("uintptr_t", out)))
        try:
            return shape(out)
        finally:
            out.release(out)

    whole = exported(batch, lambda p, addr: p._export_to_c(addr))
    pruned = exported(batch, accelerator.module.export_for_encode)
    none, some, lists, maps, n = pruned[4]
    assert none == (3, 3, 0, 1, []) and lists == (3, 3, 0, 2, [])
    # `some` holds a value, so its children are there; its y is null everywhere: pruned.
    assert some[:4] == whole[4][1][:4] and some[4][0] == whole[4][1][4][0]
    assert some[4][1] == (3, 3, 0, 2, []) and whole[4][1][4][1][4] != []
    assert maps == whole[4][3] and n == whole[4][4]
    # A slice: `some` is null in row 0 only -> pruned; its children keep their own nulls.
    sliced = exported(batch.slice(2, 1), accelerator.module.export_for_encode)
    assert sliced[4][1] == (1, 1, 2, 1, [])
    assert exported(batch.slice(1, 1), accelerator.module.export_for_encode)[4][1][4][0] == (
        whole[4][1][4][0]
    )


def _tree_and_columns(schema: pa.Schema):
    """A tree of a struct (int32, bool, list of strings), a given dictionary array and a
    struct absent from the batch (node 6), over numpy 'decoder buffers'."""
    from test_arrow_tree import FIXED, STRUCT, node, struct_list_string_bool_given
    from wirearrow._core.buffers import ArrowTree

    rows, col_values, col_valid, col_arena = struct_list_string_bool_given()
    prog = np.array(
        [
            *rows,
            node(STRUCT, 0, valid=4, child0=4, nchild=1),
            node(FIXED, 0, column=5, valid=5, width=8),
        ],
        dtype=np.int64,
    )
    tree = ArrowTree(prog, np.array([1, 2, 3, 4, 7], dtype=np.int64), np.array([0, 5, 6]), schema,
                     pa.RecordBatch._import_from_c)
    col_values += [None, np.zeros(3, dtype=np.int64)]
    col_valid += [np.zeros(3, dtype=np.uint8), np.zeros(3, dtype=np.uint8)]
    col_arena += [None, None]
    return tree, col_values, col_valid, col_arena


@needs_accelerator
def test_a_tree_taken_as_arraydata_holds_its_buffers_until_its_last_array_goes() -> None:
    """ArrowTree.build(into=TreeArrays): the C structs become ArrayData without an import,
    an absent node (absent= state 3) an array of nulls of its type; what the tree points
    into lives as long as any array made from it (a child kept alone included)."""
    import weakref

    entry = pa.struct([("a", pa.int32()), ("b", pa.bool_()), ("c", pa.list_(pa.utf8()))])
    tags = pa.array(["x", None, "y"]).dictionary_encode()
    gone = pa.struct([("z", pa.int64())])
    schema = pa.schema([("s", entry), ("t", tags.type), ("u", gone)])
    tree, col_values, col_valid, col_arena = _tree_and_columns(schema)
    held = weakref.ref(col_values[0])
    offsets = {1: pa.py_buffer(np.array([0, 2, 2, 4], dtype=np.int32))}
    state = tree.absent([3, 4], col_valid, [5], 1)[3]
    assert state.tolist() == [1, 1, 1, 1, 1, 1, 3, 0]  # (node 7 inside the absent one)
    take = accelerator.module.TreeArrays(schema)
    s, t, u = tree.build(col_values, col_valid, col_arena, [3, 4], offsets, {5: tags},
                         absent=state, into=take)
    del col_values, col_valid, col_arena, offsets, tags
    gc.collect()
    for arr in (s, t, u):
        arr.validate(full=True)
    assert s.type == entry and t.type == schema.field("t").type and u.type == gone
    assert s.to_pylist() == [
        {"a": 7, "b": True, "c": ["a", "bc"]},
        {"a": None, "b": False, "c": []},
        None,
    ]
    assert s.field("c").to_pylist() == [["a", "bc"], [], [None, "def"]]
    assert t.to_pylist() == ["x", None, "y"]
    assert u.to_pylist() == [None, None, None] and u.null_count == 3
    a = s.field("a")
    del s, t, u
    gc.collect()
    assert held() is not None  # the child alone keeps the tree
    assert a.to_pylist() == [7, None, 9]
    del a
    gc.collect()
    assert held() is None  # released with the last array


@needs_accelerator
def test_a_tree_not_taken_is_released_and_absent_needs_a_taker() -> None:
    import weakref

    entry = pa.struct([("a", pa.int32()), ("b", pa.bool_()), ("c", pa.list_(pa.utf8()))])
    tags = pa.array(["x", None, "y"]).dictionary_encode()
    schema = pa.schema([("s", entry), ("t", tags.type), ("u", pa.struct([("z", pa.int64())]))])
    tree, col_values, col_valid, col_arena = _tree_and_columns(schema)
    offsets = {1: pa.py_buffer(np.array([0, 2, 2, 4], dtype=np.int32))}
    state = tree.absent([3, 4], col_valid, [5], 1)[3]
    with pytest.raises(ValueError, match="into="):
        tree.build(col_values, col_valid, col_arena, [3, 4], offsets, {5: tags}, absent=state)
    held = weakref.ref(col_values[0])
    wrong = accelerator.module.TreeArrays(pa.schema([("s", entry)]))  # one field, not three
    with pytest.raises(ValueError, match="root"):
        tree.build(col_values, col_valid, col_arena, [3, 4], offsets, {5: tags},
                   absent=state, into=wrong)
    del col_values, col_valid, col_arena
    gc.collect()
    assert held() is None  # the tree released on the error
