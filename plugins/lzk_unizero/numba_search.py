"""The search step of :class:`~lzk_unizero.inference.SearchSession` as one numba kernel.

Shapes: n rows in a call, R store rows, T capacity, L layers, E width, H heads, d = E/H,
F = 4E hidden width, Nv / Nr value / reward atoms, A actions.

Why: at search sizes (8…128 rows, one or two new tokens each) the torch forward costs ~180 small
ops per simulation at 3–7 µs each, while the arithmetic is ~2M multiply-adds. One compiled call
per simulation does the whole step for every row: extend the parent's context (or rebuild a full
one from its last ``keep`` tokens), run the action token and the predicted latent through the
blocks with causal attention over the cached K/V, apply the heads, decode.

It reads and writes the same :class:`~lzk_unizero.kv_cache.NodeStore` buffers as the torch path
(numpy views of them: ``tokens`` [R, T, E], ``kv`` [R, L, T, 2E] with K rotated and V without its
bias, ``length`` [R]), so root inference stays in torch and the invariants of ``kv_cache.py``
hold unchanged. Weights (:class:`Weights`) are float32 numpy copies of a folded snapshot (the
same folding: LayerNorm affines in the following linears, V's bias in the projection's), made
once per snapshot by :func:`lzk_unizero.snapshot.weights_of`, so they follow the policy's weight
versions; this module knows nothing of the snapshot's own layout.

Numerics: float32 with float64 LayerNorm moments and support expectations, no fastmath; the
blocks (:mod:`lzk_unizero.numba_ops`) differ from torch's ops by rounding only (tests bound it).

Compilation: one signature (float32 C-contiguous arrays, int64 indices), cached on disk
(``cache=True``): ~10 s once per install or source change, ~50 ms to load in a new process.
numba checks only the timestamp of the file that defines a cached function, and this one has
the blocks of ``numba_ops.py`` compiled in: after editing that file, touch this one (or clear
``__pycache__``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from numba import njit

from lzk_unizero import numba_ops as ops

if TYPE_CHECKING:
    from lzk_common.support import DiscreteSupport
    from lzk_unizero.kv_cache import NodeStore

_jit = njit(cache=True, nogil=True, error_model="numpy")  # as numba_ops


class Weights(NamedTuple):
    """The numba kernel's view of a folded snapshot (all float32 C-contiguous, except
    ``ints``). Matrices are [in, out]."""

    w_qkv: np.ndarray  # [L, E, 3E]: q, k, v projections of the normalised input (ln1 folded)
    b_qkv: np.ndarray  # [L, 3E]: v's part is 0 (folded into b_proj)
    w_proj: np.ndarray  # [L, E, E]
    b_proj: np.ndarray  # [L, E]
    w_1: np.ndarray  # [L, E, F] (ln2 folded)
    b_1: np.ndarray  # [L, F]
    w_2: np.ndarray  # [L, F, E]
    b_2: np.ndarray  # [L, E]
    rope_cos: np.ndarray  # [T, d/2] (RoPE) or [0, 0]
    rope_sin: np.ndarray  # [T, d/2] (RoPE) or [0, 0]
    pos: np.ndarray  # [T, E] learned positions or [0, E]
    action_tokens: np.ndarray  # [A, E]
    ln_f: np.ndarray  # [2, E]: γ, β of the final norm
    latent_ln: np.ndarray  # [2, E]: γ, β of the next-latent LayerNorm (unused with SimNorm)
    act_w1: np.ndarray  # [E, 2F]: first layers of the next-latent and reward heads (norm folded)
    act_b1: np.ndarray  # [2F]
    act_affine: np.ndarray  # [2, 2, F]: (γ, β) of the two heads' hidden norms
    act_wa: np.ndarray  # [F, E] next-latent head's last layer
    act_ba: np.ndarray  # [E]
    act_wb: np.ndarray  # [F, Nr] reward head's last layer
    act_bb: np.ndarray  # [Nr]
    obs_w1: np.ndarray  # [E, 2F]: value and policy heads
    obs_b1: np.ndarray  # [2F]
    obs_affine: np.ndarray  # [2, 2, F]
    obs_wa: np.ndarray  # [F, Nv] value head
    obs_ba: np.ndarray  # [Nv]
    obs_wb: np.ndarray  # [F, A] policy head
    obs_bb: np.ndarray  # [A]
    eps: np.ndarray  # [2L + 6] float32: ln1/ln2 of each layer, ln_f, action pair (2), obs pair (2), latent LN
    ints: np.ndarray  # [2] int64: heads H, SimNorm group (0: LayerNorm latent norm)


class NumbaStep:
    """:func:`search_step` bound to one search: the snapshot's weights and numpy views of the
    store's buffers (no copies: the kernel extends the contexts root inference wrote in torch).
    Build it after ``store.reset``. ``__call__(parent [n], child [n], action [n])`` (store rows,
    actions) → (reward logits [n, Nr], value logits [n, Nv], policy logits [n, A], expectations
    [2, n] of reward and value in h-space), fresh float32 arrays."""

    def __init__(self, weights: Weights, store: NodeStore, keep: int, value_support: DiscreteSupport,
                 reward_support: DiscreteSupport) -> None:
        self.weights, self.keep, self.store = weights, keep, store
        self.tokens, self.kv = store.tokens.numpy(), store.kv.numpy()
        self.supports = tuple(np.ascontiguousarray(s.values.detach().to("cpu", torch.float32).numpy()).copy()
                              for s in (reward_support, value_support))

    def __call__(self, parent: np.ndarray, child: np.ndarray,
                 action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        n, w = parent.shape[0], self.weights
        out = (np.empty((n, w.act_bb.shape[0]), np.float32), np.empty((n, w.obs_ba.shape[0]), np.float32),
               np.empty((n, w.obs_bb.shape[0]), np.float32), np.empty((2, n), np.float32))
        # int64 C-contiguous indices: the one signature the kernel is compiled (and cached) for.
        search_step(np.ascontiguousarray(parent, dtype=np.int64), np.ascontiguousarray(child, dtype=np.int64),
                    np.ascontiguousarray(action, dtype=np.int64), self.keep, self.tokens, self.kv,
                    self.store.length, w, *self.supports, *out)
        return out


# --- the blocks ----------------------------------------------------------------------------

@_jit
def _append(x: np.ndarray, rows: np.ndarray, slot: np.ndarray, stop: int, kv: np.ndarray, w_qkv: np.ndarray,
            b_qkv: np.ndarray, w_proj: np.ndarray, b_proj: np.ndarray, w_1: np.ndarray, b_1: np.ndarray,
            w_2: np.ndarray, b_2: np.ndarray, cos: np.ndarray, sin: np.ndarray, pos: np.ndarray, eps: np.ndarray,
            heads: int) -> None:
    """New tokens through the blocks: x [m, E] token inputs of store rows ``rows`` [m] at slots
    ``slot`` [m] (= positions; slots < slot[r] hold the row's context or are themselves among the
    m tokens). Each layer first writes every token's K/V at its slot, then each token attends to
    slots <= slot[r]: one token per row is an incremental step, a row's tokens 0 … k−1 together
    are a causal prefill. On return x holds the residual stream (before ``ln_f``), unless
    ``stop`` < L: then only K/V are wanted and the pass ends after writing layer ``stop``'s.
    (Weights: see :class:`Weights`.)
    """
    m, E = x.shape
    L = w_qkv.shape[0]
    F = w_1.shape[2]
    if pos.shape[0] > 0:
        for r in range(m):
            for j in range(E):
                x[r, j] += pos[slot[r], j]
    a = np.empty((m, E), np.float32)
    qkv = np.empty((m, 3 * E), np.float32)
    att = np.empty((m, E), np.float32)
    hid = np.empty((m, F), np.float32)
    for li in range(L):
        ops.layer_norm(x, eps[2 * li], a)
        ops.linear(a, w_qkv[li], b_qkv[li], qkv)
        for r in range(m):
            if cos.shape[0] > 0:
                ops.rope(qkv[r, :E], heads, cos[slot[r]], sin[slot[r]])
                ops.rope(qkv[r, E: 2 * E], heads, cos[slot[r]], sin[slot[r]])
            ops.copy(kv[rows[r], li, slot[r]], qkv[r, E:])
        if li == stop:
            return
        for r in range(m):
            ops.attend(qkv[r, :E], kv[rows[r], li], slot[r], heads, att[r])
        ops.linear(att, w_proj[li], b_proj[li], a)
        for r in range(m):
            for j in range(E):
                x[r, j] += a[r, j]
        ops.layer_norm(x, eps[2 * li + 1], a)
        ops.linear(a, w_1[li], b_1[li], hid)
        ops.gelu(hid)
        ops.linear(hid, w_2[li], b_2[li], a)
        for r in range(m):
            for j in range(E):
                x[r, j] += a[r, j]


@_jit
def _head_pair(h: np.ndarray, ln_f: np.ndarray, eps_f: np.float32, eps1: np.float32, eps2: np.float32,
               w1: np.ndarray, b1: np.ndarray, affine: np.ndarray, wa: np.ndarray, ba: np.ndarray,
               wb: np.ndarray, bb: np.ndarray, out_a: np.ndarray, out_b: np.ndarray) -> None:
    """Two heads on the residual stream h [m, E]: ln_f (with affine), the heads' shared
    normalisation and [E, 2F] first layer, per-head hidden norm (γ, β) and GELU, last layers
    → out_a [m, Na], out_b [m, Nb]."""
    m, E = h.shape
    F = wa.shape[0]
    y = np.empty((m, E), np.float32)
    ops.layer_norm(h, eps_f, y)
    ops.affine(y, ln_f[0], ln_f[1])
    ops.layer_norm(y, eps1, y)
    z = np.empty((m, 2 * F), np.float32)
    ops.linear(y, w1, b1, z)
    za = np.empty((m, F), np.float32)
    zb = np.empty((m, F), np.float32)
    for r in range(m):
        ops.copy(za[r], z[r, :F])
        ops.copy(zb[r], z[r, F:])
    ops.layer_norm(za, eps2, za)
    ops.affine(za, affine[0, 0], affine[0, 1])
    ops.gelu(za)
    ops.layer_norm(zb, eps2, zb)
    ops.affine(zb, affine[1, 0], affine[1, 1])
    ops.gelu(zb)
    ops.linear(za, wa, ba, out_a)
    ops.linear(zb, wb, bb, out_b)


# --- the step ---------------------------------------------------------------------------------

@_jit
def search_step(parent: np.ndarray, child: np.ndarray, action: np.ndarray, keep: int, tokens: np.ndarray,
                kv: np.ndarray, length: np.ndarray, w: Weights, reward_support: np.ndarray,
                value_support: np.ndarray, reward_logits: np.ndarray, value_logits: np.ndarray,
                policy_logits: np.ndarray, expect: np.ndarray) -> None:
    """Build the contexts of store rows ``child`` [n] from rows ``parent`` [n] and ``action`` [n]
    (one search simulation for n trees) and write their outputs.

    A child is its parent's context + (action token, predicted latent): the rule of
    ``kv_cache.py``. A parent with length + 2 <= T is extended (its tokens and K/V copied, two
    tokens appended); a longer one is rebuilt from its last ``keep`` tokens at positions
    0 … keep−1 (one causal pass), then extended the same way. Rows may mix both paths. Outputs:
    reward_logits [n, Nr], value_logits [n, Nv], policy_logits [n, A], expect [2, n] (reward and
    value expectations in h-space); ``length[child]`` is set. Parents and children are distinct
    rows (children are new nodes), so rows never read what another row of the call writes.
    """
    w_qkv, b_qkv, w_proj, b_proj, w_1, b_1, w_2, b_2 = w.w_qkv, w.b_qkv, w.w_proj, w.b_proj, w.w_1, w.b_1, w.w_2, w.b_2
    cos, sin, pos, eps, heads, group = w.rope_cos, w.rope_sin, w.pos, w.eps, w.ints[0], w.ints[1]
    action_tokens, ln_f, latent_ln = w.action_tokens, w.ln_f, w.latent_ln
    n = parent.shape[0]
    E = tokens.shape[2]
    L = w_qkv.shape[0]
    slot = np.empty(n, np.int64)  # slot of the action token; the latent goes at slot + 1
    rebuild = np.empty(n, np.int64)
    n_rebuild = 0
    for r in range(n):
        p, c = parent[r], child[r]
        plen = length[p]
        if plen + 2 <= tokens.shape[1]:
            for j in range(plen):
                ops.copy(tokens[c, j], tokens[p, j])
                for li in range(L):
                    ops.copy(kv[c, li, j], kv[p, li, j])
            slot[r] = plen
        else:
            for j in range(keep):
                ops.copy(tokens[c, j], tokens[p, plen - keep + j])
            slot[r] = keep
            rebuild[n_rebuild] = c
            n_rebuild += 1
        ops.copy(tokens[c, slot[r]], action_tokens[action[r]])
    # The rebuilt windows' tokens (n_rebuild·keep rows; none without rebuilds) and the action tokens.
    M = n_rebuild * keep
    win_rows, win_slot, win_x = np.empty(M, np.int64), np.empty(M, np.int64), np.empty((M, E), np.float32)
    for r in range(n_rebuild):
        for j in range(keep):
            win_rows[r * keep + j], win_slot[r * keep + j] = rebuild[r], j
            ops.copy(win_x[r * keep + j], tokens[rebuild[r], j])
    x_act, latent = np.empty((n, E), np.float32), np.empty((n, E), np.float32)
    for r in range(n):
        ops.copy(x_act[r], tokens[child[r], slot[r]])
    # Three passes through the blocks, each but the first followed by its pair of heads:
    # 0. the rebuilt windows, all their tokens at once: a causal prefill, because _append writes
    #    a layer's K/V of every token before any attends (outputs unused: stop after the K/V);
    # 1. the action tokens → next latent, reward logits; 2. the latents → value, policy logits.
    # One loop rather than five call sites: LLVM inlines each call site, and one copy of _append
    # and of _head_pair cuts this function's (one-off) compile time by a third.
    for phase in range(3):
        if phase == 0:
            x, rows, at, stop = win_x, win_rows, win_slot, L - 1
        elif phase == 1:
            x, rows, at, stop = x_act, child, slot, L
        else:
            x, rows, at, stop = latent, child, slot, L
        if x.shape[0] > 0:
            _append(x, rows, at, stop, kv, w_qkv, b_qkv, w_proj, b_proj, w_1, b_1, w_2, b_2, cos, sin, pos, eps,
                    heads)
        if phase == 0:
            continue
        if phase == 1:
            w1, b1, affine, wa, ba, wb, bb = w.act_w1, w.act_b1, w.act_affine, w.act_wa, w.act_ba, w.act_wb, w.act_bb
            out_a, out_b = latent, reward_logits
        else:
            w1, b1, affine, wa, ba, wb, bb = w.obs_w1, w.obs_b1, w.obs_affine, w.obs_wa, w.obs_ba, w.obs_wb, w.obs_bb
            out_a, out_b = value_logits, policy_logits
        k = 2 * L + 2 * phase - 1  # the pair's two norm eps
        _head_pair(x, ln_f, eps[2 * L], eps[k], eps[k + 1], w1, b1, affine, wa, ba, wb, bb, out_a, out_b)
        if phase == 2:
            break
        if group > 0:
            ops.softmax_groups(latent, group)
        else:
            ops.layer_norm(latent, eps[2 * L + 5], latent)
            ops.affine(latent, latent_ln[0], latent_ln[1])
        for r in range(n):
            ops.copy(tokens[child[r], slot[r] + 1], latent[r])
            slot[r] += 1
            length[child[r]] = slot[r] + 1
    ops.expectation(reward_logits, reward_support, expect[0])
    ops.expectation(value_logits, value_support, expect[1])
