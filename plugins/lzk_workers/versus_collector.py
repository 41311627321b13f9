"""The versus collector: whole games of the agent against a bot, returned as the agent saw them.

The ``episode`` collector's quotas and persistent envs (it is one, with the acting wrapped in a
:class:`~lzk_workers.versus.VersusActor`), LightZero's ``play_with_bot_mode`` without its
limits: the agent alternates sides (LightZero's agent is always player 1), the opponent moves
in the same env step as the agent's other rows, and the trajectories are the agent's decision
points with the opponent's replies folded into its rewards (:func:`~lzk_workers.versus.agent_view`).

Self-play needs no collector of its own: the ``episode`` collector plays both sides with the
policy, and each transition's reward is already its mover's.

Shape letters: E envs.
"""
from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

import numpy as np

from lzkernel import ActingPolicy, SimulatorEnvSpec, Trajectory
from lzk_workers.collector import EpisodeCollector, episode_metrics
from lzk_workers.opponents import OpponentSpec
from lzk_workers.rollout import PlayResult
from lzk_workers.versus import VersusActor, agent_return, agent_view, outcome_rates


#: Why stacked frames do not fit agent views.
STACK_REASON = ("its trajectories keep the agent's positions only, so frames stacked from them for training would "
                "differ from the frames stacked while acting (both sides' positions)")


class VersusCollector(EpisodeCollector):
    """Plays ``n_episode`` whole games per :meth:`collect` against ``opponent`` on ``envs``
    persistent envs, the agent alternating sides.

    Env i's first game has the agent as player ``1 + i % 2`` (so both sides are played from the
    first collect on); after every game of an env its agent changes side, across collects too.

    Returns one agent-view trajectory per game (every ``to_play`` the agent's player, rewards for
    the agent); ``collect/env_steps`` counts both sides' moves, ``collect/agent_steps`` the
    agent's (the returned transitions). ``collect/return_*`` are the agent's game returns, plus
    ``collect/{win,draw,loss}_rate`` and ``collect/first_player_rate`` (the share of games the
    agent was player 1 in: the first mover, unless a random opening made the first moves).
    """

    def __init__(self, env_spec: SimulatorEnvSpec, *, envs: int, n_episode: int, opponent: OpponentSpec,
                 seed: int, opponent_seed: int, frame_stack: int = 1,
                 random_rng: np.random.Generator | None = None, opening_moves: int = 0,
                 opening_rng: np.random.Generator | None = None) -> None:
        if frame_stack != 1:
            raise ValueError(f"the versus collector needs frame_stack 1, got {frame_stack}: {STACK_REASON}")
        self.opponent_spec, self.opponent_seed, self.game_spec = opponent, opponent_seed, env_spec
        self.collects = 0  # collect calls so far: the opponent of call n is seeded from (opponent_seed, n)
        self.opponent = self._make_opponent(env_spec, 0)  # before the envs: a bad name or param fails first
        super().__init__(env_spec, envs=envs, n_episode=n_episode, seed=seed, frame_stack=frame_stack,
                         random_rng=random_rng, opening_moves=opening_moves, opening_rng=opening_rng)
        self.agent_player = 1 + np.arange(envs, dtype=np.int64) % 2  # [E] the agent's side in each env's game
        self._actor: VersusActor | None = None  # this collect's actor (its log of ended games)

    def _make_opponent(self, env_spec: SimulatorEnvSpec, n: int) -> Any:
        seq = np.random.SeedSequence([self.opponent_seed, n])
        return env_spec.make_opponent(self.opponent_spec.name, self.opponent_spec.params, int(seq.generate_state(1)[0]))

    def _acting(self, actor: ActingPolicy) -> ActingPolicy:
        # A fresh opponent per call, seeded by the call's index: the bots' random state (OpenSpiel's
        # MCTS bot's included) cannot be saved, so a resumed run rebuilds the same opponent instead.
        self.opponent = self._make_opponent(self.game_spec, self.collects)
        self.collects += 1
        self._actor = VersusActor(actor, self.opponent, self.agent_player, alternate=True)
        return self._actor

    def _summarise(self, result: PlayResult) -> tuple[list[Trajectory], dict[str, float]]:
        """Agent views of the games and their metrics. Each game is paired with the agent's side
        through the actor's log of ended games, in order per env (the player emits an env's games
        in the order they ended, and calls ``reset_envs`` once per ended game)."""
        assert self._actor is not None
        sides: dict[int, deque[int]] = defaultdict(deque)
        for env_id, side in self._actor.ended:
            sides[env_id].append(side)
        views: list[Trajectory] = []
        outcomes, firsts = [], []
        for game in result.pieces:
            side = sides[game.env_id].popleft()
            outcomes.append(agent_return(game, side))
            firsts.append(side == 1)
            view = agent_view(game, side)
            if view is not None:  # None: the opponent ended the game before the agent's first move
                views.append(view)
        lengths = np.array([ep.length for ep in result.episodes], np.float64)
        metrics = episode_metrics(np.asarray(outcomes, np.float64), lengths)
        metrics.update(outcome_rates("collect", outcomes))
        metrics["collect/agent_steps"] = float(sum(len(v) for v in views))
        if firsts:
            metrics["collect/first_player_rate"] = float(np.mean(firsts))
        return views, metrics

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "agent_player": self.agent_player.tolist(), "collects": self.collects}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.collects = int(state.get("collects", 0))  # absent from checkpoints before 2026-12-07
        if "agent_player" in state:
            # in place: the array is shared with the running actor
            self.agent_player[:] = np.asarray(state["agent_player"], np.int64)

