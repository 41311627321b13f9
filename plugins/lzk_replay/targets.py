"""Learner batches: inputs and n-step targets built by vectorised gathers on the slot arrays.

For a sampled root (segment slot, position t) and unroll offset k = 0..K, write c = t + k and
D = the segment's stored transitions (padding included). Conventions:

* ``mask[k] = 1`` iff ``c < D``: step c is a real transition (action a_c exists, so o_{c+1} is a
  real observation for the SSL target). Unlike LightZero (``[1]*min(#actions, L - t)``, last entry
  always 0) padding steps count, being real successor data, and ``mask[K]`` can be 1.
* Beyond the final observation (c > D) frames past it repeat the final frame (LightZero's
  ``padding=True``), ``to_play`` repeats the final observation's, ``legal`` is all True (the
  padding actions are uniform over all A), and the reward / policy / value targets are 0.
* Value target at c <= D: with m = min(n, D - c) reward steps,
  ``z = sum_{i<m} gamma^i * sign_i * r_{c+i} + gamma^m * sign_m * v(o_{c+m})``; the bootstrap is
  dropped when c + m == D and the episode terminated there. A truncated, non-terminal end
  bootstraps from its final observation (at c == D the target is v(o_D) itself).
  Where v(o_b) comes from is the caller's :data:`BootstrapFn`: each observation on its own
  (:func:`observation_bootstrap`, MuZero) or one teacher-forced sequence per root (UniZero,
  :mod:`lzk_replay.sequence_buffer`); the sums, signs and cut-offs here are shared by both.
  For terminal ends this equals LightZero's formula with ``n_eff = clip(n, 1, D - t)`` (whenever
  that formula bootstraps, m == n; whenever it does not, it sums exactly the rewards up to D).
* Signs (two-player games): ``sign_j = +1`` if ``to_play[c+j] == to_play[c]`` else -1, on the
  absolute index c + j (fixes the SPEC §2.6 relative-index [BUG?]). With alternating players the
  bootstrap sign is (-1)^m; single-player envs (to_play = -1 everywhere) get +1 throughout.
* Value prefixes (EfficientZero, ``value_prefix_horizon`` H > 0): ``target_value_prefix[k] =
  Σ_{j = H·⌊k/H⌋}^{k} target_reward[j]``, the undiscounted reward sum since the dynamics LSTM was
  last reset; the learner resets it before unroll steps 0, H, 2H, … and the search at node
  depths H, 2H, … (addendum C.4/C.5). Rewards past the data are 0, so a prefix holds its value
  after an episode's end; rewards in the K + n padding are the successor's real ones. Resets
  count from each sample's own root (LightZero counts across the batch, C.4 [BUG?]).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from lzk_replay.storage import SegmentStore
from lzkernel import Batch

ValueFn = Callable[[np.ndarray], np.ndarray]  # obs [M, *O'] float32 -> values [M] float32

#: A bootstrap-value provider: ``(s2, c, b, boot) -> values [P]``, all inputs [B, K+1] (slots, steps
#: c = t + k, bootstrap steps b, bool ``boot`` marking the P entries that bootstrap); returns
#: v(o_b) for the ``boot`` entries in row-major order (the order of ``b[boot]``).
BootstrapFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def observation_bootstrap(store: SegmentStore, value_fn: ValueFn) -> BootstrapFn:
    """MuZero-style bootstrap: every needed observation evaluated on its own, in one call."""

    def values(s2: np.ndarray, c: np.ndarray, b: np.ndarray, boot: np.ndarray) -> np.ndarray:
        return np.asarray(value_fn(store.stacked_obs(s2[boot], b[boot])))

    return values


def value_prefix(rewards: np.ndarray, horizon: int) -> np.ndarray:
    """Value-prefix targets [B, K] float32 of per-step reward targets ``rewards`` [B, K]: the sum
    of the rewards since the last reset, resets before steps 0, H, 2H, … (H = ``horizon`` >= 1).
    Each step's reward is prefix[k] − prefix[k − 1], or prefix[k] where k % H == 0."""
    if horizon < 1:
        raise ValueError(f"value-prefix horizon must be >= 1, got {horizon}")
    out = np.empty(rewards.shape, np.float64)
    for start in range(0, rewards.shape[1], horizon):
        block = slice(start, start + horizon)
        np.cumsum(rewards[:, block], axis=1, dtype=np.float64, out=out[:, block])
    return out.astype(np.float32)


