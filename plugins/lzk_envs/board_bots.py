"""Opponents (bots) for OpenSpiel board games, made by ``OpenSpielEnvSpec.make_opponent``.

* ``random``: uniform over the legal moves;
* ``mcts``: OpenSpiel's MCTS bot (the C++ ``pyspiel.MCTSBot``) with random-rollout leaf
  evaluation; params ``simulations`` (1000), ``rollouts`` (1), ``uct_c`` (2.0);
* ``perfect`` (tic-tac-toe only): a uniformly random choice among the minimax-optimal moves of
  :class:`lzk_envs.tictactoe_solver.TicTacToeSolver`.

Every bot plays for whichever player is to move in the state it is given, is seeded at
construction, and keeps no per-game state. Shape letters: n states, A actions.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from lzkernel import ConfigError, Opponent
from lzk_envs.openspiel_game import import_pyspiel
from lzk_envs.tictactoe_solver import tictactoe_solver

#: Params each opponent accepts, with their defaults (whose types the values must have) and minima.
_PARAMS: dict[str, dict[str, tuple[Any, float]]] = {
    "random": {},
    "mcts": {"simulations": (1000, 1), "rollouts": (1, 1), "uct_c": (2.0, 0.0)},
    "perfect": {},
}


def opponent_names(game: Any) -> tuple[str, ...]:
    """The opponents offered for ``game`` (a ``pyspiel.Game``)."""
    perfect = ("perfect",) if game.get_type().short_name == "tic_tac_toe" else ()
    return ("random", "mcts") + perfect


def _check_params(who: str, name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` of opponent ``name`` over its defaults; ConfigError for an unknown key, a wrong
    type or a value below the minimum (an int is accepted for a float)."""
    spec = _PARAMS[name]
    out = {key: default for key, (default, _) in spec.items()}
    for key, value in params.items():
        if key not in spec:
            known = ", ".join(spec) or "none"
            raise ConfigError(f"{who}: opponent {name!r} has no param {key!r}; its params: {known}")
        default, low = spec[key]
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not type(default) or not value >= low:
            kind = "an integer" if isinstance(default, int) else "a number"
            raise ConfigError(f"{who}: opponent {name!r} param {key!r} must be {kind} >= {low}, got {value!r}")
        out[key] = value
    return out


def opponent_options(game: Any, name: str, params: Mapping[str, Any], who: str = "openspiel") -> dict[str, Any]:
    """The options opponent ``name`` for ``game`` (a ``pyspiel.Game``) would be built with (its
    ``params`` over their defaults); ConfigError (starting with ``who``, e.g. the env id) for an
    unknown name or bad params. Builds nothing, so config checks can call it."""
    if name not in opponent_names(game):
        only = " (tic_tac_toe only)" if name == "perfect" else ""
        offered = ", ".join(opponent_names(game))
        raise ConfigError(f"{who}: unknown opponent {name!r}{only}; this game offers: {offered}")
    return _check_params(who, name, params)


def make_opponent(game: Any, name: str, params: Mapping[str, Any], seed: int, who: str = "openspiel") -> Opponent:
    """Opponent ``name`` for ``game`` (a ``pyspiel.Game``) with its ``params``, seeded with ``seed``;
    ConfigError (starting with ``who``, e.g. the env id) for an unknown name or bad params."""
    options = opponent_options(game, name, params, who)
    if name == "random":
        return RandomOpponent(seed)
    if name == "mcts":
        return MCTSOpponent(game, seed, **options)
    return PerfectOpponent(seed)


def _check_rows(states: Sequence[Any], legal: np.ndarray) -> None:
    if legal.ndim != 2 or legal.shape[0] != len(states):
        raise ValueError(f"opponent: legal must have shape ({len(states)}, A), got {legal.shape}")
    if not legal.any(axis=1).all():
        raise ValueError(f"opponent: rows {np.flatnonzero(~legal.any(axis=1)).tolist()} have no legal move")


class RandomOpponent:
    """Uniform over the legal moves."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def act(self, states: Sequence[Any], legal: np.ndarray) -> np.ndarray:
        """Moves [n] int64 for n states; ``legal`` [n, A] bool."""
        legal = np.asarray(legal, bool)
        _check_rows(states, legal)
        # argmax of iid uniforms over the legal entries: each legal move equally likely
        scores = np.where(legal, self._rng.random(legal.shape), -1.0)
        return scores.argmax(axis=1).astype(np.int64)


class MCTSOpponent:
    """OpenSpiel's MCTS bot (UCT, ``rollouts`` random playouts per leaf), one search per move."""

    def __init__(self, game: Any, seed: int, simulations: int = 1000, rollouts: int = 1, uct_c: float = 2.0) -> None:
        pyspiel = import_pyspiel()
        bot_seed, rollout_seed = (int(s) for s in np.random.SeedSequence(seed).generate_state(2) % 2**31)
        evaluator = pyspiel.RandomRolloutEvaluator(rollouts, rollout_seed)
        # max_memory_mb bounds the tree; solve=False: plain MCTS, as configured, no exact solver
        self._bot = pyspiel.MCTSBot(game, evaluator, uct_c, simulations, 1000, False, bot_seed, False)
        self._evaluator = evaluator  # the bot refers to it: keep it alive as long as the bot

    def act(self, states: Sequence[Any], legal: np.ndarray) -> np.ndarray:
        """Moves [n] int64: one search from each state, for its player to move."""
        _check_rows(states, np.asarray(legal, bool))
        return np.array([self._bot.step(state) for state in states], np.int64)


class PerfectOpponent:
    """Tic-tac-toe minimax: a seeded uniform choice among the optimal moves (never loses)."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)
        self._solver = tictactoe_solver()

    def act(self, states: Sequence[Any], legal: np.ndarray) -> np.ndarray:
        """Moves [n] int64 for n tic-tac-toe states."""
        _check_rows(states, np.asarray(legal, bool))
        out = np.empty(len(states), np.int64)
        for i, state in enumerate(states):
            best = sorted(self._solver.optimal_actions(state))  # sorted: the seed alone fixes the choice
            out[i] = best[self._rng.integers(len(best))]
        return out
