"""The EfficientZero policy: the shared :class:`~lzk_common.latent_policy.LatentSearchPolicy`
(acting with search or the pure policy, value targets, reanalysis with ReZero reuse, learning)
with EfficientZero's network, learner and value-prefix search snapshot (which also takes the
LSTM horizon)."""
from __future__ import annotations

from typing import Any

from lzk_common.latent_policy import LatentSearchPolicy
from lzk_efficientzero.config import EfficientZeroPolicyConfig
from lzk_efficientzero.inference import ValuePrefixSearchNetwork
from lzk_efficientzero.learner import Learner
from lzk_efficientzero.models import build_model


class EfficientZeroPolicy(LatentSearchPolicy, learner=Learner, snapshot=ValuePrefixSearchNetwork, model=build_model):
    """EfficientZero acting + learning (implements :class:`lzkernel.LearningPolicy` and
    :class:`lzkernel.ObservationValues`); arguments as the base class's."""

    cfg: EfficientZeroPolicyConfig

    def snapshot_args(self) -> tuple[Any, ...]:
        return (self.cfg.lstm_horizon_len,)