def build_batch(store: SegmentStore, slots: np.ndarray, t: np.ndarray, *, unroll_steps: int,
                td_steps: int, discount: float, rng: np.random.Generator, weights: np.ndarray,
                indices: np.ndarray, value_fn: ValueFn | None = None,
                bootstrap: BootstrapFn | None = None, value_prefix_horizon: int = 0) -> Batch:
    """The batch for roots ``(slots [B], t [B])``. Bootstrap values come from ``bootstrap``, or
    else from :func:`observation_bootstrap` of ``value_fn``; either is called once (if any entry
    bootstraps), after the padding actions have been drawn from ``rng``. With
    ``value_prefix_horizon`` H > 0 the batch also carries the value prefixes of its rewards."""
    if bootstrap is None:
        if value_fn is None:
            raise ValueError("build_batch needs value_fn or bootstrap")
        bootstrap = observation_bootstrap(store, value_fn)
    K, B = unroll_steps, slots.shape[0]
    c = t[:, None] + np.arange(K + 1)  # [B, K+1]
    s2 = np.broadcast_to(slots[:, None], c.shape)
    D = store.n_data[s2]  # [B, K+1]
    real = c < D
    c_obs = np.minimum(c, D)  # past the final observation: repeat it
    c_step = np.minimum(c, store.W - 1)  # a safe per-step index (masked where not real)
    random_actions = rng.integers(0, store.A, size=(B, K), dtype=np.int64)
    target_reward = np.where(real[:, :K], store.rewards[s2[:, :K], c_step[:, :K]], 0.0).astype(np.float32)
    return Batch(
        obs=store.stacked_obs(s2, c),
        actions=np.where(real[:, :K], store.actions[s2[:, :K], c_step[:, :K]], random_actions),
        mask=real.astype(np.float32),
        target_reward=target_reward,
        target_value=n_step_values(store, s2, c, bootstrap, td_steps, discount),
        target_policy=np.where(real[..., None], store.visit_dist[s2, c_step], 0.0).astype(np.float32),
        weights=np.asarray(weights, dtype=np.float32),
        indices=np.asarray(indices, dtype=np.int64),
        to_play=store.to_play[s2, c_obs],
        legal=store.legal[s2, c_obs] | (c > D)[..., None],
        target_value_prefix=value_prefix(target_reward, value_prefix_horizon) if value_prefix_horizon > 0 else None,
    )


def n_step_values(store: SegmentStore, s2: np.ndarray, c: np.ndarray, bootstrap: BootstrapFn,
                  td_steps: int, discount: float) -> np.ndarray:
    """Value targets [B, K+1] float32 at steps ``c`` of slots ``s2`` (both [B, K+1]); see the
    module docstring. ``bootstrap`` is asked once for every needed bootstrap value (not at all
    when no entry bootstraps)."""
    n = td_steps
    D = store.n_data[s2]
    alive = c <= D  # c is an observation of the stored data
    m = np.clip(D - c, 0, n)  # reward steps before the bootstrap
    i = np.arange(n)
    ci = c[..., None] + i  # [B, K+1, n]
    use = i < m[..., None]  # (implies ci < D <= W)
    s3 = s2[..., None]
    me = store.to_play[s2, np.minimum(c, D)]  # the player to move at the root c
    sign_r = np.where(store.to_play[s3, np.minimum(ci, D[..., None])] == me[..., None], 1.0, -1.0)
    r = store.rewards[s3, np.minimum(ci, store.W - 1)]
    value = np.sum(np.where(use, r * sign_r * discount ** i, 0.0), axis=-1)  # float64

    b = c + m  # bootstrap step (<= D where alive)
    boot = alive & ~(store.terminal[s2] & (b == D))
    if boot.any():
        sb, bb = s2[boot], b[boot]
        v = np.asarray(bootstrap(s2, c, b, boot), dtype=np.float64).reshape(-1)
        if v.shape[0] != sb.shape[0]:
            raise ValueError(f"bootstrap returned {v.shape[0]} values for {sb.shape[0]} bootstrap entries")
        sign_b = np.where(store.to_play[sb, bb] == me[boot], 1.0, -1.0)
        value[boot] += discount ** m[boot] * sign_b * v
    value[~alive] = 0.0
    return value.astype(np.float32)
