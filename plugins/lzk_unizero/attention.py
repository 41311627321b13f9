"""Causal self-attention with rotary positions and an optional KV buffer.

Shapes: n sequences, m new tokens, T buffer slots (capacity), E width, H heads, d = E/H.

Two paths, kept separate on purpose (tests compare them):

* **uncached** (``kv=None``): the m tokens are the whole sequence, plain causal attention
  (training, teacher forcing, reference computations);
* **buffered** (``kv=LayerKV``): row b already holds ``past_len[b]`` valid K/V slots (left-aligned);
  the m new tokens' K/V are written **in place** into slots ``past_len[b] … past_len[b]+m−1`` and
  new token i attends to slots ``j <= past_len[b] + i``. Slots past that hold stale values and are
  masked out, so rows of different lengths share one buffer without any padding correction.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


def rope_tables(num_positions: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables [P, d/2] of rotary embeddings (frequencies θ^(−2i/d))."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate feature pairs (x_i, x_{i+d/2}) of x [n, H, m, d] by per-token angles; cos/sin [n, m, d/2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None], sin[:, None]  # [n, 1, m, d/2]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


@dataclass
class LayerKV:
    """One layer's K/V buffer: k, v [n, H, T, d] (written in place) and past_len [n] int64."""

    k: torch.Tensor
    v: torch.Tensor
    past_len: torch.Tensor


class CausalSelfAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)
        self.proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.attn_dropout = dropout
        self.resid_drop = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,  # [n, m, E]
        rope: tuple[torch.Tensor, torch.Tensor] | None,  # cos, sin [n, m, d/2] of the new tokens' positions
        kv: LayerKV | None = None,
    ) -> torch.Tensor:  # [n, m, E]
        n, m, E = x.shape
        q, k, v = self.qkv(x).split(E, dim=-1)
        q, k, v = (t.view(n, m, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))  # [n, H, m, d]
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        p = self.attn_dropout if self.training else 0.0
        if kv is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            T = kv.k.shape[2]
            slots = kv.past_len[:, None] + torch.arange(m, device=x.device)  # [n, m]
            idx = slots[:, None, :, None].expand(n, self.num_heads, m, self.head_dim)
            kv.k.scatter_(2, idx, k)
            kv.v.scatter_(2, idx, v)
            allowed = torch.arange(T, device=x.device)[None, None, :] <= slots[:, :, None]  # [n, m, T]
            y = F.scaled_dot_product_attention(q, kv.k, kv.v, attn_mask=allowed[:, None], dropout_p=p)
        y = y.transpose(1, 2).reshape(n, m, E)
        return self.resid_drop(self.proj(y))
