"""The training feed's summary of the row ids it gave (:func:`raytpu.workloads.support.train_data.id_ranges`); the feed
itself on 8 JAX CPU devices: tests/test_train_feed.py (the heavy tier)."""

from __future__ import annotations

from typing import Any

import pytest

from raytpu.workloads.support import train_data

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("ids", "ranges"), [
    ([], []),
    ([3, 1, 2, 2], [[1, 4]]),
    ([0, 1, 5, 6, 9], [[0, 2], [5, 7], [9, 10]]),
    (list(range(0, 2 * train_data.MAX_RANGES + 4, 2)), [[i, i + 1] for i in range(0, 2 * train_data.MAX_RANGES, 2)]
     + ["..."]),
])
def test_id_ranges_are_sorted_half_open_and_bounded(ids: list[int], ranges: list[Any]) -> None:
    assert train_data.id_ranges(ids) == ranges
