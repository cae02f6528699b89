"""OpenTelemetry trace requests built with the installed opentelemetry-proto classes, for
tests/test_otel.py and the transforms/ plan: resources with 0-2 ``service.name`` entries,
spans whose attribute lists repeat some keys and lack others; and the rows the recipe
should give, worked out from the parsed messages."""

from __future__ import annotations

import random
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest as Request,
)


def kv(key: str, **value: Any) -> dict[str, Any]:
    return {"key": key, "value": value}


def random_request(rng: random.Random) -> Any:
    """Resources with 0-2 service.name entries, spans with duplicated and absent keys."""
    resources = []
    for r in range(rng.randrange(0, 3)):
        attributes = [kv("host.name", string_value=f"h{r}")]
        for k in range(rng.choice((0, 1, 1, 2))):  # twice: a duplicated key
            attributes.insert(
                rng.randrange(len(attributes) + 1), kv("service.name", string_value=f"svc{r}.{k}")
            )
        scopes = []
        for s in range(rng.randrange(0, 3)):
            spans = []
            for i in range(rng.randrange(0, 4)):
                start = 1_700_000_000_000_000_000 + rng.randrange(10**12)
                attrs = []
                if rng.random() < 0.7:
                    attrs.append(kv("http.method", string_value=rng.choice(("GET", "POST"))))
                for _ in range(rng.choice((0, 1, 2))):
                    attrs.append(kv("http.status_code", int_value=rng.choice((200, 404, 503))))
                if rng.random() < 0.4:
                    attrs.append(kv("retry", bool_value=rng.random() < 0.5))
                rng.shuffle(attrs)
                spans.append(
                    {
                        "name": f"op{r}.{s}.{i}",
                        "start_time_unix_nano": start,
                        "end_time_unix_nano": start + rng.randrange(10**9),
                        "attributes": attrs,
                    }
                )
            scopes.append({"scope": {"name": f"scope{s}"}, "spans": spans})
        resources.append({"resource": {"attributes": attributes}, "scope_spans": scopes})
    return Request(resource_spans=resources)


def _match(attributes: Any, key: str, member: str, which: int) -> Any:
    found = [a.value for a in attributes if a.key == key]
    if not found:
        return None
    value = found[which]
    return getattr(value, member) if value.WhichOneof("value") == member else None


def expected_rows(request: Any) -> list[dict[str, Any]]:
    """Left joins at each level: a resource without scopes, a scope without spans, one row."""
    rows = []
    blank = dict.fromkeys(("scope", "span", "method", "status", "retry", "start", "duration"))
    for rs in request.resource_spans or [None]:
        attrs = rs.resource.attributes if rs is not None else []
        per_resource = {
            "service": _match(attrs, "service.name", "string_value", 0),
            "service_last": _match(attrs, "service.name", "string_value", -1),
        }
        for ss in (rs.scope_spans if rs is not None else None) or [None]:
            for span in (ss.spans if ss is not None else None) or [None]:
                row = {**per_resource, **blank, "scope": ss.scope.name if ss is not None else None}
                if span is not None:
                    start, end = span.start_time_unix_nano, span.end_time_unix_nano
                    row |= {
                        "span": span.name,
                        "method": _match(span.attributes, "http.method", "string_value", 0),
                        "status": _match(span.attributes, "http.status_code", "int_value", -1),
                        "retry": _match(span.attributes, "retry", "bool_value", 0),
                        "start": start,
                        "duration": end - start,
                    }
                rows.append(row)
    return rows


def requests(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [random_request(rng).SerializeToString() for _ in range(n)]
