"""Training under a game's symmetries: each sampled position (with its unrolled steps) replaced by
a random rotation or reflection of the board (AlphaGo Zero's augmentation), for policies whose env
declares symmetries (:class:`lzkernel.SymmetricEnvSpec`).

For a symmetry (obs_index, action_index) — see :class:`lzkernel.Symmetry` — a sample becomes::

    obs[k]           → obs[k].flat[obs_index]            every step k = 0..K (one frame each)
    target_policy[k] → target_policy[k][action_index]    legal[k] likewise
    actions[k]       → σ(actions[k]), σ = action_index⁻¹ (the move that is actions[k] there)

values, rewards, value prefixes, masks and weights are unchanged (symmetric positions have the same values).

Shapes: B batch, K unroll steps, A actions, O observation shape, G symmetries.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from lzkernel import Batch, Symmetry


class BatchSymmetries:
    """Applies one random symmetry per sample to learner batches; ``rng`` is the policy's
    augmentation stream (checkpoint it with the policy)."""

    def __init__(self, symmetries: Sequence[Symmetry], rng: np.random.Generator) -> None:
        if len(symmetries) < 2:
            raise ValueError("BatchSymmetries needs the identity and at least one other symmetry")
        self.obs_index = np.stack([s.obs_index for s in symmetries])  # [G, prod(O)]
        self.action_index = np.stack([s.action_index for s in symmetries])  # [G, A]
        sigma = np.empty_like(self.action_index)
        np.put_along_axis(sigma, self.action_index, np.arange(self.action_index.shape[1])[None, :], axis=1)
        self.sigma = sigma  # [G, A]: sigma[g, a] = the move a becomes under symmetry g
        self.rng = rng

    def __call__(self, batch: Batch) -> Batch:
        B = len(batch)
        g = self.rng.integers(0, len(self.obs_index), B)  # [B] symmetry of each sample
        obs = np.asarray(batch.obs)  # [B, K+1, *O]
        if obs[0, 0].size != self.obs_index.shape[1]:
            raise ValueError(f"a symmetry permutes {self.obs_index.shape[1]} observation values, the batch has "
                             f"{obs[0, 0].size} per step (frame-stacked observations are not supported)")
        flat = obs.reshape(B, obs.shape[1], -1)
        moved = np.take_along_axis(flat, self.obs_index[g][:, None, :], axis=2).reshape(obs.shape)
        act = self.action_index[g][:, None, :]  # [B, 1, A]
        actions = np.asarray(batch.actions)
        # replace(), not Batch(...): every field the symmetry leaves alone (values, rewards, value
        # prefixes, masks, weights, ...) is carried through, including fields added later.
        return replace(batch, obs=moved,
                       actions=np.take_along_axis(self.sigma[g], actions, axis=1) if actions.size else actions,
                       target_policy=np.take_along_axis(np.asarray(batch.target_policy), act, axis=2),
                       legal=np.take_along_axis(np.asarray(batch.legal), act, axis=2))


def batch_symmetries(env_spec: object, enabled: bool, seed: int) -> BatchSymmetries | None:
    """The augmentation of a policy for ``env_spec`` (None when off or the game declares no
    symmetry beyond the identity)."""
    from lzkernel import SymmetricEnvSpec

    if not enabled or not isinstance(env_spec, SymmetricEnvSpec):
        return None
    syms = env_spec.symmetries()
    return BatchSymmetries(syms, np.random.default_rng([seed, 1])) if len(syms) > 1 else None
