"""Scalar transform h / h⁻¹ and the categorical support (SPEC §2.1)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lzk_common.support import (
    DiscreteSupport,
    inverse_scalar_transform,
    inverse_scalar_transform_np,
    scalar_transform,
)

X = torch.tensor([-1e4, -300.0, -12.5, -1.0, -1e-3, 0.0, 1e-3, 0.5, 1.0, 7.0, 199.0, 5e4], dtype=torch.float64)


def test_h_matches_formula_and_round_trips() -> None:
    expected = [math.copysign(math.sqrt(abs(x) + 1) - 1, x) + 0.001 * x for x in X.tolist()]
    assert torch.allclose(scalar_transform(X), torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    assert torch.allclose(inverse_scalar_transform(scalar_transform(X)), X, rtol=1e-9, atol=1e-9)
    assert scalar_transform(torch.tensor(0.0)) == 0.0 and inverse_scalar_transform(torch.tensor(0.0)) == 0.0


def test_numpy_inverse_agrees_with_torch() -> None:
    y = torch.linspace(-400, 400, 2001, dtype=torch.float64)
    ref = inverse_scalar_transform(y).numpy()
    assert np.allclose(inverse_scalar_transform_np(y.numpy()), ref, rtol=1e-12, atol=1e-9)
    got32 = inverse_scalar_transform_np(y.numpy().astype(np.float32))
    assert got32.dtype == np.float32 and np.allclose(got32, ref, rtol=1e-5, atol=1e-3)
    assert np.isnan(inverse_scalar_transform_np(np.array([np.nan], np.float32)))[0]


def test_support_layout() -> None:
    s = DiscreteSupport.from_range([-300, 301, 1])
    assert s.size == 601 and s.min == -300 and s.max == 300  # stop is exclusive
    s2 = DiscreteSupport(-2, 2.5, 0.5)
    assert s2.values.tolist() == [-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0]


@pytest.mark.parametrize("start,stop,step", [(-10, 11, 1), (-300, 301, 1), (-2, 2.5, 0.5)])
def test_two_hot_sums_to_one_and_reconstructs(start: float, stop: float, step: float) -> None:
    s = DiscreteSupport(start, stop, step)
    x = torch.linspace(s.min, s.max, 97)
    phi = s.phi(x)
    assert phi.shape == (97, s.size)
    assert torch.allclose(phi.sum(-1), torch.ones(97), atol=1e-6)
    assert (phi >= 0).all() and ((phi > 0).sum(-1) <= 2).all()  # at most two adjacent atoms
    assert torch.allclose(phi @ s.values, x, atol=1e-4)


def test_two_hot_clips_at_the_support_ends() -> None:
    s = DiscreteSupport(-10, 11, 1)
    phi = s.phi(torch.tensor([-1e6, -10.0, 10.0, 1e6]))
    assert phi[0, 0] == 1.0 and phi[1, 0] == 1.0  # everything below min lands on the first atom
    assert phi[2, -1] == 1.0 and phi[3, -1] == 1.0  # the top end: low == high, still sums to 1
    assert torch.allclose(phi.sum(-1), torch.ones(4))


def test_two_hot_exact_weights() -> None:
    s = DiscreteSupport(-10, 11, 1)
    phi = s.phi(torch.tensor([2.25]))[0]
    assert phi[12].item() == pytest.approx(0.75) and phi[13].item() == pytest.approx(0.25)


def test_label_smoothing() -> None:
    s = DiscreteSupport(-10, 11, 1)
    x = torch.tensor([0.3, -4.0, 25.0])
    eps = 0.1
    smooth = s.phi(x, label_smoothing=eps)
    assert torch.allclose(smooth, (1 - eps) * s.phi(x) + eps / s.size)
    assert torch.allclose(smooth.sum(-1), torch.ones(3), atol=1e-6)
    assert smooth.min().item() == pytest.approx(eps / s.size)


def test_encode_decode_round_trip() -> None:
    s = DiscreteSupport.from_range([-300, 301, 1])
    x = torch.tensor([-250.0, -3.3, 0.0, 0.7, 12.0, 199.5])
    logits = torch.log(s.encode(x).clamp_min(1e-30))  # softmax(log p) = p
    assert torch.allclose(s.decode(logits), x, rtol=1e-4, atol=1e-3)
    # Uniform logits on a symmetric support decode to exactly 0 (zero-initialised heads).
    assert s.decode(torch.zeros(3, s.size)).abs().max().item() < 1e-3
