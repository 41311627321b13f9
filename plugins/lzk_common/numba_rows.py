"""Row-wise fused passes of the learner's loss on CPU, for float32 and bfloat16 rows: the SSL
negative cosine's three row reductions in one pass and its gradient in one pass; the soft
cross-entropy of logits on the value and reward supports in two passes forward and one backward.

Why: the SSL heads' rows are [B·K, P] = [1280, 1024]. In torch the negative cosine reads them in
five passes forward (two norms, a product, its sum, plus two float32 copies of the bf16 rows
under autocast) and writes three [B·K, P] tensors backward (a product, an addcmul, the cast of
the gradient back to bf16): ≈ 6 ms of a ≈ 75 ms bf16 learner step on two cores, where the rows
come from memory, not cache. Here the forward reads x and y once and the backward reads them once
and writes the gradient once, in the operands' own storage type.

The kernels compute in float32 with 8-lane vectors (:mod:`lzk_common.numba_simd`): lane j sums
the elements j, j + 8, … of a row; the lanes are then added in order. No fast-math and no
contracted multiply-adds, so the result does not depend on how or where numba compiled the
kernel. The order differs from torch's reductions: values agree with them to float32 rounding
(~1e-7 relative; tests compare both).

The cross-entropy's rows are [B·(K+1), N] = [1536, 601] (value) and [1280, 601] (reward): torch
reads them in about ten passes per step (the float32 copy of the bf16 logits, log-softmax's three,
the product with the target, its sum, and backward the product, log-softmax's gradient, the cast
back), here in three, with exp from :func:`lzk_common.numba_simd.vexp` (< 1 ulp).

The cosine's rows must be C-contiguous with P a multiple of 8 (:func:`supported`); the
cross-entropy's with N ≥ 8 (:func:`ce_supported`; a row's last partial vector is the overlapping
vector that ends the row, its already counted lanes masked out). Callers fall back to torch
otherwise. The kernels run on the calling thread: split over two threads they were no faster on
two cores (the rows stream from memory either way).
"""
from __future__ import annotations

import math

import numba
import numpy as np
import torch

from lzk_common.numba_simd import (LANES, vadd, vbroadcast, vexp, vhmax, vload, vload_wide, vmax, vmul, vstore_narrow,
                                   vsub, vsum, vzero)


def supported(*tensors: torch.Tensor) -> bool:
    """Whether the kernels take these [B, P] tensors: CPU, float32 or bfloat16, contiguous, of one
    shape, P a multiple of 8."""
    first = tensors[0]
    return all(
        t.device.type == "cpu" and t.dtype in (torch.float32, torch.bfloat16) and t.dim() == 2
        and t.is_contiguous() and t.shape == first.shape for t in tensors
    ) and first.shape[1] % LANES == 0


def storage(t: torch.Tensor) -> np.ndarray:
    """The numpy view the kernels read and write: float32 as is, bfloat16 as its uint16 bits."""
    t = t.detach()
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def per_row(t: torch.Tensor) -> np.ndarray:
    """A per-row coefficient [R] as the float32 numpy array the kernels read."""
    return t.detach().float().contiguous().numpy()


@numba.njit(cache=True, nogil=True)
def cosine_sums(x: np.ndarray, y: np.ndarray, out: np.ndarray, lo: int, hi: int) -> None:  # pragma: no cover
    """out[0] = ⟨x_i, y_i⟩, out[1] = ‖x_i‖², out[2] = ‖y_i‖² for rows lo ≤ i < hi: x, y [B, P],
    out [3, B] float32."""
    width = x.shape[1]
    for i in range(lo, hi):
        base = i * width
        dot, xx, yy = vzero(), vzero(), vzero()
        for j in range(0, width, LANES):
            xv, yv = vload_wide(x, base + j), vload_wide(y, base + j)
            dot = vadd(dot, vmul(xv, yv))
            xx = vadd(xx, vmul(xv, xv))
            yy = vadd(yy, vmul(yv, yv))
        out[0, i], out[1, i], out[2, i] = vsum(dot), vsum(xx), vsum(yy)


@numba.njit(cache=True, nogil=True)
def scaled_sum(a: np.ndarray, b: np.ndarray, alpha: np.ndarray, beta: np.ndarray, out: np.ndarray,
               lo: int, hi: int) -> None:  # pragma: no cover - compiled
    """out_i = alpha_i · a_i + beta_i · b_i for rows lo ≤ i < hi: a, b, out [B, P]; alpha, beta [B]
    float32. ``out`` is stored in its own type (bf16 rounded to nearest even)."""
    width = a.shape[1]
    for i in range(lo, hi):
        base = i * width
        al, be = vbroadcast(alpha[i]), vbroadcast(beta[i])
        for j in range(0, width, LANES):
            vstore_narrow(out, base + j, vadd(vmul(vload_wide(a, base + j), al), vmul(vload_wide(b, base + j), be)))


