"""The MuZero policy: the shared :class:`~lzk_common.latent_policy.LatentSearchPolicy` (acting,
value targets, reanalysis, learning) with MuZero's network, learner and search snapshot."""
from __future__ import annotations

from lzk_common.latent_policy import LatentSearchPolicy
from lzk_muzero.config import MuZeroPolicyConfig
from lzk_muzero.inference import SearchNetwork
from lzk_muzero.learner import Learner
from lzk_muzero.models import build_model


class MuZeroPolicy(LatentSearchPolicy, learner=Learner, snapshot=SearchNetwork, model=build_model):
    """MuZero acting + learning (implements :class:`lzkernel.LearningPolicy` and
    :class:`lzkernel.ObservationValues`); arguments as the base class's."""

    cfg: MuZeroPolicyConfig
