"""The EfficientZero learner step (addendum C.3 steps 5–7): the shared
:class:`~lzk_common.learner.LatentLearner` (optimizer, 1/K gradient scaling with no ½ scaling of
the state's gradient, averaging and clipping, LR schedule, target network assigned every
``target_update_freq`` steps) with the EfficientZero loss (:func:`lzk_efficientzero.loss.efficientzero_loss`).
"""
from __future__ import annotations

from lzk_common.latent_loss import LossOutput
from lzk_common.learner import LatentLearner
from lzk_common.losses import TensorBatch
from lzk_efficientzero.loss import efficientzero_loss


class Learner(LatentLearner):
    """EfficientZero's learner: ``train/loss_value_prefix`` is the value-prefix cross-entropy."""

    reward_metric = "loss_value_prefix"

    def loss(self, tb: TensorBatch) -> LossOutput:
        return efficientzero_loss(self.model, tb, self.value_support, self.reward_support, self.weights,
                                  self.cfg.lstm_horizon_len, autocast_dtype=self.autocast_dtype)
