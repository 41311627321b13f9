"""Building blocks shared by the MuZero networks, and their common interface.

Every normalisation layer that can be folded for inference (BatchNorm) directly follows the
Linear/Conv layer it normalises, inside an ``nn.Sequential``: :func:`lzk_muzero.inference.fold_batchnorm`
relies on that layout.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as F


def norm1d(kind: str, n: int) -> nn.Module:
    """BatchNorm1d ('BN') or LayerNorm ('LN') over ``n`` features."""
    return nn.BatchNorm1d(n) if kind == "BN" else nn.LayerNorm(n)


def norm2d(kind: str, c: int) -> nn.Module:
    """BatchNorm2d ('BN') or a per-sample LayerNorm over [C, H, W] ('LN', as GroupNorm(1, C))."""
    return nn.BatchNorm2d(c) if kind == "BN" else nn.GroupNorm(1, c)


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    *,
    norm: str = "BN",
    activation: Callable[[], nn.Module] = nn.ReLU,
    output_norm_act: bool = False,
    zero_last: bool = False,
) -> nn.Sequential:
    """Linear → norm → act for each hidden size, then Linear(→ out_dim) [→ norm → act].

    ``zero_last`` zeroes the last Linear's weight and bias (heads start at uniform logits, i.e. a
    decoded value/reward of exactly 0 and a uniform policy).
    """
    layers: list[nn.Module] = []
    dims = [in_dim, *hidden]
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), norm1d(norm, b), activation()]
    last = nn.Linear(dims[-1], out_dim)
    if zero_last:
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
    layers.append(last)
    if output_norm_act:
        layers += [norm1d(norm, out_dim), activation()]
    return nn.Sequential(*layers)


class ResBlock(nn.Module):
    """Basic residual block: relu(x + BN(conv(relu(BN(conv(x)))))), 3×3 convs without bias."""

    def __init__(self, channels: int, norm: str = "BN") -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), norm2d(norm, channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), norm2d(norm, channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + x)


class SSLHeads(nn.Module):
    """EfficientZero/SimSiam heads (SPEC §2.2): projection D→P→P→P (BN, ReLU; BN on the output)
    and prediction head P→Q→P (BN, ReLU)."""

    def __init__(self, in_dim: int, proj_hidden: int, proj_out: int, pred_hidden: int, pred_out: int) -> None:
        super().__init__()
        self.projection = nn.Sequential(
            nn.Linear(in_dim, proj_hidden), nn.BatchNorm1d(proj_hidden), nn.ReLU(),
            nn.Linear(proj_hidden, proj_hidden), nn.BatchNorm1d(proj_hidden), nn.ReLU(),
            nn.Linear(proj_hidden, proj_out), nn.BatchNorm1d(proj_out),
        )
        self.prediction_head = nn.Sequential(
            nn.Linear(proj_out, pred_hidden), nn.BatchNorm1d(pred_hidden), nn.ReLU(),
            nn.Linear(pred_hidden, pred_out),
        )

    def forward(self, latent: torch.Tensor, with_grad: bool = True) -> torch.Tensor:
        """[B, *L] → [B, P]. ``with_grad``: prediction_head(projection(x)) (online side);
        otherwise projection(x) detached (target side)."""
        proj = self.projection(latent.flatten(1))
        return self.prediction_head(proj) if with_grad else proj.detach()


class MuZeroNet(nn.Module):
    """Interface of a MuZero network (implemented by the MLP and conv models).

    Shapes: B batch, O' the (frame-stacked) observation shape, L the latent shape (``[D]`` or
    ``[C, H, W]``), A actions, Nv/Nr the value/reward support sizes.
    """

    num_actions: int
    latent_shape: tuple[int, ...]
    value_support_size: int
    reward_support_size: int
    ssl: SSLHeads | None

    def initial_inference(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """obs [B, *O'] → (latent [B, *L], value_logits [B, Nv], policy_logits [B, A])."""
        latent = self.represent(obs)
        value_logits, policy_logits = self.predict(latent)
        return latent, value_logits, policy_logits

    def recurrent_inference(
        self, latent: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(latent [B, *L], action [B] int64) → (next_latent [B, *L], reward_logits [B, Nr],
        value_logits [B, Nv], policy_logits [B, A])."""
        next_latent, reward_logits = self.dynamics(latent, action)
        value_logits, policy_logits = self.predict(next_latent)
        return next_latent, reward_logits, value_logits, policy_logits

    def project(self, latent: torch.Tensor, with_grad: bool = True) -> torch.Tensor:
        """SSL embedding of ``latent`` [B, *L] → [B, P] (see :class:`SSLHeads`)."""
        if self.ssl is None:
            raise RuntimeError("this model was built without SSL heads (model.ssl: false)")
        return self.ssl(latent, with_grad)

    # Implemented by subclasses.
    def represent(self, obs: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def dynamics(self, latent: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError

    def predict(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError
