"""Acting from search results: visit counts → action (pure numpy, used by policies)."""
from __future__ import annotations

import numpy as np

from lzkernel import sample_from_weights


def select_action(
    visit_counts: np.ndarray,
    legal: np.ndarray,
    temperature: float,
    rng: np.random.Generator,
    deterministic: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Pick one action per row from root visit counts (SPEC §1.4 ``select_action``).

    Args:
        visit_counts: [B, A] root visits (any numeric dtype).
        legal: [B, A] bool; only legal actions get probability.
        temperature: T > 0; probs = counts^(1/T) / Σ over legal actions.
        rng: source of the sampled actions.
        deterministic: take the argmax of the raw counts over legal actions (first maximum)
            instead of sampling.

    Returns:
        actions [B] int64 and probs [B, A] float32. A row whose legal counts are all zero gets
        the uniform distribution over its legal actions (and its first legal action when
        deterministic).
    """
    if temperature <= 0.0:
        raise ValueError(f"temperature must be > 0 (use deterministic=True for argmax), got {temperature}")
    legal = np.asarray(legal, dtype=np.bool_)
    counts = np.where(legal, np.asarray(visit_counts, dtype=np.float64), 0.0)
    # Scale by the row maximum before the power so that 1/T up to ~1e3 cannot overflow.
    row_max = counts.max(axis=1, keepdims=True)
    scaled = np.where(row_max > 0.0, counts / np.where(row_max > 0.0, row_max, 1.0), legal.astype(np.float64))
    weights = np.where(legal, scaled ** (1.0 / temperature), 0.0)
    probs = weights / weights.sum(axis=1, keepdims=True)
    if deterministic:
        # -1 on illegal actions keeps them below any legal count (counts are >= 0).
        actions = np.argmax(np.where(legal, counts, -1.0), axis=1)
    else:
        actions = sample_from_weights(probs, legal, rng)
    return actions.astype(np.int64), probs.astype(np.float32)
