"""A small convolutional MuZero network for image observations [C, H, W] (board games, frames).

C' = latent channels (``latent_dim``), H'×W' the latent grid (H×W, or ⌈H/4⌉×⌈W/4⌉ with
``downsample``), A actions, R = ``num_res_blocks``.

    representation  [stride-2 conv ×2 |] conv3×3 → BN → ReLU, then R residual blocks  → [B, C', H', W']
    dynamics        x = s ‖ onehot(a) as A constant planes; next = relu(BN(conv3×3(x)) + s), R blocks
                    reward = MLP(flatten(relu(BN(conv1×1(next)))))
    prediction      R blocks; value/policy = MLP(flatten(relu(BN(conv1×1(·)))))  (zero-init last)

Deliberately modest (LightZero's Atari network has more options); the heads, zero-initialisation
and interface match the MLP model, so learner, policy and search adapter are shared.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from lzk_muzero.blocks import MuZeroNet, ResBlock, SSLHeads, mlp, norm2d
from lzk_muzero.config import MuZeroModelConfig


def _conv_bn_relu(c_in: int, c_out: int, norm: str, k: int = 3, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False), norm2d(norm, c_out), nn.ReLU()
    )


class MuZeroConv(MuZeroNet):
    """Conv MuZero model. ``obs_shape`` = stacked observation shape [C, H, W]."""

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int,
        cfg: MuZeroModelConfig,
        value_support_size: int,
        reward_support_size: int,
    ) -> None:
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"the conv model needs [C, H, W] observations, got {obs_shape}")
        c_in, h, w = obs_shape
        ch, norm = cfg.latent_dim, cfg.norm
        self.num_actions = num_actions
        self.value_support_size = value_support_size
        self.reward_support_size = reward_support_size

        stem: list[nn.Module] = []
        if cfg.downsample:
            half = max(ch // 2, 1)
            stem += [_conv_bn_relu(c_in, half, norm, stride=2), _conv_bn_relu(half, ch, norm, stride=2)]
            h, w = math.ceil(math.ceil(h / 2) / 2), math.ceil(math.ceil(w / 2) / 2)
        else:
            stem.append(_conv_bn_relu(c_in, ch, norm))
        blocks = lambda: [ResBlock(ch, norm) for _ in range(cfg.num_res_blocks)]  # noqa: E731
        self.representation = nn.Sequential(*stem, *blocks())
        self.latent_shape = (ch, h, w)

        # Dynamics: conv + BN, residual add of the input latent, ReLU, then residual blocks.
        self.dynamics_conv = nn.Sequential(
            nn.Conv2d(ch + num_actions, ch, 3, padding=1, bias=False), norm2d(norm, ch)
        )
        self.dynamics_blocks = nn.Sequential(*blocks())
        hc, flat = cfg.head_channels, cfg.head_channels * h * w
        self.reward_conv = _conv_bn_relu(ch, hc, norm, k=1)
        self.reward_head = mlp(flat, cfg.reward_head_hidden, reward_support_size, norm=norm, zero_last=True)

        self.prediction_blocks = nn.Sequential(*blocks())
        self.value_conv = _conv_bn_relu(ch, hc, norm, k=1)
        self.policy_conv = _conv_bn_relu(ch, hc, norm, k=1)
        self.value_head = mlp(flat, cfg.value_head_hidden, value_support_size, norm=norm, zero_last=True)
        self.policy_head = mlp(flat, cfg.policy_head_hidden, num_actions, norm=norm, zero_last=True)

        self.ssl = (
            SSLHeads(ch * h * w, cfg.proj_hidden, cfg.proj_out, cfg.pred_hidden, cfg.pred_out) if cfg.ssl else None
        )

    def represent(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [B, C, H, W] → latent [B, C', H', W']."""
        return self.representation(obs.float())

    def dynamics(self, latent: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(latent [B, C', H', W'], action [B]) → (next_latent, reward_logits [B, Nr])."""
        b, _, h, w = latent.shape
        planes = F.one_hot(action.long(), self.num_actions).to(latent.dtype)[:, :, None, None].expand(b, -1, h, w)
        x = torch.cat([latent, planes], dim=1)
        next_latent = self.dynamics_blocks(F.relu(self.dynamics_conv(x) + latent))
        return next_latent, self.reward_head(self.reward_conv(next_latent).flatten(1))

    def predict(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """latent [B, C', H', W'] → (value_logits [B, Nv], policy_logits [B, A])."""
        t = self.prediction_blocks(latent)
        return (
            self.value_head(self.value_conv(t).flatten(1)),
            self.policy_head(self.policy_conv(t).flatten(1)),
        )
