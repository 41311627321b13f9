"""The UniZero world model, nanoGPT style (SPEC §4.1).

Shapes: B batch, K steps, n sequences, m tokens, T buffer slots, E width, A actions, N support
atoms, O observation shape (frame-stacked).

A sequence interleaves observation and action tokens, ``[o_0, a_0, o_1, a_1, …]``:

    o_k token = encoder(obs_k)           [E]   (one token per observation; final LN or SimNorm)
    a_k token = action_embedding(a_k)    [E]

    h = ln_f(blocks(drop(tokens (+ learned positions))))      pre-LN GPT blocks, causal

    at o_k tokens: value logits [N], policy logits [A]         (the state's predictions)
    at a_k tokens: next latent [E] (≈ encoder(obs_{k+1})), reward logits [N]  (the transition's)

Positions count from 0 at the first token of the sequence (training) or of the context
(inference). With RoPE only position differences matter, so this equals LightZero's env-timestep
positions wherever those are consistent; with learned positions it is what makes training and
inference agree.

Initialisation (SPEC §4.1): embeddings N(0, 0.02); Linear kaiming-normal (fan_out, relu) with a BN
encoder, xavier-uniform with an LN encoder, biases 0; norms weight 1 bias 0; then the last Linear
of the value, policy, reward and next-latent heads is zeroed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from lzk_common.blocks import SimNorm
from lzk_unizero.attention import CausalSelfAttention, rope_tables
from lzk_unizero.config import UniZeroModelConfig


def final_norm(cfg: UniZeroModelConfig) -> nn.Module:
    return nn.LayerNorm(cfg.embed_dim) if cfg.final_norm == "LN" else SimNorm(cfg.simnorm_group)


class MLPEncoder(nn.Module):
    """Linear(O, E) → BN/LN → GELU(tanh) → Linear(E, E) → LN/SimNorm: [n, *O] → [n, E]."""

    def __init__(self, obs_dim: int, cfg: UniZeroModelConfig) -> None:
        super().__init__()
        E = cfg.embed_dim
        norm = nn.BatchNorm1d(E) if cfg.hidden_norm == "BN" else nn.LayerNorm(E)
        self.net = nn.Sequential(nn.Linear(obs_dim, E), norm, nn.GELU(approximate="tanh"), nn.Linear(E, E),
                                 final_norm(cfg))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.flatten(1))


class ConvEncoder(nn.Module):
    """Stride-2 conv stages (3×3 conv → BN/GroupNorm → GELU), flatten, Linear → LN/SimNorm:
    [n, C, H, W] → [n, E]."""

    def __init__(self, obs_shape: Sequence[int], cfg: UniZeroModelConfig) -> None:
        super().__init__()
        c, h, w = obs_shape
        layers: list[nn.Module] = []
        for out in cfg.conv_channels:
            norm = nn.BatchNorm2d(out) if cfg.hidden_norm == "BN" else nn.GroupNorm(1, out)
            layers += [nn.Conv2d(c, out, 3, stride=2, padding=1), norm, nn.GELU(approximate="tanh")]
            c, h, w = out, (h + 1) // 2, (w + 1) // 2
        self.convs = nn.Sequential(*layers)
        self.out = nn.Sequential(nn.Linear(c * h * w, cfg.embed_dim), final_norm(cfg))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.out(self.convs(obs).flatten(1))


class Block(nn.Module):
    """Pre-LN transformer block: x += attn(ln1(x)); x += ffn(ln2(x))."""

    def __init__(self, cfg: UniZeroModelConfig) -> None:
        super().__init__()
        E = cfg.embed_dim
        self.ln1 = nn.LayerNorm(E)
        self.attn = CausalSelfAttention(E, cfg.num_heads, cfg.dropout, cfg.bias)
        self.ln2 = nn.LayerNorm(E)
        self.ffn = nn.Sequential(nn.Linear(E, 4 * E, bias=cfg.bias), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * E, E, bias=cfg.bias), nn.Dropout(cfg.dropout))

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), rope)
        return x + self.ffn(self.ln2(x))


class Head(nn.Module):
    """LN(E) → Linear(E, 4E) → LN(4E) → GELU → Linear(4E, out) [→ final norm]: [*, E] → [*, out]."""

    def __init__(self, E: int, out: int, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(E), nn.Linear(E, 4 * E), nn.LayerNorm(4 * E),
                                 nn.GELU(approximate="tanh"), nn.Linear(4 * E, out))
        self.norm = norm if norm is not None else nn.Identity()

    @property
    def last(self) -> nn.Linear:
        return self.net[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.net(x))


@dataclass
class SequenceOutput:
    """Teacher-forced predictions of B sequences of K (obs, action) steps."""

    latents: torch.Tensor  # [B, K, E] encoder outputs of the K observations
    next_latent: torch.Tensor  # [B, K, E] next-latent head at a_k (predicts latent of obs_{k+1})
    reward: torch.Tensor  # [B, K, N] reward logits at a_k
    value: torch.Tensor  # [B, K, N] value logits at o_k
    policy: torch.Tensor  # [B, K, A] policy logits at o_k


class WorldModel(nn.Module):
    """Encoder + action embedding + causal transformer + heads (see the module docstring)."""

    def __init__(self, cfg: UniZeroModelConfig, obs_shape: Sequence[int], num_actions: int,
                 value_atoms: int, reward_atoms: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.obs_shape, self.num_actions = tuple(obs_shape), int(num_actions)
        E = cfg.embed_dim
        if cfg.encoder == "mlp":
            obs_dim = 1
            for s in self.obs_shape:
                obs_dim *= s
            self.encoder: nn.Module = MLPEncoder(obs_dim, cfg)
        else:
            self.encoder = ConvEncoder(self.obs_shape, cfg)
        self.act_emb = nn.Embedding(num_actions, E)
        self.pos_emb = nn.Embedding(cfg.max_tokens, E) if cfg.pos_encoding == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.ln_f = nn.LayerNorm(E)
        self.head_next_latent = Head(E, E, final_norm(cfg))
        self.head_reward = Head(E, reward_atoms)
        self.head_value = Head(E, value_atoms)
        self.head_policy = Head(E, num_actions)
        if cfg.pos_encoding == "rope":
            # Room for any context plus a full teacher-forced sequence (2K+1 <= max_tokens).
            cos, sin = rope_tables(2 * cfg.max_tokens, E // cfg.num_heads, cfg.rope_theta)
            self.register_buffer("rope_cos", cos, persistent=False)  # [P, d/2]
            self.register_buffer("rope_sin", sin, persistent=False)
        self._init_weights()

    # --- initialisation ---------------------------------------------------------------------
    def _init_weights(self) -> None:
        """``init: lightzero`` is LightZero's ``init_weights`` as it runs over the whole world
        model, encoder included: its first branch catches every Linear and Embedding (N(0, 0.02),
        biases 0), so the kaiming / xavier rule it lists for Linear is never reached and applies
        to Conv2d only. ``init: scaled`` applies that rule to Linear too (kaiming-normal fan_out
        under BN, xavier-uniform under LN). Norms start at 1 and 0; the heads' last layers at 0."""
        kaiming = self.cfg.hidden_norm == "BN"
        scaled = self.cfg.init == "scaled"
        for mod in self.modules():
            if isinstance(mod, nn.Embedding) or (isinstance(mod, nn.Linear) and not scaled):
                nn.init.normal_(mod.weight, 0.0, 0.02)
            elif isinstance(mod, (nn.Linear, nn.Conv2d)):
                if kaiming:
                    nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
                else:
                    nn.init.xavier_uniform_(mod.weight)
            elif isinstance(mod, (nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(mod.weight)
                nn.init.zeros_(mod.bias)
            if isinstance(mod, nn.Linear) and mod.bias is not None:
                nn.init.zeros_(mod.bias)
        for head in (self.head_value, self.head_policy, self.head_reward, self.head_next_latent):
            nn.init.zeros_(head.last.weight)
            nn.init.zeros_(head.last.bias)

    # --- tokens -----------------------------------------------------------------------------
    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """Observation tokens: [*S, *O] → [*S, E] (any leading shape)."""
        lead = obs.shape[: obs.dim() - len(self.obs_shape)]
        return self.encoder(obs.reshape(-1, *self.obs_shape)).reshape(*lead, -1)

    def embed_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Action tokens: [*S] int64 → [*S, E]."""
        return self.act_emb(actions)

    @staticmethod
    def interleave(obs_tokens: torch.Tensor, act_tokens: torch.Tensor) -> torch.Tensor:
        """[B, K, E] observations and [B, K or K−1, E] actions → [B, 2K or 2K−1, E] as o, a, o, a, …"""
        B, K, E = obs_tokens.shape
        pairs = torch.zeros(B, K, 2, E, dtype=obs_tokens.dtype, device=obs_tokens.device)
        pairs[:, :, 0] = obs_tokens
        pairs[:, : act_tokens.shape[1], 1] = act_tokens
        return pairs.reshape(B, 2 * K, E)[:, : K + act_tokens.shape[1]]

    # --- transformer ------------------------------------------------------------------------
    def transformer(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Causal blocks over whole sequences x [n, m, E] at ``positions`` [n, m] int64 → ln_f
        output [n, m, E]. (Search uses :class:`lzk_unizero.inference.InferenceNet`, a folded
        snapshot of these weights with KV caches; tests check the two agree.)"""
        rope = None
        if self.pos_emb is not None:
            x = x + self.pos_emb(positions)
        else:
            rope = (self.rope_cos[positions], self.rope_sin[positions])
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, rope)
        return self.ln_f(x)

    def forward_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Uncached causal pass over whole sequences: [n, m, E] → [n, m, E] (positions 0…m−1)."""
        n, m, _ = tokens.shape
        positions = torch.arange(m, device=tokens.device).expand(n, m)
        return self.transformer(tokens, positions)

    # --- heads ------------------------------------------------------------------------------
    def obs_heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """At observation tokens: h [*, E] → (value logits [*, N], policy logits [*, A])."""
        return self.head_value(h), self.head_policy(h)

    def action_heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """At action tokens: h [*, E] → (next latent [*, E], reward logits [*, N])."""
        return self.head_next_latent(h), self.head_reward(h)

    # --- teacher forcing --------------------------------------------------------------------
    def forward_sequence(self, obs: torch.Tensor, actions: torch.Tensor) -> SequenceOutput:
        """Teacher-forced pass over B sequences: obs [B, K, *O], actions [B, K] → SequenceOutput.

        One uncached causal pass over the 2K tokens ``[o_0, a_0, …, o_{K−1}, a_{K−1}]``.
        """
        latents = self.encode(obs)  # [B, K, E]
        h = self.forward_tokens(self.interleave(latents, self.embed_actions(actions)))  # [B, 2K, E]
        value, policy = self.obs_heads(h[:, 0::2])
        next_latent, reward = self.action_heads(h[:, 1::2])
        return SequenceOutput(latents, next_latent, reward, value, policy)
