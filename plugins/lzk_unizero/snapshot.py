"""The folded eval snapshot of a UniZero world model that search runs on (:class:`InferenceNet`),
and its export to the numba search step (:func:`weights_of`).

Shapes: n rows, m tokens per row, L layers, T capacity, E width, H heads, d = E/H, N support
atoms, A actions.

Why a snapshot: at search batch sizes (8…128 rows of one to T − 1 tokens) a CPU forward pass
costs mostly per-op overhead (a few µs per op, however small), so the weights are refolded once
per weight version into fewer ops; the model's own modules stay the training / reference path:

* every LayerNorm affine that feeds a Linear is folded into it (W·diag γ, b + W·β), so the norm
  runs without affine; V's bias is folded into the output projection's (attention weights sum
  to 1); two heads reading the same token share one normalisation and one [E, 8E] first layer;
* RoPE is linear in the projected features: one matmul computes [R·q, R·k, q, k, v] and the
  rotation is ``q·cos + R·q·sin`` in place (two elementwise ops); the q/k biases, rotated per
  position, join that update instead of the matmul;
* K and V of a token are stored side by side ([.., 2E]), so each layer writes its new K/V
  with one copy; a prefill's last layer runs its query, projection and FFN on the one token
  whose output is read;
* GELU is computed as x·σ(2u) (the same function; torch's CPU tanh is slow).

Folding only reorders float arithmetic: outputs equal the model's within float rounding
(tests compare them with the uncached model forward of every node's tokens). The numba search
step (:mod:`lzk_unizero.numba_search`) takes the same folded weights as float32 numpy arrays
(:class:`~lzk_unizero.numba_search.Weights`), built here, where the folded layout is defined.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from lzk_unizero.attention import rotate_half_rows
from lzk_unizero.model import Block, Head, WorldModel
from lzk_unizero.numba_search import Weights


def _fold_norm(norm: nn.LayerNorm, w: torch.Tensor, b: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Linear(W, b) ∘ LayerNorm(γ, β) → Linear(W·diag γ, b + W·β) ∘ (LayerNorm without affine)."""
    bias = w @ norm.bias if b is None else b + w @ norm.bias
    return w * norm.weight, bias


_GELU_C1 = 2.0 * math.sqrt(2.0 / math.pi)
_GELU_C2 = _GELU_C1 * 0.044715


