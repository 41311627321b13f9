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
hold unchanged. Weights are float32 numpy copies of an :class:`~lzk_unizero.inference.InferenceNet`
(the same folding: LayerNorm affines in the following linears, V's bias in the projection's),
made once per snapshot (:func:`weights_of`), so they follow the policy's weight versions.

Numerics: float32 everywhere except LayerNorm moments and the support expectation (float64
accumulators); no fastmath, so results differ from torch's only by summation order (tests bound
the difference). Matrix products are written ``out[r, :] += x[r, i]·W[i, :]`` (W stored [in, out]):
the inner loop runs over contiguous outputs without a reduction, which LLVM vectorises without
reassociating any sum (see :func:`_linear`).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from numba import njit

if TYPE_CHECKING:
    from lzk_unizero.inference import InferenceNet, _HeadPair

# error_model="numpy": no zero-division checks in the loops (every divisor is > 0);
# nogil: searches in different threads can overlap. No fastmath: the float semantics stay
# IEEE, so the kernel equals torch up to summation order.
_jit = njit(cache=True, nogil=True, error_model="numpy")

_GELU_C1 = np.float32(2.0 * math.sqrt(2.0 / math.pi))
_GELU_C2 = np.float32(2.0 * math.sqrt(2.0 / math.pi) * 0.044715)


def _np(x: torch.Tensor) -> np.ndarray:
    """A C-contiguous float32 numpy copy of ``x`` (one type per argument: one compilation)."""
    return np.ascontiguousarray(x.detach().to("cpu", torch.float32).numpy()).copy()


class Weights(NamedTuple):
    """The numba kernel's view of an :class:`InferenceNet` (all float32 C-contiguous, except
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


def _pair(pair: _HeadPair) -> tuple[np.ndarray, ...]:
    affine = torch.stack([pair.gamma, pair.beta], dim=1)  # [2 heads, (γ, β), F]
    return (_np(pair.w_1), _np(pair.b_1), _np(affine), _np(pair.w_a), _np(pair.b_a), _np(pair.w_b),
            _np(pair.b_b))


def weights_of(net: InferenceNet) -> Weights:
    """The kernel's weights of ``net``, built on first use and kept on the snapshot (a new
    weight version builds a new snapshot, hence new weights)."""
    cached = getattr(net, "_numba_weights", None)
    if cached is not None:
        return cached
    E, L, T = net.E, net.L, net.T
    rope = net.rot is not None
    off = 2 * E if rope else 0  # the folded RoPE projection is [R·q, R·k, q, k, v]: keep q, k, v
    layers = net.layers
    stack = lambda f: np.ascontiguousarray(np.stack([_np(f(w)) for w in layers]))  # noqa: E731
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
    net._numba_weights = w
    return w


# --- building blocks (rows of a [m, *] batch) -----------------------------------------------

@_jit
def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[:] = src for 1-D arrays (an explicit loop: numba's slice assignment is generic
    broadcasting code that costs seconds of compile time per use)."""
    for j in range(src.shape[0]):
        dst[j] = src[j]


