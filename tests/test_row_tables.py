"""The row tables of fan-out (wirearrow._core.rows), against numpy doing the same."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wirearrow._core.rows import expand, gather_rows

DTYPES = (np.int32, np.int64)


@given(
    st.lists(st.integers(-1, 40), min_size=1, max_size=60),
    st.lists(st.integers(0, 3), min_size=1, max_size=60),
    st.sampled_from(DTYPES),
    st.sampled_from(DTYPES),
)
def test_gather_rows_is_numpy_indexing(
    values: list[int], picks: list[int], value_type: type, owner_type: type
) -> None:
    table = np.array(values, dtype=value_type)
    owner = np.array([p % len(values) for p in picks], dtype=owner_type)
    out = gather_rows(table, owner)
    assert out.dtype == table.dtype
    assert out.tolist() == table[owner].tolist()


@pytest.mark.parametrize("bad", [3, 4, -1])
def test_gather_rows_refuses_an_owner_outside_the_table(bad: int) -> None:
    with pytest.raises(ValueError, match="outside the row table"):
        gather_rows(np.arange(3, dtype=np.int32), np.array([0, bad], dtype=np.int64))


def test_a_second_fan_out_carries_the_earlier_tables() -> None:
    # Records 0 and 1 fan out over 2 and 0 elements, then element 1 over 2 sub-elements:
    # the root's and the first level's tables follow every new row.
    root = np.arange(2, dtype=np.int32)
    owner, first = expand(root, np.array([0, 1], np.int64), np.array([0, 2, 2], np.int64))
    assert owner.tolist() == [0, 0, 1] and first.tolist() == [0, 1, -1]
    owner2, second = expand(first, np.array([0, 1], np.int64), np.array([0, 0, 2], np.int64))
    assert second.tolist() == [-1, 0, 1, -1]
    assert gather_rows(owner, owner2).tolist() == [0, 0, 0, 1]
    assert gather_rows(first, owner2).tolist() == [0, 1, 1, -1]
