"""Every YAML plan in transforms/ compiles and transcodes generated records correctly.

Each plan is checked against the protobuf runtime's reading of the same bytes: the rows a
plan should give are worked out here from the parsed messages, independently of wirearrow.
"""

from __future__ import annotations

import datetime
import pickle
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf import message_factory

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from wirearrow.config import PlanConfig, load_plan

ROOT = Path(__file__).resolve().parent.parent
TRANSFORMS = sorted((ROOT / "transforms").glob("*.yaml"))
N = 50


# ---- records for each schema -------------------------------------------------------------


def bid_records(schema: wa.Schema) -> list[bytes]:
    return corpus.generate(N, seed=1)


_SCREENS = ("home", "search", "product", "cart", "checkout")
_COUNTRIES = ("USA", "DEU", "FRA", "JPN", "BRA")


def app_records(schema: wa.Schema, n: int = N, seed: int = 1) -> list[bytes]:
    """App events built with the protobuf runtime: every oneof member, maps, items."""
    cls = message_factory.GetMessageClass(schema.descriptor)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ev: Any = cls()
        ev.event_id = f"ev-{i:04d}"
        ev.event_time.seconds = 1_717_200_000 + rng.randrange(86_400)
        ev.event_time.nanos = rng.randrange(1000) * 1_000_000
        ev.user_id = f"u{rng.randrange(100)}"
        ev.session_id = f"s{rng.randrange(1000)}"
        ev.platform = rng.choice((0, 1, 2, 3))
        ev.app_version = rng.choice(("1.0.0", "1.2.3", "2.0.0-beta"))
        if rng.random() < 0.7:
            ev.attributes["country"] = rng.choice(_COUNTRIES)
        if rng.random() < 0.5:
            ev.attributes["locale"] = rng.choice(("en-US", "de-DE", "ja-JP"))
        if rng.random() < 0.6:
            ev.properties["screen"].string_value = rng.choice(_SCREENS)
        if rng.random() < 0.5:
            ev.properties["ab_bucket"].int_value = rng.randrange(10)
        if rng.random() < 0.3:
            ev.properties["battery"].double_value = round(rng.random(), 2)
        kind = rng.choice(("page_view", "click", "purchase", "search"))
        if kind == "page_view":
            ev.page_view.url = f"https://shop.example.com/{rng.choice(_SCREENS)}"
            ev.page_view.duration_ms = rng.randrange(60_000)
        elif kind == "click":
            ev.click.element_id = f"btn-{rng.randrange(20)}"
            ev.click.x, ev.click.y = rng.randrange(1080), rng.randrange(1920)
        elif kind == "purchase":
            ev.purchase.order_id = f"o-{rng.randrange(10**6):06d}"
            ev.purchase.currency = "EUR"
            if rng.random() < 0.4:
                ev.purchase.coupon = rng.choice(("SPRING", "WELCOME10", ""))
        else:
            ev.search.query = rng.choice(("shoes", "red dress", "ラーメン", ""))
            ev.search.results = rng.randrange(100)
        if kind in ("purchase", "search") or rng.random() < 0.2:
            for k in range(rng.choice((0, 1, 2, 3))):
                item = ev.items.add()
                item.sku = f"SKU-{rng.randrange(1000):03d}"
                item.name = rng.choice(("Sneaker", "Dress", "Hat", ""))
                item.quantity = rng.randrange(0, 4)
                item.price_micros = rng.randrange(100_000_000)
                item.categories.extend(rng.sample(("a", "b", "c"), k))
        out.append(ev.SerializeToString(deterministic=True))
    return out


def otel_records(schema: wa.Schema) -> list[bytes]:
    from otel_data import requests

    return requests(40, seed=3)


RECORDS: dict[str, Callable[[wa.Schema], list[bytes]]] = {
    "BidRequestEvent": bid_records,
    "appevents.AppEvent": app_records,
    "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest": otel_records,
}


def records_for(plan: PlanConfig) -> list[bytes]:
    schema = plan.schema()
    make = RECORDS.get(schema.message_name)
    if make is None:
        pytest.fail(f"no record generator for {schema.message_name}: add one to RECORDS")
    return make(schema)


