"""``tictactoe_errors.py``: the kinds of tic-tac-toe positions and the count of wrong greedy moves,
with scripted policies whose mistakes are known."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pyspiel")

import tictactoe_errors as te  # noqa: E402
from lzk_envs.openspiel import OpenSpielEnvSpec  # noqa: E402
from lzk_envs.tictactoe_solver import tictactoe_solver  # noqa: E402


class ByState:
    """An eval-mode policy choosing ``rule(state)`` for each simulator state."""

    def __init__(self, rule: Any) -> None:
        self.rule = rule

    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, **kw: Any) -> SimpleNamespace:
        assert kw["mode"] == "eval" and len(kw["states"]) == obs.shape[0]
        return SimpleNamespace(action=np.array([self.rule(s) for s in kw["states"]], np.int64))


@pytest.fixture(scope="module")
def ttt() -> OpenSpielEnvSpec:
    return OpenSpielEnvSpec.load("tic_tac_toe")


def _play(spec: OpenSpielEnvSpec, moves: list[int]) -> Any:
    state = spec.make_simulator().new_state()
    for a in moves:
        state.apply_action(a)
    return state


def test_position_kinds_of_hand_made_boards(ttt: OpenSpielEnvSpec) -> None:
    solver = tictactoe_solver()
    assert te.position_kind(solver, _play(ttt, [])) == "draw"
    assert te.position_kind(solver, _play(ttt, [0, 3, 1, 4])) == "win_in_one"  # x: 0 1, plays 2
    # x in the centre, o on an edge: x wins by force, but no line is open yet
    assert te.position_kind(solver, _play(ttt, [4, 1])) == "win_later"
    # x on 4, 0, 6 and o on 1, 8: x threatens 3 and 2 at once, o to move cannot stop both: lost
    assert te.position_kind(solver, _play(ttt, [4, 1, 0, 8, 6])) == "loss"


def test_the_perfect_player_has_no_wrong_position(ttt: OpenSpielEnvSpec) -> None:
    solver = tictactoe_solver()
    row = te.classify(ByState(lambda s: min(solver.optimal_actions(s))), ttt)
    assert row["wrong"] == 0 and row["by_stones"] == {}
    totals = {k: t for k, (_, t) in row["by_kind"].items()}
    assert sum(totals.values()) == 4520 and min(totals.values()) > 0


def test_the_lowest_legal_move_is_counted_against_the_solver(ttt: OpenSpielEnvSpec) -> None:
    solver = tictactoe_solver()
    row = te.classify(ByState(lambda s: min(s.legal_actions())), ttt)
    expected = sum(min(s.legal_actions()) not in solver.optimal_actions(s) for s in solver.positions())
    assert row["wrong"] == expected > 0
    assert row["by_kind"]["loss"][0] == 0  # every move of a lost position is optimal
    assert sum(row["by_stones"].values()) == expected
