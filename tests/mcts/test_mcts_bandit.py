"""Bandit cases with a known best arm: the most visited root action must be it."""
from __future__ import annotations

import numpy as np
import pytest

from lzk_mcts import SearchConfig
from mcts_fakes import search


class ArmModel:
    """Every state below root action a is worth ``outcome[a]`` to the root player: a value of
    outcome[a] at even depths and −outcome[a] at odd depths in two-player mode (values are from
    the point of view of the player to move), outcome[a] everywhere in single-player mode.
    Rewards are ``reward[a]`` on the root edge, 0 deeper."""

    def __init__(self, batch: int, outcome, reward=None, two_player: bool = False) -> None:
        self.outcome = np.asarray(outcome, np.float32)
        self.reward = np.zeros_like(self.outcome) if reward is None else np.asarray(reward, np.float32)
        self.two_player = two_player
        self.arm = [{} for _ in range(batch)]  # node -> (root action, depth)

    def __call__(self, batch_idx, parent_node, action, new_node):
        n = len(batch_idx)
        rewards = np.zeros(n, np.float32)
        values = np.zeros(n, np.float32)
        for j, (b, p, a) in enumerate(zip(batch_idx, parent_node, action)):
            arm, depth = (int(a), 1) if p == 0 else (self.arm[b][int(p)][0], self.arm[b][int(p)][1] + 1)
            self.arm[b][new_node] = (arm, depth)
            rewards[j] = self.reward[arm] if depth == 1 else 0.0
            sign = -1.0 if self.two_player and depth % 2 == 1 else 1.0
            values[j] = sign * self.outcome[arm]
        return rewards, values, np.zeros((n, len(self.outcome)), np.float32)


@pytest.mark.parametrize("deterministic", [True, False])
def test_single_player_best_reward_arm(deterministic: bool) -> None:
    B, A = 4, 4
    model = ArmModel(B, outcome=np.zeros(A), reward=[0.1, 0.5, 0.9, 0.3])
    res = search(model, np.zeros((B, A), np.float32), np.ones((B, A), bool), np.full(B, -1),
                 SearchConfig(num_simulations=50), np.random.default_rng(0), add_noise=not deterministic,
                 deterministic=deterministic)
    assert (res.visit_counts.argmax(axis=1) == 2).all()
    assert (res.root_value > 0.5).all()


def test_single_player_best_value_arm_even_when_illegal_arm_is_better() -> None:
    B, A = 2, 4
    legal = np.array([[True, True, True, True], [True, True, True, False]])
    model = ArmModel(B, outcome=[-0.5, 0.8, -0.2, 0.9])
    res = search(model, np.zeros((B, A), np.float32), legal, np.full(B, -1), SearchConfig(num_simulations=40),
                 np.random.default_rng(0), add_noise=False, deterministic=True)
    assert res.visit_counts.argmax(axis=1).tolist() == [3, 1]


def test_two_player_signs() -> None:
    """The same child values, seen from the opponent: the root player must pick the arm whose
    child value is lowest for the opponent (arm 1), not the highest raw value (arm 3)."""
    B, A = 2, 4
    outcome = np.array([-0.5, 0.8, -0.2, -0.9])  # worth to the root player
    cfg = SearchConfig(num_simulations=60)
    model = ArmModel(B, outcome=outcome, two_player=True)
    # depth-1 nets return -outcome = [0.5, -0.8, 0.2, 0.9] (the opponent's view)
    res = search(model, np.zeros((B, A), np.float32), np.ones((B, A), bool), np.array([1, 2]), cfg,
                 np.random.default_rng(0), add_noise=False, deterministic=True)
    assert (res.visit_counts.argmax(axis=1) == 1).all()
    assert (res.root_value > 0.4).all()  # the root value is from the root player's point of view
    # Single-player reading of the same depth-1 values picks arm 3 instead.
    single = ArmModel(B, outcome=-outcome)
    res1 = search(single, np.zeros((B, A), np.float32), np.ones((B, A), bool), np.full(B, -1), cfg,
                  np.random.default_rng(0), add_noise=False, deterministic=True)
    assert (res1.visit_counts.argmax(axis=1) == 3).all()