def parsed(plan: PlanConfig, records: list[bytes]) -> list[Any]:
    cls = message_factory.GetMessageClass(plan.schema().descriptor)
    return [cls.FromString(r) for r in records]


# ---- every plan ------------------------------------------------------------------------


def test_transforms_exist() -> None:
    names = {p.name for p in TRANSFORMS}
    assert {"openrtb_flat.yaml", "openrtb_nested.yaml", "appevents_flat.yaml"} <= names


@pytest.mark.parametrize("path", TRANSFORMS, ids=[p.name for p in TRANSFORMS])
def test_plan_compiles_and_transcodes(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(path.anchor)  # paths inside the plan are relative to the plan file
    plan = load_plan(path)
    tc = plan.transcoder()
    records = records_for(plan)
    batch = tc.transcode(records)
    assert batch.schema == tc.arrow_schema
    stats = tc.stats
    assert stats.records_in == stats.records_ok == len(records)
    assert stats.rows_out == batch.num_rows >= len(records)
    if plan.columns is None:
        assert batch.num_rows == len(records)
        assert tc.arrow_schema.names == [f.name for f in plan.schema().descriptor.fields]
    else:
        assert tc.arrow_schema.names == [c.output_name for c in plan.columns]
    # The same plan through the other entry points, and across a pickle.
    again = wa.load_plan(str(path)).transcoder().transcode(records)
    assert again.equals(batch)
    clone = pickle.loads(pickle.dumps(tc))
    assert clone.transcode(records).equals(batch)
    assert load_plan(path) == plan


# ---- openrtb_flat ----------------------------------------------------------------------


def _present(msg: Any, name: str) -> bool:
    return msg.HasField(name)


def _enum_name(msg: Any, field: str) -> str:
    enum = msg.DESCRIPTOR.fields_by_name[field].enum_type
    return enum.values_by_number[getattr(msg, field)].name


def _utc_hour(ts: Any) -> int:
    return datetime.datetime.fromtimestamp(ts.seconds, datetime.timezone.utc).hour


def expected_openrtb_rows(messages: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for m in messages:
        site = m.site if _present(m, "site") else None
        geo = m.device.geo if _present(m, "device") and _present(m.device, "geo") else None
        common = {
            "request_id": m.id,
            "auction_type": m.auction_type,
            "auction_type_name": _enum_name(m, "auction_type"),
            "hour": _utc_hour(m.timestamp),
            "domain": site.domain if site else None,
            "publisher_id": site.publisher.id if site and _present(site, "publisher") else None,
            "country": geo.country if geo else None,
            "gdpr": m.ext.get("gdpr"),
            "total_floor": sum(imp.bidfloor for imp in m.imp) if len(m.imp) else None,
        }
        if not m.imp:
            rows.append({**common, "imp_id": None, "deal_id": None, "floor": None})
            continue
        for imp in m.imp:
            banner = imp.banner if _present(imp, "banner") else None
            size = f"{banner.w}x{banner.h}" if banner else "x"
            per_imp = {
                **common,
                "imp_id": imp.id,
                "format": "video" if _present(imp, "video") else "banner",
                "currency": imp.bidfloorcur or "USD",
                "banner_size": size,
            }
            deals = list(imp.pmp.deals) if _present(imp, "pmp") else []
            for deal in deals or [None]:
                floor = [deal.bidfloor if deal else None, imp.bidfloor]
                per_imp_deal = {
                    **per_imp,
                    "deal_id": deal.id if deal else None,
                    "floor": next((f for f in floor if f), None),
                }
                rows.append(per_imp_deal)
    return rows


def test_openrtb_flat_values() -> None:
    plan = load_plan(ROOT / "transforms" / "openrtb_flat.yaml")
    records = corpus.generate(N, seed=1)
    batch = plan.transcoder().transcode(records)
    expected = expected_openrtb_rows(parsed(plan, records))
    got = batch.to_pylist()
    assert len(got) == len(expected)
    for row, want in zip(got, expected, strict=True):
        for key, value in want.items():
            if isinstance(value, float):
                assert row[key] == pytest.approx(value), key
            else:
                assert row[key] == value, (key, row)
    assert batch.schema.field("event_time").type == pa.timestamp("us", tz="UTC")
    # The corpus exercises what the plan is about: deals, impressions without, videos.
    assert any(r["deal_id"] for r in got)
    assert any(r["imp_id"] and r["deal_id"] is None for r in got)
    assert {r["format"] for r in got if r["imp_id"]} == {"video", "banner"}


# ---- openrtb_nested --------------------------------------------------------------------


def test_openrtb_nested_options() -> None:
    plan = load_plan(ROOT / "transforms" / "openrtb_nested.yaml")
    assert plan.columns is None and plan.mode == "nested"
    assert plan.options["timestamp_unit"] == "ms"
    assert plan.options["validate"] == "full"
    assert plan.options["on_error"] == "dead_letter"
    assert plan.input.framing == "u32le"
    assert plan.output.path == str(ROOT / "out" / "openrtb_nested.parquet")
    assert plan.output.compression == "zstd"
    assert plan.output.row_group_size == 65536
    assert plan.dead_letter_path == str(ROOT / "out" / "openrtb_nested.dead.parquet")

    tc = plan.transcoder()
    records = corpus.generate(N, seed=1)
    framed = b"".join(corpus.frame(records, plan.input.framing))
    batch = tc.transcode(framed, framing=plan.input.framing)
    assert batch.num_rows == N
    assert batch.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
    messages = parsed(plan, records)
    assert batch.column("id").to_pylist() == [m.id for m in messages]
    assert [len(v) for v in batch.column("imp").to_pylist()] == [len(m.imp) for m in messages]
    # Bad records become dead letters (the plan's error policy), never exceptions.
    tc.transcode([records[0], b"\x0a\x05ab", records[1]])
    dead = tc.dead_letters()
    assert dead.num_rows == 1 and dead.column("index").to_pylist() == [1]


# ---- appevents_flat --------------------------------------------------------------------


def expected_app_rows(messages: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for m in messages:
        kind = m.WhichOneof("payload")
        props = m.properties
        common = {
            "event_id": m.event_id,
            "platform": m.platform,
            "platform_name": _enum_name(m, "platform"),
            "hour": _utc_hour(m.event_time),
            "kind": kind,
            "page_url": m.page_view.url if kind == "page_view" else None,
            "order_id": m.purchase.order_id if kind == "purchase" else None,
            "coupon": (
                m.purchase.coupon if kind == "purchase" and m.purchase.HasField("coupon") else None
            ),
            "search_query": m.search.query if kind == "search" else None,
            "country": m.attributes.get("country") or "unknown",
            "screen": props["screen"].string_value if "screen" in props else None,
            "ab_bucket": props["ab_bucket"].int_value if "ab_bucket" in props else None,
            "basket_quantity": sum(i.quantity for i in m.items) if len(m.items) else None,
            "basket_micros": (
                sum(i.quantity * i.price_micros for i in m.items) if len(m.items) else None
            ),
        }
        for item in list(m.items) or [None]:
            rows.append(
                {
                    **common,
                    "sku": item.sku if item else None,
                    "item_label": f"{item.sku} / {item.name}" if item else None,
                    "line_micros": item.price_micros if item else None,
                }
            )
    return rows


def test_appevents_flat_values() -> None:
    plan = load_plan(ROOT / "transforms" / "appevents_flat.yaml")
    assert plan.options["on_error"] == "skip"
    schema = plan.schema()
    records = app_records(schema, n=200, seed=3)
    tc = plan.transcoder()
    batch = tc.transcode(records)
    got = batch.to_pylist()
    expected = expected_app_rows(parsed(plan, records))
    assert len(got) == len(expected)
    for row, want in zip(got, expected, strict=True):
        for key, value in want.items():
            if key == "item_label" and value is None:
                # concat of two absent items: the reference's '' for nulls, joined by the sep
                assert row[key] in (None, " / "), row
                continue
            assert row[key] == value, (key, row, want)
    assert batch.schema.field("event_time").type == pa.timestamp("ms", tz="UTC")
    kinds = {r["kind"] for r in got}
    assert kinds == {"page_view", "click", "purchase", "search"}
    # skip: a bad record is counted and left out, the rest come through
    tc.transcode([records[0], b"\xff"])
    assert tc.stats.records_failed == 1


# ---- appevents_properties --------------------------------------------------------------


def _text(value: Any) -> str | None:
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    v = getattr(value, kind)
    if kind == "bool_value":
        return "true" if v else "false"
    if kind == "double_value":
        return repr(v).removesuffix(".0")  # the reference's string form: 1.0 -> "1"
    return str(v) if v != "" else None


def expected_property_rows(messages: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for m in messages:
        common = {
            "event_id": m.event_id,
            "country": m.attributes.get("country"),
            "attribute_keys": ",".join(sorted(m.attributes)),
        }
        # deterministic serialization writes map entries sorted by key: the wire order
        entries = sorted(m.properties.items()) or [(None, None)]
        for key, value in entries:
            kind = value.WhichOneof("kind") if value is not None else None
            rows.append(
                {
                    **common,
                    "property": key,
                    **{
                        member: getattr(value, member) if kind == member else None
                        for member in ("string_value", "int_value", "double_value", "bool_value")
                    },
                    "value_text": _text(value) if value is not None else None,
                }
            )
    return rows


def test_appevents_properties_values() -> None:
    plan = load_plan(ROOT / "transforms" / "appevents_properties.yaml")
    records = app_records(plan.schema(), n=200, seed=5)
    got = plan.transcoder().transcode(records).to_pylist()
    expected = expected_property_rows(parsed(plan, records))
    assert len(got) == len(expected)
    for row, want in zip(got, expected, strict=True):
        for key, value in want.items():
            assert row[key] == value, (key, row, want)
    assert {r["property"] for r in got} == {"screen", "ab_bucket", "battery", None}


def test_aggregate_over_a_map_wildcard_next_to_a_fan_out() -> None:
    """list_concat(attributes[*]) next to items[*]: once per record, not once per item."""
    plan = load_plan(
        {
            "proto": {"file": str(ROOT / "examples/schema/appevent.proto"), "message": "AppEvent"},
            "denormalizer": {
                "columns": [
                    {"name": "sku", "path": "items[*].sku"},
                    {
                        "name": "values",
                        "expr": {
                            "func": "list_concat",
                            "sep": ",",
                            "args": [{"path": "attributes[*]"}],
                        },
                    },
                ]
            },
        }
    )
    records = app_records(plan.schema(), n=50, seed=3)
    got = plan.transcoder().transcode(records).to_pylist()
    messages = parsed(plan, records)
    want = [
        ",".join(v for _, v in sorted(m.attributes.items()))
        for m in messages
        for _ in list(m.items) or [None]
    ]
    assert [r["values"] for r in got] == want


def test_two_aggregates_over_sibling_fan_outs() -> None:
    plan = load_plan(
        {
            "proto": {"file": str(ROOT / "examples/schema/appevent.proto"), "message": "AppEvent"},
            "denormalizer": {
                "columns": [
                    {"name": "id", "path": "event_id"},
                    {"name": "q", "expr": {"func": "sum", "args": [{"path": "items[*].quantity"}]}},
                    {
                        "name": "a",
                        "expr": {
                            "func": "list_concat",
                            "sep": ",",
                            "args": [{"path": "attributes[*]"}],
                        },
                    },
                ]
            },
        }
    )
    records = app_records(plan.schema(), n=50, seed=3)
    got = plan.transcoder().transcode(records).to_pylist()
    messages = parsed(plan, records)
    assert [r["q"] for r in got] == [
        sum(i.quantity for i in m.items) if len(m.items) else None for m in messages
    ]
    assert [r["a"] for r in got] == [
        ",".join(v for _, v in sorted(m.attributes.items())) for m in messages
    ]
