"""The versus components' options at config time: opponent mappings and labels (schema), and the
opponents checked against the env's game and the env's kind by ``lzkernel config`` (exit 2, one
line naming the opponent and the game)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lzkernel.cli import main
from lzkernel.config.schema import validate
from lzk_workers.opponents import OpponentSpec
from lzk_workers.plugin import VersusCollectorConfig, VersusEvaluatorConfig


def test_collector_opponent_schema() -> None:
    cfg, problems = validate(VersusCollectorConfig, {}, "collector")
    assert problems == [] and cfg.opponent_spec == OpponentSpec("random", {}, "random")
    cfg, _ = validate(VersusCollectorConfig, {"opponent": {"name": "mcts", "simulations": 200}}, "collector")
    assert cfg.opponent_spec == OpponentSpec("mcts", {"simulations": 200}, "mcts200")
    _, problems = validate(VersusCollectorConfig, {"opponent": {"simulations": 5}, "envs": 4, "n_episode": 2},
                           "collector")
    assert problems == ["collector.n_episode: must be >= envs (4), got 2",
                        "collector.opponent.name: missing required key (the bot: random, mcts, perfect, ... as the "
                        "env offers)"]
    _, problems = validate(VersusCollectorConfig, {"opponent": {"name": "random", "label": "r"}}, "collector")
    assert problems == ["collector.opponent.label: only the evaluator's opponents take a label (it names their metrics)"]
    _, problems = validate(VersusCollectorConfig, {"opponent": "random"}, "collector")
    assert problems == ["collector.opponent: expected a mapping, got str 'random'"]


def test_evaluator_opponents_schema() -> None:
    cfg, problems = validate(VersusEvaluatorConfig, {"opponents": [
        {"name": "random"}, {"name": "mcts", "simulations": 1000}, {"name": "mcts", "label": "mcts_default"},
        {"name": "perfect", "label": "oracle"}]}, "evaluator")
    assert problems == []
    assert [s.label for s in cfg.opponent_specs] == ["random", "mcts1000", "mcts_default", "oracle"]
    assert cfg.opponent_specs[1].params == {"simulations": 1000}  # name and label are not bot params
    _, problems = validate(VersusEvaluatorConfig, {"opponents": [
        {"name": "random"}, {"name": "random"}, {"label": "x y", "name": 3}]}, "evaluator")
    assert problems == [
        "evaluator.opponents[1]: label 'random' repeats opponents[0]'s; give one of them a distinct label",
        "evaluator.opponents[2].name: expected the bot's name as a string, got 3",
        "evaluator.opponents[2].label: expected letters, digits, '_', '.' or '-' (it is part of metric names), "
        "got 'x y'",
    ]
    _, problems = validate(VersusEvaluatorConfig, {"opponents": []}, "evaluator")
    assert problems == ["evaluator.opponents: expected at least one opponent, e.g. [{name: random}]"]


def _config(tmp_path: Path, env: dict[str, Any], collector: dict[str, Any], evaluator: dict[str, Any],
            capsys: pytest.CaptureFixture[str], frame_stack: int = 1) -> tuple[int, str]:
    """``lzkernel config`` (in process) on a complete config with the versus workers."""
    path = tmp_path / "versus.yaml"
    config = {"trainer": {"name": "muzero"}, "env": env, "policy": {"name": "muzero", "frame_stack": frame_stack},
              "buffer": {"name": "game"},
              "collector": {"name": "versus", **collector}, "evaluator": {"name": "versus", **evaluator},
              "update_schedule": {"name": "fixed"}}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    capsys.readouterr()
    code = main(["config", str(path)])
    return code, capsys.readouterr().err.strip()


def test_cli_checks_opponents_against_the_game(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyspiel")
    ttt = {"name": "openspiel", "game": "tic_tac_toe"}
    code, err = _config(tmp_path, ttt, {"opponent": {"name": "perfect"}},
                        {"opponents": [{"name": "random"}, {"name": "mcts", "simulations": 50}, {"name": "perfect"}]},
                        capsys)
    assert code == 0, err
    code, err = _config(tmp_path, {"name": "openspiel", "game": "connect_four"}, {"opponent": {"name": "perfect"}},
                        {"opponents": [{"name": "random"}, {"name": "alphabeta"}]}, capsys)
    assert code == 2
    header, *lines = err.splitlines()
    assert header.startswith("lzkernel: error: incompatible components") and len(lines) == 2
    assert lines[0].strip() == ("collector 'versus': collector.opponent: openspiel:connect_four: unknown opponent "
                                "'perfect' (tic_tac_toe only); this game offers: random, mcts")
    assert lines[1].strip().startswith("evaluator 'versus': evaluator.opponents[1]: openspiel:connect_four: "
                                       "unknown opponent 'alphabeta'")
    code, err = _config(tmp_path, ttt, {}, {"opponents": [{"name": "mcts", "sims": 5}]}, capsys)
    assert code == 2 and "evaluator.opponents[0]: openspiel:tic_tac_toe: opponent 'mcts' has no param 'sims'" in err
    code, err = _config(tmp_path, ttt, {}, {}, capsys, frame_stack=2)  # agent views hold the agent's positions only
    assert code == 2 and "collector 'versus': needs a policy with frame_stack 1, got 2 (policy 'muzero')" in err


def test_cli_needs_a_simulator_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _config(tmp_path, {"name": "gymnasium", "id": "CartPole-v1"}, {}, {}, capsys)
    assert code == 2
    lines = err.splitlines()[1:]
    assert len(lines) == 2 and all("needs an env that provides SimulatorEnvSpec" in line for line in lines), err
    assert lines[0].strip().startswith("collector 'versus'") and lines[1].strip().startswith("evaluator 'versus'")
