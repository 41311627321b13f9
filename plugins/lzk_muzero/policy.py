"""The MuZero policy: the shared :class:`~lzk_common.latent_policy.LatentSearchPolicy` (acting,
value targets, reanalysis, learning) with MuZero's network, learner and search snapshot."""
from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Sequence

import torch

from lzk_common.latent_policy import LatentSearchPolicy
from lzk_muzero.config import MuZeroPolicyConfig
from lzk_muzero.inference import SearchNetwork
from lzk_muzero.learner import Learner
from lzk_muzero.models import build_model


class MuZeroPolicy(LatentSearchPolicy):
    """MuZero acting + learning (implements :class:`lzkernel.LearningPolicy` and
    :class:`lzkernel.ObservationValues`).

    Args are :class:`~lzk_common.latent_policy.LatentSearchPolicy`'s plus
    ``average_gradients``, the multi-rank hook called between backward and clipping.
    """

    cfg: MuZeroPolicyConfig

    def __init__(
        self,
        cfg: MuZeroPolicyConfig,
        obs_shape: Sequence[int],
        num_actions: int,
        *,
        device: str | torch.device = "cpu",
        seed: int = 0,
        average_gradients: Callable[[Any], None] | None = None,
        search_module: ModuleType | Any | None = None,
    ) -> None:
        super().__init__(cfg, obs_shape, num_actions, device=device, seed=seed, search_module=search_module)
        self.attach(build_model(cfg.model, self.env_obs_shape, num_actions, cfg.frame_stack),
                    lambda model, target: Learner(model, target, cfg, self.value_support, self.reward_support,
                                                  average_gradients=average_gradients))

    def _build_snapshot(self, which: str) -> SearchNetwork:
        model = self.model if which == "online" else self.target_model
        return SearchNetwork(model, self.value_support, self.reward_support, backend=self.cfg.search_backend)
