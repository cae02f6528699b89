"""How the pipelines/ jobs start Ray, without the notice Ray prints on every local start.

A new local Ray (Ray 2.5x and later) runs with token authentication by default and logs,
on every start, that it chose that mode ("Token authentication is enabled for this Ray
cluster. Set RAY_AUTH_MODE=disabled to opt out ..."): a warning a newcomer's first job
should not print, about the safe default. :func:`init` drops exactly that record (a
filter on Ray's authentication logger); every other warning of Ray's -- among them the one
that a cluster runs *without* authentication -- still prints. Saying the mode instead
(``RAY_AUTH_MODE=token``) would have to happen before ``import ray`` (Ray's core reads it
then; set later, the driver and the GCS it starts disagree and the start fails), and would
change how a job joins a cluster without authentication. A cluster (``--address``,
``RAY_ADDRESS``) is joined with the environment as it is: its token, if it uses one, comes
from ``RAY_AUTH_TOKEN`` (docs/deployment.md).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["drop_default_mode_notice", "init"]

# Ray's logger for its authentication set-up, and the start of the notice to drop.
AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
DEFAULT_MODE_NOTICE = "Token authentication is enabled for this Ray cluster"


def _not_the_default_mode_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(DEFAULT_MODE_NOTICE)


def drop_default_mode_notice() -> None:
    """Drop Ray's notice that a new local cluster uses token authentication (idempotent)."""
    logger = logging.getLogger(AUTH_LOGGER)
    if _not_the_default_mode_notice not in logger.filters:
        logger.addFilter(_not_the_default_mode_notice)


def init(address: str | None = None, **kwargs: Any) -> Any:
    """``ray.init(address, **kwargs)``, without Ray's notice that it chose token auth."""
    import ray

    drop_default_mode_notice()
    return ray.init(address=address, **kwargs)
