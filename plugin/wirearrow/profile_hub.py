"""The Ray side of profile sharing: one named actor sums the profiles of every process.

``ParserCache.share_with_ray(name)`` makes each process's cache push the sums it decoded
(records, elements per group, string bytes per column) since its last push to the actor
``name`` and take back the sum of all pushes. The actor sees plain dicts of sums, never a
cache: this module imports Ray and nothing of wirearrow; only ``wirearrow.cache`` imports it,
and only once sharing is on.
"""

from __future__ import annotations

from typing import Any

import ray

__all__ = ["ProfileHub", "hub_actor"]

_SCALARS = ("records", "batches")
_ARRAYS = ("elements", "arena")


class ProfileHub:
    """Sums of pushed profiles, per (schema, plan), each with a version bumped per push."""

    def __init__(self) -> None:
        self._plans: dict[tuple[str, str], dict[str, Any]] = {}

    def exchange(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """Add a push; the merged plan back (None if its layout differs from the held one)."""
        key = (payload["schema"], payload["plan"])
        held = self._plans.get(key)
        if held is not None and held["layout"] != payload["layout"]:
            return None  # another wirearrow version's layout: neither side is merged
        if held is None:
            held = self._plans[key] = {**payload, "version": 0}
        else:
            held["profile"] = _merge(held["profile"], payload["profile"])
        held["version"] += 1
        return held

    def snapshot(self) -> list[dict[str, Any]]:
        """Every merged profile (what ``ParserCache.add_profiles`` takes as ``plans``)."""
        return list(self._plans.values())


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = {name: a[name] + b[name] for name in _SCALARS}
    for name in _ARRAYS:
        out[name] = [x + y for x, y in zip(a[name], b[name], strict=True)]
    return out


def hub_actor(name: str) -> Any:
    """The named hub actor, created by the first process that asks."""
    remote = ray.remote(num_cpus=0)(ProfileHub)
    return remote.options(name=name, get_if_exists=True, lifetime=None).remote()
