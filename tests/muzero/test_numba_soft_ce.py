"""The fused soft cross-entropy of bf16 logits (lzk_common.numba_rows, lzk_common.losses) and the
vector exp under it (lzk_common.numba_simd.vexp): exp within 1 ulp; the loss as accurate as
torch's float32 path and its bf16 gradient within one bf16 ulp of torch's, rows whose width is not
a multiple of 8 included; float32 logits keep torch's path to the bit."""
from __future__ import annotations

import numba
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from lzk_common import numba_rows
from lzk_common.losses import soft_cross_entropy
from lzk_common.numba_simd import vexp, vload, vstore


@numba.njit(cache=True)
def _exp_all(x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    for j in range(0, x.size, 8):
        vstore(out, j, vexp(vload(x, j)))


def _exp(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    _exp_all(x, out)
    return out


def test_vexp_is_within_one_ulp_and_clamps() -> None:
    x = np.linspace(-87.0, 88.5, 400_000, dtype=np.float32)
    exact = np.exp(x.astype(np.float64))
    ulps = np.abs(_exp(x).astype(np.float64) - exact) / np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert ulps.max() < 1.0
    special = _exp(np.array([0.0, 1.0, -1.0, np.nan, -np.inf, -1000.0, np.inf, 1000.0], dtype=np.float32))
    assert special[0] == 1.0 and abs(special[1] - np.e) < 3e-7 and abs(special[2] - 1 / np.e) < 1e-7
    assert np.isnan(special[3])
    # Clamped: below the normal range the smallest normal float, above it the largest finite one.
    assert 0.0 < special[4] == special[5] < 1.2e-38 * 1.01
    assert np.isfinite(special[6]) and special[6] == special[7] > 3.4e38


def _logits_and_targets(rows: int, width: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 logits with a spread like the value head's and two-hot targets (mass at two neighbours),
    some rows with a one-hot target in the last column (the overlapping tail vector)."""
    g = torch.Generator().manual_seed(seed)
    logits = (3.0 * torch.randn(rows, width, generator=g)).to(torch.bfloat16)
    low = torch.randint(0, width - 1, (rows,), generator=g)
    w = torch.rand(rows, generator=g)
    target = torch.zeros(rows, width)
    target[torch.arange(rows), low] = w
    target[torch.arange(rows), low + 1] = 1.0 - w
    target[:4] = 0.0
    target[:4, -1] = 1.0
    return logits, target


def _loss_and_grad(logits: torch.Tensor, target: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    z = logits.clone().requires_grad_(True)
    loss = soft_cross_entropy(z, target)
    (loss * weights).sum().backward()
    assert z.grad is not None
    return loss.detach(), z.grad


@pytest.mark.parametrize("width", [601, 8, 9, 23])
def test_fused_soft_cross_entropy_equals_the_torch_path(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    logits, target = _logits_and_targets(96, width)
    weights = torch.randn(96, generator=torch.Generator().manual_seed(1))
    assert numba_rows.ce_supported(logits, target)
    calls: list[int] = []
    kernel = numba_rows.row_soft_cross_entropy
    monkeypatch.setattr(numba_rows, "row_soft_cross_entropy", lambda z, t: calls.append(1) or kernel(z, t))
    loss_f, grad_f = _loss_and_grad(logits, target, weights)
    assert calls, "bf16 rows must take the fused kernels"
    monkeypatch.setattr(numba_rows, "ce_supported", lambda *t: False)
    loss_t, grad_t = _loss_and_grad(logits, target, weights)
    assert loss_f.dtype == torch.float32 and grad_f.dtype == torch.bfloat16
    exact = -(target.double() * F.log_softmax(logits.double(), dim=-1)).sum(-1)
    err, err_torch = (loss_f.double() - exact).abs().max().item(), (loss_t.double() - exact).abs().max().item()
    assert err < 4e-6 and err < 4 * err_torch + 1e-6
    # One float32 gradient up to rounding, then one bf16 rounding: at most one bf16 ulp apart, rarely.
    ulps = (grad_f.view(torch.int16).to(torch.int32) - grad_t.view(torch.int16).to(torch.int32)).abs()
    assert int(ulps.max()) <= 1 and float((ulps > 0).float().mean()) < 0.01


def test_leading_axes_are_kept() -> None:
    """[B, K+1, N] logits, as the unrolled value head gives them: the loss is [B, K+1]."""
    logits, target = _logits_and_targets(6 * 4, 601)
    loss = soft_cross_entropy(logits.view(6, 4, 601), target.view(6, 4, 601))
    assert loss.shape == (6, 4)
    torch.testing.assert_close(loss.view(-1), -(target * F.log_softmax(logits.float(), dim=-1)).sum(-1),
                               rtol=1e-6, atol=4e-6)


def test_float32_logits_keep_the_torch_path_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    logits, target = _logits_and_targets(32, 601)
    calls: list[int] = []
    monkeypatch.setattr(numba_rows, "row_soft_cross_entropy", lambda *a: calls.append(1))
    z = logits.float().requires_grad_(True)
    loss = soft_cross_entropy(z, target)
    assert not calls
    assert torch.equal(loss, -(target * F.log_softmax(logits.float(), dim=-1)).sum(-1))


def test_unsupported_rows_fall_back_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer than 8 columns (the policy head), non-contiguous logits, a target with a gradient."""
    calls: list[int] = []
    monkeypatch.setattr(numba_rows, "row_soft_cross_entropy", lambda *a: calls.append(1))
    small, small_t = _logits_and_targets(16, 7)
    wide, wide_t = _logits_and_targets(16, 64)
    for logits, target in ((small, small_t), (wide.t(), wide_t.t()), (wide, wide_t.clone().requires_grad_(True))):
        loss = soft_cross_entropy(logits, target)
        expected = -(target * F.log_softmax(logits.float(), dim=-1)).sum(-1)
        assert torch.equal(loss, expected)
    assert not calls
    assert not numba_rows.ce_supported(small, small_t)
    assert not numba_rows.ce_supported(wide, wide_t.double())
