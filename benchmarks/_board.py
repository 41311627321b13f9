"""Scoring a board-game policy against perfect play (benchmarks only): the greedy move on every
reachable tic-tac-toe position, and games against the perfect player.

Both use the policy exactly as evaluation does: ``act(mode="eval")`` with the env's simulator
states, its search and ``eval_num_simulations``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from lzk_envs.openspiel import OpenSpielEnvSpec
from lzk_envs.tictactoe_solver import tictactoe_solver


def greedy_moves(policy: Any, spec: OpenSpielEnvSpec, states: list[Any], chunk: int = 512) -> np.ndarray:
    """[N] int64: the policy's eval-mode move (its search, ``eval_num_simulations``) at each of
    ``states``, ``chunk`` positions per call."""
    sim = spec.make_simulator()
    out = np.empty(len(states), np.int64)
    for lo in range(0, len(states), chunk):
        part = states[lo:lo + chunk]
        view = sim.observe(part)
        res = policy.act(view.obs, view.legal, view.to_play, mode="eval", env_ids=np.arange(len(part)),
                         timestep=np.zeros(len(part), np.int64), states=part)
        out[lo:lo + len(part)] = res.action
    return out


def optimal_move_rate(policy: Any, spec: OpenSpielEnvSpec, chunk: int = 512) -> tuple[float, int]:
    """(share of the 4,520 non-terminal positions where the greedy move is minimax-optimal,
    number of positions where it is not)."""
    solver = tictactoe_solver()
    states = list(solver.positions())
    actions = greedy_moves(policy, spec, states, chunk)
    wrong = sum(int(a) not in solver.optimal_actions(s) for a, s in zip(actions, states))
    return 1.0 - wrong / len(states), wrong


def games_against(policy: Any, spec: OpenSpielEnvSpec, opponent: str, games_per_side: int, seed: int,
                  params: dict[str, Any] | None = None) -> dict[str, float]:
    """Greedy games against ``opponent``, ``games_per_side`` as each player: win/draw/loss counts
    per side (``first_loss``, ``second_win``, ...), all games played together."""
    bot = spec.make_opponent(opponent, params or {}, seed)
    sim = spec.make_simulator()
    out: dict[str, float] = {}
    for side, agent in (("first", 1), ("second", 2)):
        states = [sim.new_state() for _ in range(games_per_side)]
        view = sim.observe(states)
        done = np.zeros(len(states), bool)
        result = np.zeros(len(states))  # +1 agent win, 0 draw, −1 loss
        while not done.all():
            live = np.flatnonzero(~done)
            mine = live[view.to_play[live] == agent]
            theirs = live[view.to_play[live] != agent]
            actions = np.zeros(len(states), np.int64)
            if len(mine):
                sub = [states[i] for i in mine]
                res = policy.act(view.obs[mine], view.legal[mine], view.to_play[mine], mode="eval",
                                 env_ids=mine, timestep=np.zeros(len(mine), np.int64), states=sub)
                actions[mine] = res.action
            if len(theirs):
                actions[theirs] = bot.act([states[i] for i in theirs], view.legal[theirs])
            step = sim.step([states[i] for i in live], actions[live])
            view.obs[live], view.legal[live], view.to_play[live] = step.obs, step.legal, step.to_play
            for j, i in enumerate(live):
                if step.terminal[j]:
                    done[i] = True
                    p1 = sim.player1_return(states[i])
                    result[i] = p1 if agent == 1 else -p1
        out[f"{side}_win"] = float((result > 0).sum())
        out[f"{side}_draw"] = float((result == 0).sum())
        out[f"{side}_loss"] = float((result < 0).sum())
    return out
