"""The second OpenRTB corpus: ``rtb.deep.BidRequest`` (OpenRTB 2.6 with custom value types).

Where ``corpus.py``'s messages are ~1 KB with nesting five levels deep, these are ~2-3 KB,
nest up to seven levels, hold a few dozen small messages of another package each
(``rtb.types.Money`` / ``Decimal`` / ``Size`` / ``GeoPoint`` / ``SourcedId``), well-known
types (Timestamp, Duration, Int32Value, StringValue, BoolValue), a oneof of messages
(site or app), maps with message values and packed enums: the shape on which the encoder
was furthest behind the protobuf runtime. The schema is
``benchmarks/schema/rtb/openrtb_deep.proto``. Same ``(n, seed)``, same bytes, as in
``corpus.py``; it does not depend on wirearrow.

    python benchmarks/corpus_deep.py --n 5      # describe a few messages
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pool
from google.protobuf.message import Message

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus
from corpus import (
    _DEVICES,
    _DOMAINS,
    _GEOS,
    _IAB,
    _MIMES,
    _PUBLISHERS,
    _SECTIONS,
    _TS_BASE,
    _hex,
    _ip,
    _uuid,
    _weighted,
)

__all__ = ["MESSAGE_NAME", "PROTO_FILE", "SCHEMA_DIR", "generate", "load_schema"]

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
PROTO_FILE = SCHEMA_DIR / "rtb" / "openrtb_deep.proto"
MESSAGE_NAME = "rtb.deep.BidRequest"


@functools.lru_cache(maxsize=1)
def load_schema() -> tuple[descriptor_pool.DescriptorPool, type[Message]]:
    """``(private pool, BidRequest class)``, compiled once."""
    return corpus.compile_schema(PROTO_FILE, SCHEMA_DIR, MESSAGE_NAME)


_SIZES = ((300, 250), (728, 90), (320, 50), (160, 600), (300, 600), (970, 250), (336, 280))
_BIDDERS = ("appnexus", "rubicon", "pubmatic", "openx", "ix", "criteo", "triplelift")
_SEGMENT_NAMES = ("auto intender", "sports fan", "frequent traveller", "new parent",
                  "home improvement", "luxury shopper", "gamer", "pet owner")  # fmt: skip
_EID_SOURCES = ("id5-sync.com", "uidapi.com", "liveramp.com", "criteo.com", "pubcid.org")
_APPS = (("com.example.weather", "Example Weather"), ("com.example.news", "Example News"),
         ("com.example.puzzle", "Example Puzzle"), ("com.example.radio", "Example Radio"))
_CARRIERS = ("Example Mobile", "Example Telecom", "WIFI", "Example Wireless")
_LANGUAGES = ("en", "de", "fr", "es", "pt", "ja", "it", "nl")


def _money(money: Any, rng: random.Random, low: float = 0.05, high: float = 30.0) -> None:
    cents = int(rng.uniform(low, high) * 100) + 1
    money.currency = _weighted(rng, (1, 2, 3, 4, 5), (70, 15, 8, 4, 3))
    money.amount.units = cents // 100
    if cents % 100:
        money.amount.nanos = (cents % 100) * 10_000_000


def _size(size: Any, rng: random.Random) -> None:
    size.w, size.h = rng.choice(_SIZES)


def _publisher(pub: Any, rng: random.Random, domain: str) -> None:
    pub.id = f"pub-{rng.randint(10000, 99999)}"
    pub.name = rng.choice(_PUBLISHERS)
    pub.cat.extend(rng.sample(_IAB, rng.randint(0, 2)))
    if rng.random() < 0.6:
        pub.domain = domain


def _user_data(data: Any, rng: random.Random) -> None:
    data.id = str(rng.randint(1, 999))
    data.name = f"dmp{rng.randint(1, 9)}.example.com"
    for _ in range(_weighted(rng, (1, 2, 3, 5, 8), (30, 30, 20, 12, 8))):
        seg = data.segment.add()
        seg.id = str(rng.randint(1000, 999999))
        if rng.random() < 0.5:
            seg.name = rng.choice(_SEGMENT_NAMES)
        if rng.random() < 0.3:
            seg.value = str(rng.randint(1, 100))


def _content(content: Any, rng: random.Random, domain: str) -> None:
    content.id = _hex(rng, 6)
    content.title = f"{rng.choice(_SECTIONS).title()} story {rng.randint(1, 9999)}"
    if rng.random() < 0.3:
        content.series = f"Series {rng.randint(1, 40)}"
        content.season = str(rng.randint(1, 9))
        content.episode = rng.randint(1, 24)
    if rng.random() < 0.7:
        content.producer.id = _hex(rng, 4)
        content.producer.name = rng.choice(_PUBLISHERS)
        content.producer.cat.extend(rng.sample(_IAB, rng.randint(0, 2)))
        content.producer.domain = domain
    content.url = f"https://{domain}/{rng.choice(_SECTIONS)}/{_hex(rng, 5)}"
    content.cat.extend(rng.sample(_IAB, rng.randint(1, 3)))
    content.prodq = rng.choice((0, 1, 2, 3))
    content.livestream = rng.random() < 0.1
    content.len = rng.randint(0, 3600)
    content.language = rng.choice(_LANGUAGES)
    for _ in range(_weighted(rng, (0, 1, 2), (60, 30, 10))):
        _user_data(content.data.add(), rng)


def _banner(banner: Any, rng: random.Random, index: int) -> None:
    for _ in range(rng.randint(1, 4)):
        _size(banner.format.add(), rng)
    if rng.random() < 0.5:
        _size(banner.size, rng)
    banner.btype.extend(sorted(rng.sample((1, 2, 3, 4), rng.randint(0, 2))))
    banner.battr.extend(sorted(rng.sample(range(1, 18), rng.randint(0, 5))))
    banner.pos = _weighted(rng, (0, 1, 3, 4, 7), (40, 35, 15, 5, 5))
    banner.topframe = rng.random() < 0.6
    banner.api.extend(rng.sample((3, 5, 6, 7), rng.randint(0, 2)))
    banner.id = str(index + 1)


def _imp(imp: Any, rng: random.Random, index: int, domain: str) -> None:
    imp.id = str(index + 1)
    for _ in range(rng.randint(0, 3)):
        m = imp.metric.add()
        m.type = rng.choice(("viewability", "session_depth", "click_through"))
        m.value = round(rng.random(), 3)
        m.vendor = rng.choice(("EXCHANGE", "moat.com", "ias.com"))
    kind = _weighted(rng, ("banner", "video", "native", "both"), (50, 20, 15, 15))
    if kind in ("banner", "both"):
        _banner(imp.banner, rng, index)
    if kind in ("video", "both"):
        video = imp.video
        video.mimes.extend(rng.sample(_MIMES, rng.randint(1, 3)))
        video.minduration.seconds = rng.choice((0, 5))
        video.maxduration.seconds = rng.choice((15, 30, 60))
        if rng.random() < 0.2:
            video.maxduration.nanos = 500_000_000
        video.protocols.extend(rng.sample(range(1, 11), rng.randint(2, 6)))
        _size(video.size, rng)
        video.startdelay = rng.choice((0, -1, -2, 5))
        video.placement = rng.choice((1, 2, 3, 4))
        video.linearity = 1
        video.skip = rng.random() < 0.4
        for j in range(_weighted(rng, (0, 1, 2), (60, 30, 10))):
            _banner(video.companionad.add(), rng, j)
        video.api.extend(rng.sample((1, 2, 7), rng.randint(0, 2)))
    if kind == "native":
        native = imp.native
        native.request = '{"ver":"1.2","assets":[]}'
        native.ver = "1.2"
        for a in range(rng.randint(2, 5)):
            asset = native.assets.add()
            asset.id = a + 1
            asset.required = rng.random() < 0.5
            which = rng.choice(("title", "img", "data"))
            if which == "title":
                asset.title.len = rng.choice((25, 90, 140))
            elif which == "img":
                asset.img.type = rng.choice((1, 3))
                _size(asset.img.min, rng)
                if rng.random() < 0.5:
                    _size(asset.img.max, rng)
                asset.img.mimes.extend(rng.sample(("image/jpeg", "image/png", "image/gif"), 2))
            else:
                asset.data.type = rng.choice((1, 2, 3, 12))
                asset.data.len = rng.choice((0, 25, 140))
    imp.displaymanager = rng.choice(("prebid.js", "GoogleMobileAds", "example-sdk"))
    imp.displaymanagerver = f"{rng.randint(1, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 9)}"
    imp.instl = rng.random() < 0.1
    imp.tagid = f"/{rng.randint(1000, 99999)}/{domain.split('.')[0]}/{rng.choice(_SECTIONS)}"
    if rng.random() < 0.85:
        _money(imp.bidfloor, rng)
    imp.secure = rng.random() < 0.9
    if rng.random() < 0.3:
        imp.exp.value = rng.choice((300, 600, 3600))
    if rng.random() < 0.8:
        ext = imp.ext
        for name in rng.sample(_BIDDERS, rng.randint(1, 4)):
            bidder = ext.bidders[name]
            bidder.name = name
            for k in range(rng.randint(1, 3)):
                bidder.params[f"p{k}"] = _hex(rng, rng.randint(2, 8))
            if rng.random() < 0.5:
                _money(bidder.floor, rng)
        if rng.random() < 0.7:
            ext.gpid.value = imp.tagid + f"#{index + 1}"
        if rng.random() < 0.5:
            ext.adunit.source = "gam"
            ext.adunit.id = _hex(rng, 6)
            ext.adunit.atype = 1
            ext.adunit.hash = rng.getrandbits(64)
    if rng.random() < 0.5:
        pmp = imp.pmp
        pmp.private_auction = rng.random() < 0.5
        for _ in range(_weighted(rng, (0, 1, 2, 3, 5), (10, 40, 25, 15, 10))):
            deal = pmp.deals.add()
            deal.id = f"DX-{rng.randint(1000, 9999)}-{_hex(rng, 4)}"
            _money(deal.bidfloor, rng, 0.5, 25.0)
            deal.at = rng.choice((1, 2, 3))
            deal.wseat.extend(f"seat-{rng.randint(1, 500):04d}" for _ in range(rng.randint(0, 3)))
            deal.wadomain.extend(rng.sample(_DOMAINS, rng.randint(0, 2)))
            if rng.random() < 0.4:
                deal.expires.seconds = _TS_BASE + 86_400 * rng.randint(1, 60)


def _device(device: Any, rng: random.Random) -> None:
    ua, make, model, os_name, devicetype = rng.choice(_DEVICES)
    device.ua = ua
    if rng.random() < 0.9:
        country, _, places = rng.choices(_GEOS, [g[1] for g in _GEOS])[0]
        _geo(device.geo, rng, country, places)
    device.dnt = rng.random() < 0.1
    device.lmt = rng.random() < 0.2
    ip = _ip(rng)
    if ":" in ip:
        device.ipv6 = ip
    else:
        device.ip = ip
    device.devicetype = devicetype
    if make:
        device.make = make
        device.model = model
    device.os = os_name
    device.osv = f"{rng.randint(9, 17)}.{rng.randint(0, 6)}"
    if rng.random() < 0.5:
        device.hwv = model or "desktop"
    device.w, device.h = rng.choice(((1920, 1080), (390, 844), (412, 915), (1366, 768)))
    device.ppi = rng.choice((96, 326, 460, 420))
    device.pxratio = rng.choice((1.0, 2.0, 3.0, 2.625))
    device.js = rng.random() < 0.95
    device.language = rng.choice(_LANGUAGES)
    if devicetype in (4, 5):
        device.carrier = rng.choice(_CARRIERS)
        device.mccmnc = f"{rng.randint(200, 799)}-{rng.randint(1, 99):02d}"
        device.connectiontype = rng.choice((2, 5, 6))
        if rng.random() < 0.8:
            device.ifa = _uuid(rng)
            device.didsha1 = rng.getrandbits(160).to_bytes(20, "big")
    if rng.random() < 0.3:
        device.ext["atts"] = str(rng.choice((0, 1, 2, 3)))
    if rng.random() < 0.2:
        device.ext["ifa_type"] = rng.choice(("aaid", "idfa", "rida"))


def _geo(geo: Any, rng: random.Random, country: str, places: Any) -> None:
    region, city, lat, lon = rng.choice(places)
    if rng.random() < 0.8:
        geo.point.lat = lat + rng.uniform(-0.2, 0.2)
        geo.point.lon = lon + rng.uniform(-0.2, 0.2)
        geo.point.accuracy = rng.choice((5.0, 20.0, 100.0, 1000.0))
        geo.point.utc_offset_minutes = rng.choice((-480, -300, 0, 60, 120, 540))
    geo.type = rng.choice((1, 2))
    geo.country = country
    geo.region = region
    if rng.random() < 0.7:
        geo.city = city
    if rng.random() < 0.4:
        geo.zip = str(rng.randint(10000, 99999))
    geo.utcoffset = rng.choice((-480, -300, 0, 60, 120, 540))


def _user(user: Any, rng: random.Random) -> None:
    user.id = _uuid(rng)
    if rng.random() < 0.7:
        user.buyeruid = _hex(rng, 20)
    if rng.random() < 0.3:
        user.yob = rng.randint(1950, 2006)
        user.gender = rng.choice(("M", "F", "O"))
    if rng.random() < 0.2:
        user.keywords = ",".join(rng.sample(_SEGMENT_NAMES, 3))
    if rng.random() < 0.6:
        user.consent = "CP" + _hex(rng, rng.randint(40, 120))
    if rng.random() < 0.2:
        country, _, places = rng.choices(_GEOS, [g[1] for g in _GEOS])[0]
        _geo(user.geo, rng, country, places)
    for _ in range(_weighted(rng, (0, 1, 2, 3), (35, 35, 20, 10))):
        _user_data(user.data.add(), rng)
    for source in rng.sample(_EID_SOURCES, _weighted(rng, (0, 1, 2, 3), (30, 30, 25, 15))):
        eid = user.eids.add()
        eid.source = source
        for _ in range(rng.randint(1, 2)):
            uid = eid.uids.add()
            uid.source = source
            uid.id = _hex(rng, rng.randint(12, 32))
            uid.atype = rng.choice((1, 3))
            if rng.random() < 0.3:
                uid.hash = rng.getrandbits(64)


def _build(cls: type[Message], rng: random.Random) -> Message:
    msg: Any = cls()
    msg.id = _uuid(rng)
    domain = rng.choice(_DOMAINS)
    for i in range(_weighted(rng, (1, 2, 3, 4), (30, 50, 15, 5))):
        _imp(msg.imp.add(), rng, i, domain)
    if rng.random() < 0.6:
        site = msg.site
        site.id = _hex(rng, 8)
        site.name = domain.split(".")[0].title()
        site.domain = domain
        site.cat.extend(rng.sample(_IAB, rng.randint(1, 3)))
        site.sectioncat.extend(rng.sample(_IAB, rng.randint(0, 2)))
        site.page = f"https://{domain}/{rng.choice(_SECTIONS)}/{_hex(rng, 3)}.html"
        if rng.random() < 0.5:
            site.ref = f"https://{rng.choice(_DOMAINS)}/"
        _publisher(site.publisher, rng, domain)
        if rng.random() < 0.6:
            _content(site.content, rng, domain)
        site.mobile = rng.random() < 0.4
    else:
        app = msg.app
        bundle, name = rng.choice(_APPS)
        app.id = _hex(rng, 6)
        app.name = name
        app.bundle = bundle
        app.domain = domain
        app.storeurl = f"https://play.example.com/store/apps/details?id={bundle}"
        app.cat.extend(rng.sample(_IAB, rng.randint(1, 2)))
        app.ver = f"{rng.randint(1, 12)}.{rng.randint(0, 30)}"
        _publisher(app.publisher, rng, domain)
        if rng.random() < 0.3:
            _content(app.content, rng, domain)
        app.paid = rng.random() < 0.05
    if rng.random() < 0.97:
        _device(msg.device, rng)
    if rng.random() < 0.9:
        _user(msg.user, rng)
    msg.test = rng.random() < 0.01
    msg.at = _weighted(rng, (1, 2), (70, 30))
    msg.tmax = rng.choice((100, 120, 150, 200, 250, 300, 500))
    msg.wseat.extend(f"seat-{rng.randint(1, 500):04d}" for _ in range(rng.randint(0, 3)))
    msg.allimps = rng.random() < 0.05
    msg.cur.extend(_weighted(rng, ((1,), (1, 2), (2,), ()), (75, 10, 10, 5)))
    msg.wlang.extend(rng.sample(_LANGUAGES, rng.randint(0, 2)))
    msg.bcat.extend(rng.sample(_IAB, rng.randint(0, 10)))
    msg.badv.extend(rng.sample(_DOMAINS, rng.randint(0, 3)))
    source = msg.source
    source.fd = rng.random() < 0.5
    source.tid = _uuid(rng)
    if rng.random() < 0.7:
        chain = source.schain
        chain.complete = rng.random() < 0.8
        chain.ver = "1.0"
        for _ in range(rng.randint(1, 4)):
            node = chain.nodes.add()
            node.asi = rng.choice(_DOMAINS)
            node.sid = str(rng.randint(1000, 99999))
            if rng.random() < 0.5:
                node.rid = _uuid(rng)
            if rng.random() < 0.3:
                node.name = rng.choice(_PUBLISHERS)
            node.hp = True
    if rng.random() < 0.8:
        regs = msg.regs
        regs.coppa = rng.random() < 0.02
        if rng.random() < 0.7:
            regs.gdpr.value = rng.random() < 0.5
        if rng.random() < 0.5:
            regs.us_privacy = rng.choice(("1YNN", "1YYN", "1---"))
        regs.gpp_sid.extend(rng.sample((2, 6, 7, 8), rng.randint(0, 2)))
        if rng.random() < 0.3:
            regs.gpp = "DBAB" + _hex(rng, rng.randint(10, 40))
    msg.received_at.seconds = _TS_BASE + rng.randrange(86_400)
    msg.received_at.nanos = rng.randrange(1_000_000) * 1000
    msg.timeout.nanos = msg.tmax * 1_000_000
    if rng.random() < 0.5:
        msg.ext["prebid"] = '{"channel":{"name":"web","version":"8.42"}}'
    if rng.random() < 0.3:
        msg.ext["gdpr"] = rng.choice(("0", "1"))
    for seat in rng.sample(("seat-0001", "seat-0042", "seat-0137", "seat-0420"), rng.randint(0, 3)):
        _money(msg.floors_by_seat[seat], rng)
    for _ in range(_weighted(rng, (0, 1, 2), (50, 35, 15))):
        exp = msg.experiments.add()
        exp.name = rng.choice(("floors_v2", "timeout_ab", "bidder_mix", "ctv_pilot"))
        exp.bucket = rng.randint(0, 99)
        exp.started.seconds = _TS_BASE - 86_400 * rng.randint(1, 30)
    return msg


def generate(n: int, seed: int = 0) -> list[bytes]:
    """``n`` serialized ``rtb.deep.BidRequest`` messages; same ``(n, seed)``, same bytes."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    _, cls = load_schema()
    rng = random.Random(seed)
    return [_build(cls, rng).SerializeToString(deterministic=True) for _ in range(n)]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    messages = generate(args.n, args.seed)
    sizes = sorted(map(len, messages))
    print(f"{len(messages)} messages, {sum(sizes) / max(len(sizes), 1):,.0f} bytes on average "
          f"({sizes[0]:,} to {sizes[-1]:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
