"""Opponents for board games: the tic-tac-toe solver against an independent brute-force negamax,
the perfect player that never loses, and the random and MCTS bots playing legal (and winning)
moves for either player."""
from __future__ import annotations

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")

from lzkernel import ConfigError, Opponent  # noqa: E402
from lzk_envs.openspiel import OpenSpielEnvSpec  # noqa: E402
from lzk_envs.tictactoe_solver import TicTacToeSolver, tictactoe_solver  # noqa: E402

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


@pytest.fixture(scope="module")
def ttt() -> OpenSpielEnvSpec:
    return OpenSpielEnvSpec.load("tic_tac_toe")


@pytest.fixture(scope="module")
def c4() -> OpenSpielEnvSpec:
    return OpenSpielEnvSpec.load("connect_four")


# -- an independent reference: plain negamax over a 9-cell list, no memo ---------------------------


def _negamax(board: list[int], player: int) -> int:
    """Value for ``player`` (1 or 2) to move on ``board`` (0 empty); the previous mover may have won."""
    other = 3 - player
    if any(board[a] == board[b] == board[c] == other for a, b, c in LINES):
        return -1
    empty = [i for i in range(9) if board[i] == 0]
    if not empty:
        return 0
    best = -2
    for i in empty:
        board[i] = player
        best = max(best, -_negamax(board, other))
        board[i] = 0
    return best


def _board(state) -> tuple[list[int], int]:
    board = [0] * 9
    for ply, action in enumerate(state.history()):  # x (1) moves on even plies
        board[action] = 1 + ply % 2
    return board, 1 + len(state.history()) % 2


def test_solver_counts_and_opening() -> None:
    solver = tictactoe_solver()
    assert tictactoe_solver() is solver  # solved once per process
    assert solver.num_positions == 4520 and solver.num_reachable == 5478
    positions = list(solver.positions())
    assert len(positions) == 4520 and len({str(s) for s in positions}) == 4520
    assert not any(s.is_terminal() for s in positions)
    empty = positions[0]
    assert empty.history() == [] and solver.value(empty) == 0
    assert solver.optimal_actions(empty) == frozenset(range(9))  # every opening draws with best play
    after_edge = empty.child(1)  # x on the top edge: o draws only with the centre, the adjacent corners or the far edge
    assert solver.optimal_actions(after_edge) == frozenset({0, 2, 4, 7})


def test_solver_agrees_with_brute_force_negamax() -> None:
    solver = tictactoe_solver()
    positions = list(solver.positions())
    rng = np.random.default_rng(0)
    for k in rng.choice(len(positions), size=120, replace=False):
        state = positions[k]
        board, player = _board(state)
        value = _negamax(board, player)
        assert solver.value(state) == value, state
        optimal = set()
        for a in state.legal_actions():
            board[a] = player
            if -_negamax(board, 3 - player) == value:
                optimal.add(a)
            board[a] = 0
        assert solver.optimal_actions(state) == optimal, state


def test_solver_refuses_terminal_and_foreign_states(c4: OpenSpielEnvSpec) -> None:
    solver = tictactoe_solver()
    state = pyspiel.load_game("tic_tac_toe").new_initial_state()
    for a in [0, 3, 1, 4, 2]:
        state.apply_action(a)
    assert solver.value(state) == -1  # x just won: lost for the player "to move"
    with pytest.raises(ValueError, match="terminal"):
        solver.optimal_actions(state)
    with pytest.raises(ValueError, match="expected a tic_tac_toe state"):
        solver.value(c4.make_simulator().new_state())
    assert isinstance(TicTacToeSolver().value(state), int)  # a fresh solver is an independent object


# -- playing games -----------------------------------------------------------------------------------


