"""The MuZero loss (SPEC §2.7 steps 2–5): the shared unrolled loss
(:func:`lzk_common.latent_loss.unrolled_loss`) with MuZero's recurrent step, dynamics on a_k,
and its reward head trained on the per-step rewards r_{t+k}::

    k < K     s, r = dynamics(s, a_k);   reward += CE(r, φh(u_k))
"""
from __future__ import annotations

import torch

from lzk_common.latent_loss import LatentLossWeights, LossOutput, unrolled_loss
from lzk_common.losses import TensorBatch
from lzk_common.support import DiscreteSupport
from lzk_muzero.net import MuZeroNet


def muzero_loss(
    model: MuZeroNet,
    batch: TensorBatch,
    value_support: DiscreteSupport,
    reward_support: DiscreteSupport,
    weights: LatentLossWeights,
    *,
    autocast_dtype: torch.dtype | None = None,
) -> LossOutput:
    """The weighted MuZero loss of ``batch`` under ``model`` (in whatever mode it is in)."""

    def recurrent(latent: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
        return model.dynamics(latent, batch.actions[:, k])

    return unrolled_loss(model, batch, value_support, reward_support, weights, recurrent, batch.target_reward,
                         autocast_dtype=autocast_dtype)
