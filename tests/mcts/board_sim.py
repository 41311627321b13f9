"""A pure-Python tic-tac-toe :class:`lzkernel.Simulator` and an exact minimax solver, for search
tests that need a real game without OpenSpiel.

A state is ``[board, player]``: board a list of 9 cells (0 empty, 1 or 2), player the one to move.
Observations are three 3×3 planes from the mover's view: own stones, opponent stones, empty.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from lzkernel import SimulatorStep

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def winner(board: Sequence[int]) -> int:
    for a, b, c in LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return int(board[a])
    return 0


def position(moves: str) -> list[Any]:
    """The state after ``moves`` (cells '0'…'8' in play order, X first)."""
    board = [0] * 9
    for i, m in enumerate(moves):
        board[int(m)] = 1 if i % 2 == 0 else 2
    return [board, 1 if len(moves) % 2 == 0 else 2]


class TicTacToe:
    """The simulator (clone, step in place, observe)."""

    num_actions = 9
    obs_shape = (3, 3, 3)

    def clone(self, state: list[Any]) -> list[Any]:
        return [list(state[0]), state[1]]

    def _view(self, states: Sequence[list[Any]], reward: np.ndarray) -> SimulatorStep:
        n = len(states)
        obs = np.zeros((n, 3, 3, 3), np.float32)
        legal = np.zeros((n, 9), bool)
        to_play = np.zeros(n, np.int64)
        terminal = np.zeros(n, bool)
        for i, (board, player) in enumerate(states):
            b = np.array(board).reshape(3, 3)
            obs[i, 0], obs[i, 1], obs[i, 2] = b == player, (b != player) & (b != 0), b == 0
            terminal[i] = winner(board) != 0 or 0 not in board
            legal[i] = (np.array(board) == 0) & ~terminal[i]
            to_play[i] = player
        return SimulatorStep(obs, legal, to_play, reward, terminal)

    def step(self, states: Sequence[list[Any]], actions: np.ndarray) -> SimulatorStep:
        reward = np.zeros(len(states), np.float32)
        for i, (state, a) in enumerate(zip(states, np.asarray(actions).tolist())):
            board, player = state
            if board[a] or winner(board) or 0 not in board:
                raise ValueError(f"illegal move {a} on {board}")
            board[a] = player
            reward[i] = 1.0 if winner(board) == player else 0.0  # for the player who moved
            state[1] = 3 - player
        return self._view(states, reward)

    def observe(self, states: Sequence[list[Any]]) -> SimulatorStep:
        return self._view(states, np.zeros(len(states), np.float32))


@functools.lru_cache(maxsize=None)
def _value(board: tuple[int, ...], player: int) -> int:
    """Minimax value for ``player`` to move (+1 win, 0 draw, −1 loss)."""
    if winner(board):
        return -1  # the previous mover completed a line
    moves = [a for a in range(9) if board[a] == 0]
    if not moves:
        return 0
    return max(-_value(board[:a] + (player,) + board[a + 1:], 3 - player) for a in moves)


def optimal_moves(state: list[Any]) -> set[int]:
    """The moves that keep the minimax value of a non-terminal ``state``."""
    board, player = tuple(state[0]), state[1]
    values = {a: -_value(board[:a] + (player,) + board[a + 1:], 3 - player) for a in range(9) if board[a] == 0}
    best = max(values.values())
    return {a for a, v in values.items() if v == best}
