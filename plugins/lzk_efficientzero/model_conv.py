"""A small convolutional EfficientZero network for image observations [C, H, W] (addendum C.1):
the shared :class:`~lzk_common.latent_models.LatentConv` with the value-prefix branch on the
next latent::

    x          = flatten(relu(BN(conv1×1(next))))                            [B, hc·H'·W']
    h', c'     = LSTMCell(x, (h, c))                                         [B, Hd] each
    prefix     = value_prefix_head(relu(BN(h')))     (MLP, zero-initialised last layer)
"""
from __future__ import annotations

import torch
from torch import nn

from lzk_common.blocks import mlp, norm1d
from lzk_common.latent_models import LatentConv, conv_bn_relu
from lzk_common.options import LatentModelOptions
from lzk_efficientzero.net import EfficientZeroNet, State


class EfficientZeroConv(LatentConv, EfficientZeroNet):
    """Conv EfficientZero model. ``obs_shape`` = stacked observation shape [C, H, W]."""

    def _build_transition_head(self, cfg: LatentModelOptions, channels: int, head_channels: int, flat: int) -> None:
        self.lstm_hidden = int(cfg.lstm_hidden)
        self.value_prefix_conv = conv_bn_relu(channels, head_channels, cfg.norm, k=1)
        self.lstm = nn.LSTMCell(flat, self.lstm_hidden)
        # BN (LightZero: always BN here) → ReLU on the LSTM output; not folded for search (no
        # Linear before it), so it runs as eval-mode BN there.
        self.lstm_out = nn.Sequential(norm1d("BN", self.lstm_hidden), nn.ReLU())
        self.value_prefix_head = mlp(self.lstm_hidden, cfg.reward_head_hidden, self.reward_support_size,
                                     norm=cfg.norm, zero_last=True)

    def dynamics(self, latent: torch.Tensor, state: State, action: torch.Tensor
                 ) -> tuple[torch.Tensor, State, torch.Tensor]:
        """(latent [B, C', H', W'], state, action [B]) → (next_latent, next state, prefix logits [B, Nr])."""
        next_latent = self.next_latent(latent, action)
        h, c = self.lstm(self.value_prefix_conv(next_latent).flatten(1), state)
        return next_latent, (h, c), self.value_prefix_head(self.lstm_out(h))
