"""Drawing transition positions: uniform or prioritised, without replacement when possible.

Sampling weights are given per slot position (``[num_slots * L]``, zero where nothing is stored).
Prioritised weights are ``p^alpha + 1e-6`` (SPEC §2.5); uniform weights are 1. The draw inverts the
cumulative sum once per round; duplicates are redrawn, which is exactly successive sampling without
replacement (a redraw conditioned on not hitting a chosen position is a draw from the
renormalised remaining mass).
"""
from __future__ import annotations

import numpy as np

PRIORITY_EPS = 1e-6  # added to p^alpha so that every stored position keeps a chance
_MAX_REJECTION_ROUNDS = 8


def sampling_weights(prio: np.ndarray, valid: np.ndarray, use_priority: bool, alpha: float) -> np.ndarray:
    """Weights [...] float64: ``prio**alpha + 1e-6`` (or 1 when uniform) where ``valid``, else 0."""
    if use_priority:
        return np.where(valid, np.power(prio, alpha) + PRIORITY_EPS, 0.0)
    return valid.astype(np.float64)


def draw(weights: np.ndarray, batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``batch_size`` positions of ``weights [N]`` (float64, >= 0, some > 0).

    Without replacement when at least ``batch_size`` weights are positive, else with replacement.
    Returns ``(positions [B] int64 sorted, probabilities [B] float64)`` where the probability is
    the single-draw probability ``w / sum(w)`` (what the IS weights use, as in LightZero).
    """
    cdf = np.cumsum(weights)
    total = float(cdf[-1])
    if not total > 0.0:
        raise ValueError("nothing to sample: all weights are zero")
    last = int(np.searchsorted(cdf, total, side="left"))  # the last positive-weight position

    def one_round(k: int) -> np.ndarray:
        u = rng.random(k) * total
        return np.minimum(np.searchsorted(cdf, u, side="right"), last)  # min(): u rounding to total

    pos = one_round(batch_size)
    if np.count_nonzero(weights) >= batch_size:
        pos = np.unique(pos)
        rounds = 0
        while pos.size < batch_size:
            missing = batch_size - pos.size
            if rounds < _MAX_REJECTION_ROUNDS:
                extra = one_round(missing)
            else:  # heavily skewed weights: draw from the remaining mass exactly
                rest = weights.copy()
                rest[pos] = 0.0
                extra = draw(rest, missing, rng)[0]
            pos = np.union1d(pos, extra)  # at most `missing` new positions: never overshoots
            rounds += 1
    else:
        pos = np.sort(pos)
    return pos.astype(np.int64), weights[pos] / total


def importance_weights(prob: np.ndarray, num_transitions: int, beta: float) -> np.ndarray:
    """IS weights [B] float32: ``(N * P(i))^-beta / max_batch`` (SPEC §2.5)."""
    w = np.power(num_transitions * prob, -beta)
    return (w / w.max()).astype(np.float32)
