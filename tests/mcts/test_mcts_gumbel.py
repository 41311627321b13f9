"""Gumbel MuZero search (``SearchConfig(algorithm="gumbel")``): the Sequential Halving schedule,
agreement with a per-node pure-Python reference, the improved policy target, bandits, noise and
ReZero reuse."""
from __future__ import annotations

import numpy as np
import pytest

import lzk_mcts
from gumbel_reference import halving_schedule, reference_gumbel_search
from lzk_mcts import SearchConfig
from lzk_mcts.gumbel import considered_visits
from mcts_fakes import FakeModel, as_step
from test_mcts_bandit import ArmModel


def _gumbel(S: int = 25, **kw) -> SearchConfig:
    return SearchConfig(num_simulations=S, algorithm="gumbel", **kw)


def _search(model, logits, legal, to_play, cfg, seed=0, add_noise=True, root_value=None, **kw):
    B = logits.shape[0]
    rv = np.zeros(B, np.float32) if root_value is None else root_value
    return lzk_mcts.search(as_step(model, B), logits, legal, to_play, cfg, np.random.default_rng(seed),
                           add_noise=add_noise, deterministic=not add_noise, root_value=rv, **kw)


@pytest.mark.parametrize("m,S", [(1, 5), (2, 25), (3, 10), (4, 8), (16, 25), (5, 50), (8, 7)])
def test_schedule_matches_an_independent_construction_and_is_feasible(m: int, S: int) -> None:
    seq = considered_visits(m, S)
    assert seq == halving_schedule(m, S)
    assert len(seq) == S
    if m >= 2:  # the first m simulations visit m distinct actions once each
        assert seq[:min(m, S)] == [0] * min(m, S)
    # Feasible: replaying it, the wanted count is always held by some action (the best ones first).
    counts = [0] * max(m, 1)
    for wanted in seq:
        i = counts.index(wanted)
        counts[i] += 1
    assert sum(counts) == S


def test_schedule_by_hand() -> None:
    assert considered_visits(4, 8) == [0, 0, 0, 0, 1, 1, 2, 2]
    assert considered_visits(2, 6) == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("rescale", ["node", "tree"])
@pytest.mark.parametrize("two_player", [False, True])
@pytest.mark.parametrize("A,m,S", [(2, 16, 25), (5, 4, 30), (6, 16, 12)])
def test_batched_gumbel_search_matches_reference(two_player: bool, A: int, m: int, S: int, rescale: str) -> None:
    B = 5
    model = FakeModel(A, row_ids=range(B), seed=3)
    rng = np.random.default_rng(11)
    logits = rng.normal(size=(B, A)).astype(np.float32)
    legal = np.ones((B, A), bool)
    legal[1, 0] = False
    legal[2, 1:3] = False
    root_value = rng.uniform(-1, 1, size=B).astype(np.float32)
    to_play = np.full(B, 1 if two_player else -1)
    cfg = _gumbel(S, gumbel_max_considered=m, gumbel_rescale=rescale)
    res = _search(model, logits, legal, to_play, cfg, seed=7, root_value=root_value)
    gumbel = np.random.default_rng(7).gumbel(size=(B, A))
    for b in range(B):
        counts, policy, action = reference_gumbel_search(model.reference_model(b), logits[b], float(root_value[b]),
                                                         legal[b], gumbel[b], cfg, two_player)
        assert res.visit_counts[b].tolist() == counts
        np.testing.assert_allclose(res.policy_target[b], policy, rtol=1e-5, atol=1e-7)
        assert res.action[b] == action
    assert (res.visit_counts.sum(axis=1) == S).all()
    assert (res.visit_counts[~legal] == 0).all() and (res.policy_target[~legal] == 0).all()
    np.testing.assert_allclose(res.policy_target.sum(axis=1), 1.0, rtol=1e-5)


