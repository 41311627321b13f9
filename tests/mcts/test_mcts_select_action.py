"""select_action: visit counts → action and probabilities (SPEC §1.4)."""
from __future__ import annotations

import numpy as np
import pytest

from lzk_mcts import select_action

COUNTS = np.array([[1, 3, 0, 4], [5, 5, 2, 0], [0, 0, 0, 0]])
LEGAL = np.array([[True, True, True, True], [True, True, True, False], [False, True, True, False]])


def test_probs_are_counts_to_the_power_one_over_t_over_legal_actions() -> None:
    _, probs = select_action(COUNTS, LEGAL, 0.5, np.random.default_rng(0), deterministic=True)
    np.testing.assert_allclose(probs[0], np.array([1, 9, 0, 16]) / 26, rtol=1e-6)
    np.testing.assert_allclose(probs[1], np.array([25, 25, 4, 0]) / 54, rtol=1e-6)
    np.testing.assert_allclose(probs[2], [0, 0.5, 0.5, 0])  # no visits: uniform over legal
    assert probs.dtype == np.float32


def test_deterministic_takes_the_first_maximum_of_legal_counts() -> None:
    counts = np.array([[2, 9, 9, 1], [0, 1, 1, 7]])
    legal = np.array([[True, True, True, True], [True, True, True, False]])
    actions, _ = select_action(counts, legal, 1.0, np.random.default_rng(0), deterministic=True)
    assert actions.tolist() == [1, 1]  # row 1: the illegal 7 is ignored
    assert actions.dtype == np.int64
    actions, _ = select_action(COUNTS, LEGAL, 1.0, np.random.default_rng(0), deterministic=True)
    assert actions.tolist() == [3, 0, 1]


def test_sampling_follows_probs_and_never_picks_illegal() -> None:
    rng = np.random.default_rng(1)
    counts = np.tile(np.array([[1, 3, 0, 4]]), (20000, 1))
    legal = np.tile(np.array([[True, True, False, True]]), (20000, 1))
    actions, probs = select_action(counts, legal, 1.0, rng, deterministic=False)
    freq = np.bincount(actions, minlength=4) / len(actions)
    np.testing.assert_allclose(freq, probs[0], atol=0.015)
    assert freq[2] == 0.0
    # reproducible from the generator
    again, _ = select_action(counts, legal, 1.0, np.random.default_rng(1), deterministic=False)
    assert np.array_equal(actions, again)


def test_small_temperature_does_not_overflow() -> None:
    # 100^1000 overflows float64; the ratios (1, 0.99^1000, 0.01^1000) do not
    _, probs = select_action(np.array([[100, 99, 1]]), np.ones((1, 3), bool), 0.001, None, deterministic=True)
    r = 0.99 ** 1000
    np.testing.assert_allclose(probs[0], [1 / (1 + r), r / (1 + r), 0.0], rtol=1e-5)


def test_temperature_must_be_positive() -> None:
    with pytest.raises(ValueError, match="temperature"):
        select_action(COUNTS, LEGAL, 0.0, np.random.default_rng(0), deterministic=True)
