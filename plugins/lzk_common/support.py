"""Scalar transform and categorical support (SPEC §2.1).

Values and rewards are predicted as categorical distributions over a fixed support in the
*transformed* space: a target x is encoded as φ(h(x)) (two-hot) and a prediction decoded as
h⁻¹(E_softmax[support]).

* h(x)   = sign(x)(√(|x|+1) − 1) + εx, ε = 0.001 (squashes large returns);
* h⁻¹(y) = sign(y)(((√(1 + 4ε(|y| + 1 + ε)) − 1) / (2ε))² − 1), the exact inverse;
* φ(x): clip x to [min, max] of the support, put (1 − frac) on ⌊pos⌋ and frac on ⌊pos⌋ + 1
  (upper index clamped), optionally label-smoothed (1 − ε_ls)·φ + ε_ls/N.
"""
from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numba
import torch

EPS = 0.001  # ε of the scalar transform (LightZero / MuZero paper value)


def scalar_transform(x: torch.Tensor) -> torch.Tensor:
    """h(x), elementwise. Any shape."""
    return torch.sign(x) * (torch.sqrt(torch.abs(x) + 1.0) - 1.0) + EPS * x


def _inverse(y: Any, xp: ModuleType) -> Any:
    """h⁻¹(y) written once for both torch tensors and numpy arrays (``xp`` = torch or numpy)."""
    root = xp.sqrt(1.0 + 4.0 * EPS * (xp.abs(y) + 1.0 + EPS))
    return xp.sign(y) * (((root - 1.0) / (2.0 * EPS)) ** 2 - 1.0)


def inverse_scalar_transform(y: torch.Tensor) -> torch.Tensor:
    """h⁻¹(y), elementwise on a tensor. Any shape."""
    return _inverse(y, torch)


@numba.njit(cache=True)
def inverse_scalar_transform_scalar(y: float) -> float:  # pragma: no cover - compiled by numba
    """h⁻¹(y) of one float in numba code (the same formula as :func:`_inverse`; float64
    arithmetic, also for a float32 ``y``)."""
    root = math.sqrt(1.0 + 4.0 * EPS * (abs(y) + 1.0 + EPS))
    x = ((root - 1.0) / (2.0 * EPS)) ** 2 - 1.0
    return x if y > 0 else (-x if y < 0 else 0.0 * y)


@numba.vectorize(["float32(float32)", "float64(float64)"], cache=True)
def inverse_scalar_transform_np(y: float) -> float:  # pragma: no cover - compiled by numba
    """h⁻¹(y) as a numpy ufunc (the search adapter's hot path).

    :func:`inverse_scalar_transform_scalar` compiled once into a single ufunc: the search decodes
    [2, B] values per simulation, where ~11 separate numpy or torch calls cost more than the
    arithmetic (a test checks it agrees with the torch version).
    """
    return inverse_scalar_transform_scalar(y)


class DiscreteSupport:
    """The categorical support ``arange(start, stop, step)`` (stop exclusive).

    ``values`` [N] float32 on ``device``. The default MuZero support (−300, 301, 1) has 601 atoms.
    """

    def __init__(self, start: float, stop: float, step: float = 1.0, device: torch.device | str = "cpu") -> None:
        if step <= 0 or stop <= start:
            raise ValueError(f"bad support ({start}, {stop}, {step})")
        self.start, self.stop, self.step = float(start), float(stop), float(step)
        self.values = torch.arange(self.start, self.stop, self.step, dtype=torch.float32, device=device)
        self.size = int(self.values.numel())
        self.min = float(self.values[0])
        self.max = float(self.values[-1])

    @classmethod
    def from_range(cls, r: list[int] | tuple[float, ...], device: torch.device | str = "cpu") -> DiscreteSupport:
        """From a config triple ``[start, stop, step]``."""
        return cls(r[0], r[1], r[2] if len(r) > 2 else 1, device=device)

    def to(self, device: torch.device | str) -> DiscreteSupport:
        return DiscreteSupport(self.start, self.stop, self.step, device=device)

    def same_as(self, other: DiscreteSupport) -> bool:
        return (self.start, self.stop, self.step) == (other.start, other.stop, other.step)

    def phi(self, x: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
        """Two-hot encoding of ``x`` [*S] (already in h-space) → [*S, N], rows summing to 1.

        Values outside the support are clipped to its ends. With ``label_smoothing`` ε the result
        is (1 − ε)·twohot + ε/N.
        """
        x = x.float().clamp(self.min, self.max)
        pos = (x - self.min) / self.step
        low = pos.floor()
        frac = (pos - low).unsqueeze(-1)
        low_idx = low.long().clamp(0, self.size - 1).unsqueeze(-1)
        high_idx = (low_idx + 1).clamp(max=self.size - 1)
        out = torch.zeros(*x.shape, self.size, dtype=torch.float32, device=x.device)
        # scatter_add (not scatter) so that low == high at the top end still sums to 1.
        out.scatter_add_(-1, low_idx, 1.0 - frac)
        out.scatter_add_(-1, high_idx, frac)
        if label_smoothing > 0.0:
            out = out * (1.0 - label_smoothing) + label_smoothing / self.size
        return out

    def encode(self, x: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
        """φ(h(x)): the training target of a scalar ``x`` [*S] → [*S, N]."""
        return self.phi(scalar_transform(x.float()), label_smoothing)

    def expectation(self, logits: torch.Tensor) -> torch.Tensor:
        """E_softmax(logits)[support] in h-space: [*S, N] → [*S] (float32)."""
        return torch.softmax(logits.float(), dim=-1) @ self.values

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        """Scalar prediction h⁻¹(E_softmax[support]): [*S, N] → [*S] float32."""
        return inverse_scalar_transform(self.expectation(logits))
