"""EfficientZero MLP network for vector observations (addendum C.2, LightZero's CartPole model):
the shared :class:`~lzk_common.latent_models.LatentMLP` (SimNorm-ended representation by
default) with an LSTM on the transition features and a value-prefix head on its output.

    features   = fc2(next)          (residual dynamics; plain: next)           [B, D]
    h', c'     = LSTMCell(features, (h, c))                                   [B, Hd] each
    prefix     = value_prefix_head(h') = Linear(Hd, 32) → BN → ReLU → Linear(32, Nr)*

(* zero-initialised: initial prefixes decode to exactly 0.) As in LightZero's MLP there is no
norm or activation between the LSTM and the head (its conv model has BN → ReLU there).
"""
from __future__ import annotations

import torch
from torch import nn

from lzk_common.blocks import mlp
from lzk_common.latent_models import LatentMLP
from lzk_common.options import LatentModelOptions
from lzk_efficientzero.net import EfficientZeroNet, State


class EfficientZeroMLP(LatentMLP, EfficientZeroNet):
    """The MLP EfficientZero model. ``obs_shape`` is the stacked observation shape."""

    def _build_transition_head(self, cfg: LatentModelOptions, features: int) -> None:
        self.lstm_hidden = int(cfg.lstm_hidden)
        self.lstm = nn.LSTMCell(features, self.lstm_hidden)
        self.value_prefix_head = mlp(self.lstm_hidden, cfg.reward_head_hidden, self.reward_support_size,
                                     norm=cfg.norm, zero_last=True)

    def dynamics(self, latent: torch.Tensor, state: State, action: torch.Tensor
                 ) -> tuple[torch.Tensor, State, torch.Tensor]:
        """(latent [B, D], state, action [B]) → (next_latent [B, D], next state, prefix logits [B, Nr])."""
        next_latent, features = self.transition(latent, action)
        h, c = self.lstm(features, state)
        return next_latent, (h, c), self.value_prefix_head(h)
