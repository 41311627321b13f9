"""MuZero MLP network for vector observations (SPEC §2.2, LightZero's CartPole model).

D = latent_dim, A = actions, Nr/Nv = reward/value support sizes, O = flattened (stacked) obs.

    representation  obs [B, O] → Linear(O, D) → BN → GELU(tanh) → Linear(D, D)* → LayerNorm(D)
    dynamics        x = s ‖ onehot(a)                        [B, D + A]
      residual      next = fc1(x) + s;  r = reward_head(fc2(next))
      plain         next = fc(x);       r = reward_head(next)
                    fc* = Linear → BN → ReLU → Linear → BN → ReLU (D wide)
    prediction      t = trunk(s) (same shape as fc*); value_head(t) [B, Nv]; policy_head(t) [B, A]
    heads           Linear(D, 32) → BN → ReLU → Linear(32, ·)*
(* = zero-initialised.) Because the representation's last Linear is zero-initialised, initial
latents are exactly 0 (LayerNorm of a constant row is its bias, 0); zero-initialised head outputs
give uniform logits, so initial values and rewards decode to 0 and the policy is uniform.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from lzk_muzero.blocks import MuZeroNet, SSLHeads, mlp, norm1d
from lzk_muzero.config import MuZeroModelConfig


class MuZeroMLP(MuZeroNet):
    """The MLP MuZero model. ``obs_shape`` is the stacked observation shape (flattened inside)."""

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int,
        cfg: MuZeroModelConfig,
        value_support_size: int,
        reward_support_size: int,
    ) -> None:
        super().__init__()
        d = cfg.latent_dim
        obs_dim = int(math.prod(obs_shape))
        self.num_actions = num_actions
        self.latent_shape = (d,)
        self.value_support_size = value_support_size
        self.reward_support_size = reward_support_size
        self.res_connection = cfg.res_connection_in_dynamics
        norm = cfg.norm

        self.representation = nn.Sequential(
            nn.Linear(obs_dim, d), norm1d(norm, d), nn.GELU(approximate="tanh"),
            nn.Linear(d, d), nn.LayerNorm(d),
        )
        nn.init.zeros_(self.representation[3].weight)
        nn.init.zeros_(self.representation[3].bias)

        def trunk(in_dim: int) -> nn.Sequential:
            return mlp(in_dim, [d], d, norm=norm, output_norm_act=True)

        if self.res_connection:
            self.fc_dynamics_1 = trunk(d + num_actions)
            self.fc_dynamics_2 = trunk(d)
        else:
            self.fc_dynamics = trunk(d + num_actions)
        self.reward_head = mlp(d, cfg.reward_head_hidden, reward_support_size, norm=norm, zero_last=True)

        self.prediction_trunk = trunk(d)
        self.value_head = mlp(d, cfg.value_head_hidden, value_support_size, norm=norm, zero_last=True)
        self.policy_head = mlp(d, cfg.policy_head_hidden, num_actions, norm=norm, zero_last=True)

        self.ssl = (
            SSLHeads(d, cfg.proj_hidden, cfg.proj_out, cfg.pred_hidden, cfg.pred_out) if cfg.ssl else None
        )

    def represent(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [B, *O'] → latent [B, D]."""
        return self.representation(obs.flatten(1).float())

    def dynamics(self, latent: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(latent [B, D], action [B]) → (next_latent [B, D], reward_logits [B, Nr])."""
        onehot = F.one_hot(action.long(), self.num_actions).to(latent.dtype)
        x = torch.cat([latent, onehot], dim=1)
        if self.res_connection:
            # The returned latent is the pre-fc2 sum; fc2 only feeds the reward head.
            next_latent = self.fc_dynamics_1(x) + latent
            return next_latent, self.reward_head(self.fc_dynamics_2(next_latent))
        next_latent = self.fc_dynamics(x)
        return next_latent, self.reward_head(next_latent)

    def predict(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """latent [B, D] → (value_logits [B, Nv], policy_logits [B, A])."""
        t = self.prediction_trunk(latent)
        return self.value_head(t), self.policy_head(t)
