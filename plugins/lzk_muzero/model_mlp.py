"""MuZero MLP network for vector observations (SPEC §2.2, LightZero's CartPole model): the shared
:class:`~lzk_common.latent_models.LatentMLP` with a reward head on the transition features.

    reward = reward_head(fc2(next))   (residual dynamics; plain: reward_head(next))
    reward_head = Linear(D, 32) → BN → ReLU → Linear(32, Nr)*   (* zero-initialised)

Zero-initialised head outputs give uniform logits, so initial rewards decode to exactly 0.
"""
from __future__ import annotations

import torch

from lzk_common.blocks import mlp
from lzk_common.latent_models import LatentMLP
from lzk_common.options import LatentModelOptions
from lzk_muzero.net import MuZeroNet


class MuZeroMLP(LatentMLP, MuZeroNet):
    """The MLP MuZero model. ``obs_shape`` is the stacked observation shape (flattened inside)."""

    def _build_transition_head(self, cfg: LatentModelOptions, features: int) -> None:
        self.reward_head = mlp(features, cfg.reward_head_hidden, self.reward_support_size, norm=cfg.norm,
                               zero_last=True)

    def dynamics(self, latent: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(latent [B, D], action [B]) → (next_latent [B, D], reward_logits [B, Nr])."""
        next_latent, features = self.transition(latent, action)
        return next_latent, self.reward_head(features)
