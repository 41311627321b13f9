"""Tic-tac-toe solved: the minimax value and the optimal moves of every reachable position of
OpenSpiel's ``tic_tac_toe``, for the ``perfect`` opponent and for benchmarks that score a policy
against perfect play.

The game has 5,478 reachable positions, 4,520 of them non-terminal; one depth-first negamax over
them (memoised by board) takes well under a second, and :func:`tictactoe_solver` keeps the result
for the whole process.
"""
from __future__ import annotations

import functools
from typing import Any, Iterator

from lzk_envs.openspiel_game import import_pyspiel


class TicTacToeSolver:
    """Game-theoretic values of tic-tac-toe positions (``pyspiel`` states of ``tic_tac_toe``).

    Values are for the player to move: +1 a forced win, 0 a draw, -1 a forced loss. Positions are
    keyed by their board (``str(state)``): which player moves follows from it, and play only
    depends on the board, so transpositions share one entry.
    """

    def __init__(self) -> None:
        pyspiel = import_pyspiel()
        self._game = pyspiel.load_game("tic_tac_toe")
        self._value: dict[str, int] = {}  # every reachable position -> value for the player to move
        self._best: dict[str, frozenset[int]] = {}  # non-terminal position -> its optimal moves
        self._states: dict[str, Any] = {}  # non-terminal position -> one state with that board
        self._solve(self._game.new_initial_state())

    def _solve(self, state: Any) -> int:
        key = str(state)
        known = self._value.get(key)
        if known is not None:
            return known
        if state.is_terminal():
            # "to move" at the end: the player after the last mover (x moves at even plies)
            value = int(state.player_return(len(state.history()) % 2))
        else:
            self._states[key] = state  # before the children: positions() starts at the empty board
            child = {a: -self._solve(state.child(a)) for a in state.legal_actions()}
            value = max(child.values())
            self._best[key] = frozenset(a for a, v in child.items() if v == value)
        self._value[key] = value
        return value

    def _key(self, state: Any) -> str:
        if state.get_game().get_type().short_name != "tic_tac_toe":
            raise ValueError(f"TicTacToeSolver: expected a tic_tac_toe state, got one of {state.get_game()}")
        return str(state)

    def value(self, state: Any) -> int:
        """+1 / 0 / -1: the outcome under perfect play for the player to move at ``state`` (at a
        terminal state, for the player who did not make the last move)."""
        return self._value[self._key(state)]

    def optimal_actions(self, state: Any) -> frozenset[int]:
        """The moves at non-terminal ``state`` that keep its minimax value."""
        key = self._key(state)
        if key not in self._best:
            raise ValueError(f"TicTacToeSolver: the position is terminal, no move to choose:\n{state}")
        return self._best[key]

    def positions(self) -> Iterator[Any]:
        """Every reachable non-terminal position once (4,520), as fresh clones, in the order the
        solver first met them (the empty board first)."""
        return (state.clone() for state in self._states.values())

    @property
    def num_positions(self) -> int:
        """Reachable non-terminal positions (4,520)."""
        return len(self._states)

    @property
    def num_reachable(self) -> int:
        """Reachable positions, terminal ones included (5,478)."""
        return len(self._value)


@functools.cache
def tictactoe_solver() -> TicTacToeSolver:
    """The process-wide solver (solved on the first call)."""
    return TicTacToeSolver()
