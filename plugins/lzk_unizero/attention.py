"""Causal self-attention with rotary positions (the training / reference path).

Shapes: n sequences, m tokens, E width, H heads, d = E/H, P positions.

RoPE convention (one place, used by the model and by the folded inference weights): within each
head, feature pairs (x_i, x_{i+d/2}) are rotated by the angle pos·θ^(−2i/d):

    rope(x) = x ⊙ [cos, cos] + rotate_half(x) ⊙ [sin, sin],   rotate_half(x) = [−x_2, x_1]

``rotate_half`` is linear, so a projection followed by it is again a projection
(:func:`rotate_half_rows`): the search folds it into the q/k weights (see ``inference.py``).
Cached search inference lives in :mod:`lzk_unizero.inference`; this module is uncached only.
"""
from __future__ import annotations

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


def rotate_half_rows(w: torch.Tensor, head_dim: int) -> torch.Tensor:
    """R·w for a projection's weight [H·d, *] or bias [H·d]: per head, rows [x_1; x_2] → [−x_2; x_1],
    so that (R·W)x = rotate_half(Wx)."""
    h = w.reshape(-1, 2, head_dim // 2, *w.shape[1:])  # [H, 2, d/2, *]
    return torch.stack([-h[:, 1], h[:, 0]], dim=1).reshape(w.shape)


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
        x: torch.Tensor,  # [n, m, E], the whole sequence (positions given by ``rope``)
        rope: tuple[torch.Tensor, torch.Tensor] | None,  # cos, sin [n, m, d/2] of the tokens' positions
    ) -> torch.Tensor:  # [n, m, E]
        n, m, E = x.shape
        q, k, v = self.qkv(x).split(E, dim=-1)
        q, k, v = (t.view(n, m, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))  # [n, H, m, d]
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        p = self.attn_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        y = y.transpose(1, 2).reshape(n, m, E)
        return self.resid_drop(self.proj(y))
