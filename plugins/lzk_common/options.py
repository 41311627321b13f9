"""Config options every search-based policy shares: the visit temperature, the search constants
and the learning geometry. Policies' config schemas subclass :class:`SearchPolicyOptions` and
add their model and learner options; the latent-model family (MuZero, EfficientZero) subclasses
:class:`LatentPolicyOptions` (learner, pure-policy collection, ε-greedy) and its model section
:class:`LatentModelOptions`.

This module imports no torch: the kernel imports schemas to validate configs and print docs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lzkernel import TargetSpec, option

#: The kinds of ``image_augmentation`` (lzk_common.image_augment).
IMAGE_AUGMENTATIONS = ("shift", "intensity")


@dataclass
class VisitTemperatureOptions:
    """The collection visit-count temperature of the MuZero-family policies (SPEC §1.4)."""

    manual_temperature_decay: bool = option(
        False, doc="Visit temperature 1.0 → 0.5 → 0.25 at 0.5 and 0.75 of the threshold.")
    fixed_temperature_value: float = option(0.25, doc="Visit temperature when not decaying.",
                                            min=0.0, min_exclusive=True)
    threshold_training_steps_for_final_temperature: float = option(
        1e5, doc="Learner steps at which the manual decay reaches 0.25.", min=1.0)

    def temperature(self, train_iter: int) -> float:
        """LightZero's temperature after ``train_iter`` learner steps: the fixed value, or with
        manual decay 1.0 before 0.5·threshold steps, 0.5 before 0.75·threshold, then 0.25."""
        if not self.manual_temperature_decay:
            return float(self.fixed_temperature_value)
        threshold = self.threshold_training_steps_for_final_temperature
        if train_iter < 0.5 * threshold:
            return 1.0
        if train_iter < 0.75 * threshold:
            return 0.5
        return 0.25


@dataclass
class SearchOptions(VisitTemperatureOptions):
    """The MCTS constants (SPEC §2.3) and where the search runs."""

    num_simulations: int = option(25, doc="MCTS simulations per move (collect, reanalyse).", min=1)
    eval_num_simulations: int | None = option(
        None, doc="Simulations per move in eval mode (default: num_simulations).", min=1)
    discount: float = option(0.997, doc="Discount γ used in search backups.", min=0.0, max=1.0)
    pb_c_base: float = option(19652.0, doc="pUCT c2.", min=0.0, min_exclusive=True)
    pb_c_init: float = option(1.25, doc="pUCT c1.", min=0.0)
    dirichlet_alpha: float = option(0.3, doc="Root Dirichlet noise α.", min=0.0, min_exclusive=True)
    noise_fraction: float = option(0.25, doc="Root prior mixing weight of the noise.", min=0.0, max=1.0)
    value_delta_max: float = option(0.01, doc="Floor on the min-max span in value normalisation.", min=0.0)
    reanalyze_noise: bool = option(True, doc="Root noise in reanalyse searches: Dirichlet noise (pUCT), "
                                   "the Gumbel draw (search_algorithm: gumbel).")
    search_threads: int = option(
        1, doc="torch intra-op threads while acting and searching (restored afterwards); 0 leaves "
        "the process setting. Search batches are small matmuls: one thread is fastest, and a "
        "second thread on shared cores can make a search several times slower.", min=0)

    @property
    def eval_simulations(self) -> int:
        """Simulations per eval move."""
        return self.eval_num_simulations if self.eval_num_simulations is not None else self.num_simulations

    def search_config(self, num_simulations: int, **extra: Any) -> Any:
        """The ``lzk_mcts.SearchConfig`` of a search with ``num_simulations`` (``extra``: the
        search options these options do not set, e.g. ``value_normalization``)."""
        from lzk_mcts import SearchConfig

        return SearchConfig(num_simulations=num_simulations, discount=self.discount, pb_c_base=self.pb_c_base,
                            pb_c_init=self.pb_c_init, dirichlet_alpha=self.dirichlet_alpha,
                            noise_fraction=self.noise_fraction, value_delta_max=self.value_delta_max, **extra)


@dataclass
class SearchPolicyOptions(SearchOptions):
    """Search options plus the learning geometry that the replay buffer is built from."""

    frame_stack: int = option(1, doc="Observations stacked along the first axis (model input).", min=1)
    unroll_steps: int = option(5, doc="K: recurrent steps unrolled in the loss.", min=1)
    td_steps: int = option(5, doc="n of the n-step value targets (used by the buffer).", min=1)
    batch_size: int = option(256, doc="Learner batch size.", min=1)

    def target_spec(self) -> TargetSpec:
        """The :class:`lzkernel.TargetSpec` these options imply (γ of the targets = the search's)."""
        return TargetSpec(unroll_steps=self.unroll_steps, td_steps=self.td_steps, discount=self.discount,
                          frame_stack=self.frame_stack, batch_size=self.batch_size)

    def exploration(self, train_iter: int, env_steps: int) -> tuple[float, float]:
        """(visit temperature, ε) of collection; ε is 0 unless a subclass schedules it."""
        return self.temperature(train_iter), 0.0


# ---------------------------------------------------------------------------------------------
# The latent-model family (MuZero, EfficientZero): a learned representation/dynamics/prediction
# network searched by lzk_mcts, trained on unrolled K-step targets with a target network.
# ---------------------------------------------------------------------------------------------


@dataclass
class LatentModelOptions:
    """The network options MuZero and EfficientZero share (representation, dynamics trunk,
    prediction, a scalar head on the reward support after the dynamics, optional SSL heads)."""

    type: str = option("mlp", doc="Network family: 'mlp' for vector observations, 'conv' for "
                       "image observations [C, H, W].", choices=("mlp", "conv"))
    latent_dim: int = option(128, doc="MLP: latent state size D. Conv: latent channels.", min=1)
    reward_head_hidden: list[int] = option(
        [32], doc="Hidden sizes of the head on the reward support (MuZero: reward; EfficientZero: value prefix).")
    value_head_hidden: list[int] = option([32], doc="Hidden sizes of the value head MLP.")
    policy_head_hidden: list[int] = option([32], doc="Hidden sizes of the policy head MLP.")
    value_support_range: list[int] = option(
        [-300, 301, 1], doc="Categorical value support [start, stop (exclusive), step] in h-space.")
    reward_support_range: list[int] = option(
        [-300, 301, 1], doc="Categorical reward (EfficientZero: value-prefix) support [start, stop (exclusive), "
        "step] in h-space.")
    norm: str = option("BN", doc="Normalisation after hidden Linear/Conv layers: BatchNorm ('BN') or "
                       "LayerNorm ('LN'). BN is folded into the preceding layer for search.",
                       choices=("BN", "LN"))
    latent_norm: str = option("LN", doc="MLP: the representation's final norm, 'LN' (LayerNorm) or "
                              "'SimNorm' (softmax over groups of simnorm_group features).",
                              choices=("LN", "SimNorm"))
    simnorm_group: int = option(8, doc="SimNorm group size (must divide latent_dim).", min=1)
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
    downsample: bool = option(False, doc="Conv: LightZero's Atari DownSample stem in the representation "
                              "(stride-2 conv, residual blocks, a downsampling residual block, average pooling: "
                              "spatial size / 8, or / 16 above 64 pixels; 64x64 frames give an 8x8 latent), "
                              "for large frames.")
    head_channels: int = option(16, doc="Conv: channels of the 1x1 convolutions before the "
                                "reward/value/policy MLP heads.", min=1)
    action_planes: str = option(
        "one_hot", doc="Conv: how the dynamics sees the action. 'one_hot': A planes, plane a all ones "
        "(LightZero's encoding); 'cell': one plane with a 1 at the board cell of action a (row a // W, "
        "column a % W), the MuZero paper's encoding for board games (needs A = H·W of the latent).",
        choices=("one_hot", "cell"))

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
        if self.latent_norm == "SimNorm" and self.latent_dim % self.simnorm_group:
            problems.append(("simnorm_group", f"must divide latent_dim ({self.latent_dim})"))
        return problems


@dataclass
class LatentPolicyOptions(SearchPolicyOptions):
    """What the MuZero-family policies share besides the search and the learning geometry:
    pure-policy collection, the search backend, the learner and the ε-greedy schedule.
    Subclasses add their ``model`` section."""

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
    search_algorithm: str = option(
        "puct", doc="'puct': LightZero's MuZero search (pUCT, root Dirichlet noise, visit-count policy "
        "targets); 'gumbel': Gumbel MuZero (Danihelka et al. 2022): Gumbel-Top-k with Sequential Halving "
        "at the root, the improved policy softmax(logits + σ(completed Q)) as the policy target and the "
        "search's own choice as the action (Dirichlet noise and the visit temperature are then unused).",
        choices=("puct", "gumbel"))
    gumbel_max_considered: int = option(16, doc="Gumbel: actions considered at the root (m).", min=1)
    gumbel_c_visit: float = option(50.0, doc="Gumbel: c_visit of σ(q̂) = (c_visit + max N)·c_scale·q̂.", min=0.0)
    gumbel_c_scale: float = option(0.1, doc="Gumbel: c_scale of σ(q̂).", min=0.0, min_exclusive=True)
    gumbel_rescale: str = option(
        "node", doc="Gumbel: what q̂ rescales the completed Qs by: 'node' (the min and max of the node's "
        "children's completed Qs, as the paper and mctx) or 'tree' (those widened by the tree's "
        "min-max statistics, the range pUCT normalises by: with two actions 'node' makes any Q difference "
        "a full σ step, 'tree' keeps its size).", choices=("node", "tree"))
    search_chunk: int = option(4096, doc="Largest number of roots searched at once by "
                               "reanalyze_fn (bounds the latent store's memory).", min=1)
    mini_infer_size: int = option(10240, doc="Chunk size of value_fn's target-network inference.", min=1)
    # --- learner ------------------------------------------------------------------------------
    augment_symmetries: bool = option(
        False, doc="Train each sampled position (and its unrolled steps) under a random symmetry of the board, "
        "where the env declares its game's symmetries (tic-tac-toe, go, connect four); one frame per "
        "observation only.")
    image_augmentation: list[str] = option(
        [], doc="Augment the image observations of every learner batch (EfficientZero's augmentation; LightZero's "
        "Atari MuZero/EfficientZero configs: [shift, intensity]): 'shift' moves each image by up to 4 pixels "
        "with replicated edges, 'intensity' scales it by 1 + 0.05·clamp(N(0, 1), -2, 2); a sample's first "
        "observation and its SSL targets get separate draws (lzk_common.image_augment). Image observations "
        "[C, H, W] only.")
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
    reward_loss_weight: float = option(1.0, doc="Weight of the reward (EfficientZero: value-prefix) "
                                       "cross-entropy.", min=0.0)
    policy_loss_weight: float = option(1.0, doc="Weight of the policy cross-entropy.", min=0.0)
    ssl_loss_weight: float = option(2.0, doc="Weight of the SSL consistency loss (0 disables it).", min=0.0)
    entropy_loss_weight: float = option(0.0, doc="Weight of −H(π) (entropy bonus); 0 as LightZero 0.2.0's "
                                        "MuZero (policy_entropy_weight=0).", min=0.0)
    target_update_freq: int = option(100, doc="Assign the target network every N learner steps.", min=1)
    learn_dtype: str = option("auto", doc="Matmul precision of the learner's forward pass: 'float32', "
                              "'bfloat16' (CPU/CUDA autocast; losses stay float32) or 'auto': bfloat16 where "
                              "the device multiplies it natively (AMX or AVX-512 BF16 CPUs, bf16 GPUs), "
                              "float32 elsewhere; the run records the choice in resolved.json.",
                              choices=("auto", "float32", "bfloat16"))
    on_nonfinite: str = option("raise", doc="A non-finite loss or gradient norm: 'raise' an error, or "
                               "'skip' the optimizer step (reported as train/skipped_nonfinite).",
                               choices=("raise", "skip"))
    # --- exploration schedules ----------------------------------------------------------------
    eps_greedy: bool = option(False, doc="Collect with argmax-of-visits plus ε-random legal actions.")
    eps_start: float = option(1.0, doc="ε at env step 0.", min=0.0, max=1.0)
    eps_end: float = option(0.05, doc="Final ε.", min=0.0, max=1.0)
    eps_decay: float = option(1e5, doc="Env steps of the ε decay.", min=0.0, min_exclusive=True)
    eps_type: str = option("linear", doc="ε schedule: 'linear' or 'exp'.", choices=("linear", "exp"))

    def search_config(self, num_simulations: int, **extra: Any) -> Any:
        return super().search_config(num_simulations, algorithm=self.search_algorithm,
                                     gumbel_max_considered=self.gumbel_max_considered,
                                     gumbel_maxvisit_init=self.gumbel_c_visit,
                                     gumbel_value_scale=self.gumbel_c_scale,
                                     gumbel_rescale=self.gumbel_rescale, **extra)

    def validate(self) -> list[tuple[str, str]]:
        # The kernel validates nested dataclasses too; repeating the model's rules here keeps
        # a config built in code (not from YAML) checkable in one call.
        model = getattr(self, "model", None)
        problems = [(f"model.{f}", m) for f, m in model.validate()] if model is not None else []
        unknown = sorted(set(self.image_augmentation) - set(IMAGE_AUGMENTATIONS))
        if unknown:
            problems.append(("image_augmentation", f"unknown kinds {unknown}; expected some of "
                             f"{list(IMAGE_AUGMENTATIONS)}"))
        return problems

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
