"""Config schema of the ``unizero`` policy (section ``policy: {name: unizero, ...}``).

Defaults are LightZero's CartPole UniZero config (SPEC §6, §4): embedding 64, 2 layers, 2 heads,
context_length 8 tokens, max_blocks 10 (max_tokens 20), RoPE, LayerNorm final norm on the encoder
and the next-latent head, ±50 supports (101 atoms), dropout 0.1; K = n = 5, γ = 0.997, batch 256;
AdamW (nanoGPT groups) lr 1e-4, weight decay 1e-4, betas (0.9, 0.95), grad clip 5; loss weights
obs 10 / reward 1 / policy 1 / value 0.5, entropy 5e-3, value/reward label smoothing 0.1; target
network EMA θ = 0.05 per learner step; 25 simulations for collection and reanalysis, 50 in eval;
fixed visit temperature 0.25.

No torch here: ``lzkernel config`` reads this schema without importing the model.
"""
from __future__ import annotations

from dataclasses import dataclass

from lzk_common.options import SearchPolicyOptions
from lzkernel import option


@dataclass
class UniZeroModelConfig:
    """The transformer world model (encoder, action embedding, GPT blocks, heads)."""

    encoder: str = option("mlp", doc="Observation encoder: 'mlp' for vectors, 'conv' for images "
                          "[C, H, W].", choices=("mlp", "conv"))
    embed_dim: int = option(64, doc="E: token width (latent size).", min=1)
    num_layers: int = option(2, doc="Transformer blocks.", min=1)
    num_heads: int = option(2, doc="Attention heads (must divide embed_dim; head size even for RoPE).", min=1)
    dropout: float = option(0.1, doc="Embedding, residual and attention dropout (training only).",
                            min=0.0, max=1.0, max_exclusive=True)
    bias: bool = option(True, doc="Biases in the attention and FFN Linear layers.")
    max_blocks: int = option(10, doc="Longest (observation, action) sequence the model handles: "
                             "max_tokens = 2·max_blocks bounds training sequences and the learned "
                             "position table.", min=1)
    context_length: int = option(
        8, doc="Inference context in tokens, at the root and inside the search: a context holds the "
        "last ⌊(c−1)/2⌋ (obs, action) pairs before the current observation; a search node whose "
        "context would overflow is recomputed from its last tokens (exact, see kv_cache.py).", min=3)
    pos_encoding: str = option("rope", doc="'rope' (rotary, θ = rope_theta, on q and k) or 'learned' "
                               "(absolute position table of max_tokens rows added to the inputs). "
                               "Positions count from 0 at the first token of every sequence/context.",
                               choices=("rope", "learned"))
    rope_theta: float = option(10000.0, doc="RoPE base θ.", min=1.0)
    hidden_norm: str = option("BN", doc="Norm after the encoder's hidden layer: 'BN' (LightZero default) or 'LN'.",
                              choices=("BN", "LN"))
    init: str = option(
        "scaled", doc="Weight initialisation. 'lightzero': LightZero's init_weights as it runs (every Linear and "
        "Embedding N(0, 0.02)); 'scaled': Linear kaiming-normal (fan_out) under BN, xavier-uniform under LN, "
        "Embedding N(0, 0.02). Both: Conv2d kaiming/xavier by the norm, biases 0, the heads' last layers 0 "
        "(docs/algorithms/unizero.md, Initialisation).", choices=("scaled", "lightzero"))
    final_norm: str = option("LN", doc="Norm ending the encoder and the next-latent head: 'LN' or "
                             "'SimNorm' (softmax over groups of simnorm_group).", choices=("LN", "SimNorm"))
    simnorm_group: int = option(8, doc="SimNorm group size (must divide embed_dim).", min=1)
    conv_channels: list[int] = option([32, 64], doc="Conv encoder: channels of its stride-2 stages.")
    value_support_range: list[int] = option(
        [-50, 51, 1], doc="Categorical value support [start, stop (exclusive), step] in h-space.")
    reward_support_range: list[int] = option(
        [-50, 51, 1], doc="Categorical reward support [start, stop (exclusive), step] in h-space.")

    @property
    def max_tokens(self) -> int:
        return 2 * self.max_blocks

    def validate(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        if self.embed_dim % self.num_heads:
            problems.append(("num_heads", f"must divide embed_dim ({self.embed_dim})"))
        elif self.pos_encoding == "rope" and (self.embed_dim // self.num_heads) % 2:
            problems.append(("num_heads", "RoPE needs an even head size embed_dim/num_heads"))
        if self.final_norm == "SimNorm" and self.embed_dim % self.simnorm_group:
            problems.append(("simnorm_group", f"must divide embed_dim ({self.embed_dim})"))
        if self.context_length > self.max_tokens:
            problems.append(("context_length", f"must be <= max_tokens = 2·max_blocks ({self.max_tokens})"))
        for name in ("value_support_range", "reward_support_range"):
            r = getattr(self, name)
            if len(r) != 3 or r[2] <= 0 or r[1] <= r[0]:
                problems.append((name, f"expected [start, stop, step] with stop > start, step > 0; got {r}"))
        if any(c <= 0 for c in self.conv_channels) or not self.conv_channels:
            problems.append(("conv_channels", "needs at least one positive channel count"))
        return problems


@dataclass
class UniZeroPolicyConfig(SearchPolicyOptions):
    """UniZero policy: world model, search constants, learner (the visit temperature, search
    constants and learning geometry come from :class:`~lzk_common.options.SearchPolicyOptions`)."""

    model: UniZeroModelConfig = option(default_factory=UniZeroModelConfig, doc="The world model.")
    # --- search -------------------------------------------------------------------------------
    num_simulations: int = option(25, doc="MCTS simulations per move in collection and reanalysis "
                                  "(LightZero collect_num_simulations; the CartPole config's 25).", min=1)
    eval_num_simulations: int = option(50, doc="MCTS simulations per move in eval mode.", min=1)
    search_backend: str = option(
        "numba", doc="How search simulations run the world model: 'numba' (one compiled kernel per "
        "simulation over all trees: ~3.5x faster simulations and ~3x faster acts at CartPole sizes; "
        "compiled once, ~10-15 s, and cached on disk) or 'torch' (the folded-snapshot reference). Root "
        "inference runs in torch either way, and 'numba' applies to float32 models on the CPU only "
        "(others search with torch).",
        choices=("numba", "torch"))
    search_chunk: int = option(
        128, doc="Largest number of roots searched at once by reanalyze_fn. LightZero uses env_num (8) "
        "because its KV-cache pools are sized for the env count; our search contexts are exact and "
        "per search, so wider chunks only cost memory, (S+1)·T·E·(1 + 2·L)·4 bytes per root (266 KB "
        "for CartPole, S = 25), and amortise the torch backend's per-op overhead: with "
        "search_backend 'torch', 128 roots search ~3x faster per root than 8 on CPU; with 'numba' "
        "the cost per root hardly depends on the chunk (benchmarks/unizero_search.py).", min=1)
    mini_infer_size: int = option(1024, doc="Chunk size (sequences) of value_fn's target-model inference.",
                                  min=1)
    # --- targets / learner --------------------------------------------------------------------
    unroll_steps: int = option(5, doc="K: (obs, action) steps of each teacher-forced training sequence "
                               "(2K tokens; 2K+1 <= max_tokens).", min=1)
    batch_size: int = option(256, doc="Learner batch size (sequences).", min=1)
    lr: float = option(1e-4, doc="AdamW learning rate.", min=0.0, min_exclusive=True)
    weight_decay: float = option(1e-4, doc="AdamW weight decay, on parameters with >= 2 dims only.", min=0.0)
    adam_betas: list[float] = option([0.9, 0.95], doc="AdamW (β1, β2).")
    grad_clip: float = option(5.0, doc="Max global gradient norm.", min=0.0, min_exclusive=True)
    obs_loss_weight: float = option(10.0, doc="Weight of the next-latent (consistency) loss.", min=0.0)
    reward_loss_weight: float = option(1.0, doc="Weight of the reward cross-entropy.", min=0.0)
    policy_loss_weight: float = option(1.0, doc="Weight of the policy cross-entropy (with entropy bonus).",
                                       min=0.0)
    value_loss_weight: float = option(0.5, doc="Weight of the value cross-entropy.", min=0.0)
    entropy_weight: float = option(5e-3, doc="α of the policy entropy bonus: policy loss = CE − α·H(π).",
                                   min=0.0)
    label_smoothing: float = option(0.1, doc="ε of the value and reward two-hot targets: (1−ε)·φ + ε/N.",
                                    min=0.0, max=1.0)
    policy_label_smoothing: float = option(0.0, doc="ε of the policy targets: (1−ε)·p + ε/A.", min=0.0, max=1.0)
    latent_loss: str = option("mse", doc="Next-latent loss: 'mse' (mean over E) or 'cos_sim' (1 − cosine).",
                              choices=("mse", "cos_sim"))
    target_update_theta: float = option(0.05, doc="EMA rate θ of the target network, after every learner "
                                        "step: p_target ← (1−θ)·p_target + θ·p (parameters only).",
                                        min=0.0, max=1.0)
    on_nonfinite: str = option("raise", doc="A non-finite loss or gradient norm: 'raise', or 'skip' the step.",
                               choices=("raise", "skip"))

    def validate(self) -> list[tuple[str, str]]:
        problems = [(f"model.{f}", m) for f, m in self.model.validate()]
        if 2 * self.unroll_steps + 1 > self.model.max_tokens:
            problems.append(("unroll_steps", f"2K+1 tokens must fit max_tokens = {self.model.max_tokens}"))
        if len(self.adam_betas) != 2 or not all(0.0 <= b < 1.0 for b in self.adam_betas):
            problems.append(("adam_betas", f"expected two values in [0, 1); got {self.adam_betas}"))
        return problems
