"""Beam's ReadDelimited over compressed files (FnApiRunner, in process): every codec by
suffix or by option, one chunk per compressed file, and a cut compressed stream raising
(naming the file) or, with truncated="skip", keeping its records and counting the file."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections import Counter
from pathlib import Path

import pytest

beam = pytest.importorskip("apache_beam")
zstandard = pytest.importorskip("zstandard")

from apache_beam.io.filesystem import CompressionTypes  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from apache_beam.testing.util import assert_that  # noqa: E402

import corpus  # noqa: E402  (benchmarks/, put on sys.path by conftest.py)
import wirearrow.beam as wab  # noqa: E402
from wirearrow.delimited import split_framed  # noqa: E402

pytestmark = [
    pytest.mark.beam,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning:apache_beam.*"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

CODECS = {
    ".gz": gzip.compress,
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
    ".zst": lambda data: zstandard.ZstdCompressor().compress(data),
}


def in_process() -> beam.Pipeline:
    return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions())


def framed(records: list[bytes]) -> bytes:
    return b"".join(corpus.frame(records, "u32le"))


def same(want: Counter):
    def check(got) -> None:
        if Counter(got) != want:
            raise AssertionError(f"got {len(got)} records, want {sum(want.values())}")

    return check


def counters(p: beam.Pipeline) -> dict[str, int]:
    return {c.key.metric.name: c.committed for c in p.result.metrics().query()["counters"]}


def test_every_codec_by_suffix_and_by_option(tmp_path: Path, bid_corpus) -> None:
    want: Counter = Counter()
    for i, (suffix, compress) in enumerate(CODECS.items()):
        records = [r + bytes([i]) for r in bid_corpus[i * 50 : i * 50 + 50]]
        (tmp_path / f"part{i}.bin{suffix}").write_bytes(compress(framed(records)))
        want.update(records)
    plain = [r + b"p" for r in bid_corpus[:30]]
    (tmp_path / "plain.bin").write_bytes(framed(plain))
    want.update(plain)
    with in_process() as p:
        # chunk_bytes far below the files' sizes: compressed files still read whole.
        records = p | wab.ReadDelimited(str(tmp_path / "*"), "u32le", chunk_bytes=500)
        assert_that(records, same(want))
    # An explicit codec (here Beam's own CompressionTypes name) for a file without suffix.
    (tmp_path / "nosuffix").write_bytes(gzip.compress(framed(bid_corpus[:20])))
    for compression in (CompressionTypes.GZIP, "gzip"):
        with in_process() as p:
            records = p | wab.ReadDelimited(
                str(tmp_path / "nosuffix"), "u32le", compression=compression
            )
            assert_that(records, same(Counter(bid_corpus[:20])))
    with pytest.raises(ValueError, match="compression must be one of"):
        wab.ReadDelimited(str(tmp_path / "nosuffix"), compression="rar")


def test_a_cut_compressed_file(tmp_path: Path, bid_corpus) -> None:
    data = gzip.compress(framed(bid_corpus))
    path = tmp_path / "cut.bin.gz"
    path.write_bytes(data[: len(data) // 2])
    with (
        pytest.raises(Exception, match=r"cut\.bin\.gz: truncated gzip stream: .* decompressed byte"),
        in_process() as p,
    ):
        _ = p | wab.ReadDelimited(str(path), "u32le")
    # The records before the cut: what the cut gzip decompresses to, in whole frames.
    head = zlib.decompressobj(31).decompress(data[: len(data) // 2])
    whole = len(split_framed(head, "u32le")[0])
    assert 0 < whole < len(bid_corpus)
    with in_process() as p:
        records = p | wab.ReadDelimited(str(path), "u32le", truncated="skip")
        assert_that(records, same(Counter(bid_corpus[:whole])))
    stats = counters(p)
    assert stats["truncated_files"] == 1
    assert stats["records_read"] == whole
