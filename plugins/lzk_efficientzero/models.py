"""Model construction from the config (``model.type: mlp | conv``)."""
from __future__ import annotations

from lzk_common.latent_models import build_latent_model
from lzk_efficientzero.config import EfficientZeroModelConfig
from lzk_efficientzero.model_conv import EfficientZeroConv
from lzk_efficientzero.model_mlp import EfficientZeroMLP
from lzk_efficientzero.net import EfficientZeroNet


def build_model(cfg: EfficientZeroModelConfig, obs_shape: tuple[int, ...], num_actions: int,
                frame_stack: int = 1) -> EfficientZeroNet:
    """The network for one (unstacked) observation shape ``obs_shape`` and ``num_actions``."""
    return build_latent_model(cfg, obs_shape, num_actions, frame_stack,
                              {"mlp": EfficientZeroMLP, "conv": EfficientZeroConv})