def _play(spec: OpenSpielEnvSpec, players: dict[int, Opponent], games: int, envs: int = 50) -> np.ndarray:
    """Returns [games] of player 1 over ``games`` games of ``players[1]`` against ``players[2]``."""
    venv = spec.make_vector(envs, seed=0)
    b = venv.reset()
    owed = np.full(envs, games // envs)
    results: list[float] = []
    while owed.any():
        active = owed > 0
        actions = np.zeros(envs, np.int64)
        for p in (1, 2):
            rows = np.flatnonzero(active & (b.to_play == p))
            if rows.size:
                actions[rows] = players[p].act([b.states[i] for i in rows], b.legal[rows])
        b = venv.step(actions, active)
        for i in np.flatnonzero(b.terminated):
            results.append(float(b.episode_return[i]))
            owed[i] -= 1
    return np.array(results)


def test_perfect_never_loses_to_itself(ttt: OpenSpielEnvSpec) -> None:
    results = _play(ttt, {1: ttt.make_opponent("perfect", {}, 1), 2: ttt.make_opponent("perfect", {}, 2)}, 1000)
    assert len(results) == 1000 and (results == 0).all()


def test_perfect_never_loses_to_random(ttt: OpenSpielEnvSpec) -> None:
    perfect, rand = ttt.make_opponent("perfect", {}, 3), ttt.make_opponent("random", {}, 4)
    as_first = _play(ttt, {1: perfect, 2: rand}, 500)
    as_second = -_play(ttt, {1: rand, 2: perfect}, 500)
    assert len(as_first) == len(as_second) == 500
    assert (as_first >= 0).all() and (as_second >= 0).all()
    assert (as_first == 1).mean() > 0.8 and (as_second == 1).mean() > 0.5  # and it does beat random play


def test_perfect_is_seeded_and_varied(ttt: OpenSpielEnvSpec) -> None:
    empty = [ttt.make_simulator().new_state()] * 40
    legal = np.ones((40, 9), bool)
    a, b = ttt.make_opponent("perfect", {}, 5).act(empty, legal), ttt.make_opponent("perfect", {}, 5).act(empty, legal)
    assert (a == b).all() and len(set(a.tolist())) > 4  # all 9 openings are optimal: it varies them


# -- random and MCTS bots --------------------------------------------------------------------------


def _midgame(spec: OpenSpielEnvSpec, seed: int, n: int) -> tuple[list, np.ndarray]:
    """n non-terminal states after random play, about half of them with player 2 to move."""
    sim, rng = spec.make_simulator(), np.random.default_rng(seed)
    states = []
    for k in range(n):
        s = sim.new_state()
        for _ in range(k % 5):
            view = sim.observe([s])
            if view.terminal[0]:
                break
            sim.step([s], np.array([rng.choice(np.flatnonzero(view.legal[0]))]))
        if not s.is_terminal():
            states.append(s)
    return states, sim.observe(states).legal


@pytest.mark.parametrize("name, params", [("random", {}), ("mcts", {"simulations": 50})])
def test_bots_play_legal_moves_for_both_players(ttt: OpenSpielEnvSpec, c4: OpenSpielEnvSpec, name: str,
                                               params: dict) -> None:
    for spec in (ttt, c4):
        states, legal = _midgame(spec, 0, 30)
        players = np.array([s.current_player() for s in states])
        assert set(players.tolist()) == {0, 1}
        bot = spec.make_opponent(name, params, 7)
        moves = bot.act(states, legal)
        assert moves.dtype == np.int64 and moves.shape == (len(states),)
        assert legal[np.arange(len(states)), moves].all()
        again = spec.make_opponent(name, params, 7).act(states, legal)
        assert (again == moves).all()  # seeded at construction


def test_random_bot_is_uniform_over_legal_moves(ttt: OpenSpielEnvSpec) -> None:
    legal = np.zeros((9000, 9), bool)
    legal[:, [0, 4, 8]] = True
    moves = ttt.make_opponent("random", {}, 0).act([None] * 9000, legal)
    counts = np.bincount(moves, minlength=9)
    assert counts[[1, 2, 3, 5, 6, 7]].sum() == 0 and (np.abs(counts[[0, 4, 8]] - 3000) < 200).all()


@pytest.mark.parametrize("history, win", [
    ([0, 3, 1, 4], 2),  # x to move: 0 1 _ completes the top row
    ([0, 3, 1, 4, 8], 5),  # o to move: 3 4 _ completes the middle row (and x threatens 2)
])
def test_mcts_takes_a_win_in_one(ttt: OpenSpielEnvSpec, history: list[int], win: int) -> None:
    state = ttt.make_simulator().new_state()
    for a in history:
        state.apply_action(a)
    legal = np.array([[bool(x) for x in state.legal_actions_mask()]])
    for seed in range(5):
        assert ttt.make_opponent("mcts", {"simulations": 300}, seed).act([state], legal).tolist() == [win]


def test_opponent_errors_are_config_errors(ttt: OpenSpielEnvSpec, c4: OpenSpielEnvSpec) -> None:
    with pytest.raises(ConfigError, match=r"openspiel:connect_four: unknown opponent 'perfect' \(tic_tac_toe only\)"):
        c4.make_opponent("perfect", {}, 0)
    with pytest.raises(ConfigError, match="unknown opponent 'alphabeta'.*random, mcts, perfect"):
        ttt.make_opponent("alphabeta", {}, 0)
    with pytest.raises(ConfigError, match="'mcts' has no param 'sims'; its params: simulations, rollouts, uct_c"):
        ttt.make_opponent("mcts", {"sims": 10}, 0)
    with pytest.raises(ConfigError, match="'simulations' must be an integer >= 1, got 0"):
        ttt.make_opponent("mcts", {"simulations": 0}, 0)
    with pytest.raises(ConfigError, match="'uct_c' must be a number"):
        ttt.make_opponent("mcts", {"uct_c": "high"}, 0)
    with pytest.raises(ConfigError, match="'random' has no param 'seed'"):
        ttt.make_opponent("random", {"seed": 1}, 0)
    assert ttt.make_opponent("mcts", {"uct_c": 1, "rollouts": 2}, 0) is not None  # an int for a float is fine
