"""Search inference with exact KV caches: a folded eval snapshot of the world model, root
windows, recurrent search steps, and sequence values.

Shapes: n rows, m tokens per row, B roots, W window observations, L layers, T capacity,
E width, H heads, d = E/H, N support atoms, A actions.

The cache invariants are documented in :mod:`lzk_unizero.kv_cache`; every function here keeps
them. Callers run these under ``torch.inference_mode()``.

Why a snapshot (:class:`InferenceNet`): at search batch sizes (8…128 rows of one to T − 1
tokens) a CPU forward pass costs mostly per-op overhead (a few µs per op, however small), so the
weights are refolded once per weight version into fewer ops; the model's own modules stay the
training / reference path:

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
(tests compare them with the uncached model forward of every node's tokens).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from lzk_muzero.support import DiscreteSupport, inverse_scalar_transform_np
from lzk_unizero.attention import rotate_half_rows
from lzk_unizero.kv_cache import NodeStore, keep_tokens
from lzk_unizero.model import Block, Head, WorldModel
from lzk_unizero.numba_search import NumbaStep, numba_supported


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
        #: numpy weights of the numba search step (numba_search.weights_of builds them on first use).
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


def root_inference(net: InferenceNet, obs: torch.Tensor, actions: torch.Tensor, n_obs: np.ndarray,
                   store: NodeStore | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Root windows → (value logits [n, N], policy logits [n, A], root latent [n, E]).

    obs [n, W, *O] right-padded windows whose first ``n_obs[b]`` observations are real (the last
    real one is the current observation), actions [n, W−1] the actions between them (padding:
    any valid index). Window b has 2·n_obs[b] − 1 tokens (<= capacity). With ``store`` (already
    :meth:`NodeStore.reset` for n roots), the windows become the contexts of node 0.
    """
    n_obs = np.asarray(n_obs, dtype=np.int64)
    model = net.model
    latents = model.encode(obs)  # [n, W, E]
    tokens = model.interleave(latents, model.embed_actions(actions))  # [n, 2W−1, E]
    n, m = tokens.shape[:2]
    lengths = 2 * n_obs - 1
    if int(lengths.max()) > net.T:
        raise ValueError(f"root window of {int(lengths.max())} tokens exceeds the context ({net.T})")
    kv = None
    if store is not None:
        m = min(m, net.T)  # padding beyond the longest window may be cut
        tokens = tokens[:, :m]
        store.tokens[:n, :m] = tokens
        store.length[:n] = lengths
        kv = KVRows.of(store.kv[:n], net.H)
    value, policy = net.obs_heads(net.prefill(tokens, lengths - 1, kv))
    root_latent = latents.reshape(n * latents.shape[1], -1).index_select(
        0, net._index(np.arange(n) * latents.shape[1] + n_obs - 1))
    return value, policy, root_latent


def _numpy_f32(x: torch.Tensor) -> np.ndarray:
    """A float32 numpy view (CPU float32 tensors, which search outputs are) or copy of x."""
    if x.dtype == torch.float32 and x.device.type == "cpu":
        return x.numpy()
    return x.detach().to("cpu", torch.float32).numpy()


_inverse_h = inverse_scalar_transform_np.ufunc  # the compiled ufunc: no dispatch wrapper per call


