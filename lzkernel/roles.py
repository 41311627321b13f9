"""The interfaces between roles, as Protocols (structural: implement them without inheriting).

These are the contracts first-party and third-party plugins meet at. They are deliberately
torch-free: arrays crossing role boundaries are numpy arrays. Shape letters: E envs, B batch,
A actions, O observation shape, T time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    import numpy as np


# ---------------------------------------------------------------------------------------------
# Environments
# ---------------------------------------------------------------------------------------------


@dataclass
class StepBatch:
    """What a vector env returns from ``reset`` and ``step``, one row per env.

    Auto-reset happens on the same step: where ``terminated | truncated`` is true, ``obs``,
    ``legal`` and ``to_play`` already belong to the *next* episode's first state, and
    ``final_obs`` holds the last observation of the finished episode (elsewhere it equals
    ``obs``). ``reward`` is the reward of the transition just taken (zeros after ``reset``).
    """

    obs: np.ndarray  # [E, *O] float32
    legal: np.ndarray  # [E, A] bool, at least one True per row
    to_play: np.ndarray  # [E] int64: -1 single player, else the player to move (1 or 2)
    reward: np.ndarray  # [E] float32
    terminated: np.ndarray  # [E] bool: the MDP ended (no bootstrap past it)
    truncated: np.ndarray  # [E] bool: cut by a time limit (bootstrap allowed unless configured)
    final_obs: np.ndarray  # [E, *O]
    episode_return: np.ndarray  # [E] float32: return of the episode that just ended (0 elsewhere)
    episode_length: np.ndarray  # [E] int64: its length in steps (0 elsewhere)


@runtime_checkable
class VectorEnv(Protocol):
    """E environments stepped together, with same-step auto-reset."""

    num_envs: int

    def reset(self) -> StepBatch:
        """Reset every env (seeded at the first call) and return the first states."""

    def step(self, actions: np.ndarray, active: np.ndarray | None = None) -> StepBatch:
        """Step the envs with ``actions`` [E] int64 (each legal for its row). ``active`` [E] bool,
        when given, leaves the other rows unstepped (their rows in the result are unchanged and
        their rewards zero): collectors use it for envs that met their episode quota."""

    def close(self) -> None: ...


@runtime_checkable
class EnvSpec(Protocol):
    """Built by the ``env`` component: what a policy needs to know and how to make envs."""

    id: str
    obs_shape: tuple[int, ...]
    num_actions: int
    two_player: bool
    #: When true, a time-limit truncation ends the episode like a termination (no bootstrap).
    truncation_as_terminal: bool

    def make_vector(self, num_envs: int, seed: int) -> VectorEnv:
        """``num_envs`` envs; env i is seeded with ``seed + i`` at its first reset."""


# ---------------------------------------------------------------------------------------------
# Acting: what collectors and evaluators need from a policy
# ---------------------------------------------------------------------------------------------


@dataclass
class ActResult:
    """One decision per env row."""

    action: np.ndarray  # [E] int64
    visit_dist: np.ndarray  # [E, A] float32: normalised root visits (zeros for pure-policy acting)
    root_value: np.ndarray  # [E] float32: searched root value (or the predicted value)
    pred_value: np.ndarray  # [E] float32: the network's value at the root, for priorities
    metrics: Mapping[str, float] | None = None  # e.g. search/... timings of this call


@runtime_checkable
class ActingPolicy(Protocol):
    """The acting side of a policy (collect and eval modes)."""

    def act(
        self,
        obs: np.ndarray,  # [E, *O'] observations (frame-stacked when the policy stacks frames)
        legal: np.ndarray,  # [E, A] bool
        to_play: np.ndarray,  # [E] int64
        *,
        mode: str,  # "collect" (noise, sampled action) or "eval" (no noise, greedy)
        env_ids: np.ndarray,  # [E] int64 ids of the rows' envs (for per-env state such as caches)
        temperature: float = 1.0,
        epsilon: float = 0.0,
        timestep: np.ndarray | None = None,  # [E] int64 step index within the episode
    ) -> ActResult: ...

    def reset_envs(self, env_ids: Sequence[int], mode: str) -> None:
        """Episodes ended for ``env_ids``: drop any per-env state (no-op for MuZero)."""


@dataclass
class Trajectory:
    """A contiguous piece of one env's episode, as collectors hand it to replay buffers.

    T transitions: ``obs[t]`` is the observation at which ``actions[t]`` was chosen and
    ``obs[T]`` the observation after the last transition (the episode's final observation when
    ``ended``). Observations are unstacked; frame stacking happens when a batch is built.
    Buffers cut trajectories into game segments (with the K + n padding from the successor).
    """

    obs: np.ndarray  # [T+1, *O]
    actions: np.ndarray  # [T] int64
    rewards: np.ndarray  # [T] float32
    visit_dist: np.ndarray  # [T, A] float32 normalised root visits (zeros when acting without search)
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


# ---------------------------------------------------------------------------------------------
# Update schedule and comm
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class UpdateSchedule(Protocol):
    def updates(self, collected_transitions: int) -> int:
        """Learner updates to run after a collect of ``collected_transitions`` (this rank's
        count). Implementations that depend on the count sum it across ranks through the comm
        backend, so every rank returns the same number."""


@runtime_checkable
class CommBackend(Protocol):
    """Rank, world size and the collectives trainers need. Tensors are torch tensors; the
    backend moves them to the device its transport needs and back."""

    rank: int
    world_size: int

    @property
    def is_main(self) -> bool: ...

    def barrier(self) -> None: ...

    def all_reduce_sum(self, tensor: Any) -> Any:
        """Sum ``tensor`` over ranks, in place; returns it."""

    def broadcast(self, tensor: Any, src: int = 0) -> Any:
        """Overwrite ``tensor`` on every rank with ``src``'s value, in place; returns it."""

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """``src``'s picklable-free value (None, bool, int, float, str, lists/dicts of them)."""

    def average_gradients(self, parameters: Any) -> None:
        """Average ``p.grad`` over ranks for every parameter in ``parameters``; parameters whose
        grad is None on this rank take part with zeros (so every rank runs the same collective)."""

    def close(self) -> None: ...


@runtime_checkable
class Trainer(Protocol):
    def train(self) -> None:
        """Run until a budget or stop condition; checkpoint through ``run.checkpoints``."""
