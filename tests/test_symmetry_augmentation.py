"""Symmetry augmentation of learner batches (lzk_common.symmetry): a sample under a symmetry is the
same game seen rotated: its unrolled actions, observations, policy targets and legal masks move
together, and its values stay."""
from __future__ import annotations

import numpy as np

from lzk_common.symmetry import BatchSymmetries, batch_symmetries
from lzk_envs.openspiel import OpenSpielEnvSpec
from lzkernel import Batch


def test_an_augmented_unroll_is_the_transformed_game() -> None:
    spec = OpenSpielEnvSpec.load("tic_tac_toe")
    sim = spec.make_simulator()
    moves = [4, 0, 8, 2]  # a game prefix; unroll K = 3 from its first position
    states, obs, legal = [sim.new_state()], [], []
    view = sim.observe(states)
    obs.append(view.obs[0])
    legal.append(view.legal[0])
    for a in moves[:3]:
        view = sim.step(states, np.array([a]))
        obs.append(view.obs[0])
        legal.append(view.legal[0])
    pi = np.zeros((4, 9), np.float32)
    pi[np.arange(4), [4, 0, 8, 2]] = 1.0
    batch = Batch(obs=np.stack(obs)[None], actions=np.array([moves[:3]]), mask=np.ones((1, 4), np.float32),
                  target_reward=np.zeros((1, 3), np.float32), target_value=np.array([[0.5, -0.5, 0.5, -0.5]], np.float32),
                  target_policy=pi[None], weights=np.ones(1, np.float32), indices=np.zeros(1, np.int64),
                  to_play=np.array([[1, 2, 1, 2]]), legal=np.stack(legal)[None])
    class _Fixed:  # an rng that always picks symmetry g
        def __init__(self, g: int) -> None:
            self.g = g

        def integers(self, lo: int, hi: int, n: int) -> np.ndarray:
            return np.full(n, self.g)

    aug = BatchSymmetries(spec.symmetries(), np.random.default_rng(0))
    for g in range(1, 8):  # each symmetry in turn
        aug.rng = _Fixed(g)  # type: ignore[assignment]
        out = aug(batch)
        # Replay the transformed moves: the observations and legal masks must be the augmented ones.
        state = sim.new_state()
        view = sim.observe([state])
        np.testing.assert_array_equal(view.obs[0], out.obs[0, 0])
        for k, a in enumerate(out.actions[0]):
            assert out.target_policy[0, k, a] == 1.0  # the policy target moved with the move
            view = sim.step([state], np.array([a]))
            np.testing.assert_array_equal(view.obs[0], out.obs[0, k + 1])
            np.testing.assert_array_equal(view.legal[0], out.legal[0, k + 1])
        np.testing.assert_array_equal(out.target_value, batch.target_value)


def test_no_augmentation_without_symmetries() -> None:
    assert batch_symmetries(OpenSpielEnvSpec.load("breakthrough"), True, 0) is None
    assert batch_symmetries(OpenSpielEnvSpec.load("tic_tac_toe"), False, 0) is None
    assert batch_symmetries(OpenSpielEnvSpec.load("tic_tac_toe"), True, 0) is not None
