"""The MuZero network interface: the shared :class:`~lzk_common.blocks.LatentNet` (representation,
prediction, SSL projection) plus MuZero's recurrent step, dynamics → (next latent, reward).

Shapes: B batch, L the latent shape (``[D]`` or ``[C, H, W]``), A actions, Nv/Nr the value/reward
support sizes.
"""
from __future__ import annotations

import torch

from lzk_common.blocks import LatentNet


class MuZeroNet(LatentNet):
    """A MuZero network (implemented by the MLP and conv models)."""

    def recurrent_inference(
        self, latent: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(latent [B, *L], action [B] int64) → (next_latent [B, *L], reward_logits [B, Nr],
        value_logits [B, Nv], policy_logits [B, A])."""
        next_latent, reward_logits = self.dynamics(latent, action)
        value_logits, policy_logits = self.predict(next_latent)
        return next_latent, reward_logits, value_logits, policy_logits

    def dynamics(self, latent: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover
        """(latent [B, *L], action [B]) → (next_latent [B, *L], reward_logits [B, Nr])."""
        raise NotImplementedError
