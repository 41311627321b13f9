"""Config schema of the ``efficientzero`` policy (section ``policy: {name: efficientzero, ...}``).

Defaults are LightZero's CartPole EfficientZero config (addendum C.6): MLP model with latent 128,
LSTM hidden 128, BN, one-hot actions, SimNorm-ended representation, SSL on, residual dynamics,
±300 supports (601 atoms) for value and value prefix, LSTM reset every 5 steps
(``lstm_horizon_len``); 25 simulations, K = n = 5, γ = 0.997, batch 256, Adam 3e-3 with weight
decay 1e-4 and no piecewise schedule, grad clip 10, loss weights value 0.25 / value prefix 1 /
policy 1 / ssl 2 and no entropy term (C.3; as MuZero's in LightZero 0.2.0), target network assigned every 100
learner steps, fixed visit temperature 0.25. Every option but the model's LSTM and the horizon comes from the shared
:class:`~lzk_common.options.LatentPolicyOptions` (``reward_*`` options set the value-prefix head).

This module imports no torch: the kernel imports schemas to validate configs and print docs.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lzk_common.options import LatentModelOptions, LatentPolicyOptions
from lzkernel import TargetSpec, option


@dataclass
class EfficientZeroModelConfig(LatentModelOptions):
    """The EfficientZero network: MuZero's family with an LSTM after the dynamics trunk whose
    output feeds the value-prefix head (``reward_head_hidden``, ``reward_support_range``)."""

    latent_norm: str = option("SimNorm", doc="MLP: the representation's final norm, 'SimNorm' (LightZero's "
                              "EfficientZero MLP: softmax over groups of simnorm_group features) or 'LN'.",
                              choices=("LN", "SimNorm"))
    lstm_hidden: int = option(128, doc="Hidden (and cell) size of the value-prefix LSTM.", min=1)


@dataclass
class EfficientZeroPolicyConfig(LatentPolicyOptions):
    """EfficientZero policy: model, LSTM horizon, search constants, learner, exploration (all
    but the model and the horizon from :class:`~lzk_common.options.LatentPolicyOptions`)."""

    model: EfficientZeroModelConfig = option(default_factory=EfficientZeroModelConfig, doc="The network.")
    entropy_loss_weight: float = option(0.0, doc="Weight of −H(π) (entropy bonus); LightZero's EfficientZero "
                                        "loss has no entropy term.", min=0.0)
    lstm_horizon_len: int = option(
        5, doc="H: the LSTM state restarts from zero every H steps: in the unroll after steps H, 2H, …, in "
        "search at node depths H, 2H, …; value-prefix targets restart at the same steps.", min=1)

    def target_spec(self) -> TargetSpec:
        """The shared learning geometry plus the value-prefix horizon (the buffer builds prefix
        targets from it)."""
        return dataclasses.replace(super().target_spec(), value_prefix_horizon=self.lstm_horizon_len)
