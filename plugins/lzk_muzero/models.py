"""Model construction from the config (``model.type: mlp | conv``)."""
from __future__ import annotations

from lzk_common.policy import stacked_obs_shape
from lzk_common.support import DiscreteSupport
from lzk_muzero.net import MuZeroNet
from lzk_muzero.config import MuZeroModelConfig


def build_model(
    cfg: MuZeroModelConfig, obs_shape: tuple[int, ...], num_actions: int, frame_stack: int = 1
) -> MuZeroNet:
    """The network for one (unstacked) observation shape ``obs_shape`` and ``num_actions``."""
    n_value = DiscreteSupport.from_range(cfg.value_support_range).size
    n_reward = DiscreteSupport.from_range(cfg.reward_support_range).size
    shape = stacked_obs_shape(obs_shape, frame_stack)
    if cfg.type == "mlp":
        from lzk_muzero.model_mlp import MuZeroMLP

        return MuZeroMLP(shape, num_actions, cfg, n_value, n_reward)
    if cfg.type == "conv":
        from lzk_muzero.model_conv import MuZeroConv

        return MuZeroConv(shape, num_actions, cfg, n_value, n_reward)
    raise ValueError(f"unknown model type {cfg.type!r}")
