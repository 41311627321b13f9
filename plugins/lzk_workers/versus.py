"""Two-player play against a bot, on the episode player: one side of each game is the agent (a
policy), the other an :class:`~lzkernel.Opponent`; and the agent's view of the recorded games.

* :class:`VersusActor` is an :class:`~lzkernel.ActingPolicy` that :class:`EpisodePlayer` steps
  like any policy: per env row, the agent moves where it is the player to move and the opponent
  elsewhere, in one env step for all rows. The recorded trajectory holds both sides' moves.
* :func:`agent_view` keeps only the agent's decision points of such a trajectory and folds the
  opponent's replies into the rewards of the agent's moves, so that the result reads like a
  single-agent episode whose every step is the agent's (the ``versus`` collector returns these).
* :func:`agent_return` and :func:`outcome_rates`: the agent's result of a game and win/draw/loss
  rates (the ``versus`` collector's and evaluator's metrics).

Rewards follow the kernel's contract: ``Trajectory.rewards[t]`` is for the player who moved at t
(``to_play[t]``), and games are zero-sum, so the other player's reward is its negation.

Shape letters: E envs, B acting rows, A actions, T transitions of a game (both sides), K the
agent's decision points in it.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from lzkernel import ActingPolicy, ActResult, Opponent, Trajectory
from lzk_workers.rollout import check_act


def other_player(player: np.ndarray) -> np.ndarray:
    """The opponent of players 1 and 2 (elementwise)."""
    return 3 - player


class VersusActor:
    """An :class:`~lzkernel.ActingPolicy` that plays ``agent`` against ``opponent``.

    ``agent_player`` [E] int64 (1 or 2) is the agent's player in each env's running game; the
    array is the caller's and is updated in place: with ``alternate``, :meth:`reset_envs` (the
    episode player's signal that an env's game ended) hands the env's next game to the other
    side, so the agent is player 1 in one game and player 2 in the next.

    Rows where the opponent moves get visit_dist zeros and values 0 (no search was made there);
    the agent is called once per step with its rows only (their env ids, observations, states),
    and its ``metrics`` are the step's. Needs ``states`` (a :class:`~lzkernel.SimulatorEnvSpec`
    env): opponents move from game states.
    """

    def __init__(self, agent: ActingPolicy, opponent: Opponent, agent_player: np.ndarray, *,
                 alternate: bool) -> None:
        if agent_player.ndim != 1 or not np.isin(agent_player, (1, 2)).all():
            raise ValueError(f"agent_player must be a [E] array of players 1 or 2, got {agent_player!r}")
        self.agent = agent
        self.opponent = opponent
        self.agent_player = agent_player
        self.alternate = alternate
        #: (env id, the agent's player) of every game that ended, in the order reset_envs saw them
        self.ended: list[tuple[int, int]] = []

    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, *, mode: str,
            env_ids: np.ndarray, temperature: float = 1.0, epsilon: float = 0.0,
            timestep: np.ndarray | None = None, states: Sequence[Any] | None = None) -> ActResult:
        """One move per row [B]: the agent's where ``to_play`` is its player, the opponent's elsewhere."""
        if states is None:
            raise ValueError("versus play needs game states (StepBatch.states): use an env whose spec is a "
                             "SimulatorEnvSpec, e.g. openspiel")
        b, a = legal.shape
        mine = to_play == self.agent_player[env_ids]  # [B]
        action = np.zeros(b, np.int64)
        visit = np.zeros((b, a), np.float32)
        root, pred = np.zeros(b, np.float32), np.zeros(b, np.float32)
        metrics = None
        rows = np.flatnonzero(mine)
        if rows.size:
            res = check_act(
                self.agent.act(obs[rows], legal[rows], to_play[rows], mode=mode, env_ids=env_ids[rows],
                               temperature=temperature, epsilon=epsilon,
                               timestep=None if timestep is None else timestep[rows],
                               states=[states[i] for i in rows]),
                rows.size, a)
            action[rows], visit[rows], root[rows], pred[rows] = res.action, res.visit_dist, res.root_value, res.pred_value
            metrics = res.metrics
        rows = np.flatnonzero(~mine)
        if rows.size:
            action[rows] = self.opponent.act([states[i] for i in rows], legal[rows])
        return ActResult(action, visit, root, pred, metrics)

    def reset_envs(self, env_ids: Sequence[int], mode: str) -> None:
        """Games ended in ``env_ids``: log each with the agent's side, switch sides (with
        ``alternate``), and let the agent drop its per-env state."""
        ids = np.asarray(env_ids, np.int64)
        self.ended.extend((int(i), int(self.agent_player[i])) for i in ids)
        if self.alternate:
            self.agent_player[ids] = other_player(self.agent_player[ids])
        self.agent.reset_envs(env_ids, mode)


def _signed_rewards(traj: Trajectory, player: int) -> np.ndarray:
    """[T] float32: each move's reward for ``player`` (a zero-sum game: the other player's moves
    count with the opposite sign)."""
    mover = traj.to_play[: len(traj)]
    return np.where(mover == player, traj.rewards, -traj.rewards).astype(np.float32)


def agent_return(traj: Trajectory, player: int) -> float:
    """The return of ``player`` (1 or 2) over the whole recorded game ``traj`` (both sides' moves)."""
    return float(_signed_rewards(traj, player).sum())


def agent_view(traj: Trajectory, player: int) -> Trajectory | None:
    """The game ``traj`` (both sides' moves, rewards for each mover) as ``player`` saw it.

    Kept: the K steps t_0 < … < t_{K−1} where ``player`` moved (obs, legal, action, visit_dist,
    values), then the game's final observation as obs[K] (legal all True, as the episode player
    records it). Reward k is ``player``'s reward over steps t_k … t_{k+1} − 1 (t_K = T): its own
    move's reward minus the opponent's replies' (one reply in games that alternate strictly).
    ``to_play`` is ``player`` everywhere (obs[K] included: the game is over there, nothing is
    chosen from it), ``timestep`` counts the agent's decisions 0 … K, and ``episode_return`` is
    ``player``'s return of the whole game (:func:`agent_return`; it differs from the sum of the
    kept rewards only by rewards of opponent moves made before the agent's first move).

    None when ``player`` never moved. Only whole games: a piece that did not end may stop on the
    opponent's turn, and its last observation would not be a state of the agent (ValueError).
    """
    if not traj.ended:
        raise ValueError("agent_view needs a whole game (Trajectory.ended); got a piece that did not end")
    t = len(traj)
    keep = np.flatnonzero(traj.to_play[:t] == player)  # [K] the agent's decision points
    if keep.size == 0:
        return None
    signed = _signed_rewards(traj, player)
    k = keep.size
    last = np.array([t])
    return Trajectory(
        obs=traj.obs[np.concatenate([keep, last])],
        actions=traj.actions[keep],
        # reduceat sums signed[keep[k] : keep[k + 1]] (the last one up to T): a move and its replies
        rewards=np.add.reduceat(signed, keep).astype(np.float32),
        visit_dist=traj.visit_dist[keep],
        root_values=traj.root_values[keep],
        pred_values=traj.pred_values[keep],
        legal=traj.legal[np.concatenate([keep, last])],
        to_play=np.full(k + 1, player, np.int64),
        timestep=np.arange(k + 1, dtype=np.int64),
        ended=traj.ended,
        terminal=traj.terminal,
        env_id=traj.env_id,
        episode_return=float(signed.sum()),
    )


def outcome_rates(prefix: str, outcomes: Sequence[float]) -> dict[str, float]:
    """``{prefix}/win_rate``, ``/draw_rate``, ``/loss_rate`` of the agent's game results
    ``outcomes`` (> 0 a win, 0 a draw, < 0 a loss); they sum to 1. Nothing for no games."""
    if not len(outcomes):
        return {}
    sign = np.sign(np.asarray(outcomes, np.float64))
    return {f"{prefix}/win_rate": float((sign > 0).mean()), f"{prefix}/draw_rate": float((sign == 0).mean()),
            f"{prefix}/loss_rate": float((sign < 0).mean())}
