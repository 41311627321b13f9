"""Entry point of the lzk_efficientzero plugin: registers the ``efficientzero`` policy (torch is
imported by its factory only)."""
from __future__ import annotations

from lzk_common.factory import latent_policy_component
from lzk_efficientzero.config import EfficientZeroPolicyConfig
from lzkernel import Component, hookimpl


@hookimpl
def lzkernel_register_policies() -> list[Component]:
    doc = ("EfficientZero (LightZero-compatible): MuZero's MLP/conv model family with an LSTM value-prefix head "
           "(state reset every lstm_horizon_len steps), SSL consistency loss, target network, batched MCTS over "
           "(latent, LSTM state) nodes; with the rezero trainer, ReZero-EfficientZero.")
    return [latent_policy_component("efficientzero", "lzk_efficientzero.policy:EfficientZeroPolicy",
                                    EfficientZeroPolicyConfig, doc)]
