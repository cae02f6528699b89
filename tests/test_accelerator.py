"""The optional C++ accelerator (wirearrow.accelerator): it puts arrays and record batches
together without pyarrow's validation, so what it builds is validated here in full, and
compared with what the pure-pyarrow path (its fallback) builds from the same records in the
same process, shape by shape. Whether it is on, and why not, is visible and can be forced."""

from __future__ import annotations

import os
import sys
import types

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
    from test_arrow_tree import _RECURSIVE

    monkeypatch.setattr(assemble, "_SPARSE_PLAN", 0)
    monkeypatch.setattr(assemble, "_ABSENT_NODES", 2)
    schema, cls = compile_proto(_RECURSIVE, "Node")
    a = cls(name="a", rank=1, ids=[1, 2], child=cls(name="b", note="n"))
    a.leaves["k"].key = "v"
    a.at.seconds = 5
    a.children.add(name="c").b.key = "x"
    b = cls(name="z")
    b.a.key = "first"
    c = cls()
    tc = wa.Transcoder(schema, max_depth=3)
    for records in ([a], [b], [c], [a, b, c], [c, c], []):
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
