"""A deterministic, realistic corpus of OpenRTB-style ``BidRequestEvent`` messages.

The schema is ``examples/schema/bidrequest.proto``. Messages are built with the protobuf
runtime from a private descriptor pool (compiled here with ``grpc_tools.protoc``), so this
module does not depend on wirearrow: it is the neutral input every benchmark row shares.

Same ``(n, seed)`` -> the same bytes, on any machine: all randomness comes from one
``random.Random(seed)`` passed down explicitly, and maps are serialized deterministically.
The shape aims at real exchange traffic, ~1 KB a message: 0-4 impressions (mostly 2),
banner and/or video, private-marketplace deals on some impressions, and optional device,
geo, user and site sub-messages (absent ones exercise null handling).

Usage::

    python benchmarks/corpus.py --n 50000 --out benchmarks/data/bidrequest.u32le
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import struct
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

__all__ = [
    "DATA_DIR",
    "FRAMINGS",
    "MESSAGE_NAME",
    "PROTO_FILE",
    "SCHEMA_DIR",
    "break_records",
    "compile_schema",
    "frame",
    "generate",
    "generate_skewed",
    "load_schema",
    "read_corpus",
    "unframe",
    "write_corpus",
    "write_split",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = REPO_ROOT / "examples" / "schema"
PROTO_FILE = SCHEMA_DIR / "bidrequest.proto"
MESSAGE_NAME = "BidRequestEvent"
# Everything this module (and the benchmarks) writes goes here; the directory is gitignored.
DATA_DIR = REPO_ROOT / "benchmarks" / "data"

Framing = Literal["varint", "u32le", "u32be"]
FRAMINGS: tuple[Framing, ...] = ("varint", "u32le", "u32be")

T = TypeVar("T")


# --------------------------------------------------------------------------- schema


@functools.lru_cache(maxsize=1)
def load_schema() -> tuple[descriptor_pool.DescriptorPool, type[Message]]:
    """Compile ``bidrequest.proto`` and return ``(pool, BidRequestEvent class)``.

    The pool is private (not the default pool), so loading this schema never clashes with
    another copy of the same file names elsewhere in the process. Cached: protoc runs once.
    """
    return compile_schema(PROTO_FILE, SCHEMA_DIR, MESSAGE_NAME)


def compile_schema(
    proto_file: Path, schema_dir: Path, message_name: str
) -> tuple[descriptor_pool.DescriptorPool, type[Message]]:
    """``(private pool, message class)`` of ``message_name`` in ``proto_file`` (protoc)."""
    with tempfile.TemporaryDirectory(prefix="wirearrow-corpus-") as tmp:
        out = Path(tmp) / "schema.pb"
        # `python -m grpc_tools.protoc` adds grpc_tools' bundled include dir (which holds
        # google/protobuf/timestamp.proto) itself; --include_imports makes the set
        # self-contained and topologically ordered (dependencies first).
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={schema_dir}",
            f"--descriptor_set_out={out}",
            "--include_imports",
            str(proto_file),
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"protoc failed ({result.returncode}): {result.stderr.strip()}")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())

    pool = descriptor_pool.DescriptorPool()
    for file_proto in fds.file:
        pool.Add(file_proto)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(message_name))
    return pool, cls


# --------------------------------------------------------------------------- vocabulary
# Small fixed vocabularies, so strings look like real traffic (lengths and repetition
# matter for decoders and for Arrow string columns) without shipping a data file.

_DOMAINS = (
    "news.example.com", "weather.example.org", "sports-daily.example.net",
    "recipes.example.com", "techreview.example.io", "finance.example.co.uk",
    "travelguide.example.de", "gamesportal.example.fr", "lifestyle.example.es",
    "autos.example.it", "music-stream.example.com", "localnews.example.ca",
)  # fmt: skip
_SECTIONS = ("world", "politics", "sport", "tech", "culture", "money", "travel", "food")
_SLOTS = ("top_leaderboard", "mid_rectangle", "sidebar_skyscraper", "in_article", "sticky_footer")
_NETWORKS = (21775744923, 3379, 6499, 22152718, 1001)
_IAB = (
    "IAB1", "IAB2", "IAB3", "IAB3-1", "IAB7", "IAB7-39", "IAB9", "IAB9-30", "IAB12",
    "IAB13", "IAB13-7", "IAB15", "IAB17", "IAB18", "IAB19", "IAB20", "IAB22", "IAB25",
    "IAB25-3", "IAB26",
)  # fmt: skip
_UTM_SOURCES = ("facebook", "twitter", "newsletter", "google", "reddit")
_PUBLISHERS = (
    "Example Media Group", "Daily Example Ltd", "Example Sports Network",
    "Example Digital GmbH", "Example Publishing SA",
)  # fmt: skip
# (user agent, make, model, os, OpenRTB devicetype)
_DEVICES = (
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/124.0.0.0 Safari/537.36", "", "", "Windows", 2),
    ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like "
     "Gecko) Version/17.4.1 Safari/605.1.15", "Apple", "Macintosh", "macOS", 2),
    ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_4_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, "
     "like Gecko) Version/17.4.1 Mobile/15E148 Safari/604.1", "Apple", "iPhone", "iOS", 4),
    ("Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/124.0.6367.82 Mobile Safari/537.36", "Samsung", "SM-S918B", "Android", 4),
    ("Mozilla/5.0 (Linux; Android 13; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/123.0.6312.99 Mobile Safari/537.36", "Google", "Pixel 7", "Android", 4),
    ("Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
     "Version/17.4 Mobile/15E148 Safari/604.1", "Apple", "iPad", "iOS", 5),
    ("Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
     "", "", "Linux", 2),
    ("Mozilla/5.0 (SMART-TV; Linux; Tizen 7.0) AppleWebKit/537.36 (KHTML, like Gecko) "
     "SamsungBrowser/5.0 Chrome/94.0.4606.31 TV Safari/537.36", "Samsung", "QE55Q80B",
     "Tizen", 3),
)  # fmt: skip
# (ISO 3166-1 alpha-3, weight, [(region, city, lat, lon)])
_GEOS = (
    ("USA", 40, (("CA", "Los Angeles", 34.05, -118.24), ("NY", "New York", 40.71, -74.01),
                 ("TX", "Austin", 30.27, -97.74), ("IL", "Chicago", 41.88, -87.63))),
    ("GBR", 10, (("ENG", "London", 51.51, -0.13), ("SCT", "Glasgow", 55.86, -4.25))),
    ("DEU", 9, (("BE", "Berlin", 52.52, 13.40), ("BY", "Munich", 48.14, 11.58))),
    ("FRA", 8, (("IDF", "Paris", 48.86, 2.35), ("ARA", "Lyon", 45.76, 4.84))),
    ("CAN", 6, (("ON", "Toronto", 43.65, -79.38), ("QC", "Montreal", 45.50, -73.57))),
    ("BRA", 6, (("SP", "Sao Paulo", -23.55, -46.63),)),
    ("JPN", 5, (("13", "Tokyo", 35.68, 139.69),)),
    ("IND", 5, (("MH", "Mumbai", 19.08, 72.88),)),
    ("ESP", 4, (("MD", "Madrid", 40.42, -3.70),)),
    ("AUS", 4, (("NSW", "Sydney", -33.87, 151.21),)),
    ("NLD", 3, (("NH", "Amsterdam", 52.37, 4.90),)),
)  # fmt: skip
_BANNER_SIZES = ((300, 250), (728, 90), (320, 50), (160, 600), (300, 600), (970, 250),
                 (320, 100), (336, 280))  # fmt: skip
_VIDEO_SIZES = ((640, 480), (1280, 720), (1920, 1080), (400, 300))
_MIMES = ("video/mp4", "video/webm", "application/javascript", "video/ogg",
          "application/x-mpegURL")  # fmt: skip
_PROVIDERS = ((7, "Example Exchange"), (12, "Example SSP"), (23, "Example Ad Server"),
              (31, "Example Header Bidding"))  # fmt: skip
_TS_BASE = 1_717_200_000  # 2024-06-01T00:00:00Z


def _weighted(rng: random.Random, items: Sequence[T], weights: Sequence[float]) -> T:
    return rng.choices(items, weights)[0]


def _uuid(rng: random.Random) -> str:
    # uuid4-shaped but drawn from rng, so it is reproducible.
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _hex(rng: random.Random, nbytes: int) -> str:
    return rng.getrandbits(8 * nbytes).to_bytes(nbytes, "big").hex()


def _ip(rng: random.Random) -> str:
    if rng.random() < 0.1:  # some IPv6 traffic
        return ":".join(f"{rng.getrandbits(16):x}" for _ in range(4)) + "::"
    # The last octet is zeroed, as exchanges truncate IPs for privacy.
    return f"{rng.randint(1, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.0"


# --------------------------------------------------------------------------- messages
# Each _fill_* writes into a sub-message the caller decided to create: with the protobuf
# runtime, touching a sub-message field (even reading through .foo.bar =) sets presence,
# so absence is produced by not calling the filler at all.


def _fill_imp(imp: Any, rng: random.Random, index: int, domain: str) -> None:
    imp.id = str(index + 1)  # OpenRTB exchanges number impressions "1", "2", ...
    # Ad-server style ad unit path: network id / site / section / slot.
    imp.tagid = (
        f"/{rng.choice(_NETWORKS)}/{domain.split('.')[0]}/{rng.choice(_SECTIONS)}/"
        f"{rng.choice(_SLOTS)}_{index + 1}"
    )
    # banner only 55 %, video only 20 %, both 20 %, neither 5 % (native/audio, not modelled)
    kind = _weighted(rng, ("banner", "video", "both", "none"), (55, 20, 20, 5))
    if kind in ("banner", "both"):
        w, h = rng.choice(_BANNER_SIZES)
        imp.banner.w = w
        imp.banner.h = h
        imp.banner.pos = _weighted(rng, (0, 1, 3, 4, 7), (40, 35, 15, 5, 5))
        imp.banner.btype.extend(sorted(rng.sample((1, 2, 3, 4), rng.randint(0, 2))))
    if kind in ("video", "both"):
        w, h = rng.choice(_VIDEO_SIZES)
        imp.video.w = w
        imp.video.h = h
        imp.video.mimes.extend(rng.sample(_MIMES, rng.randint(1, 3)))
        imp.video.minduration = rng.choice((0, 5))
        imp.video.maxduration = rng.choice((15, 30, 60))
    if rng.random() < 0.85:
        # Floors in whole cents, so the double and the exact decimal agree.
        cents = int(rng.lognormvariate(4.0, 1.0)) + 1
        imp.bidfloor = cents / 100
        imp.bidfloorcur = _weighted(rng, ("USD", "EUR", "GBP"), (80, 15, 5))
        if rng.random() < 0.7:
            imp.bidfloor_decimal.units = cents // 100
            imp.bidfloor_decimal.nanos = (cents % 100) * 10_000_000
    secure = _weighted(rng, (1, 0, None), (85, 5, 10))
    if secure is not None:
        imp.secure = secure  # proto3 optional: None leaves it unset (null, not 0)
    if rng.random() < 0.55:
        imp.pmp.private_auction = rng.random() < 0.5
        ndeals = _weighted(rng, (0, 1, 2, 3, 4), (10, 45, 25, 12, 8))
        for _ in range(ndeals):
            deal = imp.pmp.deals.add()
            deal.id = f"DX-{rng.randint(1000, 9999)}-{_hex(rng, 4)}"
            deal.bidfloor = round(rng.uniform(0.5, 25.0), 2)
            deal.wseat.extend(f"seat-{rng.randint(1, 500):04d}" for _ in range(rng.randint(0, 4)))
            deal.at = rng.choice((1, 2, 3))


def _fill_site(site: Any, rng: random.Random, domain: str) -> None:
    site.id = _hex(rng, 8)
    site.domain = domain
    site.cat.extend(rng.sample(_IAB, rng.randint(1, 3)))
    section = rng.choice(_SECTIONS)
    site.page = f"https://{domain}/{section}/{_hex(rng, 3)}-story-{rng.randint(1, 99999)}.html"
    if rng.random() < 0.4:  # campaign-tagged landing pages
        site.page += (
            f"?utm_source={rng.choice(_UTM_SOURCES)}&utm_medium=social&utm_campaign={_hex(rng, 4)}"
        )
    if rng.random() < 0.95:
        site.publisher.id = f"pub-{rng.randint(10000, 99999)}"
        site.publisher.name = rng.choice(_PUBLISHERS)


def _fill_device(device: Any, rng: random.Random) -> None:
    ua, make, model, os_name, devicetype = rng.choice(_DEVICES)
    device.ua = ua
    device.ip = _ip(rng)
    if make:
        device.make = make
        device.model = model
    device.os = os_name
    device.devicetype = devicetype
    if devicetype in (3, 4, 5) and rng.random() < 0.8:  # advertising ids are mobile/CTV
        device.ifa = _uuid(rng)
    if rng.random() < 0.9:
        country, _, places = rng.choices(_GEOS, [g[1] for g in _GEOS])[0]
        region, city, lat, lon = rng.choice(places)
        geo = device.geo
        geo.country = country
        geo.region = region
        if rng.random() < 0.8:
            geo.city = city
            geo.lat = lat + rng.uniform(-0.2, 0.2)
            geo.lon = lon + rng.uniform(-0.2, 0.2)
        geo.type = 2  # IP-derived


def _fill_user(user: Any, rng: random.Random) -> None:
    user.id = _uuid(rng)
    if rng.random() < 0.7:
        user.buyeruid = _hex(rng, 20)
    if rng.random() < 0.4:
        user.yob = rng.randint(1950, 2006)
        user.gender = rng.choice(("M", "F", "O"))
    if rng.random() < 0.3:
        total = user.ext.demographic.total
        total.units = rng.randint(0, 250)
        total.nanos = rng.randrange(0, 1_000_000_000, 1_000_000)


def _build(cls: type[Message], rng: random.Random) -> Message:
    msg: Any = cls()
    msg.id = _uuid(rng)
    domain = rng.choice(_DOMAINS)
    nimp = _weighted(rng, (0, 1, 2, 3, 4), (1, 18, 70, 9, 2))
    for i in range(nimp):
        _fill_imp(msg.imp.add(), rng, i, domain)
    if rng.random() < 0.97:
        _fill_site(msg.site, rng, domain)
    if rng.random() < 0.96:
        _fill_device(msg.device, rng)
    if rng.random() < 0.85:
        _fill_user(msg.user, rng)
    msg.at = _weighted(rng, (1, 2), (20, 80))
    msg.auction_type = msg.at  # FIRST_PRICE = 1, SECOND_PRICE = 2
    msg.tmax = rng.choice((100, 120, 150, 200, 250, 300, 500))
    msg.cur.extend(_weighted(rng, (("USD",), ("USD", "EUR"), ()), (90, 5, 5)))
    msg.bcat.extend(rng.sample(_IAB, rng.randint(0, 16)))
    test = _weighted(rng, (None, False, True), (70, 25, 5))
    if test is not None:
        msg.test = test
    msg.timestamp.seconds = _TS_BASE + rng.randrange(86_400)
    msg.timestamp.nanos = rng.randrange(1_000_000) * 1000  # microsecond precision
    if rng.random() < 0.9:
        msg.technicalprovider.id, msg.technicalprovider.name = rng.choice(_PROVIDERS)
    if rng.random() < 0.6:
        msg.ext["gdpr"] = rng.choice(("0", "1"))
    if rng.random() < 0.4:
        msg.ext["us_privacy"] = rng.choice(("1YNN", "1YYN", "1---"))
    if rng.random() < 0.3:
        msg.ext["schain"] = (
            f"1.0,1!exchange.example.com,{rng.randint(1000, 99999)},1,{_hex(rng, 6)},"
            f"{domain}!ssp.example.net,{rng.randint(1000, 99999)},1"
        )
    if rng.random() < 0.4:  # extended ids from identity providers, as one JSON string
        msg.ext["eids"] = (
            f'[{{"source":"id5-sync.com","uids":[{{"id":"ID5*{_hex(rng, 16)}"}}]}},'
            f'{{"source":"uidapi.com","uids":[{{"id":"{_hex(rng, 12)}"}}]}}]'
        )
    return msg


def generate(n: int, seed: int = 0) -> list[bytes]:
    """Return ``n`` serialized ``BidRequestEvent`` messages; same ``(n, seed)``, same bytes.

    The first ``k`` messages of ``generate(n, seed)`` equal ``generate(k, seed)``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    _, cls = load_schema()
    rng = random.Random(seed)
    # deterministic=True sorts map entries by key; without it the `ext` map's order (and
    # therefore the bytes) could change between protobuf versions.
    return [_build(cls, rng).SerializeToString(deterministic=True) for _ in range(n)]