def test_only_the_considered_actions_are_visited() -> None:
    B, A, m = 3, 8, 4
    model = FakeModel(A, row_ids=range(B))
    res = _search(model, np.zeros((B, A), np.float32), np.ones((B, A), bool), np.full(B, -1),
                  _gumbel(20, gumbel_max_considered=m))
    assert ((res.visit_counts > 0).sum(axis=1) == m).all()


@pytest.mark.parametrize("add_noise", [False, True])
def test_bandit_best_arm_wins_and_the_target_is_sharp(add_noise: bool) -> None:
    """Two arms worth 0.6 and 0.4 with equal priors: 25 simulations split about evenly (the visit
    target would be ≈ [0.5, 0.5]) but the improved policy puts nearly all mass on the better arm."""
    B, A = 16, 2
    model = ArmModel(B, outcome=[0.4, 0.6])
    res = _search(model, np.zeros((B, A), np.float32), np.ones((B, A), bool), np.full(B, -1), _gumbel(25),
                  add_noise=add_noise, root_value=np.full(B, 0.5, np.float32))
    assert (np.abs(res.visit_counts[:, 0] - res.visit_counts[:, 1]) <= 1).all()
    assert (res.policy_target[:, 1] > 0.99).all()
    assert (res.action == 1).all()


def test_two_player_picks_the_arm_worst_for_the_opponent() -> None:
    B, A = 4, 4
    model = ArmModel(B, outcome=[-0.5, 0.8, -0.2, -0.9], two_player=True)
    res = _search(model, np.zeros((B, A), np.float32), np.ones((B, A), bool), np.full(B, 1), _gumbel(40),
                  add_noise=False)
    assert (res.action == 1).all()
    assert (res.policy_target.argmax(axis=1) == 1).all()


def test_noise_is_seeded_and_changes_the_search() -> None:
    B, A = 6, 5
    logits = np.zeros((B, A), np.float32)
    legal = np.ones((B, A), bool)

    def run(seed: int, noise: bool = True):
        return _search(FakeModel(A, range(B)), logits, legal, np.full(B, -1), _gumbel(12, gumbel_max_considered=2),
                       seed=seed, add_noise=noise)

    a, b, c = run(1), run(1), run(2)
    assert (a.visit_counts == b.visit_counts).all() and (a.action == b.action).all()
    assert not (a.visit_counts == c.visit_counts).all()  # other Gumbel draws consider other actions
    # No noise: every equal-prior root considers the first two actions (ties go to the first).
    quiet = run(1, noise=False)
    assert (quiet.visit_counts[:, 2:] == 0).all()


def test_rezero_reuse_stops_at_depth_one() -> None:
    B, A = 3, 3
    model = FakeModel(A, range(B))
    ta = np.array([0, 2, -1])
    res = _search(model, np.zeros((B, A), np.float32), np.ones((B, A), bool), np.full(B, -1), _gumbel(15),
                  true_action=ta, reuse_value=np.array([0.3, -0.2, 0.0], np.float32), keep_tree=True)
    t = res.tree
    for b in (0, 1):
        child = t.children[b, 0, ta[b]]
        assert child >= 0 and (t.children[b, child] < 0).all()  # visited, never expanded below
        assert t.visit[b, child] == res.visit_counts[b, ta[b]] > 1
        np.testing.assert_allclose(t.value_sum[b, child] / t.visit[b, child], [0.3, -0.2][b], rtol=1e-6)
    assert res.visit_counts.sum() == 3 * 15


def test_gumbel_needs_the_root_value() -> None:
    with pytest.raises(ValueError, match="root_value"):
        lzk_mcts.search(as_step(FakeModel(2, [0]), 1), np.zeros((1, 2), np.float32), np.ones((1, 2), bool),
                        np.full(1, -1), _gumbel(4), np.random.default_rng(0), add_noise=False, deterministic=True)


def test_config_rejects_unknown_algorithm() -> None:
    with pytest.raises(ValueError, match="algorithm"):
        SearchConfig(algorithm="alphago")