@_jit
def _linear(x: np.ndarray, w: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = b + x @ w: x [m, k], w [k, o], b [o], out [m, o].

    Four input features per pass over a row of ``out`` (summed pairwise, then added): a quarter
    of the loads and stores of out of a one-feature axpy, 1.5x faster and no less accurate. The
    i loop is outermost so that W streams through once for all m rows; the j loop is a
    vectorisable axpy (no reduction to reassociate)."""
    m, k = x.shape
    o = w.shape[1]
    for r in range(m):
        for j in range(o):
            out[r, j] = b[j]
    k4 = k - k % 4
    for i in range(0, k4, 4):
        w0, w1, w2, w3 = w[i], w[i + 1], w[i + 2], w[i + 3]
        for r in range(m):
            x0, x1, x2, x3 = x[r, i], x[r, i + 1], x[r, i + 2], x[r, i + 3]
            o_r = out[r]
            for j in range(o):
                o_r[j] += (x0 * w0[j] + x1 * w1[j]) + (x2 * w2[j] + x3 * w3[j])
    for i in range(k4, k):
        for r in range(m):
            xi = x[r, i]
            for j in range(o):
                out[r, j] += xi * w[i, j]


@_jit
def _layer_norm(x: np.ndarray, eps: np.float32, out: np.ndarray) -> None:
    """LayerNorm without affine over the last axis: x [m, k] → out [m, k] (may alias x)."""
    m, k = x.shape
    for r in range(m):
        mean = 0.0
        for j in range(k):
            mean += x[r, j]
        mean /= k
        var = 0.0
        for j in range(k):
            dv = x[r, j] - mean
            var += dv * dv
        inv = np.float32(1.0 / math.sqrt(var / k + eps))
        mu = np.float32(mean)
        for j in range(k):
            out[r, j] = (x[r, j] - mu) * inv


@_jit
def _affine(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> None:
    """x[r] ← x[r]·γ + β in place: x [m, k], γ, β [k]."""
    m, k = x.shape
    for r in range(m):
        for j in range(k):
            x[r, j] = x[r, j] * gamma[j] + beta[j]


@_jit
def _gelu(x: np.ndarray) -> None:
    """GELU (tanh approximation) in place, as x·σ(2u), 2u = x·(c1 + c2·x²): the same function as
    torch's ``gelu(approximate='tanh')`` (and the torch search path's formula)."""
    m, k = x.shape
    one = np.float32(1.0)
    for r in range(m):
        for j in range(k):
            v = x[r, j]
            x[r, j] = v * (one / (one + math.exp(-(v * (_GELU_C1 + _GELU_C2 * v * v)))))


@_jit
def _softmax_groups(x: np.ndarray, group: int) -> None:
    """SimNorm in place: softmax over consecutive groups of ``group`` features of x [m, k]."""
    m, k = x.shape
    for r in range(m):
        for g0 in range(0, k, group):
            mx = x[r, g0]
            for j in range(g0 + 1, g0 + group):
                mx = max(mx, x[r, j])
            tot = np.float32(0.0)
            for j in range(g0, g0 + group):
                e = np.float32(math.exp(x[r, j] - mx))
                x[r, j] = e
                tot += e
            for j in range(g0, g0 + group):
                x[r, j] /= tot


@_jit
def _rope(x: np.ndarray, heads: int, cos: np.ndarray, sin: np.ndarray) -> None:
    """Rotate the pairs (x_i, x_{i+d/2}) of each head of x [E] in place by one position's
    angles cos, sin [d/2] (``attention.apply_rope``'s convention)."""
    d = x.shape[0] // heads
    half = d // 2
    for h in range(heads):
        base = h * d
        for i in range(half):
            c, s = cos[i], sin[i]
            x1, x2 = x[base + i], x[base + half + i]
            x[base + i] = x1 * c - x2 * s
            x[base + half + i] = x1 * s + x2 * c


@_jit
def _attend(q: np.ndarray, kv: np.ndarray, last: int, heads: int, out: np.ndarray) -> None:
    """Softmax attention of one query q [E] over slots 0 … last of kv [T, 2E] (K then V) →
    out [E]: per head, scores q·k/√d over the visible slots."""
    E = q.shape[0]
    d = E // heads
    scale = np.float32(1.0 / math.sqrt(d))
    score = np.empty(last + 1, np.float32)
    for h in range(heads):
        base = h * d
        for j in range(last + 1):
            acc = np.float32(0.0)
            for t in range(base, base + d):
                acc += q[t] * kv[j, t]
            score[j] = acc * scale
        mx = score[0]
        for j in range(1, last + 1):
            mx = max(mx, score[j])
        tot = np.float32(0.0)
        for j in range(last + 1):
            e = np.float32(math.exp(score[j] - mx))
            score[j] = e
            tot += e
        for t in range(base, base + d):
            out[t] = 0.0
        for j in range(last + 1):
            p = score[j] / tot
            for t in range(base, base + d):
                out[t] += p * kv[j, E + t]


@_jit
def _append(x: np.ndarray, rows: np.ndarray, slot: np.ndarray, stop: int, kv: np.ndarray, w_qkv: np.ndarray,
            b_qkv: np.ndarray, w_proj: np.ndarray, b_proj: np.ndarray, w_1: np.ndarray, b_1: np.ndarray,
            w_2: np.ndarray, b_2: np.ndarray, cos: np.ndarray, sin: np.ndarray, pos: np.ndarray, eps: np.ndarray,
            heads: int) -> None:
    """One new token per row through the blocks: x [m, E] token inputs of store rows ``rows``
    [m] at slots ``slot`` [m] (= positions; slots < slot[r] hold the row's context). Each
    layer writes the token's K/V at its slot, then the token attends to slots <= slot[r]. On
    return x holds the residual stream (before ``ln_f``), unless ``stop`` < L: then only K/V
    are wanted and the pass ends after writing layer ``stop``'s. (Weights: see :class:`Weights`.)
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
        _layer_norm(x, eps[2 * li], a)
        _linear(a, w_qkv[li], b_qkv[li], qkv)
        for r in range(m):
            if cos.shape[0] > 0:
                _rope(qkv[r, :E], heads, cos[slot[r]], sin[slot[r]])
                _rope(qkv[r, E: 2 * E], heads, cos[slot[r]], sin[slot[r]])
            _copy(kv[rows[r], li, slot[r]], qkv[r, E:])
        if li == stop:
            return
        for r in range(m):
            _attend(qkv[r, :E], kv[rows[r], li], slot[r], heads, att[r])
        _linear(att, w_proj[li], b_proj[li], a)
        for r in range(m):
            for j in range(E):
                x[r, j] += a[r, j]
        _layer_norm(x, eps[2 * li + 1], a)
        _linear(a, w_1[li], b_1[li], hid)
        _gelu(hid)
        _linear(hid, w_2[li], b_2[li], a)
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
    _layer_norm(h, eps_f, y)
    _affine(y, ln_f[0], ln_f[1])
    _layer_norm(y, eps1, y)
    z = np.empty((m, 2 * F), np.float32)
    _linear(y, w1, b1, z)
    za = np.empty((m, F), np.float32)
    zb = np.empty((m, F), np.float32)
    for r in range(m):
        _copy(za[r], z[r, :F])
        _copy(zb[r], z[r, F:])
    _layer_norm(za, eps2, za)
    _affine(za, affine[0, 0], affine[0, 1])
    _gelu(za)
    _layer_norm(zb, eps2, zb)
    _affine(zb, affine[1, 0], affine[1, 1])
    _gelu(zb)
    _linear(za, wa, ba, out_a)
    _linear(zb, wb, bb, out_b)


@_jit
def _expectation(logits: np.ndarray, support: np.ndarray, out: np.ndarray) -> None:
    """E_softmax(logits)[support] in h-space: logits [m, N], support [N] → out [m]."""
    m, N = logits.shape
    for r in range(m):
        mx = logits[r, 0]
        for j in range(1, N):
            mx = max(mx, logits[r, j])
        tot = 0.0
        acc = 0.0
        for j in range(N):
            e = math.exp(float(logits[r, j] - mx))
            tot += e
            acc += e * support[j]
        out[r] = acc / tot


# --- the step ---------------------------------------------------------------------------------

@_jit
def search_step(parent: np.ndarray, child: np.ndarray, action: np.ndarray, keep: int, tokens: np.ndarray,
                kv: np.ndarray, length: np.ndarray, w: Weights, reward_support: np.ndarray,
                value_support: np.ndarray, reward_logits: np.ndarray, value_logits: np.ndarray,
                policy_logits: np.ndarray, expect: np.ndarray) -> None:
    """Build the contexts of store rows ``child`` [n] from rows ``parent`` [n] and ``action`` [n]
    (one search simulation for n trees) and write their outputs.

    A child is its parent's context + (action token, predicted latent). A parent with length
    + 2 <= T is extended (its tokens and K/V copied, two tokens appended); a longer one is
    rebuilt from its last ``keep`` tokens at positions 0 … keep−1, one causal token at a time
    (equal to a full causal pass), then extended the same way. Outputs: reward_logits [n, Nr],
    value_logits [n, Nv], policy_logits [n, A], expect [2, n] (reward, value expectations in
    h-space); ``length[child]`` is set. Parents and children must be distinct rows.
    """
    # Unpacked once: passing the whole tuple to helpers would copy (and refcount) 30 arrays per call.
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
                _copy(tokens[c, j], tokens[p, j])
                for li in range(L):
                    _copy(kv[c, li, j], kv[p, li, j])
            slot[r] = plen
        else:
            for j in range(keep):
                _copy(tokens[c, j], tokens[p, plen - keep + j])
            slot[r] = keep
            rebuild[n_rebuild] = c
            n_rebuild += 1
        _copy(tokens[c, slot[r]], action_tokens[action[r]])
    if n_rebuild > 0:  # the rebuilt windows' K/V, token by token (their outputs are never read)
        rows = rebuild[:n_rebuild].copy()
        at = np.empty(n_rebuild, np.int64)
        x = np.empty((n_rebuild, E), np.float32)
        for j in range(keep):
            for r in range(n_rebuild):
                _copy(x[r], tokens[rows[r], j])
                at[r] = j
            _append(x, rows, at, L - 1, kv, w_qkv, b_qkv, w_proj, b_proj, w_1, b_1, w_2, b_2, cos, sin, pos, eps,
                    heads)
    x = np.empty((n, E), np.float32)
    for r in range(n):
        _copy(x[r], tokens[child[r], slot[r]])
    _append(x, child, slot, L, kv, w_qkv, b_qkv, w_proj, b_proj, w_1, b_1, w_2, b_2, cos, sin, pos, eps, heads)
    latent = np.empty((n, E), np.float32)
    _head_pair(x, ln_f, eps[2 * L], eps[2 * L + 1], eps[2 * L + 2], w.act_w1, w.act_b1, w.act_affine,
               w.act_wa, w.act_ba, w.act_wb, w.act_bb, latent, reward_logits)
    if group > 0:
        _softmax_groups(latent, group)
    else:
        _layer_norm(latent, eps[2 * L + 5], latent)
        _affine(latent, latent_ln[0], latent_ln[1])
    for r in range(n):
        _copy(tokens[child[r], slot[r] + 1], latent[r])
        slot[r] += 1
        length[child[r]] = slot[r] + 1
    _append(latent, child, slot, L, kv, w_qkv, b_qkv, w_proj, b_proj, w_1, b_1, w_2, b_2, cos, sin, pos, eps, heads)
    _head_pair(latent, ln_f, eps[2 * L], eps[2 * L + 3], eps[2 * L + 4], w.obs_w1, w.obs_b1, w.obs_affine,
               w.obs_wa, w.obs_ba, w.obs_wb, w.obs_bb, value_logits, policy_logits)
    _expectation(reward_logits, reward_support, expect[0])
    _expectation(value_logits, value_support, expect[1])
