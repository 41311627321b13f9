"""Model construction from the config (``model.type: mlp | conv``)."""
from __future__ import annotations

from lzk_common.latent_models import build_latent_model
from lzk_muzero.config import MuZeroModelConfig
from lzk_muzero.model_conv import MuZeroConv
from lzk_muzero.model_mlp import MuZeroMLP
from lzk_muzero.net import MuZeroNet


def build_model(
    cfg: MuZeroModelConfig, obs_shape: tuple[int, ...], num_actions: int, frame_stack: int = 1
) -> MuZeroNet:
    """The network for one (unstacked) observation shape ``obs_shape`` and ``num_actions``."""
    return build_latent_model(cfg, obs_shape, num_actions, frame_stack, {"mlp": MuZeroMLP, "conv": MuZeroConv})
