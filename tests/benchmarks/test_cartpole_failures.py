"""``cartpole_failures.py``: the classification of CartPole episode ends and the greedy play loop
(with scripted policies whose failure mode is known)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

import cartpole_failures as cf


class Scripted:
    """A policy whose action is a function of the observation; counts resets."""

    def __init__(self, rule: Any) -> None:
        self.rule, self.resets = rule, 0

    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, **kw: Any) -> SimpleNamespace:
        assert kw["mode"] == "eval" and obs.shape == (1, 4) and legal.all()
        return SimpleNamespace(action=np.array([self.rule(obs[0])]))

    def reset_envs(self, env_ids: list[int], mode: str) -> None:
        self.resets += 1


def test_end_cause() -> None:
    assert cf.end_cause(np.array([2.41, 0.0, 0.0, 0.0])) == "track"
    assert cf.end_cause(np.array([-2.41, 0.0, 0.0, 0.0])) == "track"
    assert cf.end_cause(np.array([0.0, 0.0, -0.21, 0.0])) == "pole"
    assert cf.end_cause(np.array([1.0, 0.0, 0.1, 0.0])) == "time"
    assert cf.end_cause(np.array([cf.X_LIMIT, 0.0, cf.THETA_LIMIT, 0.0])) == "time"  # at, not past, the limits


def test_constant_push_drops_the_pole() -> None:
    policy = Scripted(lambda o: 1)
    episodes = cf.play(policy, "CartPole-v0", 3)
    assert policy.resets == 3
    assert all(e["end"] == "pole" and e["length"] < 30 for e in episodes)
    assert all(e["mean_x"] > 0 for e in episodes)  # pushed right


def test_angle_controller_balances_and_the_summary_counts() -> None:
    # Push towards the side the pole leans to (θ + θ̇): it stays up, the cart wanders.
    episodes = cf.play(Scripted(lambda o: int(o[2] + 0.5 * o[3] > 0)), "CartPole-v0", 4)
    row = cf.summarise("ckpt", {"train_iter": 7, "env_steps": 99}, episodes)
    assert row["ends"]["pole"] == 0 and sum(row["ends"].values()) == 4
    assert row["length_mean"] > 100 and row["train_iter"] == 7
