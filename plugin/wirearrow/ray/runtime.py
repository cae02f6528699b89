"""The Ray runtime as wirearrow.ray uses it: imported lazily, never started by accident."""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any


def ray_module() -> Any:
    """``import ray``, with an install hint (the import is lazy: see the module docstring)."""
    try:
        import ray
    except ImportError as err:  # pragma: no cover - ray is an optional dependency
        raise ImportError(
            "wirearrow.ray needs Ray Data: pip install 'wirearrow[ray]' (ray[data])"
        ) from err
    return ray


def is_object_ref(value: object) -> bool:
    # Checked by name so that a plain (non-Ray) call never imports ray.
    return type(value).__name__ == "ObjectRef" and type(value).__module__.startswith("ray")


def whereami() -> tuple[str, str]:
    """(a key for this Transcode: its actor id, else pid + a nonce; the node id), without
    starting Ray in a plain process."""
    key = f"pid{os.getpid()}-{uuid.uuid4().hex[:8]}"
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ctx = ray.get_runtime_context()
        actor = ctx.get_actor_id()
        return (actor[:16] if actor else key), ctx.get_node_id()[:12]
    return key, "local"


# ---- the ledger: counts and dead letters of every actor ------------------------------------


def cluster_cpus() -> float:
    ray = ray_module()
    if not ray.is_initialized():
        ray.init()
    return float(ray.cluster_resources().get("CPU", 1.0))
