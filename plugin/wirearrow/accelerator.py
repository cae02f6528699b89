"""Whether the optional C++ accelerator is in use, and why not when it is not.

The accelerator (`wirearrow._core.accelerator`) puts Arrow arrays and record batches
together in C++ over pyarrow's own Arrow library, without pyarrow's Python constructors and
their validation of every node: it is what makes a call's fixed cost follow what the batch
holds on very wide nested plans (docs/packaging.md, "The accelerator"). It is built against
one pyarrow release's C++ ABI, so it is used only when the installed pyarrow is the very
release it was built against; otherwise, when it was not built, or with
WIREARROW_NO_ACCELERATOR=1 in the environment, wirearrow uses pyarrow's Python API (same
arrays, slower on wide plans). `wirearrow.accelerated` says which; `accelerator_status()`
says why.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from types import ModuleType

import pyarrow as pa

__all__ = ["accelerated", "accelerator_status", "encode_export", "module", "record_batch"]


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get("WIREARROW_NO_ACCELERATOR") == "1":
        return None, "off: WIREARROW_NO_ACCELERATOR=1"
    try:
        with warnings.catch_warnings():
            # Cython's check of pyarrow's extension types against the ones compiled in
            # warns (a larger type) or raises ValueError (a smaller one) when pyarrow is
            # another release with the same library soname: the version check below says so.
            warnings.simplefilter("ignore", RuntimeWarning)
            from wirearrow._core import accelerator as built
    except Exception as e:  # not built, another Arrow library, another pyarrow
        # ABI: any failure to load means the pure path, said by accelerator_status())
        return None, f"off: not loadable in this installation ({type(e).__name__}: {e})"
    if pa.__version__ != built.PYARROW_VERSION:
        return None, (
            f"off: built against pyarrow {built.PYARROW_VERSION}, "
            f"pyarrow {pa.__version__} is installed (reinstall wirearrow to rebuild it)"
        )
    return built, f"on: built against pyarrow {built.PYARROW_VERSION}"


module, _status = _load()
accelerated: bool = module is not None


def accelerator_status() -> str:
    """'on: ...' or 'off: <why>', e.g. for a bug report or a worker's log."""
    return _status


def record_batch(columns: list[pa.Array], schema: pa.Schema) -> pa.RecordBatch:
    """pa.RecordBatch.from_arrays(columns, schema=schema) for columns wirearrow built: with
    the accelerator, the lengths and types are checked but not every node's buffers again
    (pyarrow's validation walks the whole output type: 9M instructions on a wide plan)."""
    if module is None:
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    return module.record_batch(columns, schema)


def encode_export() -> Callable[[pa.RecordBatch, int], None] | None:
    """How the encoder exports a batch (`_core.encoder.Plan.encode`'s `export`): with the
    accelerator, without the children of subtrees null in every row, which the encoder
    never reads (on a wide plan, most of the nodes: ~1.1k instructions each to export and
    release); None (pyarrow's `_export_to_c` of every node) without it."""
    return None if module is None else module.export_for_encode