def row_cosine_sums(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(⟨x, y⟩, ‖x‖², ‖y‖²) per row, each [B] float32, of [B, P] rows (:func:`supported`)."""
    out = torch.empty(3, x.shape[0], dtype=torch.float32)
    cosine_sums(storage(x), storage(y), out.numpy(), 0, x.shape[0])
    return out[0], out[1], out[2]


def row_scaled_sum(a: torch.Tensor, b: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """alpha · a + beta · b per row, in a's dtype: a, b [B, P] (:func:`supported`), alpha, beta [B]."""
    out = torch.empty_like(a)
    scaled_sum(storage(a), storage(b), per_row(alpha), per_row(beta), storage(out), 0, a.shape[0])
    return out


def ce_supported(logits: torch.Tensor, target: torch.Tensor) -> bool:
    """Whether the cross-entropy kernels take these [R, N] rows: CPU, contiguous, of one shape,
    logits float32 or bfloat16, target float32, N ≥ 8."""
    return (logits.device.type == target.device.type == "cpu" and logits.dtype in (torch.float32, torch.bfloat16)
            and target.dtype == torch.float32 and logits.dim() == 2 and logits.shape == target.shape
            and logits.is_contiguous() and target.is_contiguous() and logits.shape[1] >= LANES)


# vload(_TAIL_MASK, r) = [0] * (8 − r) + [1] * r: the lanes of a row's last, overlapping vector that
# the full vectors before it have not counted.
_TAIL_MASK = np.array([0.0] * LANES + [1.0] * LANES, dtype=np.float32)


@numba.njit(cache=True, nogil=True)
def soft_ce_sums(z: np.ndarray, t: np.ndarray, mask: np.ndarray, out: np.ndarray, lo: int,
                 hi: int) -> None:  # pragma: no cover - compiled
    """For rows lo ≤ i < hi of logits z and targets t [R, N]: out[0, i] = −Σ t·log_softmax(z),
    out[1, i] = logsumexp(z), out[2, i] = Σ t; out [3, R] float32.

    With m the row's max and d = z − m: −Σ t·log_softmax(z) = log(Σ e^d)·Σ t − Σ t·d."""
    n = z.shape[1]
    rem = n % LANES
    full = n - rem
    tail = vload(mask, rem)
    for i in range(lo, hi):
        base = i * n
        mv = vload_wide(z, base)
        for k in range(LANES, n, LANES):  # the last start clipped to n − 8: max is idempotent, no mask
            mv = vmax(mv, vload_wide(z, base + min(k, n - LANES)))
        m = vhmax(mv)
        mb = vbroadcast(m)
        s, td, ts = vzero(), vzero(), vzero()
        for j in range(0, full, LANES):
            d, tv = vsub(vload_wide(z, base + j), mb), vload(t, base + j)
            s = vadd(s, vexp(d))
            td = vadd(td, vmul(tv, d))
            ts = vadd(ts, tv)
        if rem:
            d, tv = vsub(vload_wide(z, base + n - LANES), mb), vmul(vload(t, base + n - LANES), tail)
            s = vadd(s, vmul(vexp(d), tail))
            td = vadd(td, vmul(tv, d))
            ts = vadd(ts, tv)
        log_s = np.float32(math.log(vsum(s)))
        sum_t = vsum(ts)
        out[0, i] = log_s * sum_t - vsum(td)
        out[1, i] = m + log_s
        out[2, i] = sum_t


@numba.njit(cache=True, nogil=True)
def soft_ce_grad(z: np.ndarray, t: np.ndarray, lse: np.ndarray, alpha: np.ndarray, beta: np.ndarray,
                 out: np.ndarray, lo: int, hi: int) -> None:  # pragma: no cover - compiled
    """out_i = alpha_i · exp(z_i − lse_i) − beta_i · t_i for rows lo ≤ i < hi: z, t, out [R, N];
    lse, alpha, beta [R] float32. ``out`` is stored in its own type (bf16 rounded to nearest even);
    a row's last, overlapping vector rewrites the same values."""
    n = z.shape[1]
    for i in range(lo, hi):
        base = i * n
        lb, al, be = vbroadcast(lse[i]), vbroadcast(alpha[i]), vbroadcast(beta[i])
        for k in range(0, n, LANES):
            j = base + min(k, n - LANES)  # the last start clipped to n − 8: an overlap rewrites equal values
            vstore_narrow(out, j, vsub(vmul(al, vexp(vsub(vload_wide(z, j), lb))), vmul(be, vload(t, j))))


def row_soft_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(−Σ target·log_softmax(logits), logsumexp(logits), Σ target) per row, each [R] float32, of
    [R, N] rows (:func:`ce_supported`)."""
    out = torch.empty(3, logits.shape[0], dtype=torch.float32)
    soft_ce_sums(storage(logits), storage(target), _TAIL_MASK, out.numpy(), 0, logits.shape[0])
    return out[0], out[1], out[2]


def row_soft_cross_entropy_grad(logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
                                alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """alpha · softmax(logits) − beta · target per row, in the logits' dtype: [R, N]
    (:func:`ce_supported`); lse from :func:`row_soft_cross_entropy`, alpha, beta [R]."""
    out = torch.empty_like(logits)
    soft_ce_grad(storage(logits), storage(target), per_row(lse), per_row(alpha), per_row(beta), storage(out), 0,
                 logits.shape[0])
    return out
