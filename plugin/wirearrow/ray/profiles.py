"""The Ray side of the parser cache: the core's :class:`~wirearrow.cache.ProfileHub` as a
named actor, the exchange of every process's ``ParserCache`` (docs/cache.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray

from wirearrow.cache import ParserCache, ProfileHub

__all__ = ["RayProfiles", "pull_from_ray", "share_with_ray"]

HUB_NAME = "wirearrow-profile-hub"
# ray.get's bound on a call to the hub: a hub that went away costs sharing, never a batch.
TIMEOUT_S = 30

_HUB = ray.remote(num_cpus=0)(ProfileHub)
# This process's handle of each named hub, by Ray session (a new one has a new node id).
_HANDLES: dict[tuple[str, str, str], Any] = {}


@dataclass(frozen=True)
class RayProfiles:
    """A :class:`~wirearrow.ParserCache` exchange through the hub actor ``name`` (created by
    the first process that calls it; it lives as long as the job). Picklable: it travels
    with the cache to every worker."""

    name: str = HUB_NAME

    def __call__(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        return ray.get(self._hub().exchange.remote(payload), timeout=TIMEOUT_S)

    def snapshot(self) -> list[dict[str, Any]]:
        return ray.get(self._hub().snapshot.remote(), timeout=TIMEOUT_S)

    def _hub(self) -> Any:
        ctx = ray.get_runtime_context()
        key = (self.name, ctx.get_job_id(), ctx.get_node_id())
        handle = _HANDLES.get(key)
        if handle is None:
            handle = _HANDLES[key] = _HUB.options(
                name=self.name, get_if_exists=True, lifetime=None
            ).remote()
        return handle


def share_with_ray(cache: ParserCache, name: str = HUB_NAME) -> ParserCache:
    """Merge ``cache``'s profiles across Ray workers through the named actor ``name``
    (docs/cache.md); returns ``cache``. ``transcode(profile=)`` calls it."""
    cache.exchange = RayProfiles(name)
    return cache


def pull_from_ray(cache: ParserCache) -> ParserCache:
    """Add the hub's merged profiles (every worker's) to ``cache``, e.g. to ``save`` them:
    they replace what ``cache`` knew of their plans (its own pushes are in them)."""
    hub = cache.exchange
    if not isinstance(hub, RayProfiles):
        raise ValueError("this cache does not share with Ray: call share_with_ray(cache) first")
    cache.add_profiles({"plans": hub.snapshot()}, f"Ray actor {hub.name!r}", replace=True)
    return cache
