"""The versus evaluator: greedy games against each configured bot, as first and as second player.

LightZero's AlphaZero evaluator plays its agent as player 1 only, against one bot; here every
opponent is played from both sides, and win/draw/loss rates are reported per opponent and side:

* ``eval/vs_<label>/first/{win,draw,loss}_rate``, ``eval/vs_<label>/second/...`` (the agent moved
  first / second), and ``eval/vs_<label>/{win,draw,loss}_rate`` over both sides;
* ``eval/return_mean`` (and ``_std``, ``_min``, ``_max``) over all games of the agent's result
  (win 1, draw 0, loss −1), ``eval/episodes``, ``eval/episode_length_mean`` (moves of both sides),
  ``eval/seconds``: so ``stop_value`` and ``ckpt/best`` work as with the ``episodes`` evaluator.

Evaluations are reproducible: evaluation n (counted in the evaluator's state, so a resumed run
continues the count) seeds opponent k on side s from (the opponents' seed, n, k, s).

Shape letters: E envs.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from lzkernel import ActingPolicy, SimulatorEnvSpec
from lzk_workers.evaluator import EvaluatorBase, return_metrics
from lzk_workers.opponents import OpponentSpec
from lzk_workers.rollout import balanced_quotas
from lzk_workers.versus import VersusActor, agent_return, outcome_rates

#: The agent's player and the metric name of each side.
SIDES = ((1, "first"), (2, "second"))


class VersusEvaluator(EvaluatorBase):
    """Plays ``games`` greedy games per opponent and side per :meth:`evaluate` (``2 · games ·
    len(opponents)`` in all) on ``envs`` envs; cadence, best and stop as :class:`EvaluatorBase`."""

    def __init__(self, env_spec: SimulatorEnvSpec, *, envs: int, games: int, opponents: Sequence[OpponentSpec],
                 seed: int, opponent_seed: int, every_train_iters: int, stop_value: float | None = None,
                 frame_stack: int = 1, interrupt: Callable[[], bool] | None = None) -> None:
        if not opponents:
            raise ValueError("the versus evaluator needs at least one opponent")
        labels = [spec.label for spec in opponents]
        if len(set(labels)) != len(labels):
            raise ValueError(f"opponent labels must differ, got {labels}")
        envs = min(envs, games)  # more envs than games per side would idle
        # record=True: a game's result is read from its moves' rewards (each for its mover)
        super().__init__(env_spec, envs=envs, seed=seed, every_train_iters=every_train_iters,
                         stop_value=stop_value, frame_stack=frame_stack, record=True, interrupt=interrupt)
        self.opponents = list(opponents)
        self.games = games
        self.opponent_seed = opponent_seed
        self.quota = balanced_quotas(games, envs)  # [E]
        for k, spec in enumerate(self.opponents):  # a bad name or param fails now, not at the first evaluation
            self._opponent(k, 1)

    def _opponent(self, k: int, side: int) -> Any:
        """Opponent k for the games where the agent is player ``side``, in this evaluation."""
        spec = self.opponents[k]
        seq = np.random.SeedSequence([self.opponent_seed, self.evaluations, k, side])
        return self.env_spec.make_opponent(spec.name, spec.params, int(seq.generate_state(1)[0]))

    def _play_side(self, policy: ActingPolicy, k: int, side: int) -> tuple[list[float], list[int]]:
        """The agent's results and the games' lengths of ``games`` games as player ``side`` against opponent k."""
        self._restart(policy)
        actor = VersusActor(policy, self._opponent(k, side), np.full(self.player.num_envs, side, np.int64),
                            alternate=False)
        result = self._play(actor, self.quota)
        return [agent_return(game, side) for game in result.pieces], [ep.length for ep in result.episodes]

    def evaluate(self, policy: ActingPolicy) -> dict[str, float]:
        """Play every opponent from both sides; the ``eval/...`` metrics (module docstring)."""
        start = time.perf_counter()
        index = self._begin()
        metrics: dict[str, float] = {}
        results: list[float] = []
        lengths: list[int] = []
        for k, spec in enumerate(self.opponents):
            both: list[float] = []
            for side, side_name in SIDES:
                outcomes, game_lengths = self._play_side(policy, k, side)
                metrics.update(outcome_rates(f"eval/vs_{spec.label}/{side_name}", outcomes))
                both += outcomes
                lengths += game_lengths
            metrics.update(outcome_rates(f"eval/vs_{spec.label}", both))
            results += both
        scores = np.sign(np.asarray(results, np.float64))  # win 1, draw 0, loss -1
        metrics.update(return_metrics(scores, np.asarray(lengths, np.float64)))
        metrics["eval/seconds"] = time.perf_counter() - start
        return self._finish(metrics, index)
