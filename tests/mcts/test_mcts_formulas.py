"""Golden cases for the scalar formulas of SPEC §2.3/§3.2 and the root value Σ/(S+1)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lzk_mcts import SearchConfig
from lzk_mcts.tree import arm_score, clip01, minmax_normalize, prior_score, ucb_score
from mcts_fakes import search

INF = math.inf


def test_minmax_normalize_plain_span() -> None:
    assert minmax_normalize(0.6, 0.2, 1.2, 0.01) == pytest.approx(0.4)


def test_minmax_normalize_uses_the_001_span_floor() -> None:
    # span 0.005 < 0.01: divide by the floor, not the span (0.5 / 0.005 would give 100)
    assert minmax_normalize(0.5, 0.0, 0.005, 0.01) == pytest.approx(50.0)
    assert minmax_normalize(0.003, 0.0, 0.005, 0.01) == pytest.approx(0.3)


def test_minmax_normalize_returns_v_unchanged_without_span() -> None:
    assert minmax_normalize(0.3, INF, -INF, 0.01) == 0.3  # empty stats
    assert minmax_normalize(-2.5, 0.7, 0.7, 0.01) == -2.5  # a single value seen


def test_clip01() -> None:
    assert (clip01(-0.1), clip01(0.25), clip01(7.0)) == (0.0, 0.25, 1.0)


def test_prior_score_golden() -> None:
    # (log((10 + 19652 + 1)/19652) + 1.25)·√10/(1 + 2)·0.5, computed by hand ≈ 0.65910
    assert prior_score(0.5, 10.0, 2.0, 19652.0, 1.25) == pytest.approx(0.6591027719370847, rel=1e-12)
    assert prior_score(0.2, 24.0, 0.0, 19652.0, 1.25) == pytest.approx(1.225990512049985, rel=1e-12)
    assert prior_score(0.9, 0.0, 0.0, 19652.0, 1.25) == 0.0  # first simulation: no exploration term


def test_ucb_score_golden() -> None:
    # prior term 0.6591027719 + value term clip01((0.6 − 0.2)/1.0) = 0.4
    assert ucb_score(0.5, 10.0, 2.0, 0.6, 0.2, 1.2, 0.01, 19652.0, 1.25) == pytest.approx(1.0591027719370847)
    # value term clipped to 1 under the span floor: (0.5 − 0)/0.01 = 50 → 1
    assert ucb_score(0.5, 10.0, 2.0, 0.5, 0.0, 0.005, 0.01, 19652.0, 1.25) == pytest.approx(1.6591027719370847)
    # value term clipped to 0 below the minimum
    assert ucb_score(0.5, 10.0, 2.0, -1.0, 0.0, 1.0, 0.01, 19652.0, 1.25) == pytest.approx(0.6591027719370847)


def test_arm_score_is_normalised_r_plus_gamma_v_without_prior_term() -> None:
    # one player: 0.1 + 0.9·0.5 = 0.55, normalised on [0, 1]
    assert arm_score(0.1, 0.5, False, 0.9, 0.0, 1.0, 0.01) == pytest.approx(0.55)
    # two players: 0.1 + 0.9·(−0.5) = −0.35, normalised on [−1, 1] → 0.325
    assert arm_score(0.1, 0.5, True, 0.9, -1.0, 1.0, 0.01) == pytest.approx(0.325)
    # clipped to [0, 1]
    assert arm_score(0.1, 5.0, False, 0.9, 0.0, 1.0, 0.01) == 1.0


def _chain_model(value: float, reward: float):
    def recurrent_fn(batch_idx, parent_node, action, new_node):
        n = len(batch_idx)
        return np.full(n, reward, np.float32), np.full(n, value, np.float32), np.zeros((n, 1), np.float32)
    return recurrent_fn


@pytest.mark.parametrize("discount", [1.0, 0.9])
def test_root_value_is_sum_over_s_plus_one(discount: float) -> None:
    """A = 1 makes the tree a chain: simulation s expands depth s + 1 and the root receives
    γ^(s+1)·v, so the root value is Σ_{d=1..S} γ^d·v / (S + 1) (the +1 is the preparation visit)."""
    S, v = 10, 0.8
    cfg = SearchConfig(num_simulations=S, discount=discount)
    result = search(_chain_model(v, 0.0), np.zeros((2, 1), np.float32), np.ones((2, 1), bool),
                    np.array([-1, -1]), cfg, np.random.default_rng(0), add_noise=False, deterministic=True)
    expected = sum(discount ** d * v for d in range(1, S + 1)) / (S + 1)
    np.testing.assert_allclose(result.root_value, expected, rtol=1e-6)
    assert result.root_value.dtype == np.float32
    assert result.visit_counts.tolist() == [[S], [S]]
    assert result.stats["search/max_depth"] == S


def test_root_value_with_rewards_on_a_chain() -> None:
    """With reward r on every edge and value v at the leaf, the root receives
    Σ_{k<d} γ^k r + γ^d v for a leaf at depth d (backup b ← r + γ·b)."""
    S, r, v, g = 6, 0.5, -1.0, 0.9
    cfg = SearchConfig(num_simulations=S, discount=g)
    result = search(_chain_model(v, r), np.zeros((1, 1), np.float32), np.ones((1, 1), bool), np.array([-1]),
                    cfg, np.random.default_rng(0), add_noise=False, deterministic=True)
    total = sum(sum(g ** k * r for k in range(d)) + g ** d * v for d in range(1, S + 1))
    np.testing.assert_allclose(result.root_value, total / (S + 1), rtol=1e-6)


def test_search_config_validation() -> None:
    with pytest.raises(ValueError, match="num_simulations"):
        SearchConfig(num_simulations=0)
    with pytest.raises(ValueError, match="noise_fraction"):
        SearchConfig(noise_fraction=1.5)
