"""float32 building blocks of the numba search step (:mod:`lzk_unizero.numba_search`), written
for small row batches: x [m, k] with m = 1…~1000 rows and k = 16…512 features.

Numerics: no fastmath, so LLVM keeps IEEE semantics and never reassociates a sum; loops are
written so that it still vectorises them: matrix products as axpys over contiguous outputs,
LayerNorm moments in float64 with four partial sums, GELU through a rational tanh (mul, add,
div only). Results differ from torch's float32 ops by rounding only (tests bound it).

Callers compile these into their own cached code, which numba does not invalidate when this
file changes: after editing it, touch ``numba_search.py`` (or clear ``__pycache__``).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

# error_model="numpy": no zero-division checks in the loops (every divisor is > 0);
# nogil: searches in different threads can overlap.
_jit = njit(cache=True, nogil=True, error_model="numpy")


@_jit
def copy(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[:] = src for 1-D arrays (an explicit loop: numba's slice assignment is generic
    broadcasting code that costs seconds of compile time per use)."""
    for j in range(src.shape[0]):
        dst[j] = src[j]


@_jit
def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
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
def layer_norm(x: np.ndarray, eps: np.float32, out: np.ndarray) -> None:
    """LayerNorm without affine over the last axis: x [m, k] → out [m, k] (may alias x).
    Moments in float64 with four partial sums (a serial sum is latency-bound: 2x slower)."""
    m, k = x.shape
    k4 = k - k % 4
    for r in range(m):
        xr = x[r]
        a0 = a1 = a2 = a3 = 0.0
        for j in range(0, k4, 4):
            a0 += xr[j]
            a1 += xr[j + 1]
            a2 += xr[j + 2]
            a3 += xr[j + 3]
        for j in range(k4, k):
            a0 += xr[j]
        mean = ((a0 + a1) + (a2 + a3)) / k
        a0 = a1 = a2 = a3 = 0.0
        for j in range(0, k4, 4):
            d0, d1, d2, d3 = xr[j] - mean, xr[j + 1] - mean, xr[j + 2] - mean, xr[j + 3] - mean
            a0 += d0 * d0
            a1 += d1 * d1
            a2 += d2 * d2
            a3 += d3 * d3
        for j in range(k4, k):
            d0 = xr[j] - mean
            a0 += d0 * d0
        inv = np.float32(1.0 / math.sqrt(((a0 + a1) + (a2 + a3)) / k + eps))
        mu = np.float32(mean)
        o = out[r]
        for j in range(k):
            o[j] = (xr[j] - mu) * inv


@_jit
def affine(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> None:
    """x[r] ← x[r]·γ + β in place: x [m, k], γ, β [k]."""
    m, k = x.shape
    for r in range(m):
        for j in range(k):
            x[r, j] = x[r, j] * gamma[j] + beta[j]


# Eigen's rational approximation of tanh on [−c, c] (odd degree-13 numerator, even degree-6
# denominator; |error| <= 4e-7 against float64 tanh, as torch's float32 GELU): mul/add/div only,
# so LLVM vectorises the GELU loop (libm's exp/tanh are scalar calls, 3x slower here).
_TANH_CLAMP = np.float32(7.90531110763549805)
_TANH_P = (np.float32(-2.76076847742355e-16), np.float32(2.00018790482477e-13), np.float32(-8.60467152213735e-11),
           np.float32(5.12229709037114e-08), np.float32(1.48572235717979e-05), np.float32(6.37261928875436e-04),
           np.float32(4.89352455891786e-03))
_TANH_Q = (np.float32(1.19825839466702e-06), np.float32(1.18534705686654e-04), np.float32(2.26843463243900e-03),
           np.float32(4.89352518554385e-03))
_SQRT_2_PI = np.float32(math.sqrt(2.0 / math.pi))
_SQRT_2_PI_C = np.float32(math.sqrt(2.0 / math.pi) * 0.044715)


@_jit
def tanh(u: np.float32) -> np.float32:
    """tanh(u) as p(u)/q(u) on the clamped u (Horner; coefficients highest degree first)."""
    u = min(max(u, -_TANH_CLAMP), _TANH_CLAMP)
    u2 = u * u
    p = _TANH_P[0]
    for c in _TANH_P[1:]:
        p = p * u2 + c
    q = _TANH_Q[0]
    for c in _TANH_Q[1:]:
        q = q * u2 + c
    return p * u / q


@_jit
def gelu(x: np.ndarray) -> None:
    """GELU, tanh approximation, in place on x [m, k]: ½x(1 + tanh(√(2/π)(x + 0.044715x³)))."""
    m, k = x.shape
    half, one = np.float32(0.5), np.float32(1.0)
    for r in range(m):
        xr = x[r]
        for j in range(k):
            v = xr[j]
            xr[j] = half * v * (one + tanh(v * (_SQRT_2_PI + _SQRT_2_PI_C * v * v)))


@_jit
def softmax_groups(x: np.ndarray, group: int) -> None:
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
def rope(x: np.ndarray, heads: int, cos: np.ndarray, sin: np.ndarray) -> None:
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
def attend(q: np.ndarray, kv: np.ndarray, last: int, heads: int, out: np.ndarray) -> None:
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
def expectation(logits: np.ndarray, support: np.ndarray, out: np.ndarray) -> None:
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
