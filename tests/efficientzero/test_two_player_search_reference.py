"""Two-player (board game, alternating ``to_play``) value-prefix search: against the per-node
reference (tests/mcts/reference.py, two-player mode) on random trees with LSTM resets inside,
against returns worked out by hand from zero-sum first principles, and on the case where
LightZero 0.2.0's ``ctree_efficientzero`` differs (its min-max statistics take the node's own-view
value; ``benchmarks/lightzero_ez_parity.py`` measures it on many roots).

Conventions checked: a node's value is from its player-to-move's view; an edge's reward (prefix
difference, or the prefix itself below a fresh LSTM state) belongs to the player who moved; the
parent's Q of a child is r + γ·(−v_child); the min-max statistics see those Qs."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
import torch

import lzk_mcts
from ez_helpers import A, make_policy, node_depths, path_model
from lzk_efficientzero.inference import prefix_rewards
from reference import reference_search

B = 6


def _roots(seed: int):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(B, 4)).astype(np.float32)
    legal = rng.random((B, A)) < 0.8
    legal[np.arange(B), rng.integers(0, A, B)] = True
    to_play = rng.integers(1, 3, B).astype(np.int64)
    return obs, legal, to_play


@pytest.mark.parametrize("backend", ["torch", "numba"])
@pytest.mark.parametrize("horizon,discount", [(1, 1.0), (2, 1.0), (3, 0.997), (2, 0.997)])
def test_two_player_search_matches_the_per_node_reference(backend: str, horizon: int, discount: float) -> None:
    """Visit counts, root values and inference counts equal the two-player reference's, whose
    model replays each path node by node with LightZero's reset and prefix rules; the trees
    reach below a reset."""
    pol = make_policy(seed=20 + horizon, lstm_horizon_len=horizon, search_backend=backend, discount=discount)
    obs, legal, to_play = _roots(20 + horizon)
    sims = 30
    snap = pol._snapshot("online")
    with torch.inference_mode():
        latent, _, logits = snap.initial(torch.as_tensor(obs))
        res = lzk_mcts.search(snap.begin(latent, sims), logits, legal, to_play, pol.cfg.search_config(sims),
                              np.random.default_rng(0), add_noise=False, deterministic=True, keep_tree=True)
    calls = 0
    deepest = 0
    for b in range(B):
        model = path_model(pol.model, obs[b], horizon, pol.value_support, pol.reward_support)
        counts, value, n = reference_search(model, logits[b], legal[b], int(to_play[b]), pol.cfg.search_config(sims))
        calls += n
        assert res.visit_counts[b].tolist() == counts, f"row {b}"
        np.testing.assert_allclose(res.root_value[b], value, rtol=1e-4, atol=1e-4, err_msg=f"row {b}")
        deepest = max(deepest, int(node_depths(res.tree.children[b]).max()))
    assert calls == round(res.stats["search/inferences_per_sim"] * sims)
    assert deepest > horizon


# ------------------------------------------------------------------------------------------------
# Hand-checked trees: a table network (prefix, value, logits per path) through our reward rule
# ------------------------------------------------------------------------------------------------

Table = Callable[[tuple[int, ...]], tuple[float, float, list[float]]]


def _table_search(table: Table, root_logits: list[float], to_play: int, horizon: int, discount: float, sims: int):
    """lzk_mcts.search of one root whose steps take (prefix, value, logits) from ``table(path)``
    and rewards from :func:`lzk_efficientzero.inference.prefix_rewards` (the EZ search's rule)."""
    nodes: dict[int, tuple[tuple[int, ...], float, int]] = {0: ((), 0.0, 0)}  # slot -> (path, prefix, depth)

    def step(parent_slot, action, child_slot):
        prefixes, values, logits, parent_prefix, parent_depth = [], [], [], [], []
        for p, a, c in zip(parent_slot.tolist(), action.tolist(), child_slot.tolist()):
            path, pp, pd = nodes[p]
            prefix, value, lg = table(path + (a,))
            nodes[c] = (path + (a,), np.float32(prefix), pd + 1)
            prefixes.append(prefix)
            values.append(value)
            logits.append(lg)
            parent_prefix.append(pp)
            parent_depth.append(pd)
        reward = prefix_rewards(np.asarray(prefixes, np.float32), np.asarray(parent_prefix, np.float32),
                                np.asarray(parent_depth, np.int64), horizon)
        return lzk_mcts.StepOutput(reward, np.asarray(values, np.float32), np.asarray(logits, np.float32))

    cfg = lzk_mcts.SearchConfig(num_simulations=sims, discount=discount)
    return lzk_mcts.search(step, np.asarray([root_logits], np.float32), np.ones((1, len(root_logits)), bool),
                           np.asarray([to_play], np.int64), cfg, np.random.default_rng(0), add_noise=False,
                           deterministic=True, keep_tree=True)


@pytest.mark.parametrize("horizon", [1, 2, 5])
def test_two_player_values_are_zero_sum_returns(horizon: int) -> None:
    """Two simulations down one line root →0→ c0 →0→ c00 (forced by the priors and the first-
    descent tie). Player 1 moves at the root, player 2 at c0, player 1 is to move at c00. From
    player 1's view: G1 = r0 − γ·v0, G2 = r0 − γ·r00 + γ²·v00 (player 2's reward counts against
    player 1); the root value is (G1 + G2)/3 (the preparation visit has no value), c0's value is
    player 2's: (v0 + r00 − γ·v00)/2. Rewards are prefix differences except below a fresh state:
    r0 = prefix(0) (the root), r00 = prefix(00) where depth 1 is a reset (H = 1), else
    prefix(00) − prefix(0)."""
    g = 0.997
    table = {(0,): (0.3, -0.4, [0.0, 0.0]), (0, 0): (-0.5, 0.6, [0.0, 0.0])}
    res = _table_search(lambda p: table[p], [5.0, -5.0], 1, horizon, g, 2)
    tree = res.tree
    c0 = tree.children[0, 0, 0]
    c00 = tree.children[0, c0, 0]
    assert c0 == 1 and c00 == 2 and res.visit_counts[0].tolist() == [2, 0]
    assert tree.to_play[0, :3].tolist() == [1, 2, 1]
    p0, v0 = np.float32(0.3), np.float32(-0.4)
    p00, v00 = np.float32(-0.5), np.float32(0.6)
    r0 = float(p0)
    r00 = float(p00) if horizon == 1 else float(np.float32(p00 - p0))
    assert tree.reward[0, c00] == pytest.approx(r00, abs=1e-7)
    g1 = r0 - g * float(v0)
    g2 = r0 - g * r00 + g * g * float(v00)
    assert res.root_value[0] == pytest.approx((g1 + g2) / 3, abs=1e-6)
    assert tree.value_sum[0, c0] / tree.visit[0, c0] == pytest.approx((float(v0) + r00 - g * float(v00)) / 2,
                                                                      abs=1e-6)


def test_min_max_statistics_see_the_parents_view() -> None:
    """The smallest case where LightZero 0.2.0's ``ctree_efficientzero`` searches differently (its
    two-player backup widens the min-max bounds with r + γ·v_node, the node's own view, while its
    selection scores r + γ·(−v_child)). Root: player 2, priors ≈ (0.967, 0.033), γ = 1, no reset.
    Simulation 1 expands c0: r0 = 0.4554, v0 = 0.3642 (player 1's view). The bounds are then
    Q(c0) = r0 − v0 = 0.0911 and the root's −v_root = −0.0456; c0 scores 1.25·0.967/2 +
    norm(0.0911) = 0.604 + 1, the unvisited c1 1.25·0.033 + clip(norm(mean_q = r0 + v0)) =
    0.041 + 1: simulation 2 goes to c0 again, visits (2, 0). LightZero's own-view bounds
    [0.0456, 0.8196] give c0 norm 0.059 and c1 1, visits (1, 1) (measured: the parity
    benchmark's minimal case)."""
    prefix0, v0 = 0.4553588, 0.36424378
    table = {(0,): (prefix0, v0, [0.0, 0.0]), (0, 0): (-0.28142336, 0.58290416, [0.0, 0.0]),
             (1,): (-0.17980519, 0.58972555, [0.0, 0.0])}
    logits = [1.9783899784088135, -1.4045168161392212]
    q0 = float(np.float32(prefix0)) - float(np.float32(v0))  # c0's Q from the root player's view
    one = _table_search(lambda p: table[p], logits, 2, 1000, 1.0, 1)
    # after one simulation: the bounds are c0's Q and the root's −v_root = −q0/2 (LightZero's: r0 + v0, +q0/2)
    np.testing.assert_allclose(one.tree.minmax[0], [-q0 / 2, q0], rtol=1e-6)
    two = _table_search(lambda p: table[p], logits, 2, 1000, 1.0, 2)
    assert two.visit_counts[0].tolist() == [2, 0]
