"""The MuZero learner step (SPEC §2.7 steps 6–10): the shared
:class:`~lzk_common.learner.LatentLearner` (optimizer, 1/K gradient scaling, averaging and
clipping, LR schedule, target network assigned every ``target_update_freq`` steps) with the
MuZero loss (:func:`lzk_muzero.loss.muzero_loss`).
"""
from __future__ import annotations

from lzk_common.latent_loss import LossOutput
from lzk_common.learner import LatentLearner, build_optimizer
from lzk_common.losses import TensorBatch
from lzk_muzero.loss import muzero_loss

__all__ = ["Learner", "build_optimizer"]


class Learner(LatentLearner):
    """MuZero's learner: ``train/loss_reward`` is the reward cross-entropy."""

    def loss(self, tb: TensorBatch) -> LossOutput:
        return muzero_loss(self.model, tb, self.value_support, self.reward_support, self.weights,
                           autocast_dtype=self.autocast_dtype)