# --------------------------------------------------------------------------- skewed variant
# Real producers do not write fields in field-number order (the protobuf runtimes do): a
# hand-rolled or generated encoder writes them in its own, consistent order, and real
# traffic has a few very large strings (user agents, page URLs with tracking parameters,
# consent strings) and many absent fields. The skewed corpus re-encodes the neutral one's
# messages in such an order (same field values, so the same decoded result), with larger
# strings and sparser sub-messages.

# Producer field order per message type (field numbers); unlisted fields follow, by number.
_SKEWED_ORDER: dict[str, tuple[int, ...]] = {
    "BidRequestEvent": (16, 17, 8, 7, 18, 1, 19, 5, 6, 3, 12, 11, 2, 15),
    "Imp": (12, 8, 9, 16, 11, 3, 2, 7, 1),
    "Banner": (5, 4, 2, 1),
    "Video": (8, 7, 4, 3, 1),
    "Pmp": (2, 1),
    "Deal": (6, 4, 2, 1),
    "Site": (9, 7, 4, 3, 1),
    "Publisher": (2, 1),
    "Device": (20, 18, 4, 2, 3, 14, 13, 12),
    "Geo": (9, 6, 4, 3, 2, 1),
    "User": (16, 4, 3, 2, 1),
    "TechnicalProvider": (2, 1),
}


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _reorder(data: bytes, descriptor: Any) -> bytes:
    """Re-encode a message with its fields in the producer order (recursively).

    Repeated occurrences keep their relative order (a stable sort), so the decoded message
    is the same; only the byte order of fields changes.
    """
    rank = {n: i for i, n in enumerate(_SKEWED_ORDER.get(descriptor.name, ()))}
    chunks: list[tuple[int, int, bytes]] = []
    pos = 0
    while pos < len(data):
        start = pos
        tag, pos = _read_varint(data, pos)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            _, pos = _read_varint(data, pos)
            chunk = data[start:pos]
        elif wire_type == 1:
            pos += 8
            chunk = data[start:pos]
        elif wire_type == 5:
            pos += 4
            chunk = data[start:pos]
        elif wire_type == 2:
            size, body = _read_varint(data, pos)
            pos = body + size
            fd = descriptor.fields_by_number.get(number)
            if fd is not None and fd.message_type is not None:
                inner = _reorder(data[body:pos], fd.message_type)
                chunk = data[start : body - len(_varint(size))] + _varint(len(inner)) + inner
            else:
                chunk = data[start:pos]
        else:
            raise ValueError(f"unexpected wire type {wire_type}")
        chunks.append((rank.get(number, len(rank) + number), len(chunks), chunk))
    chunks.sort()
    return b"".join(c for _, _, c in chunks)


