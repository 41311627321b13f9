"""Symmetry augmentation of learner batches (lzk_common.symmetry): a sample under a symmetry is the
same game seen rotated: its unrolled actions, observations, policy targets and legal masks move
together, and its values stay."""
from __future__ import annotations

import numpy as np

from lzk_common.symmetry import BatchSymmetries, batch_symmetries
from lzk_envs.openspiel import OpenSpielEnvSpec
from lzkernel import Batch, Symmetry


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


def _random_batch(rng: np.random.Generator, B: int, K: int, A: int) -> Batch:
    return Batch(obs=rng.random((B, K + 1, A), dtype=np.float32), actions=rng.integers(0, A, (B, K)),
                 mask=np.ones((B, K + 1), np.float32), target_reward=rng.random((B, K), dtype=np.float32),
                 target_value=rng.random((B, K + 1), dtype=np.float32),
                 target_policy=np.full((B, K + 1, A), 1 / A, np.float32), weights=rng.random(B, dtype=np.float32),
                 indices=np.arange(B), to_play=-np.ones((B, K + 1), np.int64), legal=np.ones((B, K + 1, A), bool),
                 target_value_prefix=rng.random((B, K), dtype=np.float32))


def _flip_symmetries() -> BatchSymmetries:
    """The identity and the reversal of a 9-cell row (observations: one value per cell)."""
    flip = np.arange(9)[::-1].copy()
    return BatchSymmetries([Symmetry(np.arange(9), np.arange(9)), Symmetry(flip, flip)], np.random.default_rng(0))


def test_fields_a_symmetry_leaves_alone_are_carried_through() -> None:
    """Every Batch field but the moved ones (obs, actions, policy targets, legal masks) is the
    input's own: EfficientZero's value-prefix targets were once dropped here, so its first
    learner step under augmentation raised."""
    import dataclasses

    aug = _flip_symmetries()
    batch = _random_batch(np.random.default_rng(1), B=16, K=3, A=9)
    out = aug(batch)
    moved = {"obs", "actions", "target_policy", "legal"}
    for field in dataclasses.fields(Batch):
        if field.name not in moved:
            assert getattr(out, field.name) is getattr(batch, field.name), field.name


def test_efficientzero_learns_under_symmetry_augmentation() -> None:
    import torch

    from lzk_efficientzero.config import EfficientZeroModelConfig, EfficientZeroPolicyConfig
    from lzk_efficientzero.policy import EfficientZeroPolicy

    torch.set_num_threads(1)
    aug = _flip_symmetries()
    batch = _random_batch(np.random.default_rng(2), B=8, K=5, A=9)
    cfg = EfficientZeroPolicyConfig(model=EfficientZeroModelConfig(latent_dim=16, lstm_hidden=8), num_simulations=2,
                                    batch_size=8)
    policy = EfficientZeroPolicy(cfg, (9,), 9, seed=0, symmetries=aug)
    metrics, _ = policy.learn(batch)
    assert np.isfinite(metrics["train/loss_value_prefix"]) and metrics["train/loss_value_prefix"] > 0
