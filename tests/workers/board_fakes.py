"""Fake agents and scripted bots for the two-player worker tests, on the real OpenSpiel
tic-tac-toe env (no network anywhere).

A game state here is a ``pyspiel.State``: scripted players read the ply from its history.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from lzkernel import ActResult, Opponent


class FirstLegalAgent:
    """An ActingPolicy playing the first legal move; visit_dist one-hot on it, root_value 0.5,
    pred_value 0.25 (so kept rows are told from the zeros of bot rows). Records calls and resets."""

    def __init__(self, metrics: dict[str, float] | None = None) -> None:
        self.metrics = metrics
        self.calls: list[dict[str, Any]] = []
        self.resets: list[tuple[list[int], str]] = []

    def choose(self, legal: np.ndarray, states: Sequence[Any]) -> np.ndarray:
        return np.argmax(legal, axis=1).astype(np.int64)

    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, *, mode: str, env_ids: np.ndarray,
            temperature: float = 1.0, epsilon: float = 0.0, timestep: np.ndarray | None = None,
            states: Sequence[Any] | None = None) -> ActResult:
        assert states is not None and len(states) == len(obs) == len(legal) == len(env_ids)
        self.calls.append(dict(env_ids=env_ids.copy(), to_play=to_play.copy(), mode=mode, obs=obs.copy(),
                               histories=[tuple(s.history()) for s in states]))
        action = self.choose(legal, states)
        visit = np.eye(legal.shape[1], dtype=np.float32)[action]
        n = len(action)
        return ActResult(action, visit, np.full(n, 0.5, np.float32), np.full(n, 0.25, np.float32), self.metrics)

    def reset_envs(self, env_ids: Sequence[int], mode: str) -> None:
        self.resets.append((list(env_ids), mode))


class BotAgent(FirstLegalAgent):
    """A bot (e.g. the perfect player) as an ActingPolicy."""

    def __init__(self, bot: Opponent) -> None:
        super().__init__()
        self.bot = bot

    def choose(self, legal: np.ndarray, states: Sequence[Any]) -> np.ndarray:
        return self.bot.act(states, legal)


def scripted_move(state: Any, moves: Sequence[int]) -> int:
    """Ply p of a scripted game is ``moves[p]``, whoever makes it."""
    return int(moves[len(state.history())])


class ScriptedAgent(FirstLegalAgent):
    """Plays the scripted game's move at each ply."""

    def __init__(self, moves: Sequence[int]) -> None:
        super().__init__()
        self.moves = list(moves)

    def choose(self, legal: np.ndarray, states: Sequence[Any]) -> np.ndarray:
        return np.array([scripted_move(s, self.moves) for s in states], np.int64)


class ScriptedBot:
    """An Opponent playing the scripted game's move at each ply."""

    def __init__(self, moves: Sequence[int]) -> None:
        self.moves = list(moves)

    def act(self, states: Sequence[Any], legal: np.ndarray) -> np.ndarray:
        out = np.array([scripted_move(s, self.moves) for s in states], np.int64)
        assert legal[np.arange(len(out)), out].all(), "the script plays an illegal move"
        return out


class ScriptedSpec:
    """The real tic-tac-toe spec whose ``make_opponent`` returns a :class:`ScriptedBot` for the
    name ``scripted`` (and records every call)."""

    def __init__(self, spec: Any, moves: Sequence[int] = ()) -> None:
        self.spec = spec
        self.moves = list(moves)
        self.made: list[tuple[str, dict[str, Any], int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.spec, name)

    def make_opponent(self, name: str, params: dict[str, Any], seed: int) -> Opponent:
        self.made.append((name, dict(params), seed))
        return ScriptedBot(self.moves) if name == "scripted" else self.spec.make_opponent(name, params, seed)
