"""The row tables of fan-out (wirearrow._core.rows), against numpy doing the same."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wirearrow._core.rows import expand, gather_rows, group_offsets, list_offsets

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


@given(st.lists(st.integers(0, 5), max_size=40), st.integers(0, 3))
def test_list_offsets_are_numpys_counts_summed(children: list[int], childless_tail: int) -> None:
    # parents[i]: the parent of element i, sorted (the decoder's order); some parents have
    # none, the last ones too. Elements are counted four at a time and then one by one.
    n_parent = len(children) + childless_tail
    parents = np.repeat(np.arange(len(children), dtype=np.int64), children)
    expected = np.concatenate([[0], np.cumsum(np.bincount(parents, minlength=n_parent))])
    assert np.frombuffer(list_offsets(parents, n_parent), np.int32).tolist() == expected.tolist()
    assert group_offsets(parents, n_parent).tolist() == expected.tolist()


@pytest.mark.parametrize(("n", "at"), [(n, at) for n in (4, 5, 8, 9) for at in range(n)])
@pytest.mark.parametrize("bad", ["descending", "past the parents", "negative"])
def test_list_offsets_refuse_parents_out_of_order_or_range(n: int, at: int, bad: str) -> None:
    # One bad parent at each place of a block of four and of the tail after the blocks.
    parents = np.arange(n, dtype=np.int64) // 2 + 1  # sorted, in range of n_parent
    n_parent = int(parents[-1]) + 1
    if bad == "descending":  # below the one before it (the first: above the next one)
        if at:
            parents[at] = parents[at - 1] - 1
        else:
            parents[0] = parents[1] + 1
    elif bad == "past the parents":
        parents[at:] = n_parent
    else:
        parents[at] = -1
    assert np.any(np.diff(parents) < 0) or parents.min() < 0 or parents.max() >= n_parent
    with pytest.raises(ValueError, match="sorted and in range"):
        list_offsets(parents, n_parent)
    with pytest.raises(ValueError, match="sorted and in range"):
        group_offsets(parents, n_parent)
