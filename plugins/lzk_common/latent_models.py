"""The networks MuZero and EfficientZero share: representation, dynamics trunk and prediction,
as an MLP for vector observations and a small conv net for images. What follows the dynamics
trunk on the reward support (MuZero: a reward head; EfficientZero: an LSTM and a value-prefix
head) is the algorithm's, built by :meth:`_build_transition_head` at a fixed point of the
constructor, so the parameter order (and so the initial weights drawn from torch's RNG) is
representation, dynamics, transition head, prediction, SSL.

MLP (SPEC §2.2, LightZero's CartPole model). D = latent_dim, A = actions, O = flattened obs::

    representation  obs [B, O] → Linear(O, D) → BN → GELU(tanh) → Linear(D, D)* → LN | SimNorm
    transition      x = s ‖ onehot(a)                        [B, D + A]
      residual      next = fc1(x) + s;  features = fc2(next)
      plain         next = fc(x);       features = next
                    fc* = Linear → BN → ReLU → Linear → BN → ReLU (D wide)
    prediction      t = trunk(s) (same shape as fc*); value_head(t) [B, Nv]; policy_head(t) [B, A]
    heads           Linear(D, 32) → BN → ReLU → Linear(32, ·)*

Conv, for image observations [C, H, W] (C' = latent channels, H'×W' the latent grid, R res blocks)::

    representation  stem, then R residual blocks                                       → [B, C', H', W']
      plain         conv3×3 → BN → ReLU                                  (H' = H)
      downsample    LightZero's Atari DownSample: conv3×3 s2 (C → C'/2) → BN → ReLU, ResBlock(C'/2),
                    downsampling ResBlock (C'/2 → C', s2), ResBlock(C'), AvgPool(3, s2, p1),
                    ResBlock(C'), and a second AvgPool when H > 64  (H' = ⌈H/8⌉, ⌈H/16⌉ above 64:
                    64 → 8, 84 and 96 → 6)
    transition      x = s ‖ onehot(a) as A constant planes; next = relu(BN(conv3×3(x)) + s), R blocks
                    (the head on next, e.g. MLP(flatten(relu(BN(conv1×1(next))))), is the subclass's)
    prediction      R blocks; value/policy = MLP(flatten(relu(BN(conv1×1(·)))))

(* = zero-initialised.) Zero-initialised head outputs give uniform logits, so initial values
decode to 0 and the policy is uniform; the zero-initialised last representation layer makes the
initial latents constant (0 after LayerNorm, 1/group after SimNorm).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from lzk_common.blocks import LatentNet, ResBlock, SimNorm, SSLHeads, mlp, norm1d, norm2d
from lzk_common.options import LatentModelOptions


def conv_bn_relu(c_in: int, c_out: int, norm: str, k: int = 3, stride: int = 1) -> nn.Sequential:
    """Conv(k×k, no bias) → BN/GroupNorm → ReLU."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False), norm2d(norm, c_out), nn.ReLU()
    )


class DownsampleResBlock(nn.Module):
    """A residual block that halves the grid and maps C_in → C_out channels:
    relu(body(x) + shortcut(x)), body = conv3×3 s2 → BN → ReLU → conv3×3 → BN, shortcut = conv3×3
    s2 without a norm (LightZero's ``res_type='downsample'`` block). [B, C_in, H, W] → [B, C_out, ⌈H/2⌉, ⌈W/2⌉]."""

    def __init__(self, c_in: int, c_out: int, norm: str = "BN") -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False), norm2d(norm, c_out), nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), norm2d(norm, c_out),
        )
        self.shortcut = nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


