"""ReZero backward-view reuse (SPEC §3.2): the true-action child is searched to depth 1 only,
backs up reuse_value, is scored by the normalised r + γ·v_next, and saves inferences."""
from __future__ import annotations

import numpy as np
import pytest

from lzk_mcts import SearchConfig
from mcts_fakes import FakeModel, random_roots, search

S = 40


def _reuse_search(two_player: bool, reuse_value: float, seed: int = 0, mode: str = "continuous"):
    rng = np.random.default_rng(seed)
    B, A = 8, 4
    logits, legal, to_play = random_roots(rng, B, A, two_player)
    true_action = np.array([np.flatnonzero(row)[0] for row in legal], np.int64)
    reuse = np.full(B, reuse_value, np.float32)
    model = FakeModel(A, range(B), seed=seed, mode=mode)
    res = search(model, logits, legal, to_play, SearchConfig(num_simulations=S), np.random.default_rng(seed),
                 add_noise=True, deterministic=False, true_action=true_action, reuse_value=reuse, keep_tree=True)
    return res, model, true_action, legal


@pytest.mark.parametrize("two_player", [False, True])
def test_true_action_child_stays_at_depth_one_and_backs_up_reuse_value(two_player: bool) -> None:
    res, model, ta, _ = _reuse_search(two_player, reuse_value=-0.7 if two_player else 0.7)
    t = res.tree
    B = len(ta)
    skipped = 0
    for b in range(B):
        c = t.children[b, 0, ta[b]]
        assert c > 0, "the true-action child was never visited"
        assert (t.children[b, c] == -1).all(), "the reused child must never be expanded"
        assert not any((bi == b and p == c) for call in model.calls for bi, p in zip(call[0], call[1]))
        # expanded once with the network's reward, every backup through it is reuse_value
        assert t.reward[b, c] == model.outputs(b, (int(ta[b]),))[0]
        assert t.value_sum[b, c] / t.visit[b, c] == pytest.approx(-0.7 if two_player else 0.7)
        skipped += t.visit[b, c] - 1  # visits after the first need no inference
    assert res.visit_counts.sum() == B * S
    assert model.inferences == B * S - skipped
    assert res.stats["search/inferences_per_sim"] == pytest.approx((B * S - skipped) / S)
    assert res.stats["search/inferences_per_sim"] < B


def test_reuse_value_steers_the_true_action_share() -> None:
    """Its visited score is clip01(normalize(r + γ·v_next)) with no exploration bonus: a high
    v_next makes the true action dominate, a low one starves it; signs flip for two players."""
    share = {}
    for two_player in (False, True):
        for v in (1.0, -1.0):
            res, _, ta, _ = _reuse_search(two_player, v, seed=3, mode="tiny")
            share[two_player, v] = res.visit_counts[np.arange(len(ta)), ta].mean() / S
    assert share[False, 1.0] > 0.6 and share[False, -1.0] < 0.2
    assert share[True, -1.0] > 0.6 and share[True, 1.0] < 0.2


def test_every_tree_reusing_skips_the_model_call() -> None:
    """A single legal action that is the true action: after its first expansion no tree needs
    inference, and recurrent_fn is never called with an empty batch."""
    B, A = 3, 2
    legal = np.zeros((B, A), bool)
    legal[:, 1] = True
    model = FakeModel(A, range(B))
    res = search(model, np.zeros((B, A), np.float32), legal, np.full(B, -1), SearchConfig(num_simulations=10),
                 np.random.default_rng(0), add_noise=False, deterministic=True, true_action=np.ones(B, np.int64),
                 reuse_value=np.full(B, 0.5, np.float32))
    assert len(model.calls) == 1 and model.inferences == B
    assert res.stats["search/inferences_per_sim"] == pytest.approx(B / 10)
    assert res.visit_counts[:, 1].tolist() == [10] * B
    rewards = np.array([model.outputs(b, (1,))[0] for b in range(B)], np.float64)
    np.testing.assert_allclose(res.root_value, (rewards + 0.997 * 0.5) * 10 / 11, rtol=1e-6)
