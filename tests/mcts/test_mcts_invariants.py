"""Invariants of the batched search: visit sums, legality, row independence, reproducibility,
root noise, the recurrent_fn contract and input validation."""
from __future__ import annotations

import numpy as np
import pytest

from lzk_mcts import SearchConfig
from mcts_fakes import FakeModel, random_reuse, random_roots, search

CFG = SearchConfig(num_simulations=30)


def _search(model, logits, legal, to_play, seed=0, **kw):
    kw.setdefault("add_noise", True)
    kw.setdefault("deterministic", False)
    return search(model, logits, legal, to_play, kw.pop("config", CFG), np.random.default_rng(seed), **kw)


@pytest.mark.parametrize("two_player", [False, True])
@pytest.mark.parametrize("mode", ["continuous", "discrete"])
def test_root_visits_sum_to_s_and_skip_illegal_actions(two_player: bool, mode: str) -> None:
    rng = np.random.default_rng(1)
    logits, legal, to_play = random_roots(rng, 16, 6, two_player)
    logits[~legal] = 50.0  # illegal actions must stay unvisited even with huge logits
    for reuse in (False, True):
        ta, rv = random_reuse(rng, legal) if reuse else (None, None)
        res = _search(FakeModel(6, range(16), mode=mode), logits, legal, to_play, true_action=ta, reuse_value=rv)
        assert res.visit_counts.dtype == np.int32 and res.visit_counts.shape == (16, 6)
        assert (res.visit_counts.sum(axis=1) == CFG.num_simulations).all()
        assert (res.visit_counts[~legal] == 0).all()
        assert res.root_value.shape == (16,) and res.root_value.dtype == np.float32


def test_rows_are_independent() -> None:
    """Searching a row alone gives the same result as inside a batch (no noise, deterministic),
    even when the batch mixes single- and two-player roots and reuse/no-reuse rows."""
    rng = np.random.default_rng(2)
    B, A = 7, 4
    logits, legal, to_play = random_roots(rng, B, A, two_player=True)
    to_play[::2] = -1
    ta, rv = random_reuse(rng, legal)
    kw = dict(add_noise=False, deterministic=True)
    batch = _search(FakeModel(A, range(B)), logits, legal, to_play, true_action=ta, reuse_value=rv, **kw)
    for b in range(B):
        alone = _search(FakeModel(A, [b]), logits[b:b + 1], legal[b:b + 1], to_play[b:b + 1],
                        true_action=ta[b:b + 1], reuse_value=rv[b:b + 1], **kw)
        assert alone.visit_counts[0].tolist() == batch.visit_counts[b].tolist()
        assert alone.root_value[0] == batch.root_value[b]


def test_same_seed_same_result_and_seed_matters() -> None:
    rng = np.random.default_rng(3)
    logits, legal, to_play = random_roots(rng, 8, 3, two_player=False)
    # "discrete" outputs make exact ties common, so tie-breaking randomness shows up.
    runs = [_search(FakeModel(3, range(8), mode="discrete"), logits, legal, to_play, seed=s, keep_tree=True)
            for s in (7, 7, 8)]
    assert np.array_equal(runs[0].visit_counts, runs[1].visit_counts)
    assert np.array_equal(runs[0].root_value, runs[1].root_value)
    assert np.array_equal(runs[0].tree.prior, runs[1].tree.prior)
    assert not np.array_equal(runs[0].tree.prior[:, 0], runs[2].tree.prior[:, 0])  # other noise


def test_random_tie_breaking_is_random_and_deterministic_is_first() -> None:
    """With a constant model every score ties at the first simulation: deterministic picks the
    first legal action, otherwise the choice varies across roots."""
    B, A = 64, 4

    def flat(batch_idx, parent_node, action, new_node):
        n = len(batch_idx)
        return np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros((n, A), np.float32)

    legal = np.ones((B, A), bool)
    legal[:, 0] = False
    cfg = SearchConfig(num_simulations=1)
    args = (flat, np.zeros((B, A), np.float32), legal, np.full(B, -1), cfg)
    det = search(*args, np.random.default_rng(0), add_noise=False, deterministic=True)
    assert (det.visit_counts[:, 1] == 1).all()
    rnd = search(*args, np.random.default_rng(0), add_noise=False, deterministic=False)
    first = rnd.visit_counts.argmax(axis=1)
    assert set(first.tolist()) == {1, 2, 3}


