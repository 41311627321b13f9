"""Row-wise fused passes of the learner's SSL term on CPU: the negative cosine's three row
reductions in one pass, and its gradient in one pass, for float32 and bfloat16 rows.

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

Rows must be C-contiguous with P a multiple of 8 (:func:`supported`); callers fall back to torch
otherwise. The kernels run on the calling thread: split over two threads they were no faster on
two cores (the rows stream from memory either way).
"""
from __future__ import annotations

import numba
import numpy as np
import torch

from lzk_common.numba_simd import LANES, vadd, vbroadcast, vload_wide, vmul, vstore_narrow, vsum, vzero


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
    scaled_sum(storage(a), storage(b), alpha.detach().float().contiguous().numpy(),
               beta.detach().float().contiguous().numpy(), storage(out), 0, a.shape[0])
    return out
