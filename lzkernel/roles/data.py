"""The data that crosses role boundaries: trajectories (collector → buffer) and learner batches
(buffer → policy). numpy arrays only.

Shape letters: T transitions, B batch, K unroll steps, A actions, O observation shape, O'
stacked observation shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass
class Trajectory:
    """A contiguous piece of one env's episode, as collectors hand it to replay buffers.

    T transitions: ``obs[t]`` is the observation at which ``actions[t]`` was chosen and
    ``obs[T]`` the observation after the last transition (the episode's final observation when
    ``ended``). Observations are unstacked; frame stacking happens when a batch is built.
    Buffers cut trajectories into game segments (with the K + n padding from the successor).
    ``rewards[t]`` is the reward of transition t for the player who took it (``to_play[t]``).
    """

    obs: np.ndarray  # [T+1, *O] float32, or uint8 frames for a FrameEnvSpec env (obs = frames / frame_scale)
    actions: np.ndarray  # [T] int64
    rewards: np.ndarray  # [T] float32
    visit_dist: np.ndarray  # [T, A] float32 policy targets (normalised root visits; zeros without search)
    root_values: np.ndarray  # [T] float32 searched root values
    pred_values: np.ndarray  # [T] float32 network values at the roots (for initial priorities)
    legal: np.ndarray  # [T+1, A] bool
    to_play: np.ndarray  # [T+1] int64
    timestep: np.ndarray  # [T+1] int64 step index within the episode
    ended: bool  # the episode ended at obs[T] (terminated or truncated)
    terminal: bool  # ended and no bootstrap past obs[T] (terminated, or truncation treated as terminal)
    env_id: int = 0
    episode_return: float = 0.0  # the whole episode's return when ended

    def __len__(self) -> int:
        return int(self.actions.shape[0])


@dataclass
class Batch:
    """What a learning policy consumes (B samples, K unroll steps; K = 0 for AlphaZero)."""

    obs: np.ndarray  # [B, K+1, *O'] float32: stacked obs at t..t+K (0: root input, >=1: SSL targets)
    actions: np.ndarray  # [B, K] int64: a_t..a_{t+K-1}, uniformly random past the data
    mask: np.ndarray  # [B, K+1] float32: 1 where t+k is a real transition
    target_reward: np.ndarray  # [B, K] float32: r_{t+k}, 0 past the data
    target_value: np.ndarray  # [B, K+1] float32: value targets (n-step returns or game outcomes)
    target_policy: np.ndarray  # [B, K+1, A] float32: stored policy targets, 0 past the data
    weights: np.ndarray  # [B] float32: importance-sampling weights (ones when uniform)
    indices: np.ndarray  # [B] int64: transition ids for ``ReplayBuffer.update_priorities``
    to_play: np.ndarray  # [B, K+1] int64
    legal: np.ndarray  # [B, K+1, A] bool
    #: [B, K] float32 value-prefix targets (when ``TargetSpec.value_prefix_horizon`` = H > 0):
    #: entry k = Σ target_reward[j] for j from H·⌊k/H⌋ to k (the sum since the last reset).
    target_value_prefix: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.indices.shape[0])