def test_root_noise_is_dirichlet_over_legal_actions_mixed_with_fraction() -> None:
    rng = np.random.default_rng(4)
    B, A = 6, 5
    logits, legal, to_play = random_roots(rng, B, A, two_player=False)
    cfg = SearchConfig(num_simulations=2, dirichlet_alpha=0.3, noise_fraction=0.25)
    res = _search(FakeModel(A, range(B)), logits, legal, to_play, seed=9, config=cfg, keep_tree=True)
    clean = _search(FakeModel(A, range(B)), logits, legal, to_play, config=cfg, add_noise=False, keep_tree=True)
    p_noisy, p = res.tree.prior[:, 0], clean.tree.prior[:, 0]
    # p is the softmax over legal actions only
    masked = np.where(legal, logits.astype(np.float64), -np.inf)
    expected_p = np.exp(masked - masked.max(axis=1, keepdims=True))
    np.testing.assert_allclose(p, expected_p / expected_p.sum(axis=1, keepdims=True), rtol=1e-12)
    # η: the same generator's Gamma(α) draws renormalised over the legal actions
    gamma = np.random.default_rng(9).standard_gamma(0.3, size=(B, A)) * legal
    eta = gamma / gamma.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(p_noisy, 0.75 * p + 0.25 * eta, rtol=1e-12, atol=1e-15)
    assert (p_noisy[~legal] == 0).all()
    np.testing.assert_allclose(p_noisy.sum(axis=1), 1.0)


def test_recurrent_fn_contract_node_numbering() -> None:
    """Simulation s creates node s + 1; parents are nodes created before (FakeModel checks)."""
    rng = np.random.default_rng(5)
    logits, legal, to_play = random_roots(rng, 4, 3, two_player=False)
    model = FakeModel(3, range(4))
    res = _search(model, logits, legal, to_play, keep_tree=True)
    assert [c[3] for c in model.calls] == list(range(1, CFG.num_simulations + 1))
    for batch_idx, parent, action, new_node in model.calls:
        assert batch_idx.dtype == np.int64 and parent.dtype == np.int64 and action.dtype == np.int64
        assert batch_idx.tolist() == [0, 1, 2, 3]
        assert (parent < new_node).all()
        for b, p, a in zip(batch_idx, parent, action):
            assert res.tree.children[b, p, a] == new_node
            assert res.tree.parent_of(b, new_node) == p
    assert res.stats["search/inferences_per_sim"] == 4.0
    assert 1 <= res.stats["search/max_depth"] <= CFG.num_simulations


def test_input_validation() -> None:
    model = FakeModel(2, range(2))
    logits = np.zeros((2, 2), np.float32)
    legal = np.ones((2, 2), bool)
    with pytest.raises(ValueError, match="legal action"):
        _search(model, logits, np.array([[True, True], [False, False]]), np.array([-1, -1]))
    with pytest.raises(ValueError, match="to_play"):
        _search(model, logits, legal, np.array([-1, 3]))
    with pytest.raises(ValueError, match="true_action"):
        _search(model, logits, np.array([[True, False], [True, True]]), np.array([-1, -1]),
                true_action=np.array([1, 0]), reuse_value=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="together"):
        _search(model, logits, legal, np.array([-1, -1]), true_action=np.array([0, 0]))

    def wrong_shape(batch_idx, parent_node, action, new_node):
        n = len(batch_idx)
        return np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros((n, 3), np.float32)

    with pytest.raises(ValueError, match="logits"):
        _search(wrong_shape, logits, legal, np.array([-1, -1]))
