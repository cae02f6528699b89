"""The Ray side of profile sharing: one named actor sums the profiles of every process.

``ParserCache.share_with_ray(name)`` makes each process's cache push the records it profiled
since its last push (at every retune) to the actor ``name``, and take back the sum of all
pushes with a version number. Imports Ray; only ``wirearrow.cache`` imports this module,
and only once sharing is on.
"""

from __future__ import annotations

from typing import Any

import ray

from wirearrow.cache import _Counters

__all__ = ["ProfileHub", "hub_actor"]


class ProfileHub:
    """Sums of pushed profiles, per (schema, plan), each with a version bumped per push."""

    def __init__(self) -> None:
        self._plans: dict[tuple[str, str], dict[str, Any]] = {}

    def exchange(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        key = (payload["schema"], payload["plan"])
        held = self._plans.get(key)
        if held is not None and held["layout"] != payload["layout"]:
            return None  # another wirearrow version's layout: neither side is merged
        if held is None:
            held = self._plans[key] = {
                "schema": key[0],
                "plan": key[1],
                "message": payload.get("message", ""),
                "layout": payload["layout"],
                "profile": payload["profile"],
                "version": 1,
                "pushes": 1,
            }
            return held
        held["profile"] = _merge(held["profile"], payload["profile"])
        held["version"] += 1
        held["pushes"] += 1
        return held

    def snapshot(self) -> list[dict[str, Any]]:
        """Every merged profile (what ``ParserCache.add_profiles`` takes as ``plans``)."""
        return list(self._plans.values())


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("batches", "records", "sampled"):
        out[name] = a[name] + b[name]
    if not a["batches"]:
        out["batch_min"], out["batch_max"] = b["batch_min"], b["batch_max"]
    elif not b["batches"]:
        out["batch_min"], out["batch_max"] = a["batch_min"], a["batch_max"]
    else:
        out["batch_min"] = min(a["batch_min"], b["batch_min"])
        out["batch_max"] = max(a["batch_max"], b["batch_max"])
    for name in _Counters._ARRAYS:
        sums: dict[int, int] = dict(zip(*a[name], strict=True))
        for i, v in zip(*b[name], strict=True):
            sums[i] = sums.get(i, 0) + v
        keys = sorted(sums)
        out[name] = [keys, [sums[k] for k in keys]]
    return out


def hub_actor(name: str) -> Any:
    """The named hub actor, created by the first process that asks."""
    remote = ray.remote(num_cpus=0)(ProfileHub)
    return remote.options(name=name, get_if_exists=True, lifetime=None).remote()
