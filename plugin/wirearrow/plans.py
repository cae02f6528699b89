"""Anything a plan can be, as a Transcoder and the format of its records: the one resolver
that ``wirearrow.ray``, ``wirearrow.beam``, the command line and the playground call.

A plan is a :class:`~wirearrow.Transcoder`, a :class:`~wirearrow.TranscodeSpec`, a
:class:`~wirearrow.PlanConfig`, a YAML plan (a path, YAML text or bytes, a mapping), or a
schema read whole (a :class:`~wirearrow.Schema`, a message class or descriptor). It is
resolved where the job is built (plan errors show up there, not on a worker); what travels
to the workers is the transcoder's spec.

The error policy is the same everywhere: ``on_error`` when the caller gives one, else the
plan's own (a YAML plan's ``errors:``, a spec's or transcoder's ``on_error``), whose default
is ``raise``: a bad record stops the job, naming the record, byte and field. Jobs that
should go on past bad records say so (``errors: dead_letter`` in the plan, or
``on_error="dead_letter"``), and then every bad record is kept as a dead letter, never
dropped unseen (docs/errors.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple, TypeAlias

from google.protobuf.descriptor import Descriptor

from wirearrow.cache import ParserCache
from wirearrow.config import PlanConfig, load_plan
from wirearrow.errors import PlanError
from wirearrow.options import ON_ERROR
from wirearrow.schema import Schema
from wirearrow.sources.format import RecordFormat
from wirearrow.spec import TranscodeSpec
from wirearrow.transcoder import Transcoder

__all__ = ["PlanLike", "Resolved", "resolve_plan"]

PlanLike: TypeAlias = (
    Transcoder
    | TranscodeSpec
    | PlanConfig
    | Schema
    | Descriptor
    | type
    | str
    | os.PathLike[str]
    | bytes
    | Mapping[str, Any]
)


class Resolved(NamedTuple):
    """A resolved plan: its ``transcoder``, how its records arrive (``input``: a YAML plan's
    ``input:`` section, else the defaults) and the checked YAML plan when there was one
    (``config``: its output and dead-letter settings)."""

    transcoder: Transcoder
    input: RecordFormat
    config: PlanConfig | None


def resolve_plan(
    plan: PlanLike, *, on_error: str | None = None, cache: ParserCache | None = None
) -> Resolved:
    """``plan`` as a :class:`Resolved`, with ``on_error`` (when given) as its policy and
    compiled on ``cache`` (when given; else a given transcoder's own, or the process's)."""
    if on_error is not None and on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, not {on_error!r}")
    config: PlanConfig | None = None
    if isinstance(plan, Transcoder):
        spec, cache = plan.spec, cache if cache is not None else plan.cache
    elif isinstance(plan, TranscodeSpec):
        spec = plan
    elif isinstance(plan, Schema | Descriptor) or hasattr(plan, "DESCRIPTOR"):
        schema = plan if isinstance(plan, Schema) else Schema.from_message(plan)
        spec = TranscodeSpec(schema)  # the whole message
    elif isinstance(plan, PlanConfig | str | bytes | bytearray | os.PathLike | Mapping):
        config = load_plan(plan)  # type: ignore[arg-type]
        spec = config.spec()
    else:
        raise TypeError(
            "a plan is a wirearrow.Transcoder, TranscodeSpec, PlanConfig, Schema or message "
            "class, a YAML path, YAML text or a mapping; not " + type(plan).__name__
        )
    if on_error is not None:
        spec = spec.replace(on_error=on_error)
    if isinstance(plan, Transcoder) and spec == plan.spec and cache is plan.cache:
        transcoder = plan
    else:
        try:
            transcoder = Transcoder(spec, cache=cache)
        except PlanError as err:
            if config is None:
                raise
            # Path errors, located at their column's line of the plan file.
            raise PlanError([config.locate(problem) for problem in err.problems]) from err
    return Resolved(transcoder, config.input if config is not None else RecordFormat(), config)
