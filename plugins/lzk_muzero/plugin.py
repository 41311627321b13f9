"""Entry point of the lzk_muzero plugin: registers the ``muzero`` policy.

Imports no torch at module level (``lzkernel plugins`` must stay fast); the factory does.
"""
from __future__ import annotations

from lzk_common.factory import latent_policy_component
from lzkernel import Component, hookimpl
from lzk_muzero.config import MuZeroPolicyConfig


@hookimpl
def lzkernel_register_policies() -> list[Component]:
    return [latent_policy_component(
        "muzero", "lzk_muzero.policy:MuZeroPolicy", MuZeroPolicyConfig,
        doc="MuZero (LightZero-compatible): MLP/conv model with categorical value/reward, batched "
        "MCTS acting, SSL consistency loss, target network; also the model side of ReZero.")]