def _skew(msg: Any, rng: random.Random) -> None:
    """Bigger strings in a few fields, many more absent fields."""
    if msg.HasField("device"):
        device = msg.device
        # Long user agents (app webviews append their own tokens).
        device.ua += " " + " ".join(f"App/{_hex(rng, 3)}" for _ in range(rng.randint(8, 40)))
        if rng.random() < 0.6:
            device.ClearField("make")
            device.ClearField("model")
        if rng.random() < 0.5:
            device.ClearField("ifa")
    if msg.HasField("site"):
        site = msg.site
        # Page URLs carrying tracking parameters.
        site.page += "?" + "&".join(
            f"p{k}={_hex(rng, rng.randint(4, 24))}" for k in range(rng.randint(10, 60))
        )
        if rng.random() < 0.7:
            site.ClearField("cat")
    if msg.HasField("user"):
        # An opaque identity token read by the plan (user.id), a few hundred bytes.
        msg.user.id = _hex(rng, rng.randint(60, 200))
        if rng.random() < 0.8:
            msg.user.ClearField("yob")
            msg.user.ClearField("gender")
    for imp in msg.imp:
        if rng.random() < 0.7:
            imp.ClearField("tagid")
        if rng.random() < 0.6:
            imp.ClearField("bidfloorcur")
    if rng.random() < 0.8:
        del msg.bcat[:]
    # A consent string (TCF-style), large and present in most requests.
    if rng.random() < 0.8:
        msg.ext["gdpr_consent"] = _hex(rng, rng.randint(200, 600))