def _gelu_tanh(x: torch.Tensor, c1: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation: ½x(1 + tanh u) = x·σ(2u) with 2u = x·(c1 + c2·x²). The same
    function as ``F.gelu(approximate='tanh')`` up to rounding and 1.1–2× faster on CPU, where
    torch's tanh is much slower than its sigmoid. ``c1`` is a 0-dim tensor of x's dtype."""
    return torch.sigmoid_(torch.addcmul(c1, x, x, value=_GELU_C2).mul_(x)).mul_(x)


def _bias(linear: nn.Linear) -> torch.Tensor:
    return linear.weight.new_zeros(linear.out_features) if linear.bias is None else linear.bias.detach()


@dataclass
class _Layer:
    """One block, folded (see the module docstring). Weights are transposed views [in, out]
    (``addmm`` takes the transpose flag: no copies)."""

    w_qkv: torch.Tensor  # [E, 5E] (RoPE: R·q, R·k, q, k, v) or [E, 3E]
    b_qkv: torch.Tensor  # v's bias is 0: moved into b_proj (below)
    w_proj: torch.Tensor  # [E, E]
    b_proj: torch.Tensor
    w_1: torch.Tensor  # [E, 4E] (ln2 folded in)
    b_1: torch.Tensor
    w_2: torch.Tensor  # [4E, E]
    b_2: torch.Tensor
    eps1: float
    eps2: float

    @classmethod
    def fold(cls, block: Block, rope: bool) -> _Layer:
        E, d = block.ln1.weight.shape[0], block.attn.head_dim
        w, b = _fold_norm(block.ln1, block.attn.qkv.weight, block.attn.qkv.bias)  # [3E, E], [3E]
        # Attention weights sum to 1, so v's bias passes through unchanged: fold it into the
        # projection's bias (proj(a + b_v) = proj(a) + W_proj·b_v) and save an op per layer.
        b_proj = _bias(block.attn.proj) + block.attn.proj.weight @ b[2 * E:]
        b = torch.cat([b[: 2 * E], torch.zeros_like(b[2 * E:])])
        if rope:
            w = torch.cat([rotate_half_rows(w[: 2 * E], d), w])
            b = torch.cat([rotate_half_rows(b[: 2 * E], d), b])
        ffn1, ffn2 = block.ffn[0], block.ffn[2]
        w1, b1 = _fold_norm(block.ln2, ffn1.weight, ffn1.bias)
        return cls(w.t(), b, block.attn.proj.weight.detach().t(), b_proj, w1.t(), b1,
                   ffn2.weight.detach().t(), _bias(ffn2), block.ln1.eps, block.ln2.eps)


class _HeadPair:
    """Two :class:`Head` s reading the same token, sharing one normalisation, one [E, 8E] first
    layer, one hidden-norm call and one GELU: h [n, E] → ([n, out_a], [n, out_b])."""

    def __init__(self, a: Head, b: Head) -> None:
        (ln_a, lin_a, hn_a, _, last_a), (ln_b, lin_b, hn_b, _, last_b) = a.net, b.net
        if (ln_a.eps, hn_a.eps) != (ln_b.eps, hn_b.eps):
            raise ValueError("paired heads must use the same LayerNorm eps")
        wa, ba = _fold_norm(ln_a, lin_a.weight, lin_a.bias)
        wb, bb = _fold_norm(ln_b, lin_b.weight, lin_b.bias)
        self.w_1, self.b_1 = torch.cat([wa, wb]).t(), torch.cat([ba, bb])  # [E, 8E], [8E]
        self.gamma = torch.stack([hn_a.weight, hn_b.weight])  # [2, 4E]
        self.beta = torch.stack([hn_a.bias, hn_b.bias])
        # Separate last layers: a zero-padded batched matmul costs more than the op it saves.
        self.w_a, self.b_a = last_a.weight.detach().t(), _bias(last_a)
        self.w_b, self.b_b = last_b.weight.detach().t(), _bias(last_b)
        self.eps1, self.eps2, self.hidden = ln_a.eps, hn_a.eps, last_a.in_features
        self.gelu_c1 = torch.tensor(_GELU_C1, dtype=wa.dtype, device=wa.device)

    def __call__(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, E = h.shape
        z = torch.addmm(self.b_1, torch.layer_norm(h, (E,), None, None, self.eps1), self.w_1)  # [n, 8E]
        z = torch.layer_norm(z.view(n, 2, self.hidden), (self.hidden,), None, None, self.eps2)
        z = _gelu_tanh(torch.addcmul(self.beta, z, self.gamma), self.gelu_c1)  # [n, 2, 4E]
        return torch.addmm(self.b_a, z[:, 0], self.w_a), torch.addmm(self.b_b, z[:, 1], self.w_b)


@dataclass
class KVRows:
    """The K/V of n contexts as the passes read and write them (all views of ``kv``)."""

    kv: torch.Tensor  # [n, L, T, 2E]: per layer and slot, K (rotated) then V
    layer: list[torch.Tensor]  # L × [n, T, 2E]
    flat: torch.Tensor  # [n·L·T, 2E]: row (r·L + l)·T + slot
    k: list[torch.Tensor]  # L × [n, H, T, d]
    v: list[torch.Tensor]  # L × [n, H, T, d]

    @classmethod
    def of(cls, kv: torch.Tensor, heads: int) -> KVRows:
        n, L, T, E2 = kv.shape
        E = E2 // 2
        layer = [kv[:, i] for i in range(L)]
        k = [t[..., :E].view(n, T, heads, E // heads).transpose(1, 2) for t in layer]
        v = [t[..., E:].view(n, T, heads, E // heads).transpose(1, 2) for t in layer]
        return cls(kv, layer, kv.view(n * L * T, E2), k, v)

    def rows(self, lo: int, n: int) -> KVRows:
        """Rows lo … lo + n − 1 (views; no copies)."""
        per_row = self.flat.shape[0] // self.kv.shape[0]
        return KVRows(self.kv[lo: lo + n], [t[lo: lo + n] for t in self.layer],
                      self.flat[lo * per_row: (lo + n) * per_row], [t[lo: lo + n] for t in self.k],
                      [t[lo: lo + n] for t in self.v])


class InferenceNet:
    """Eval-mode snapshot of a :class:`WorldModel` for search (see the module docstring).

    It folds copies of some weights and views the rest (encoder, embeddings, final norms), so it
    must be rebuilt after a weight update (the policy keys it on a weight version). ``capacity``
    (T) bounds the positions it serves.
    """

    def __init__(self, model: WorldModel, capacity: int) -> None:
        cfg = model.cfg
        self.model, self.T = model, capacity
        self.E, self.H, self.L = cfg.embed_dim, cfg.num_heads, cfg.num_layers
        self.d = self.E // self.H
        p = model.act_emb.weight
        self.dtype, self.device = p.dtype, p.device
        E = self.E
        with torch.no_grad():
            self.layers = [_Layer.fold(blk, cfg.pos_encoding == "rope") for blk in model.blocks]
            self.action_pair = _HeadPair(model.head_next_latent, model.head_reward)  # at action tokens
            self.obs_pair = _HeadPair(model.head_value, model.head_policy)  # at observation tokens
            self.action_tokens = p.detach()  # [A, E]
            self.gelu_c1 = torch.tensor(_GELU_C1, dtype=self.dtype, device=self.device)
            self.pos: torch.Tensor | None = None
            self.rot: torch.Tensor | None = None
            if cfg.pos_encoding == "rope":
                cos, sin = model.rope_cos[:capacity], model.rope_sin[:capacity]  # [T, d/2]
                # [T, 2E] each: a head's [c, c] / [s, s] layout, tiled over the H heads of q and of k.
                cos, sin = cos.repeat(1, 4 * self.H), sin.repeat(1, 4 * self.H)
                # The q/k biases rotate with their position: (q + b)·cos + R(q + b)·sin = q·cos +
                # R·q·sin + b_rot[pos], so the projection runs without bias (addmm's broadcast copy
                # of the bias costs as much as the matmul at these sizes) and b_rot joins the rotation.
                b_rot = [w.b_qkv[2 * E: 4 * E] * cos + w.b_qkv[: 2 * E] * sin for w in self.layers]
                # [T, (2 + L)·2E] = [cos | sin | b_rot of each layer]: one gather per appended token.
                self.rot = torch.cat([cos, sin, *b_rot], dim=1)
            else:
                self.pos = model.pos_emb.weight[:capacity].detach()  # [T, E]
            # hidden_after[s, j]: additive attention mask of a token at slot s, −inf on slots j > s
            # (a float mask: cheaper than a boolean one in CPU attention).
            self.hidden_after = torch.full((capacity, capacity), float("-inf"), dtype=self.dtype,
                                           device=self.device).triu(1)
        # Per prefill length m and layer: (cos, sin, b_rot) [m, 2E] of positions 0 … m−1.
        self._prefill_rot = [[None if self.rot is None else self._rot_of(self.rot[:m], i) for i in range(self.L)]
                             for m in range(capacity + 1)]
        self._prefill_mask = [self.hidden_after[:, :m] for m in range(capacity + 1)]
        self.ln_f = (model.ln_f.weight.detach(), model.ln_f.bias.detach(), model.ln_f.eps)
        norm = model.head_next_latent.norm
        self.latent_norm = norm
        self.latent_ln = None  # LayerNorm arguments when the latent norm is a LayerNorm (called directly)
        #: numpy weights of the numba search step (:func:`weights_of` builds them on first use).
        self.numba_weights: Any = None
        if isinstance(norm, nn.LayerNorm):
            self.latent_ln = (norm.weight.detach(), norm.bias.detach(), norm.eps)

    def _index(self, a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(a)
        return t if self.device.type == "cpu" else t.to(self.device)

    def _rot_of(self, table: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(cos, sin, b_rot of ``layer``) [r, 2E] views of rows of the ``rot`` table."""
        E2 = 2 * self.E
        return table[:, :E2], table[:, E2: 2 * E2], table[:, (2 + layer) * E2: (3 + layer) * E2]

    # --- transformer ------------------------------------------------------------------------
    def _qkv(self, x: torch.Tensor, w: _Layer, rot: tuple[torch.Tensor, ...] | None,
             per_row: int = 0) -> torch.Tensor:
        """Projections of tokens x [r, E] → [r, 5E] (RoPE: [R·q, R·k, q, k, v], q and k rotated and
        biased in place by rot = (cos, sin, b_rot) [r, 2E], or [m, 2E] for r = n·m tokens given
        ``per_row`` = m) or [r, 3E] = [q, k, v]."""
        x = torch.layer_norm(x, (self.E,), None, None, w.eps1)
        if rot is None:
            return torch.addmm(w.b_qkv, x, w.w_qkv)
        E = self.E
        y = torch.mm(x, w.w_qkv)
        yr = y.view(-1, per_row, 5 * E) if per_row else y
        qk = yr[..., 2 * E: 4 * E]
        torch.addcmul(rot[2], qk, rot[0], out=qk).addcmul_(yr[..., : 2 * E], rot[1])  # q·cos + R·q·sin + b_rot
        return y

    def _attend_and_ffn(self, x: torch.Tensor, a: torch.Tensor, w: _Layer) -> torch.Tensor:
        """Residual updates of one block given the attention output a [r, E]: x [r, E] → [r, E]."""
        x = torch.addmm(w.b_proj, a, w.w_proj).add_(x)
        h = _gelu_tanh(torch.addmm(w.b_1, torch.layer_norm(x, (self.E,), None, None, w.eps2), w.w_1),
                       self.gelu_c1)
        return torch.addmm(w.b_2, h, w.w_2).add_(x)

    def prefill(self, x: torch.Tensor, last: np.ndarray, kv: KVRows | None) -> torch.Tensor:
        """Causal pass over rows of tokens from scratch: x [n, m, E] at positions 0 … m−1 →
        residual stream (before ``ln_f``) at token ``last[r]`` of each row [n, E]. With ``kv``
        (n rows, m <= T), each layer's K/V of the m tokens are written into slots 0 … m−1. Rows
        may be right-padded after ``last[r]``: a token sees only tokens before it.

        The last layer runs its attention query, projection and FFN on the ``last`` tokens only
        (every token's K/V is still computed): nothing else reads them.
        """
        n, m, E = x.shape
        H, d = self.H, self.d
        if self.pos is not None:
            x = x + self.pos[:m]
        x = x.reshape(n * m, E)
        rots = self._prefill_rot[m]
        off = 2 * E if self.rot is not None else 0  # q, k, v start after [R·q, R·k] with RoPE
        pick = self._index(np.arange(0, n * m, m) + last)  # rows of x at `last`
        for i, w in enumerate(self.layers):
            y = self._qkv(x, w, rots[i], m)  # [n·m, 5E or 3E]
            qkv = y.view(n, m, -1)[..., off:]  # [n, m, 3E]
            if kv is not None:
                kv.layer[i][:, :m].copy_(qkv[..., E:])
            if i + 1 < self.L:
                q, k, v = qkv.unflatten(-1, (3, H, d)).permute(2, 0, 3, 1, 4).unbind(0)  # [n, H, m, d]
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = self._attend_and_ffn(x, a.transpose(1, 2).reshape(n * m, E), w)
            else:
                k, v = qkv[..., E:].unflatten(-1, (2, H, d)).permute(2, 0, 3, 1, 4).unbind(0)
                q = y.index_select(0, pick)[:, off: off + E].view(n, H, 1, d)
                mask = self._prefill_mask[m].index_select(0, self._index(last)).view(n, 1, 1, m)
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [n, H, 1, d]
                x = self._attend_and_ffn(x.index_select(0, pick), a.view(n, E), w)
        return x

    def append(self, x: torch.Tensor, slot: np.ndarray, kv: KVRows) -> torch.Tensor:
        """One new token per row: x [n, E] at slot (= position) ``slot[r]`` of row r's context
        in ``kv`` (slots < slot[r] valid), attending to slots <= slot[r]; its K/V are written
        there. Returns the residual stream [n, E] (before ``ln_f``)."""
        n, E = x.shape
        H, d, T, L = self.H, self.d, self.T, self.L
        slot_t = self._index(slot)
        table = None
        if self.rot is not None:
            table = self.rot.index_select(0, slot_t)  # [n, (2 + L)·2E]
        else:
            x = x + self.pos.index_select(0, slot_t)
        off = 2 * E if table is not None else 0
        mask = self.hidden_after.index_select(0, slot_t).view(n, 1, 1, T)
        # Rows of kv.flat receiving the new K/V, layer by layer: [L, n].
        flat = self._index(np.arange(0, n * L * T, L * T) + slot + np.arange(0, L * T, T)[:, None])
        for i, w in enumerate(self.layers):
            y = self._qkv(x, w, None if table is None else self._rot_of(table, i))  # [n, 5E or 3E]
            kv.flat.index_copy_(0, flat[i], y[:, off + E:])
            a = F.scaled_dot_product_attention(y[:, off: off + E].view(n, H, 1, d), kv.k[i], kv.v[i],
                                               attn_mask=mask)
            x = self._attend_and_ffn(x, a.view(n, E), w)
        return x

    # --- heads ------------------------------------------------------------------------------
    def action_heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Residual stream at action tokens [n, E] → (next latent [n, E], reward logits [n, N])."""
        latent, reward = self.action_pair(torch.layer_norm(h, (self.E,), *self.ln_f))
        if self.latent_ln is not None:
            return torch.layer_norm(latent, (self.E,), *self.latent_ln), reward
        return self.latent_norm(latent), reward

    def obs_heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Residual stream at observation tokens [n, E] → (value logits [n, N], policy logits [n, A])."""
        return self.obs_pair(torch.layer_norm(h, (self.E,), *self.ln_f))


# --- export to the numba search step ---------------------------------------------------------


def numba_supported(net: InferenceNet) -> bool:
    """Whether the numba step can serve ``net``: a float32 snapshot on the CPU."""
    return net.device.type == "cpu" and net.dtype == torch.float32


def _np(x: torch.Tensor) -> np.ndarray:
    """A C-contiguous float32 numpy copy of ``x`` (C-contiguous everywhere: one compiled type)."""
    return np.ascontiguousarray(x.detach().to("cpu", torch.float32).numpy()).copy()


def _np(x: torch.Tensor) -> np.ndarray:
    """A C-contiguous float32 numpy copy of ``x`` (C-contiguous everywhere: one compiled type)."""
    return np.ascontiguousarray(x.detach().to("cpu", torch.float32).numpy()).copy()


def _pair(pair: _HeadPair) -> tuple[np.ndarray, ...]:
    affine = torch.stack([pair.gamma, pair.beta], dim=1)  # [2 heads, (γ, β), F]
    return (_np(pair.w_1), _np(pair.b_1), _np(affine), _np(pair.w_a), _np(pair.b_a), _np(pair.w_b),
            _np(pair.b_b))


def weights_of(net: InferenceNet) -> Weights:
    """The kernel's weights of ``net``, built on first use and kept on the snapshot (a new
    weight version builds a new snapshot, hence new weights)."""
    if net.numba_weights is not None:
        return net.numba_weights
    E, T = net.E, net.T
    rope = net.rot is not None
    off = 2 * E if rope else 0  # the folded RoPE projection is [R·q, R·k, q, k, v]: keep q, k, v
    layers = net.layers

    def stack(f: Callable[[Any], torch.Tensor]) -> np.ndarray:  # one array per weight, [L, ...]
        return np.ascontiguousarray(np.stack([_np(f(w)) for w in layers]))

    model = net.model
    if rope:
        cos, sin = _np(model.rope_cos[:T]), _np(model.rope_sin[:T])
        pos = np.zeros((0, E), np.float32)
    else:
        cos = sin = np.zeros((0, 0), np.float32)
        pos = _np(net.pos)
    ln_f = np.stack([_np(net.ln_f[0]), _np(net.ln_f[1])])
    if net.latent_ln is not None:
        latent_ln, latent_eps, group = np.stack([_np(net.latent_ln[0]), _np(net.latent_ln[1])]), net.latent_ln[2], 0
    else:
        latent_ln, latent_eps, group = np.zeros((2, E), np.float32), 0.0, int(net.latent_norm.group)
    ap, op = net.action_pair, net.obs_pair
    eps = [e for w in layers for e in (w.eps1, w.eps2)] + [net.ln_f[2], ap.eps1, ap.eps2, op.eps1, op.eps2,
                                                           latent_eps]
    w = Weights(
        stack(lambda w: w.w_qkv[:, off:]), stack(lambda w: w.b_qkv[off:]), stack(lambda w: w.w_proj),
        stack(lambda w: w.b_proj), stack(lambda w: w.w_1), stack(lambda w: w.b_1), stack(lambda w: w.w_2),
        stack(lambda w: w.b_2), cos, sin, pos, _np(net.action_tokens), ln_f, latent_ln, *_pair(ap), *_pair(op),
        np.asarray(eps, np.float32), np.asarray([net.H, group], np.int64))
    net.numba_weights = w
    return w
