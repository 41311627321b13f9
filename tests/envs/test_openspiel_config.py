"""Games the openspiel env cannot play are refused at config time, naming the game and the
property: by the factory, by schema validation, and by ``lzkernel config`` (exit 2)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("pyspiel")

from lzkernel import ConfigError  # noqa: E402
from lzkernel.config.schema import validate  # noqa: E402
from lzk_envs.plugin import OpenSpielEnvConfig, make_openspiel_env  # noqa: E402

#: (game, params, what the message must say); the game's name is checked too.
BAD = [
    ("backgammon", {}, "has chance nodes (chance_mode EXPLICIT_STOCHASTIC)"),
    ("pig", {}, "has chance nodes"),
    ("matrix_rps", {}, "has simultaneous moves (dynamics SIMULTANEOUS)"),
    ("goofspiel", {}, "has simultaneous moves"),
    ("kuhn_poker", {}, "has imperfect information (information IMPERFECT_INFORMATION)"),
    ("dark_hex", {}, "has imperfect information"),
    ("chinese_checkers", {"players": 3}, "is not a two-player game (3 players)"),
    ("catch", {}, "is not a two-player game (1 player)"),
    ("efg_game", {}, "has no observation tensor"),
    ("tic_tac_tow", {}, "unknown OpenSpiel game 'tic_tac_tow' (did you mean 'tic_tac_toe'"),
    ("connect_four", {"rowz": 5}, "has no parameter 'rowz' (did you mean 'rows'?)"),
    ("connect_four", {"rows": "six"}, "parameter 'rows' must be int (default 6), got str 'six'"),
    ("go", {"board_size": -1}, "cannot start a game: unsupported board size"),
]


@pytest.mark.parametrize("game, params, reason", BAD, ids=[f"{g}{'-' + next(iter(p)) if p else ''}" for g, p, _ in BAD])
def test_factory_and_schema_refuse_unsupported_games(game: str, params: dict, reason: str) -> None:
    field = "params" if params and game != "chinese_checkers" else "game"
    with pytest.raises(ConfigError) as info:
        make_openspiel_env(OpenSpielEnvConfig(game=game, params=params))
    message = str(info.value)
    assert message.startswith(f"env.{field}: ") and game in message and reason in message
    assert "\n" not in message
    _, problems = validate(OpenSpielEnvConfig, {"game": game, "params": params}, "env")
    assert problems == [message]  # what `lzkernel config` reports is the factory's message


def test_schema_accepts_a_playable_game() -> None:
    cfg, problems = validate(OpenSpielEnvConfig, {"game": "connect_four", "params": {"rows": 5}}, "env")
    assert problems == [] and (cfg.game, cfg.params) == ("connect_four", {"rows": 5})
    _, problems = validate(OpenSpielEnvConfig, {}, "env")
    assert problems == ["env.game: missing required key"]


def _lzkernel_config(tmp_path: Path, env: dict) -> subprocess.CompletedProcess[str]:
    """``python -m lzkernel config`` on the smallest config: a trainer (the one section
    resolution requires; its options default) and the env section under test."""
    path = tmp_path / "board.yaml"
    config = {"trainer": {"name": "muzero"}, "env": env, "policy": {"name": "muzero"}, "buffer": {"name": "game"},
              "collector": {"name": "episode"}, "evaluator": {"name": "episodes"},
              "update_schedule": {"name": "fixed"}}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "lzkernel", "config", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("game, params, reason", [
    ("pig", {}, "has chance nodes"),
    ("goofspiel", {}, "has simultaneous moves"),
    ("kuhn_poker", {}, "has imperfect information"),
    ("no_such_game", {}, "unknown OpenSpiel game 'no_such_game'"),
    ("go", {"board_size": -1}, "unsupported board size"),  # pyspiel raises (and would print) here
])
def test_cli_config_exits_2_naming_game_and_property(tmp_path: Path, game: str, params: dict, reason: str) -> None:
    proc = _lzkernel_config(tmp_path, {"name": "openspiel", "game": game, "params": params})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert err.startswith("lzkernel: error: invalid config"), err
    assert f"env.{'params' if params else 'game'}: " in err and f"'{game}" in err and reason in err
    assert "Traceback" not in err and "OpenSpiel exception" not in err  # pyspiel's own print is silenced
    assert len(err.splitlines()) == 1, err  # one problem, one line


def test_cli_config_accepts_a_board_game(tmp_path: Path) -> None:
    proc = _lzkernel_config(tmp_path, {"name": "openspiel", "game": "go", "params": {"board_size": 9}})
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["env"] == {"name": "openspiel", "game": "go", "params": {"board_size": 9},
                                                  "to_play_plane": True, "mover_planes": []}


def test_missing_open_spiel_is_a_config_error() -> None:
    """Without OpenSpiel (e.g. Python 3.10, where it has no wheels) the env says how to get it."""
    code = (
        "import sys\n"
        "sys.modules['pyspiel'] = sys.modules['open_spiel'] = None  # import fails as if not installed\n"
        "from lzkernel import ConfigError\n"
        "from lzkernel.config.schema import validate\n"
        "from lzk_envs.plugin import OpenSpielEnvConfig, make_openspiel_env\n"
        "print(validate(OpenSpielEnvConfig, {'game': 'tic_tac_toe'}, 'env')[1])\n"
        "try:\n"
        "    make_openspiel_env(OpenSpielEnvConfig(game='tic_tac_toe'))\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    schema_line, factory_line = proc.stdout.splitlines()
    assert "env.game: the openspiel env needs OpenSpiel, which is not installed" in schema_line
    assert factory_line.startswith("env.game: the openspiel env needs OpenSpiel")
    assert "pip install 'open_spiel>=1.5'" in factory_line


def test_opponent_problems_name_the_opponent_and_the_game() -> None:
    """What the two-player workers' config check asks of the env section: one line per problem
    naming the opponent and the game, nothing built; the component declares SimulatorEnvSpec and TextGameEnvSpec."""
    from lzkernel import SimulatorEnvSpec, TextGameEnvSpec
    from lzk_envs.plugin import lzkernel_register_envs

    ttt, c4 = OpenSpielEnvConfig(game="tic_tac_toe"), OpenSpielEnvConfig(game="connect_four")
    assert ttt.opponent_problems("perfect", {}) == [] and c4.opponent_problems("mcts", {"simulations": 5}) == []
    (line,) = c4.opponent_problems("perfect", {})
    assert line == ("openspiel:connect_four: unknown opponent 'perfect' (tic_tac_toe only); "
                    "this game offers: random, mcts")
    (line,) = ttt.opponent_problems("alphabeta", {})
    assert "'alphabeta'" in line and "openspiel:tic_tac_toe" in line
    (line,) = ttt.opponent_problems("mcts", {"simulations": 0})
    assert "'simulations' must be an integer >= 1, got 0" in line
    assert OpenSpielEnvConfig(game="no_such_game").opponent_problems("random", {}) == []  # the env's own error
    openspiel = {c.name: c for c in lzkernel_register_envs()}["openspiel"]
    assert openspiel.provides == (SimulatorEnvSpec, TextGameEnvSpec)