def downsample_stem(c_in: int, channels: int, norm: str, height: int) -> list[nn.Module]:
    """LightZero's Atari ``DownSample`` (module docstring) for frames ``height`` pixels high:
    [B, c_in, H, W] → [B, channels, H', W'], H' = ⌈H/8⌉, or ⌈H/16⌉ when H > 64 (LightZero pools
    twice for its 84 and 96 frames, once for 64, and refuses other sizes; here any size works).
    Every stride-2 step (conv or AvgPool(3, 2, 1), padding counted) maps n → ⌈n/2⌉."""
    half = max(channels // 2, 1)
    pool = lambda: nn.AvgPool2d(kernel_size=3, stride=2, padding=1)  # noqa: E731
    stem: list[nn.Module] = [
        conv_bn_relu(c_in, half, norm, stride=2), ResBlock(half, norm), DownsampleResBlock(half, channels, norm),
        ResBlock(channels, norm), pool(), ResBlock(channels, norm),
    ]
    if height > 64:
        stem.append(pool())
    return stem


class LatentMLP(LatentNet):
    """The MLP of the module docstring. ``obs_shape`` is the stacked observation shape
    (flattened inside); ``reward_support_size`` sizes the subclass's transition head."""

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, cfg: LatentModelOptions,
                 value_support_size: int, reward_support_size: int) -> None:
        super().__init__()
        d = cfg.latent_dim
        obs_dim = int(math.prod(obs_shape))
        self.num_actions = num_actions
        self.latent_shape = (d,)
        self.value_support_size = value_support_size
        self.reward_support_size = reward_support_size
        self.res_connection = cfg.res_connection_in_dynamics
        norm = cfg.norm

        final = nn.LayerNorm(d) if cfg.latent_norm == "LN" else SimNorm(cfg.simnorm_group)
        self.representation = nn.Sequential(
            nn.Linear(obs_dim, d), norm1d(norm, d), nn.GELU(approximate="tanh"), nn.Linear(d, d), final,
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
        self._build_transition_head(cfg, d)

        self.prediction_trunk = trunk(d)
        self.value_head = mlp(d, cfg.value_head_hidden, value_support_size, norm=norm, zero_last=True)
        self.policy_head = mlp(d, cfg.policy_head_hidden, num_actions, norm=norm, zero_last=True)

        self.ssl = (
            SSLHeads(d, cfg.proj_hidden, cfg.proj_out, cfg.pred_hidden, cfg.pred_out) if cfg.ssl else None
        )

    def _build_transition_head(self, cfg: LatentModelOptions, features: int) -> None:  # pragma: no cover
        """Build the modules that map the transition's ``features``-wide output to the reward
        support (called between the dynamics trunk and the prediction network)."""
        raise NotImplementedError

    def represent(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [B, *O'] → latent [B, D]."""
        return self.representation(obs.flatten(1).float())

    def transition(self, latent: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(latent [B, D], action [B]) → (next_latent [B, D], features [B, D] for the head)."""
        onehot = F.one_hot(action.long(), self.num_actions).to(latent.dtype)
        x = torch.cat([latent, onehot], dim=1)
        if self.res_connection:
            # The returned latent is the pre-fc2 sum; fc2 only feeds the transition head.
            next_latent = self.fc_dynamics_1(x) + latent
            return next_latent, self.fc_dynamics_2(next_latent)
        next_latent = self.fc_dynamics(x)
        return next_latent, next_latent

    def predict(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """latent [B, D] → (value_logits [B, Nv], policy_logits [B, A])."""
        t = self.prediction_trunk(latent)
        return self.value_head(t), self.policy_head(t)


class LatentConv(LatentNet):
    """The conv net of the module docstring. ``obs_shape`` = stacked observation shape [C, H, W].

    With ``downsample`` and 64 channels it is LightZero's Atari network (docs/atari.md; the 1×1
    head convs have no bias, BatchNorm follows them); the heads, zero-initialisation and
    interface match the MLP, so learners, policies and search adapters serve both."""

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, cfg: LatentModelOptions,
                 value_support_size: int, reward_support_size: int) -> None:
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"the conv model needs [C, H, W] observations, got {obs_shape}")
        c_in, h, w = obs_shape
        ch, norm = cfg.latent_dim, cfg.norm
        self.num_actions = num_actions
        self.value_support_size = value_support_size
        self.reward_support_size = reward_support_size

        stem: list[nn.Module]
        if cfg.downsample:
            stem = downsample_stem(c_in, ch, norm, h)
            halvings = 4 if h > 64 else 3  # stride-2 steps of the stem, each n → ⌈n/2⌉
            h, w = -(-h // 2**halvings), -(-w // 2**halvings)
        else:
            stem = [conv_bn_relu(c_in, ch, norm)]
        blocks = lambda: [ResBlock(ch, norm) for _ in range(cfg.num_res_blocks)]  # noqa: E731
        self.representation = nn.Sequential(*stem, *blocks())
        self.latent_shape = (ch, h, w)

        # Dynamics: conv + BN, residual add of the input latent, ReLU, then residual blocks.
        self.action_planes = cfg.action_planes
        if self.action_planes == "cell" and num_actions != h * w:
            raise ValueError(f"action_planes 'cell' needs one action per latent cell: {num_actions} actions, "
                             f"latent {h}x{w} = {h * w} cells")
        a_planes = 1 if self.action_planes == "cell" else num_actions
        self.dynamics_conv = nn.Sequential(
            nn.Conv2d(ch + a_planes, ch, 3, padding=1, bias=False), norm2d(norm, ch)
        )
        self.dynamics_blocks = nn.Sequential(*blocks())
        hc, flat = cfg.head_channels, cfg.head_channels * h * w
        self._build_transition_head(cfg, ch, hc, flat)

        self.prediction_blocks = nn.Sequential(*blocks())
        self.value_conv = conv_bn_relu(ch, hc, norm, k=1)
        self.policy_conv = conv_bn_relu(ch, hc, norm, k=1)
        self.value_head = mlp(flat, cfg.value_head_hidden, value_support_size, norm=norm, zero_last=True)
        self.policy_head = mlp(flat, cfg.policy_head_hidden, num_actions, norm=norm, zero_last=True)

        self.ssl = (
            SSLHeads(ch * h * w, cfg.proj_hidden, cfg.proj_out, cfg.pred_hidden, cfg.pred_out) if cfg.ssl else None
        )

    def _build_transition_head(self, cfg: LatentModelOptions, channels: int, head_channels: int,
                               flat: int) -> None:  # pragma: no cover
        """Build the modules from the next latent [B, channels, H', W'] to the reward support
        (``flat`` = head_channels·H'·W', the width after the 1×1 conv)."""
        raise NotImplementedError

    def represent(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [B, C, H, W] → latent [B, C', H', W']."""
        return self.representation(obs.float())

    def next_latent(self, latent: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """(latent [B, C', H', W'], action [B]) → next latent [B, C', H', W']."""
        b, _, h, w = latent.shape
        onehot = F.one_hot(action.long(), self.num_actions).to(latent.dtype)  # [B, A]
        if self.action_planes == "cell":
            planes = onehot.view(b, 1, h, w)  # [B, 1, H, W]: 1 at (a // W, a % W)
        else:
            planes = onehot[:, :, None, None].expand(b, -1, h, w)  # [B, A, H, W]: plane a all ones
        x = torch.cat([latent, planes], dim=1)
        return self.dynamics_blocks(F.relu(self.dynamics_conv(x) + latent))

    def predict(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """latent [B, C', H', W'] → (value_logits [B, Nv], policy_logits [B, A])."""
        t = self.prediction_blocks(latent)
        return (
            self.value_head(self.value_conv(t).flatten(1)),
            self.policy_head(self.policy_conv(t).flatten(1)),
        )


def build_latent_model(cfg: LatentModelOptions, obs_shape: tuple[int, ...], num_actions: int, frame_stack: int,
                       classes: dict[str, type[LatentNet]]) -> LatentNet:
    """The network ``classes[cfg.type]`` (``mlp`` or ``conv``) for one (unstacked) observation
    shape ``obs_shape``, ``num_actions`` and ``frame_stack`` frames, with the config's supports."""
    from lzk_common.policy import stacked_obs_shape
    from lzk_common.support import DiscreteSupport

    if cfg.type not in classes:
        raise ValueError(f"unknown model type {cfg.type!r}; expected one of {sorted(classes)}")
    n_value = DiscreteSupport.from_range(cfg.value_support_range).size
    n_reward = DiscreteSupport.from_range(cfg.reward_support_range).size
    return classes[cfg.type](stacked_obs_shape(obs_shape, frame_stack), num_actions, cfg, n_value, n_reward)
