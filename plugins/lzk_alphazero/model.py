"""The AlphaZero policy-value network: board planes [C, H, W] through a residual conv tower, or a
vector through an MLP trunk, then a policy head (logits over all A actions) and a value head
(a scalar in [−1, 1]).

    conv:  x [B, C, H, W] → conv3×3(C→ch)·BN·ReLU → res blocks → h [B, ch, H, W]
           policy = MLP(flatten(ReLU(BN(conv1×1(h → pc)))))             [B, A]
           value  = tanh(MLP(flatten(ReLU(BN(conv1×1(h → vc))))))       [B]
    mlp:   x [B, D] → (Linear·LayerNorm·ReLU)* → h [B, D'] → the same two MLP heads

Why a tanh value rather than a categorical support: outcomes are −1, 0 or +1 (board games), the
search backs them up without normalisation, and a bounded value keeps Q in the outcome's range
from the first update (LightZero's head is linear and unbounded). The last layer of each head
starts at zero: uniform priors and value 0 until the first update, so the first games are played
by the search alone.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from lzk_alphazero.config import AlphaZeroModelConfig


def _mlp(sizes: Sequence[int], out: int, norm: bool) -> nn.Sequential:
    """Linear layers through ``sizes`` (LayerNorm and ReLU between, when ``norm``; else ReLU),
    then a zero-initialised output layer of width ``out``."""
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), *( [nn.LayerNorm(b)] if norm else []), nn.ReLU()]
    last = nn.Linear(sizes[-1], out)
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)
    return nn.Sequential(*layers, last)


class ResBlock(nn.Module):
    """conv3×3·BN·ReLU·conv3×3·BN, plus the input, then ReLU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels),
                                  nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + x)


class AlphaZeroNet(nn.Module):
    """obs [B, *O] → (policy logits [B, A], value [B] in [−1, 1])."""

    def __init__(self, obs_shape: Sequence[int], num_actions: int, cfg: AlphaZeroModelConfig) -> None:
        super().__init__()
        obs_shape = tuple(int(d) for d in obs_shape)
        self.num_actions = int(num_actions)
        if cfg.type == "conv":
            if len(obs_shape) != 3:
                raise ValueError(f"the conv AlphaZero network needs [C, H, W] observations, got {obs_shape}; "
                                 f"use policy.model.type=mlp")
            c, h, w = obs_shape
            ch = cfg.channels
            self.trunk = nn.Sequential(nn.Conv2d(c, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch), nn.ReLU(),
                                       *[ResBlock(ch) for _ in range(cfg.num_res_blocks)])
            pc, vc = cfg.policy_head_channels, cfg.value_head_channels
            self.policy_conv = nn.Sequential(nn.Conv2d(ch, pc, 1, bias=False), nn.BatchNorm2d(pc), nn.ReLU(),
                                             nn.Flatten())
            self.value_conv = nn.Sequential(nn.Conv2d(ch, vc, 1, bias=False), nn.BatchNorm2d(vc), nn.ReLU(),
                                            nn.Flatten())
            policy_in, value_in = pc * h * w, vc * h * w
        else:
            d = int(math.prod(obs_shape))
            sizes = [d, *cfg.mlp_hidden]
            self.trunk = nn.Sequential(nn.Flatten(), *[m for a, b in zip(sizes[:-1], sizes[1:])
                                                       for m in (nn.Linear(a, b), nn.LayerNorm(b), nn.ReLU())])
            self.policy_conv = self.value_conv = nn.Identity()
            policy_in = value_in = sizes[-1]
        self.policy_head = _mlp([policy_in, *cfg.policy_head_hidden], self.num_actions, norm=False)
        self.value_head = _mlp([value_in, *cfg.value_head_hidden], 1, norm=True)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs)
        logits = self.policy_head(self.policy_conv(h))
        value = torch.tanh(self.value_head(self.value_conv(h)).squeeze(-1))
        return logits, value
