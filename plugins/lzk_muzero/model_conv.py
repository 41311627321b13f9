"""A small convolutional MuZero network for image observations [C, H, W] (board games, frames):
the shared :class:`~lzk_common.latent_models.LatentConv` with a reward head on the next latent.

    reward = MLP(flatten(relu(BN(conv1×1(next)))))   (zero-initialised last layer)
"""
from __future__ import annotations

import torch

from lzk_common.blocks import mlp
from lzk_common.latent_models import LatentConv, conv_bn_relu
from lzk_common.options import LatentModelOptions
from lzk_muzero.net import MuZeroNet


class MuZeroConv(LatentConv, MuZeroNet):
    """Conv MuZero model. ``obs_shape`` = stacked observation shape [C, H, W]."""

    def _build_transition_head(self, cfg: LatentModelOptions, channels: int, head_channels: int, flat: int) -> None:
        self.reward_conv = conv_bn_relu(channels, head_channels, cfg.norm, k=1)
        self.reward_head = mlp(flat, cfg.reward_head_hidden, self.reward_support_size, norm=cfg.norm, zero_last=True)

    def dynamics(self, latent: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(latent [B, C', H', W'], action [B]) → (next_latent, reward_logits [B, Nr])."""
        next_latent = self.next_latent(latent, action)
        return next_latent, self.reward_head(self.reward_conv(next_latent).flatten(1))
