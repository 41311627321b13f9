"""The fused row kernels of the SSL negative cosine (lzk_common.numba_rows) against torch: bf16
storage widened and rounded exactly as torch's casts, the row sums as accurate as torch's, and
the loss and its gradients equal to the unfused torch path (float32 within 1e-6, bfloat16 within
bf16 rounding)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lzk_common import numba_rows
from lzk_common.losses import negative_cosine


def _rows(dtype: torch.dtype, rows: int = 40, width: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g) + 0.3
    y = 0.5 * torch.randn(rows, width, generator=g) + x
    return x.to(dtype), y.to(dtype)


def test_bf16_storage_round_trip_matches_torch_casts() -> None:
    """A bf16 load widens exactly; a bf16 store rounds to nearest even like ``tensor.to(bfloat16)``,
    ties, NaN and infinities included."""
    g = torch.Generator().manual_seed(3)
    values = torch.randn(64, 32, generator=g) * 100.0
    # Exact ties between two bf16 neighbours (lower mantissa half 0x8000), both parities.
    bits = values.view(torch.int32)
    values.view(torch.int32)[:8] = (bits[:8] & ~0xFFFF) | 0x8000
    values[8, :4] = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0])
    half = torch.full((64,), 0.5)  # v·0.5 + v·0.5 = v exactly, infinities and −0 included

    def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
        return bool(((a.view(torch.int16) == b.view(torch.int16)) | (torch.isnan(a) & torch.isnan(b))).all())

    expected = values.to(torch.bfloat16)
    assert same_bits(numba_rows.row_scaled_sum(expected, expected, half, half), expected)
    # float32 → bf16 rounding through the store: float32 storage in, a bf16 output.
    rounded = torch.empty(64, 32, dtype=torch.bfloat16)
    numba_rows.scaled_sum(values.numpy(), values.numpy(), half.numpy(), half.numpy(), numba_rows.storage(rounded), 0, 64)
    assert same_bits(rounded, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_sums_are_as_accurate_as_torch(dtype: torch.dtype) -> None:
    x, y = _rows(dtype, rows=64, width=1024)
    dot, sq_x, sq_y = numba_rows.row_cosine_sums(x, y)
    xd, yd = x.double(), y.double()
    for ours, exact, theirs in ((dot, (xd * yd).sum(-1), torch.linalg.vecdot(x.float(), y.float())),
                                (sq_x, (xd * xd).sum(-1), torch.linalg.vector_norm(x.float(), dim=-1) ** 2),
                                (sq_y, (yd * yd).sum(-1), torch.linalg.vector_norm(y.float(), dim=-1) ** 2)):
        assert ours.dtype == torch.float32
        err = ((ours.double() - exact).abs() / exact.abs()).max().item()
        err_torch = ((theirs.double() - exact).abs() / exact.abs()).max().item()
        assert err < 1e-6 and err < 4 * err_torch + 1e-7


def test_fused_negative_cosine_equals_the_torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """bfloat16 rows (autocast): value and both gradients, fused against the torch fallback, with a
    zero row (norm clamped) and an operand without gradient (the detached SSL target)."""
    dtype = torch.bfloat16
    x, y = _rows(dtype)
    x[5] = 0.0
    w = torch.randn(x.shape[0], generator=torch.Generator().manual_seed(9))
    results = []
    for fused in (True, False):
        assert numba_rows.supported(x, y)
        if not fused:
            monkeypatch.setattr(numba_rows, "supported", lambda *t: False)
        xi, yi = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
        loss = negative_cosine(xi, yi)
        (loss * w).sum().backward()
        x_only = x.clone().requires_grad_(True)
        (negative_cosine(x_only, y) * w).sum().backward()
        assert xi.grad.dtype == dtype and yi.grad.dtype == dtype and loss.dtype == torch.float32
        assert torch.equal(x_only.grad, xi.grad)
        results.append((loss, xi.grad, yi.grad))
    (loss_f, gx_f, gy_f), (loss_t, gx_t, gy_t) = results
    torch.testing.assert_close(loss_f, loss_t, rtol=1e-6, atol=1e-7)
    assert loss_f[5] == 0.0
    # The same float32 gradient on both paths up to rounding, then one bf16 rounding: at most one
    # bf16 ulp apart, and rarely that.
    for a, b in ((gx_f, gx_t), (gy_f, gy_t)):
        ulps = (a.view(torch.int16).to(torch.int32) - b.view(torch.int16).to(torch.int32)).abs()
        assert int(ulps.max()) <= 1 and float((ulps > 0).float().mean()) < 0.05


def test_float32_rows_keep_the_torch_path_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """float32 rows never reach the kernels (they only matched torch's two-thread passes there),
    so float32 learner numbers are those of the unfused code, to the bit."""
    x, y = _rows(torch.float32)
    calls = []
    monkeypatch.setattr(numba_rows, "row_cosine_sums", lambda *a: calls.append(a))
    xi = x.clone().requires_grad_(True)
    loss = negative_cosine(xi, y)
    loss.sum().backward()
    assert not calls
    n_x, n_y = torch.linalg.vector_norm(x, dim=-1), torch.linalg.vector_norm(y, dim=-1)
    dot = torch.linalg.vecdot(x, y)
    assert torch.equal(loss, -dot / (n_x.clamp_min(1e-5) * n_y.clamp_min(1e-5)))
    scale = torch.ones_like(dot) / (n_x * n_y)
    expected = torch.addcmul(y * (-scale).unsqueeze(-1), x, (scale * (dot / n_x.square())).unsqueeze(-1))
    assert torch.equal(xi.grad, expected)


def test_unsupported_rows_fall_back_to_torch() -> None:
    """Widths that are not a multiple of 8, non-contiguous rows and float64 take the torch path."""
    x, y = _rows(torch.float32, width=30)
    assert not numba_rows.supported(x, y)
    assert not numba_rows.supported(*(t.t() for t in _rows(torch.float32, rows=64)))
    assert not numba_rows.supported(*(t.double() for t in _rows(torch.float32)))
    xd, yd = (t.double().requires_grad_(True) for t in _rows(torch.float32, width=30))
    out = negative_cosine(xd, yd)
    expected = -(torch.nn.functional.normalize(xd, dim=-1) * torch.nn.functional.normalize(yd, dim=-1)).sum(-1)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, expected)
    assert np.isfinite(out.detach().numpy()).all()

