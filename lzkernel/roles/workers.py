"""Collectors and evaluators: they step vector envs with a policy."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from lzkernel.roles.data import Trajectory
    from lzkernel.roles.policy import ActingPolicy


@runtime_checkable
class Collector(Protocol):
    """Plays with a policy and returns trajectories (whole episodes or finished pieces)."""

    def collect(self, policy: ActingPolicy, *, temperature: float, epsilon: float, random_policy: bool = False,
                n_episode: int | None = None) -> tuple[list[Trajectory], dict[str, float]]:
        """One collection: the trajectories that finished and ``collect/...`` metrics.
        ``random_policy``: act uniformly at random (warm-up); ``n_episode``: this call's episode
        count instead of the configured one (collectors that count episodes)."""

    def state_dict(self) -> dict[str, Any]:
        """Counters and whatever else a resume needs (plain values)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class ResumableCollector(Collector, Protocol):
    """A collector whose work in progress a checkpoint can hold, so that a resumed run collects
    exactly what the uninterrupted run would have: its envs' running episodes (through
    :class:`~lzkernel.ResumableVectorEnv`), frame windows, episode timesteps, the pieces not yet
    returned, and its RNG states. The loop saves it with every full checkpoint and restores it
    after :meth:`load_state_dict`."""

    def episode_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(meta, arrays)``: plain values and numpy arrays of the work in progress."""

    def load_episode_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Continue from an :meth:`episode_state` (of a collector with the same config and seed)."""


@runtime_checkable
class Evaluator(Protocol):
    """Plays greedy episodes on rank 0, reports ``eval/...`` (always ``eval/return_mean``), and
    decides "best" and "stop"."""

    def should_eval(self, train_iter: int) -> bool:
        """Whether an evaluation is due at ``train_iter`` (recording it when it answers True)."""

    def evaluate(self, policy: ActingPolicy) -> dict[str, float]: ...

    def is_best(self, mean: float) -> bool:
        """``mean`` beats every earlier evaluation (and is remembered)."""

    def reached(self, mean: float) -> bool:
        """``mean`` reaches the stop value."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class ReplayableEvaluator(Evaluator, Protocol):
    """An evaluator whose evaluations can be replayed: evaluation n seeds its envs (and bots)
    from the evaluator's seed and n only, and policies act deterministically in eval mode, so
    the same weights play the same episodes again (``lzkernel eval``)."""

    #: Evaluations done (in the state; reported as ``eval/index`` of each). Setting it to n before
    #: :meth:`evaluate` plays evaluation n again.
    evaluations: int