class SearchSession:
    """The ``recurrent_fn`` of one ``lzk_mcts.search`` over B roots, backed by a :class:`NodeStore`.

    Construction resets ``store`` for B roots × (S + 1) nodes and puts the root windows at node 0
    (``root_value_logits`` [B, N], ``root_policy_logits`` [B, A] are their outputs).
    ``__call__(batch_idx [B'], parent_node [B'], action [B'], new_node)`` builds the children's
    contexts at ``(new_node, b)``: it returns (reward [B'], value [B'], logits [B', A]) as float32
    numpy, rewards and values decoded.

    Per call, with ``cached`` (the default): when every parent context can take the (action,
    latent) pair, the children copy their parents' K/V and run two one-token passes; otherwise
    every row's child window (the rebuilt window for full rows, the parent's whole context for the
    others) is recomputed in one right-padded pass — a full row must recompute, and one batched
    pass of <= T − 1 tokens costs less than splitting the batch — and the latent token is then
    appended with the cache. ``cached=False`` recomputes both passes from the tokens (the
    reference the benchmark compares against); both keep the same tokens, so outputs agree.

    ``backend="numba"`` runs each call as one compiled kernel
    (:class:`lzk_unizero.numba_search.NumbaStep`) on the same store and tokens, with the same
    extend/rebuild rule per row (rows need not share a path, and any subset of trees is built in
    place); it needs a cached search of a float32 CPU snapshot (:func:`numba_supported`). Root
    inference stays in torch either way. ``backend="torch"`` is the reference.
    """

    def __init__(self, net: InferenceNet, store: NodeStore, obs: torch.Tensor, actions: torch.Tensor,
                 n_obs: np.ndarray, num_simulations: int, value_support: DiscreteSupport,
                 reward_support: DiscreteSupport, *, cached: bool = True, backend: str = "torch") -> None:
        if backend not in ("torch", "numba"):
            raise ValueError(f"backend must be 'torch' or 'numba', got {backend!r}")
        if backend == "numba" and not (cached and numba_supported(net)):
            raise ValueError("the numba backend needs cached=True and a float32 CPU snapshot")
        self.net, self.store, self.cached, self.backend = net, store, cached, backend
        self.B = obs.shape[0]
        store.reset(num_simulations + 1, self.B, net.action_tokens)
        self.root_value_logits, self.root_policy_logits, _ = root_inference(net, obs, actions, n_obs, store)
        self.kv = KVRows.of(store.kv, net.H)
        self.keep = keep_tokens(store.T)
        self.joint_decode = value_support.same_as(reward_support)
        self.value_support, self.reward_support = value_support, reward_support
        self._rows_T = np.arange(self.B) * store.T  # row offsets into a block's flattened tokens
        self.calls = 0
        self._numba = NumbaStep(net, store, self.keep, value_support, reward_support) if backend == "numba" else None
        #: When a list, every call appends (batch_idx, parent_node, action, new_node, reward
        #: logits, value logits, policy logits) as numpy arrays (tests, debugging).
        self.record: list[tuple[np.ndarray, ...]] | None = None

    def __call__(self, batch_idx: np.ndarray, parent_node: np.ndarray, action: np.ndarray,
                 new_node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._numba is not None:
            return self._call_numba(batch_idx, parent_node, action, new_node)
        st, net = self.store, self.net
        B, T, E = st.B, st.T, st.E
        b = np.asarray(batch_idx, dtype=np.int64)
        a = np.asarray(action, dtype=np.int64)
        n = b.shape[0]
        parent = np.asarray(parent_node, dtype=np.int64) * B + b
        plen = st.length[parent]
        # The driver lists trees in increasing b, so B' = B rows are one contiguous block of the
        # store and the children are built in place; otherwise in scratch rows, copied back.
        c0 = int(new_node) * B
        if n == B:
            kv, tokens = self.kv.rows(c0, n), st.tokens[c0: c0 + n]
        else:
            kv = KVRows.of(torch.zeros(n, st.L, T, 2 * E, device=net.device, dtype=net.dtype), net.H)
            tokens = torch.zeros(n, T, E, device=net.device, dtype=net.dtype)
        tokens_flat = tokens.view(n * T, E)
        rows_T = self._rows_T[:n]

        if self.cached and int(plen.max()) + 2 <= T:  # every child extends its parent's context
            parent_t = net._index(parent)
            kv.kv.copy_(st.kv.index_select(0, parent_t))
            tokens.copy_(st.tokens.index_select(0, parent_t))
            x_act = st.source.index_select(0, net._index(st.action_base + a))
            tokens_flat.index_copy_(0, net._index(rows_T + plen), x_act)
            h_act = net.append(x_act, plen, kv)
            slot = plen + 1
        else:
            start = np.where(plen + 2 > T, plen - self.keep, 0)
            width = plen - start + 1  # window + action token
            m = int(width.max())
            j = np.arange(m)
            # Window tokens, then the action token; padding after it repeats the action (never read).
            src = np.where(j < width[:, None] - 1, (parent * T + start)[:, None] + j, st.action_base + a[:, None])
            x = st.source.index_select(0, net._index(src.reshape(-1))).view(n, m, E)
            tokens[:, :m] = x
            h_act = net.prefill(x, width - 1, kv if self.cached else None)
            slot = width
        latent, reward = net.action_heads(h_act)
        tokens_flat.index_copy_(0, net._index(rows_T + slot), latent)
        if self.cached:
            h_obs = net.append(latent, slot, kv)
        else:
            h_obs = net.prefill(tokens[:, : int(slot.max()) + 1], slot, None)
        value, policy = net.obs_heads(h_obs)
        child = c0 + b
        st.length[child] = slot + 1
        if n != B:
            child_t = net._index(child)
            st.kv.index_copy_(0, child_t, kv.kv)
            st.tokens.index_copy_(0, child_t, tokens)
        self.calls += 1
        if self.record is not None:
            self.record.append((b.copy(), np.array(parent_node), a.copy(), np.array(new_node),
                                *(x.detach().cpu().numpy() for x in (reward, value, policy))))
        return (*self._decode(reward, value), _numpy_f32(policy))

    def _call_numba(self, batch_idx: np.ndarray, parent_node: np.ndarray, action: np.ndarray,
                    new_node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        b = np.asarray(batch_idx, dtype=np.int64)
        B = self.store.B
        reward, value, policy, expect = self._numba(np.asarray(parent_node, dtype=np.int64) * B + b,
                                                    int(new_node) * B + b, action)
        self.calls += 1
        if self.record is not None:
            self.record.append((b.copy(), np.array(parent_node), np.array(action, dtype=np.int64),
                                np.array(new_node), reward, value, policy.copy()))
        r, v = _inverse_h(expect)
        return r, v, policy

    def _decode(self, reward: torch.Tensor, value: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """h⁻¹(E_softmax[support]) of reward and value logits [n, N] → two [n] float32 arrays."""
        if self.joint_decode:  # one softmax·support reduction for both heads
            both = torch.softmax(torch.stack([reward, value]).float(), dim=-1)  # [2, n, N]
            r, v = _inverse_h(_numpy_f32(torch.mv(both.view(-1, both.shape[-1]), self.value_support.values))
                              ).reshape(2, -1)
            return r, v
        return (_inverse_h(_numpy_f32(self.reward_support.expectation(reward))),
                _inverse_h(_numpy_f32(self.value_support.expectation(value))))


def sequence_values(model: WorldModel, obs: torch.Tensor, actions: torch.Tensor,
                    value_support: DiscreteSupport) -> torch.Tensor:
    """Values of every observation of teacher-forced sequences: obs [M, T, *O], actions [M, T−1]
    → [M, T] float32 (decoded), from one uncached causal pass over 2T − 1 tokens.

    This is the bootstrap-value computation of SPEC §4.5 with all T observations kept (LightZero
    drops the last one and duplicates the previous value) and positions starting at 0 (LightZero
    offsets them by the sample's first timestep, which only RoPE forgives).
    """
    latents = model.encode(obs)
    h = model.forward_tokens(model.interleave(latents, model.embed_actions(actions)))
    value, _ = model.obs_heads(h[:, 0::2])
    return value_support.decode(value)
