"""Drawing actions over a legal mask: the one implementation that acting code (search policies,
random actors, bots) uses. numpy only.

Shapes: E rows, A actions.
"""
from __future__ import annotations

import numpy as np


def sample_from_weights(weights: np.ndarray, legal: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row with probability ∝ ``weights`` [E, A] (>= 0, zero where illegal, a
    positive sum per row): inverse CDF of one uniform draw per row (E draws from ``rng``).
    Rounding can land past the last positive weight; such rows take their last legal action.
    Returns [E] int64."""
    cdf = np.cumsum(weights, axis=1)
    u = rng.random((weights.shape[0], 1)) * cdf[:, -1:]
    actions = (cdf <= u).sum(axis=1)
    last_legal = legal.shape[1] - 1 - np.argmax(legal[:, ::-1], axis=1)
    return np.minimum(actions, last_legal).astype(np.int64)


def uniform_legal(legal: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random legal action per row of ``legal`` [E, A] bool (E·A draws): [E] int64."""
    u = np.where(legal, rng.random(legal.shape), -1.0)
    return u.argmax(axis=1).astype(np.int64)


def masked_softmax_weights(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """exp(logits − max) over the legal actions, 0 elsewhere (unnormalised, float64): [E, A]."""
    z = np.where(legal, logits.astype(np.float64), -np.inf)
    return np.exp(z - z.max(axis=1, keepdims=True))
