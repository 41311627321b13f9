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


class EpisodeEvaluator:
    """Plays exactly ``episodes`` greedy episodes (``mode="eval"``) per :meth:`evaluate`."""

    def __init__(self, env_spec: EnvSpec, *, envs: int, episodes: int, seed: int,
                 every_train_iters: int, stop_value: float | None = None, frame_stack: int = 1) -> None:
        envs = min(envs, episodes)  # more envs than episodes would idle
        self.episodes = episodes
        self.every_train_iters = every_train_iters
        self.stop_value = stop_value
        self.quota = balanced_quotas(episodes, envs)  # [E]
        self.player = EpisodePlayer(env_spec.make_vector(envs, seed), env_spec, frame_stack,
                                    mode="eval", record=False)
        self.best_return = -math.inf
        # -1 (LightZero starts from 0) so that should_eval(0) is true on a fresh evaluator: the
        # trainer needs no separate evaluation before its loop.
        self.last_eval_iter = -1

    def should_eval(self, train_iter: int) -> bool:
        """LightZero's rule: not twice at one iteration; at least ``every_train_iters`` apart,
        except at iteration 0. Records ``train_iter`` when it answers True."""
        if train_iter == self.last_eval_iter:
            return False
        if train_iter - self.last_eval_iter < self.every_train_iters and train_iter != 0:
            return False
        self.last_eval_iter = train_iter
        return True

    def evaluate(self, policy: ActingPolicy) -> dict[str, float]:
        """Reset the envs and the policy's eval state, play the episodes, return ``eval/...``."""
        start = time.perf_counter()
        self.player.restart()  # every evaluation starts fresh episodes (no half-played ones)
        policy.reset_envs(list(range(self.player.num_envs)), "eval")
        result = self.player.play(policy, self.quota)
        returns = np.array([ep.episode_return for ep in result.episodes], np.float64)
        lengths = np.array([ep.length for ep in result.episodes], np.float64)
        return {
            "eval/return_mean": float(returns.mean()),
            "eval/return_std": float(returns.std()),
            "eval/return_min": float(returns.min()),
            "eval/return_max": float(returns.max()),
            "eval/episodes": float(len(returns)),
            "eval/episode_length_mean": float(lengths.mean()),
            "eval/seconds": time.perf_counter() - start,
        }

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