def test_tree_rescale_keeps_the_size_of_a_two_action_q_difference() -> None:
    """Two actions: rescaled by their own min and max, any Q difference is a full σ step (the
    improved policy near one-hot whatever the gap); rescaled by the tree's range (here widened by
    the root's own Q), a small gap stays a small step and a larger gap makes a larger one."""
    gaps: dict[str, list[float]] = {"node": [], "tree": []}
    for rescale in gaps:
        for gap in (0.05, 0.5):
            model = ArmModel(1, outcome=[5.0, 5.0], reward=[0.0, gap])
            res = _search(model, np.zeros((1, 2), np.float32), np.ones((1, 2), bool), np.full(1, -1),
                          _gumbel(25, gumbel_rescale=rescale), add_noise=False)
            gaps[rescale].append(float(res.policy_target[0, 1] - res.policy_target[0, 0]))
    assert min(gaps["node"]) > 0.99
    assert 0.0 < gaps["tree"][0] < gaps["tree"][1] < 0.99
    assert gaps["tree"][0] < 0.2


def test_gumbel_rescale_is_validated() -> None:
    with pytest.raises(ValueError, match="gumbel_rescale"):
        _gumbel(gumbel_rescale="global")


@pytest.mark.parametrize("illegal,visits,action", [([1, 0, 0, 1], [0, 9, 8, 0], 1), ([0, 0, 0, 0], [6, 2, 2, 7], 3)])
def test_mctx_published_bandit_expectations(illegal: list[int], visits: list[int], action: int) -> None:
    """mctx's own unit tests of ``gumbel_muzero_policy`` (``test_gumbel_muzero_policy`` and its
    ``_without_invalid_actions`` twin): a terminal bandit (reward = rewards[a], discount 0, value 0),
    logits [0, -1, 2, 3], rewards [20, 3, -1, 10], 17 simulations, c_visit 60, c_scale 0.05, root
    value -5. mctx asserts these visit counts and actions (they do not depend on its Gumbel draw
    here, so g = 0 reproduces them); where every action is legal, its improved policy is
    softmax(logits + σ(q̂)) with the completed Qs rescaled over the actions."""
    from lzk_mcts import StepOutput

    logits = np.array([[0.0, -1.0, 2.0, 3.0]], np.float32)
    rewards = np.array([20.0, 3.0, -1.0, 10.0])
    legal = ~np.asarray(illegal, bool)[None]

    def bandit(parent_slot: np.ndarray, actions: np.ndarray, child_slot: np.ndarray) -> StepOutput:
        n = len(actions)
        return StepOutput(reward=rewards.astype(np.float32)[actions], value=np.zeros(n, np.float32),
                          prior_logits=np.zeros((n, 4), np.float32), discount=np.zeros(n))

    cfg = SearchConfig(num_simulations=17, algorithm="gumbel", gumbel_maxvisit_init=60.0, gumbel_value_scale=0.05,
                       discount=0.997)
    res = lzk_mcts.search(bandit, logits, legal, np.array([-1]), cfg, np.random.default_rng(0), add_noise=False,
                          deterministic=True, root_value=np.array([-5.0], np.float32))
    n = res.visit_counts[0]
    assert n.tolist() == visits and int(res.action[0]) == action
    if legal.all():  # mctx's expected policy, by its formula with these visits
        prior = np.exp(logits[0] - logits[0].max()) / np.exp(logits[0] - logits[0].max()).sum()
        mixed = (-5.0 + n.sum() * (prior * rewards)[n > 0].sum() / prior[n > 0].sum()) / (n.sum() + 1)
        q = np.where(n > 0, rewards, mixed)
        z = logits[0] + (60.0 + n.max()) * 0.05 * (q - q.min()) / (q.max() - q.min())
        np.testing.assert_allclose(res.policy_target[0], np.exp(z - z.max()) / np.exp(z - z.max()).sum(), atol=1e-6)