def generate_skewed(n: int, seed: int = 0) -> list[bytes]:
    """``n`` messages with skewed field order and sizes; same ``(n, seed)``, same bytes.

    Same generator as :func:`generate` (different values: the skew draws from the same
    random stream), then :func:`_skew`, then re-encoded in the producer order.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    _, cls = load_schema()
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        msg = _build(cls, rng)
        _skew(msg, rng)
        out.append(_reorder(msg.SerializeToString(deterministic=True), cls.DESCRIPTOR))
    return out


# --------------------------------------------------------------------------- framing


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def frame(messages: Iterable[bytes], framing: Framing = "u32le") -> Iterator[bytes]:
    """Yield each message prefixed by its length (varint, or 4-byte little/big endian)."""
    if framing == "varint":
        prefix = _varint
    elif framing == "u32le":
        prefix = struct.Struct("<I").pack
    elif framing == "u32be":
        prefix = struct.Struct(">I").pack
    else:
        raise ValueError(f"unknown framing {framing!r}; expected one of {FRAMINGS}")
    for m in messages:
        yield prefix(len(m))
        yield m


def unframe(data: bytes, framing: Framing = "u32le") -> list[bytes]:
    """Split a length-prefixed buffer back into messages (the inverse of :func:`frame`)."""
    if framing not in FRAMINGS:
        raise ValueError(f"unknown framing {framing!r}; expected one of {FRAMINGS}")
    view = memoryview(data)
    out: list[bytes] = []
    pos, end = 0, len(data)
    while pos < end:
        if framing == "varint":
            size = shift = 0
            while True:
                if pos >= end:
                    raise ValueError(f"truncated varint length at byte {pos}")
                b = data[pos]
                pos += 1
                size |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    break
        else:
            if pos + 4 > end:
                raise ValueError(f"truncated 4-byte length at byte {pos}")
            size = int.from_bytes(view[pos : pos + 4], "little" if framing == "u32le" else "big")
            pos += 4
        if pos + size > end:
            raise ValueError(f"record of {size} bytes at byte {pos} runs past the end ({end})")
        out.append(bytes(view[pos : pos + size]))
        pos += size
    return out


def write_corpus(
    path: str | os.PathLike[str], n: int, seed: int = 0, framing: Framing = "u32le"
) -> list[bytes]:
    """Generate ``n`` messages, write them length-prefixed to ``path``, return them."""
    messages = generate(n, seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write to a sibling temp file and rename, so a concurrent reader never sees half a file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.writelines(frame(messages, framing))
    tmp.replace(path)
    return messages


def break_records(messages: list[bytes], count: int) -> list[int]:
    """Break ``count`` of ``messages`` in place, spread evenly from the first; their indexes.

    A broken record ends with a field whose length runs past the record's end: protobuf
    cannot parse it, wirearrow makes it a dead letter. The pipelines use this, so that the
    same ``(n, seed, count)`` breaks the same records whichever engine runs them.
    """
    n = len(messages)
    broken = list(range(0, n, max(n // count, 1))[:count]) if count > 0 else []
    for i in broken:
        messages[i] += b"\x0a\x7f"  # field 1 (id), length 127: past the end
    return broken


def write_split(
    directory: str | os.PathLike[str], messages: Sequence[bytes], files: int, framing: Framing
) -> list[Path]:
    """Write ``messages`` over ``files`` files ``events-NNNNN.<framing>``, consecutive slices
    in order: read back in name order they are ``messages`` again."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-len(messages) // max(files, 1))
    paths = []
    for i in range(max(files, 1)):
        part = messages[i * per_file : (i + 1) * per_file]
        if not part and i:
            break
        path = directory / f"events-{i:05d}.{framing}"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.writelines(frame(part, framing))
        tmp.replace(path)
        paths.append(path)
    return paths


