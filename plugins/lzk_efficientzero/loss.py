"""The EfficientZero loss (addendum C.3): the shared unrolled loss
(:func:`lzk_common.latent_loss.unrolled_loss`) whose recurrent step carries the LSTM state and
whose value-prefix head is trained on the value-prefix targets::

    (h, c) = 0
    k < K     s, (h, c), vp = dynamics(s, (h, c), a_k)
              prefix += CE(vp, φh(target_value_prefix[:, k]))
              (h, c) = 0 when (k + 1) % H == 0      (the state restarts every H steps)

The targets restart at the same steps (:func:`lzk_replay.targets.value_prefix`), so step k's
prediction and target both sum the rewards since step H·⌊k/H⌋. With LightZero's K = H = 5 the
reset falls after the last step and never matters; it does for K > H.
"""
from __future__ import annotations

import torch

from lzk_common.latent_loss import LatentLossWeights, LossOutput, unrolled_loss
from lzk_common.losses import TensorBatch
from lzk_common.support import DiscreteSupport
from lzk_efficientzero.net import EfficientZeroNet


def efficientzero_loss(
    model: EfficientZeroNet,
    batch: TensorBatch,
    value_support: DiscreteSupport,
    prefix_support: DiscreteSupport,
    weights: LatentLossWeights,
    horizon: int,
    *,
    autocast_dtype: torch.dtype | None = None,
) -> LossOutput:
    """The weighted EfficientZero loss of ``batch`` under ``model`` (in whatever mode it is in);
    ``horizon`` = H. The batch must carry ``target_value_prefix`` [B, K]."""
    if batch.target_value_prefix is None:
        raise ValueError("the EfficientZero loss needs value-prefix targets: build the buffer from the policy's "
                         "TargetSpec (value_prefix_horizon > 0) so that batches carry target_value_prefix")
    state = model.initial_state(batch.obs.shape[0], batch.obs.device)

    def recurrent(latent: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
        nonlocal state
        latent, state, prefix_logits = model.dynamics(latent, state, batch.actions[:, k])
        if (k + 1) % horizon == 0:  # LightZero resets after step k; the targets restart there too
            state = model.initial_state(latent.shape[0], latent.device, state[0].dtype)
        return latent, prefix_logits

    return unrolled_loss(model, batch, value_support, prefix_support, weights, recurrent, batch.target_value_prefix,
                         autocast_dtype=autocast_dtype)
