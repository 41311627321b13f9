"""The episode evaluator: a fixed number of greedy episodes, return statistics, best/stop.

Behaviour of LightZero's ``MuZeroEvaluator`` (SPEC §1.5), with reproducible evaluations:
evaluation n (counted in the evaluator's state, so a resumed run continues the count, and
reported as ``eval/index``) plays on fresh envs seeded from (the evaluator's seed, n), env i with
:func:`evaluation_seed` + i. Policies act deterministically in eval mode, so the same weights
replay evaluation n exactly (``lzkernel eval RUN --checkpoint best``). Env specs that declare an
evaluation variant (:class:`lzkernel.EvalVariantEnvSpec`, e.g. Atari without episodic life and
reward clipping) are evaluated on it.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from lzkernel import ActingPolicy, EnvSpec, EvalVariantEnvSpec, StopRequested, make_checked_vector
from lzk_workers.rollout import EpisodePlayer, PlayResult, balanced_quotas


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


def evaluation_seed(seed: int, index: int) -> int:
    """The env seed of evaluation ``index`` of an evaluator seeded with ``seed`` (31 bits; env i
    of the evaluation gets this + i)."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0] & 0x7FFFFFFF)


class EvaluatorBase:
    """What the evaluators share: a greedy (``mode="eval"``) :class:`EpisodePlayer` on ``envs``
    envs, fresh and seeded per evaluation (module docstring), when to evaluate
    (:meth:`should_eval`), the best mean and the stop rule, and their state. ``record``: keep the
    played trajectories (evaluators that score them). ``interrupt`` (the run's stop flag): an
    evaluation it interrupts raises :class:`lzkernel.StopRequested` and leaves the evaluator's state
    as before :meth:`should_eval` recorded it, so the evaluation is due again after a resume."""

    def __init__(self, env_spec: EnvSpec, *, envs: int, seed: int, every_train_iters: int,
                 stop_value: float | None, frame_stack: int, record: bool,
                 interrupt: Callable[[], bool] | None = None) -> None:
        self.every_train_iters = every_train_iters
        self.interrupt = interrupt
        self.stop_value = stop_value
        self.env_spec = env_spec.eval_variant() if isinstance(env_spec, EvalVariantEnvSpec) else env_spec
        self.seed, self.envs, self.frame_stack, self.record = seed, envs, frame_stack, record
        self.evaluations = 0  # evaluations done: the index of the next one
        self.player = self._new_player(0)  # made now so that a bad env fails at start-up
        self._player_index: int | None = 0  # the evaluation an unused player was made for
        self.best_return = -math.inf
        # -1 (LightZero starts from 0) so that should_eval(0) is true on a fresh evaluator: the
        # trainer needs no separate evaluation before its loop.
        self.last_eval_iter = -1
        self._unrecorded_iter = -1  # last_eval_iter before should_eval last recorded one

    def _new_player(self, index: int) -> EpisodePlayer:
        venv = make_checked_vector(self.env_spec, self.envs, evaluation_seed(self.seed, index))
        return EpisodePlayer(venv, self.env_spec, self.frame_stack, mode="eval", record=self.record)

    def _begin(self) -> int:
        """Fresh envs for the evaluation about to run, seeded by its index; returns the index."""
        n = self.evaluations
        if self._player_index != n:
            self.player.close()
            self.player = self._new_player(n)
        self._player_index = None
        return n

    def _finish(self, metrics: dict[str, float], index: int) -> dict[str, float]:
        """Count the evaluation ``index`` just played and report it as ``eval/index``."""
        self.evaluations = index + 1
        return {**metrics, "eval/index": float(index)}

    def _play(self, policy: ActingPolicy, quota: np.ndarray) -> PlayResult:
        """``player.play`` with the interrupt; an interrupted evaluation is forgotten: the
        iteration :meth:`should_eval` recorded for it is due again (the count of evaluations only
        moves in :meth:`_finish`, and :meth:`_begin` makes fresh envs for the next one)."""
        try:
            return self.player.play(policy, quota, interrupt=self.interrupt)
        except StopRequested:
            self.last_eval_iter = self._unrecorded_iter
            raise

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
        self._unrecorded_iter, self.last_eval_iter = self.last_eval_iter, train_iter
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
        return {"best_return": best, "last_eval_iter": self.last_eval_iter, "evaluations": self.evaluations}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        best = state["best_return"]
        self.best_return = -math.inf if best is None else float(best)
        self.last_eval_iter = int(state["last_eval_iter"])
        self.evaluations = int(state.get("evaluations", 0))  # states from before the count: 0

    def close(self) -> None:
        self.player.close()


class EpisodeEvaluator(EvaluatorBase):
    """Plays exactly ``episodes`` greedy episodes (``mode="eval"``) per :meth:`evaluate`."""

    def __init__(self, env_spec: EnvSpec, *, envs: int, episodes: int, seed: int,
                 every_train_iters: int, stop_value: float | None = None, frame_stack: int = 1,
                 interrupt: Callable[[], bool] | None = None) -> None:
        envs = min(envs, episodes)  # more envs than episodes would idle
        super().__init__(env_spec, envs=envs, seed=seed, every_train_iters=every_train_iters,
                         stop_value=stop_value, frame_stack=frame_stack, record=False, interrupt=interrupt)
        self.episodes = episodes
        self.quota = balanced_quotas(episodes, envs)  # [E]

    def evaluate(self, policy: ActingPolicy) -> dict[str, float]:
        """Reset the envs and the policy's eval state, play the episodes, return ``eval/...``."""
        start = time.perf_counter()
        index = self._begin()
        self._restart(policy)
        result = self._play(policy, self.quota)
        returns = np.array([ep.episode_return for ep in result.episodes], np.float64)
        lengths = np.array([ep.length for ep in result.episodes], np.float64)
        failures = {"eval/env_failures": float(result.env_failures)} if result.env_failures else {}
        return self._finish({**return_metrics(returns, lengths), **failures, "eval/seconds": time.perf_counter() - start},
                            index)
