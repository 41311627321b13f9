"""The episode evaluator: a fixed number of greedy episodes, return statistics, best/stop.

Behaviour of LightZero's ``MuZeroEvaluator`` (SPEC §1.5).
"""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from lzkernel import ActingPolicy, EnvSpec
from lzk_workers.rollout import EpisodePlayer, balanced_quotas


def return_metrics(returns: np.ndarray, lengths: np.ndarray) -> dict[str, float]:
    """``eval/return_{mean,std,min,max}``, ``eval/episodes`` and ``eval/episode_length_mean`` of
    the evaluation's episodes (``returns``, ``lengths`` [n], n >= 1)."""
    return {
        "eval/return_mean": float(returns.mean()),
        "eval/return_std": float(returns.std()),
        "eval/return_min": float(returns.min()),
        "eval/return_max": float(returns.max()),
        "eval/episodes": float(len(returns)),
        "eval/episode_length_mean": float(lengths.mean()),
    }


class EvaluatorBase:
    """What the evaluators share: a greedy (``mode="eval"``) :class:`EpisodePlayer` on ``envs``
    envs, when to evaluate (:meth:`should_eval`), the best mean and the stop rule, and their state.
    ``record``: keep the played trajectories (evaluators that score them)."""

    def __init__(self, env_spec: EnvSpec, *, envs: int, seed: int, every_train_iters: int,
                 stop_value: float | None, frame_stack: int, record: bool) -> None:
        self.every_train_iters = every_train_iters
        self.stop_value = stop_value
        self.player = EpisodePlayer(env_spec.make_vector(envs, seed), env_spec, frame_stack,
                                    mode="eval", record=record)
        self.best_return = -math.inf
        # -1 (LightZero starts from 0) so that should_eval(0) is true on a fresh evaluator: the
        # trainer needs no separate evaluation before its loop.
        self.last_eval_iter = -1

    def _restart(self, policy: ActingPolicy) -> None:
        """Fresh games in every env (no half-played ones) and a reset of the policy's eval state."""
        self.player.restart()
        policy.reset_envs(list(range(self.player.num_envs)), "eval")

    def should_eval(self, train_iter: int) -> bool:
        """LightZero's rule: not twice at one iteration; at least ``every_train_iters`` apart,
        except at iteration 0. Records ``train_iter`` when it answers True."""
        if train_iter == self.last_eval_iter:
            return False
        if train_iter - self.last_eval_iter < self.every_train_iters and train_iter != 0:
            return False
        self.last_eval_iter = train_iter
        return True

    def is_best(self, mean: float) -> bool:
        """True (and remember it) when ``mean`` beats every earlier mean."""
        if mean > self.best_return:
            self.best_return = float(mean)
            return True
        return False

    def reached(self, mean: float) -> bool:
        """``stop_value`` is set and ``mean >= stop_value`` (the trainer adds ``train_iter > 0``)."""
        return self.stop_value is not None and mean >= self.stop_value

    def state_dict(self) -> dict[str, Any]:
        best = None if math.isinf(self.best_return) else self.best_return  # checkpoint-friendly
        return {"best_return": best, "last_eval_iter": self.last_eval_iter}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        best = state["best_return"]
        self.best_return = -math.inf if best is None else float(best)
        self.last_eval_iter = int(state["last_eval_iter"])

    def close(self) -> None:
        self.player.close()


class EpisodeEvaluator(EvaluatorBase):
    """Plays exactly ``episodes`` greedy episodes (``mode="eval"``) per :meth:`evaluate`."""

    def __init__(self, env_spec: EnvSpec, *, envs: int, episodes: int, seed: int,
                 every_train_iters: int, stop_value: float | None = None, frame_stack: int = 1) -> None:
        envs = min(envs, episodes)  # more envs than episodes would idle
        super().__init__(env_spec, envs=envs, seed=seed, every_train_iters=every_train_iters,
                         stop_value=stop_value, frame_stack=frame_stack, record=False)
        self.episodes = episodes
        self.quota = balanced_quotas(episodes, envs)  # [E]

    def evaluate(self, policy: ActingPolicy) -> dict[str, float]:
        """Reset the envs and the policy's eval state, play the episodes, return ``eval/...``."""
        start = time.perf_counter()
        self._restart(policy)
        result = self.player.play(policy, self.quota)
        returns = np.array([ep.episode_return for ep in result.episodes], np.float64)
        lengths = np.array([ep.length for ep in result.episodes], np.float64)
        return {**return_metrics(returns, lengths), "eval/seconds": time.perf_counter() - start}
