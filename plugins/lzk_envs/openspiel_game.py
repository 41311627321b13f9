"""OpenSpiel games: load one by name and parameters, and check that the ``openspiel`` env can play it.

The env serves games that are sequential, deterministic (no chance nodes), perfect-information,
two-player, zero-sum or constant-sum, and that provide an observation tensor: tic-tac-toe,
connect four, breakthrough, hex, othello, go, ... Everything is checked when the config is
validated (``OpenSpielEnvConfig.validate`` calls :func:`game_problems`), so ``lzkernel config`` and
``lzkernel run`` refuse an unsupported game with exit 2 before anything is built.

pyspiel prints every ``SpielError`` to stderr before raising it; calls that may fail on bad user
input run under :func:`quiet_stderr`, and the error raised instead carries the same text.
"""
from __future__ import annotations

import contextlib
import difflib
import os
import sys
from typing import Any, Iterator, Mapping

from lzkernel import ConfigError

#: What the env supports, appended to every "unsupported game" message.
SUPPORTED = ("the openspiel env supports sequential, deterministic, perfect-information, two-player "
             "zero-sum games with an observation tensor")


def import_pyspiel() -> Any:
    """``pyspiel``, or a :class:`ConfigError` that says how to install it."""
    try:
        import pyspiel
    except ImportError as exc:
        raise ConfigError(
            f"env.game: the openspiel env needs OpenSpiel, which is not installed ({exc}); install it "
            "with pip install 'open_spiel>=1.5' (its wheels need Python >= 3.11)"
        ) from None
    return pyspiel


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null for the block (pyspiel's C++ error handler writes
    there directly, so redirecting ``sys.stderr`` is not enough)."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _type_problems(pyspiel: Any, gtype: Any, num_players: int | None) -> list[str]:
    """Why the env cannot play a game of type ``gtype`` (empty: it can). ``num_players`` is the
    loaded game's count; None checks the type's allowed range instead."""
    kinds = pyspiel.GameType
    out: list[str] = []
    if num_players is not None and num_players != 2:
        out.append(f"is not a two-player game ({num_players} players)")
    elif num_players is None and not gtype.min_num_players <= 2 <= gtype.max_num_players:
        lo, hi = gtype.min_num_players, gtype.max_num_players
        out.append(f"is not a two-player game ({lo if lo == hi else f'{lo} to {hi}'} player{'s' if hi > 1 else ''})")
    if gtype.dynamics != kinds.Dynamics.SEQUENTIAL:
        what = "has simultaneous moves" if gtype.dynamics == kinds.Dynamics.SIMULTANEOUS else "is not sequential"
        out.append(f"{what} (dynamics {gtype.dynamics.name})")
    if gtype.chance_mode != kinds.ChanceMode.DETERMINISTIC:
        out.append(f"has chance nodes (chance_mode {gtype.chance_mode.name})")
    if gtype.information != kinds.Information.PERFECT_INFORMATION:
        what = "has imperfect information" if gtype.information == kinds.Information.IMPERFECT_INFORMATION \
            else "is a one-shot (normal-form) game"
        out.append(f"{what} (information {gtype.information.name})")
    if gtype.utility not in (kinds.Utility.ZERO_SUM, kinds.Utility.CONSTANT_SUM):
        out.append(f"is not zero-sum (utility {gtype.utility.name})")
    if not gtype.provides_observation_tensor:
        out.append("has no observation tensor (provides_observation_tensor is false)")
    return out


def _unsupported(name: str, problems: list[str]) -> str:
    return f"OpenSpiel game {name!r} " + ", ".join(problems) + f"; {SUPPORTED}"


def _coerce_params(name: str, params: Mapping[str, Any], spec: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """``params`` checked against the game's parameter specification (name → default value):
    returns (the params, "") or ({}, the problem). An int is accepted where a float is expected
    (``komi: 7``); anything else must have the default's type."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if key not in spec:
            close = difflib.get_close_matches(key, list(spec), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(sorted(spec)) or "none"
            return {}, f"OpenSpiel game {name!r} has no parameter {key!r}{hint}; its parameters: {known}"
        want = type(spec[key])
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not want:
            return {}, (f"OpenSpiel game {name!r} parameter {key!r} must be {want.__name__} "
                        f"(default {spec[key]!r}), got {type(value).__name__} {value!r}")
        out[key] = value
    return out, ""


def _load(name: str, params: Mapping[str, Any]) -> tuple[Any, str, str]:
    """(game, "", "") or (None, the config field at fault, the reason)."""
    try:
        pyspiel = import_pyspiel()
    except ConfigError as exc:
        return None, "game", str(exc).removeprefix("env.game: ")
    types = {t.short_name: t for t in pyspiel.registered_games()}
    if name not in types:
        close = difflib.get_close_matches(name, list(types), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        return None, "game", f"unknown OpenSpiel game {name!r}{hint}; `python -c \"import pyspiel; " \
                             "print(pyspiel.registered_names())\"` lists them"
    problems = _type_problems(pyspiel, types[name], None)
    if problems:
        return None, "game", _unsupported(name, problems)
    checked, problem = _coerce_params(name, params, types[name].parameter_specification)
    if problem:
        return None, "params", problem
    with quiet_stderr():
        try:
            game = pyspiel.load_game(name, checked)
        except pyspiel.SpielError as exc:
            return None, "params", f"OpenSpiel game {name!r} rejected params {dict(params)!r}: {exc}"
    problems = _type_problems(pyspiel, game.get_type(), game.num_players())  # params may change these
    if problems:
        return None, "game", _unsupported(f"{game}", problems)
    with quiet_stderr():  # bad parameter values often fail only when a state is made
        try:
            state = game.new_initial_state()
            state.observation_tensor(state.current_player())
            if not state.legal_actions():
                return None, "params", f"OpenSpiel game {str(game)!r} has no legal move at its start"
        except pyspiel.SpielError as exc:
            return None, "params", f"OpenSpiel game {str(game)!r} cannot start a game: {exc}"
    return game, "", ""


def game_problems(name: str, params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The config problems of ``env: {name: openspiel, game: name, params: params}`` as
    ``(field, reason)`` pairs (what a config schema's ``validate`` returns); empty when fine."""
    game, field, reason = _load(name, params)
    return [] if game is not None else [(field, reason)]


def load_game(name: str, params: Mapping[str, Any]) -> Any:
    """The ``pyspiel.Game`` ``name`` with ``params``; :class:`ConfigError` (``env.game`` or
    ``env.params``) naming the game and the unsupported property when the env cannot play it."""
    game, field, reason = _load(name, params)
    if game is None:
        raise ConfigError(f"env.{field}: {reason}")
    return game


def game_id(game: Any, params: Mapping[str, Any]) -> str:
    """``openspiel:connect_four``, or ``openspiel:go(board_size=9)`` when ``params`` are set."""
    return f"openspiel:{game}" if params else f"openspiel:{game.get_type().short_name}"
