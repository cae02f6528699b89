"""Validity bytes -> Arrow bitmaps (pack_bits, a word at a time), against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from wirearrow._core.buffers import pack_bits


@pytest.mark.parametrize("n", [*range(0, 20), 63, 64, 65, 1000, 4097])
@pytest.mark.parametrize("kind", ["zero-one", "any byte", "sparse"])
def test_pack_bits_matches_numpy(n: int, kind: str) -> None:
    rng = np.random.default_rng(n)
    if kind == "zero-one":
        flags = rng.integers(0, 2, n).astype(np.uint8)
    elif kind == "any byte":  # every non-zero byte is a set flag, 0x80 and 0xFF included
        flags = rng.integers(0, 256, n).astype(np.uint8)
    else:
        flags = (rng.random(n) < 0.05) * rng.integers(1, 256, n).astype(np.uint8)
        flags = flags.astype(np.uint8)
    bitmap, zeros = pack_bits(flags, n)
    assert bytes(bitmap) == np.packbits(flags != 0, bitorder="little").tobytes()
    assert zeros == int((flags == 0).sum())


def test_pack_bits_reads_only_n_flags() -> None:
    flags = np.array([1, 0, 1, 1, 0, 0, 0, 1, 1, 1, 9], dtype=np.uint8)
    bitmap, zeros = pack_bits(flags, 9)
    assert bytes(bitmap) == bytes([0b10001101, 0b1])
    assert zeros == 4
