"""Config schema of the ``muzero`` policy (section ``policy: {name: muzero, ...}``).

Defaults are LightZero's CartPole MuZero config (SPEC §6): MLP model with latent 128, BN, one-hot
actions, SSL on, residual dynamics, ±300 supports (601 atoms), 25 simulations, K = n = 5,
γ = 0.997, batch 256, Adam 3e-3 with weight decay 1e-4 and no piecewise schedule, grad clip 10,
loss weights value 0.25 / reward 1 / policy 1 / ssl 2 / entropy 5e-3, target net assigned every
100 learner steps, fixed visit temperature 0.25, eps-greedy off.

This module imports no torch: the kernel imports schemas to validate configs and print docs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from lzk_common.options import SearchPolicyOptions
from lzkernel import option


@dataclass
class MuZeroModelConfig:
    """The MuZero network (representation, dynamics, prediction, optional SSL heads)."""

    type: str = option("mlp", doc="Network family: 'mlp' for vector observations, 'conv' for "
                       "image observations [C, H, W].", choices=("mlp", "conv"))
    latent_dim: int = option(128, doc="MLP: latent state size D. Conv: latent channels.", min=1)
    reward_head_hidden: list[int] = option([32], doc="Hidden sizes of the reward head MLP.")
    value_head_hidden: list[int] = option([32], doc="Hidden sizes of the value head MLP.")
    policy_head_hidden: list[int] = option([32], doc="Hidden sizes of the policy head MLP.")
    value_support_range: list[int] = option(
        [-300, 301, 1], doc="Categorical value support [start, stop (exclusive), step] in h-space.")
    reward_support_range: list[int] = option(
        [-300, 301, 1], doc="Categorical reward support [start, stop (exclusive), step] in h-space.")
    norm: str = option("BN", doc="Normalisation after hidden Linear/Conv layers: BatchNorm ('BN') or "
                       "LayerNorm ('LN'). BN is folded into the preceding layer for search.",
                       choices=("BN", "LN"))
    res_connection_in_dynamics: bool = option(
        True, doc="MLP dynamics: next = fc1(s‖a) + s, reward from fc2(next) (LightZero policy default).")
    ssl: bool = option(True, doc="Build the SimSiam projection/prediction heads for the "
                       "self-supervised consistency loss (needs loss weight ssl > 0 to matter).")
    proj_hidden: int = option(1024, doc="SSL projection hidden size.", min=1)
    proj_out: int = option(1024, doc="SSL projection output size.", min=1)
    pred_hidden: int = option(512, doc="SSL prediction-head hidden size.", min=1)
    pred_out: int = option(1024, doc="SSL prediction-head output size (must equal proj_out).", min=1)
    # Conv-only fields.
    num_res_blocks: int = option(1, doc="Conv: residual blocks in each of representation, "
                                 "dynamics and prediction.", min=0)
    downsample: bool = option(False, doc="Conv: two stride-2 convolutions in the representation "
                              "(spatial size / 4), for large frames.")
    head_channels: int = option(16, doc="Conv: channels of the 1x1 convolutions before the "
                                "reward/value/policy MLP heads.", min=1)

    def validate(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        for name in ("value_support_range", "reward_support_range"):
            r = getattr(self, name)
            if len(r) != 3 or r[2] <= 0 or r[1] <= r[0]:
                problems.append((name, f"expected [start, stop, step] with stop > start, step > 0; got {r}"))
        for name in ("reward_head_hidden", "value_head_hidden", "policy_head_hidden"):
            if any(h <= 0 for h in getattr(self, name)):
                problems.append((name, "hidden sizes must be positive"))
        if self.ssl and self.pred_out != self.proj_out:
            problems.append(("pred_out", f"must equal proj_out ({self.proj_out}) for the cosine loss"))
        return problems


@dataclass
class MuZeroPolicyConfig(SearchPolicyOptions):
    """MuZero policy: model, search constants, learner, exploration schedules (the visit
    temperature, search constants and learning geometry come from
    :class:`~lzk_common.options.SearchPolicyOptions`)."""

    model: MuZeroModelConfig = option(default_factory=MuZeroModelConfig, doc="The network.")
    # --- search -------------------------------------------------------------------------------
    collect_with_pure_policy: bool = option(
        False, doc="Collect without search: sample from the softmax of the legal policy logits "
        "(visit distributions are zeros, root value = predicted value). ReZero option.")
    search_backend: str = option(
        "numba", doc="Network backend of acting and reanalysis searches: 'numba' runs the root "
        "prediction and each simulation's recurrent step as one compiled call each (the residual "
        "MLP on CPU; other models and devices use torch; the first use compiles for a few seconds, "
        "then numba's cache in __pycache__ is used); 'torch' is the reference path.",
        choices=("numba", "torch"))
    search_chunk: int = option(4096, doc="Largest number of roots searched at once by "
                               "reanalyze_fn (bounds the latent store's memory).", min=1)
    mini_infer_size: int = option(10240, doc="Chunk size of value_fn's target-network inference.", min=1)
    # --- learner ------------------------------------------------------------------------------
    augment_symmetries: bool = option(
        False, doc="Train each sampled position (and its unrolled steps) under a random symmetry of the board, "
        "where the env declares its game's symmetries (tic-tac-toe, go, connect four); one frame per "
        "observation only.")
    optimizer: str = option("adam", doc="'adam' (L2 weight decay on all parameters), 'adamw' "
                            "(decoupled decay on Linear/Conv weights only) or 'sgd' (momentum 0.9).",
                            choices=("adam", "adamw", "sgd"))
    lr: float = option(3e-3, doc="Base learning rate.", min=0.0, min_exclusive=True)
    weight_decay: float = option(1e-4, doc="Weight decay.", min=0.0)
    lr_piecewise: bool = option(False, doc="Piecewise LR: factor 1 until 0.5·T learner steps, 0.1 "
                                "until T, 0.01 after (T = lr_piecewise_threshold).")
    lr_piecewise_threshold: float = option(5e4, doc="T of the piecewise LR schedule.", min=1.0)
    grad_clip: float = option(10.0, doc="Max global gradient norm (clip_grad_norm_).",
                              min=0.0, min_exclusive=True)
    value_loss_weight: float = option(0.25, doc="Weight of the value cross-entropy.", min=0.0)
    reward_loss_weight: float = option(1.0, doc="Weight of the reward cross-entropy.", min=0.0)
    policy_loss_weight: float = option(1.0, doc="Weight of the policy cross-entropy.", min=0.0)
    ssl_loss_weight: float = option(2.0, doc="Weight of the SSL consistency loss (0 disables it).", min=0.0)
    entropy_loss_weight: float = option(5e-3, doc="Weight of −H(π) (entropy bonus).", min=0.0)
    target_update_freq: int = option(100, doc="Assign the target network every N learner steps.", min=1)
    learn_dtype: str = option("float32", doc="Matmul precision of the learner's forward pass: "
                              "'float32' or 'bfloat16' (CPU/CUDA autocast; losses stay float32).",
                              choices=("float32", "bfloat16"))
    on_nonfinite: str = option("raise", doc="A non-finite loss or gradient norm: 'raise' an error, or "
                               "'skip' the optimizer step (reported as train/skipped_nonfinite).",
                               choices=("raise", "skip"))
    # --- exploration schedules ----------------------------------------------------------------
    eps_greedy: bool = option(False, doc="Collect with argmax-of-visits plus ε-random legal actions.")
    eps_start: float = option(1.0, doc="ε at env step 0.", min=0.0, max=1.0)
    eps_end: float = option(0.05, doc="Final ε.", min=0.0, max=1.0)
    eps_decay: float = option(1e5, doc="Env steps of the ε decay.", min=0.0, min_exclusive=True)
    eps_type: str = option("linear", doc="ε schedule: 'linear' or 'exp'.", choices=("linear", "exp"))

    def validate(self) -> list[tuple[str, str]]:
        # The kernel validates nested dataclasses too; repeating the model's rules here keeps
        # a MuZeroPolicyConfig built in code (not from YAML) checkable in one call.
        return [(f"model.{f}", m) for f, m in self.model.validate()]

    def exploration(self, train_iter: int, env_steps: int) -> tuple[float, float]:
        """(visit temperature at ``train_iter``, ε of eps-greedy collection at ``env_steps``)."""
        return self.temperature(train_iter), self.epsilon(env_steps)

    def epsilon(self, env_steps: int) -> float:
        """ε of eps-greedy collection at ``env_steps`` (0.0 when ``eps_greedy`` is off)."""
        if not self.eps_greedy:
            return 0.0
        span = self.eps_start - self.eps_end
        if self.eps_type == "exp":
            return float(span * math.exp(-env_steps / self.eps_decay) + self.eps_end)
        if env_steps >= self.eps_decay:
            return float(self.eps_end)
        return float(span * (1.0 - env_steps / self.eps_decay) + self.eps_end)
