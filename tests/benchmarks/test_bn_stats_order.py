"""``bn_stats_order.py``: the steady state of a repeated sequence of running-statistics updates."""
from __future__ import annotations

import pytest

import bn_stats_order as bso


@pytest.mark.parametrize("order", [["a", "b", "c"], ["c", "a", "b", "a"]])
def test_steady_state_is_the_fixed_point_of_the_repeated_updates(order: list[str]) -> None:
    values, m = {"a": 1.0, "b": -2.0, "c": 5.0}, 0.1
    r = 0.0
    for _ in range(2000):
        for tag in order:
            r = (1 - m) * r + m * values[tag]
    assert bso.steady_state(order, values, m) == pytest.approx(r, rel=1e-12)
    # ... and the order matters: the last update weighs most.
    assert bso.steady_state(order[::-1], values, m) != pytest.approx(r, rel=1e-6)