def read_corpus(path: str | os.PathLike[str], framing: Framing = "u32le") -> list[bytes]:
    """Read a file written by :func:`write_corpus`."""
    return unframe(Path(path).read_bytes(), framing)


# --------------------------------------------------------------------------- CLI


def _describe(messages: Sequence[bytes]) -> str:
    _, cls = load_schema()
    parsed: list[Any] = [cls.FromString(m) for m in messages]
    total = sum(map(len, messages))
    imps = Counter(len(m.imp) for m in parsed)
    deals = Counter(len(i.pmp.deals) for m in parsed for i in m.imp if i.HasField("pmp"))
    sizes = sorted(map(len, messages))
    lines = [
        f"messages: {len(messages):,}  bytes: {total:,}  "
        f"mean: {total / max(len(messages), 1):,.0f} B  "
        f"min/median/max: {sizes[0] if sizes else 0}/{sizes[len(sizes) // 2] if sizes else 0}/"
        f"{sizes[-1] if sizes else 0} B",
        "imp per message: " + ", ".join(f"{k}: {v}" for k, v in sorted(imps.items())),
        "deals per pmp:   " + ", ".join(f"{k}: {v}" for k, v in sorted(deals.items())),
        f"with device: {sum(m.HasField('device') for m in parsed):,}  "
        f"geo: {sum(m.device.HasField('geo') for m in parsed):,}  "
        f"user: {sum(m.HasField('user') for m in parsed):,}  "
        f"site: {sum(m.HasField('site') for m in parsed):,}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50_000, help="number of messages")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        default=DATA_DIR / "bidrequest.u32le",
        help="output file (default: %(default)s)",
    )
    parser.add_argument(
        "--framing",
        choices=FRAMINGS,
        default=None,
        help="length prefix; default: the --out suffix if it names one, else u32le",
    )
    args = parser.parse_args(argv)
    framing = args.framing or next((f for f in FRAMINGS if args.out.suffix == f".{f}"), "u32le")
    messages = write_corpus(args.out, args.n, args.seed, framing)
    print(f"wrote {args.out} ({framing} framing, seed {args.seed})")
    print(_describe(messages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
