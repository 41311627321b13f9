"""Config schema of the ``muzero`` policy (section ``policy: {name: muzero, ...}``).

Defaults are LightZero's CartPole MuZero config (SPEC §6): MLP model with latent 128, BN, one-hot
actions, SSL on, residual dynamics, ±300 supports (601 atoms), 25 simulations, K = n = 5,
γ = 0.997, batch 256, Adam 3e-3 with weight decay 1e-4 and no piecewise schedule, grad clip 10,
loss weights value 0.25 / reward 1 / policy 1 / ssl 2 / entropy 0 (LightZero 0.2.0's
``policy_entropy_weight``), target net assigned every 100 learner steps, fixed visit temperature
0.25, eps-greedy off. Every option but the model section's class comes from the shared
:class:`~lzk_common.options.LatentPolicyOptions`.

This module imports no torch: the kernel imports schemas to validate configs and print docs.
"""
from __future__ import annotations

from dataclasses import dataclass

from lzk_common.options import LatentModelOptions, LatentPolicyOptions
from lzkernel import option


@dataclass
class MuZeroModelConfig(LatentModelOptions):
    """The MuZero network (representation, dynamics with a reward head, prediction, optional SSL
    heads)."""


@dataclass
class MuZeroPolicyConfig(LatentPolicyOptions):
    """MuZero policy: model, search constants, learner, exploration schedules (everything but the
    model comes from :class:`~lzk_common.options.LatentPolicyOptions`)."""

    model: MuZeroModelConfig = option(default_factory=MuZeroModelConfig, doc="The network.")
