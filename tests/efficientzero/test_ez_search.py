"""The value-prefix search (lzk_efficientzero.inference + lzk_mcts): the LSTM reset rule per node
depth against a per-node reference of LightZero's semantics on random trees, rewards from
prefixes, and ReZero reuse (the reused child is never expanded below depth 1), for both
backends."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lzk_mcts
from ez_helpers import A, make_policy, node_depths, path_model
from reference import reference_search

B = 5


def _roots(seed: int):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(B, 4)).astype(np.float32)
    legal = rng.random((B, A)) < 0.8
    legal[np.arange(B), rng.integers(0, A, B)] = True
    return obs, legal


def _search(pol, obs, legal, sims, *, true_action=None, reuse_value=None):
    snap = pol._snapshot("online")
    with torch.inference_mode():
        latent, _, logits = snap.initial(torch.as_tensor(obs))
        step = snap.begin(latent, sims)
        res = lzk_mcts.search(step, logits, legal, np.full(B, -1, np.int64), pol.cfg.search_config(sims),
                              np.random.default_rng(0), add_noise=False, deterministic=True,
                              true_action=true_action, reuse_value=reuse_value, keep_tree=True)
    return snap, logits, res


def _reference(pol, obs, legal, logits, sims, horizon, b, true_action=-1, reuse_value=0.0):
    model = path_model(pol.model, obs[b], horizon, pol.value_support, pol.reward_support)
    return reference_search(model, logits[b], legal[b], -1, pol.cfg.search_config(sims), true_action, reuse_value)


@pytest.mark.parametrize("backend", ["torch", "numba"])
@pytest.mark.parametrize("horizon", [1, 2, 3, 5])
def test_fresh_states_exactly_where_lightzero_resets(backend: str, horizon: int) -> None:
    """Every node at depth d stores a zero LSTM state iff d % H == 0 (the root too: depth 0), a
    non-zero one elsewhere; the stored depths are the tree's."""
    pol = make_policy(seed=horizon, lstm_horizon_len=horizon, search_backend=backend)
    obs, legal = _roots(horizon)
    snap, _, res = _search(pol, obs, legal, 120)
    assert (snap.compiled is not None) == (backend == "numba")
    tree = res.tree
    deepest = 0
    for b in range(B):
        depth = node_depths(tree.children[b])
        nodes = np.flatnonzero(depth >= 0)
        h, c, _, stored_depth = snap.node_state(nodes * B + b)
        np.testing.assert_array_equal(stored_depth, depth[nodes])
        fresh = depth[nodes] % horizon == 0
        assert (h[fresh] == 0).all() and (c[fresh] == 0).all()
        assert (np.abs(h[~fresh]).max(axis=1) > 0).all() and (np.abs(c[~fresh]).max(axis=1) > 0).all()
        deepest = max(deepest, int(depth.max()))
    assert deepest > horizon  # the trees reach below a reset


@pytest.mark.parametrize("backend", ["torch", "numba"])
@pytest.mark.parametrize("horizon", [1, 2, 3])
def test_search_matches_the_per_node_reference(backend: str, horizon: int) -> None:
    """Visit counts, root values and inference counts equal the reference's (which replays every
    path node by node with LightZero's reset and prefix rules); a reference with another
    horizon disagrees, so the comparison sees the rule."""
    pol = make_policy(seed=10 + horizon, lstm_horizon_len=horizon, search_backend=backend)
    obs, legal = _roots(10 + horizon)
    sims = 30
    snap, logits, res = _search(pol, obs, legal, sims)
    differs = False
    for b in range(B):
        counts, value, calls = _reference(pol, obs, legal, logits, sims, horizon, b)
        assert res.visit_counts[b].tolist() == counts, f"row {b}"
        np.testing.assert_allclose(res.root_value[b], value, rtol=1e-4, atol=1e-4)
        other = _reference(pol, obs, legal, logits, sims, horizon + 1, b)
        differs |= other[0] != counts or abs(other[1] - value) > 1e-3
    assert differs


def test_edge_rewards_are_prefix_differences() -> None:
    """In the tree, reward(node) = prefix(node) − prefix(parent), or prefix(node) below a fresh
    state (the root or a depth that is a multiple of H)."""
    horizon = 2
    pol = make_policy(seed=3, lstm_horizon_len=horizon, search_backend="torch")
    obs, legal = _roots(3)
    snap, _, res = _search(pol, obs, legal, 30)
    tree = res.tree
    for b in range(B):
        depth = node_depths(tree.children[b])
        for n in np.flatnonzero(depth > 0):
            p = tree.parent_of(b, int(n))
            _, _, prefix, _ = snap.node_state(np.array([n * B + b, p * B + b]))
            want = prefix[0] if depth[p] % horizon == 0 else prefix[0] - prefix[1]
            assert tree.reward[b, n] == pytest.approx(float(want), abs=1e-6)


@pytest.mark.parametrize("backend", ["torch", "numba"])
def test_rezero_reuse_stops_at_depth_one_and_matches_the_reference(backend: str) -> None:
    """ReZero-EZ: the true-action child is expanded once (with the network's prefix as reward)
    and never below; every backup through it is reuse_value; the search equals the reference
    with reuse."""
    horizon, sims = 2, 30
    pol = make_policy(seed=7, lstm_horizon_len=horizon, search_backend=backend)
    obs, legal = _roots(7)
    true_action = np.array([np.flatnonzero(row)[0] for row in legal], np.int64)
    true_action[1] = -1
    reuse = np.linspace(-2.0, 3.0, B).astype(np.float32)
    snap, logits, res = _search(pol, obs, legal, sims, true_action=true_action, reuse_value=reuse)
    tree = res.tree
    for b in range(B):
        counts, value, _ = _reference(pol, obs, legal, logits, sims, horizon, b, int(true_action[b]),
                                      float(reuse[b]))
        assert res.visit_counts[b].tolist() == counts
        np.testing.assert_allclose(res.root_value[b], value, rtol=1e-4, atol=1e-4)
        if true_action[b] < 0:
            continue
        c = tree.children[b, 0, true_action[b]]
        if c > 0:
            assert (tree.children[b, c] == -1).all(), "the reused child must never be expanded"
            assert tree.value_sum[b, c] / tree.visit[b, c] == pytest.approx(float(reuse[b]), rel=1e-6)
            _, _, prefix, depth = snap.node_state(np.array([c * B + b]))
            assert depth[0] == 1 and tree.reward[b, c] == pytest.approx(float(prefix[0]), abs=1e-6)
    assert res.stats["search/inferences_per_sim"] < B
