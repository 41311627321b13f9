"""Entry point of the lzk_envs plugin: registers its components with lzkernel.

Kept free of gymnasium/torch/pyspiel imports at module level (``lzkernel plugins`` must stay fast): the
factories import their implementation modules when called.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from lzkernel import Component, SimulatorEnvSpec, hookimpl, option


@dataclass
class GymEnvConfig:
    """Options of the ``gymnasium`` env component."""

    id: str = option(doc="A gymnasium env id, e.g. CartPole-v0 (Discrete action space, Box observations).")
    kwargs: dict[str, Any] = option({}, doc="Keyword arguments passed to gymnasium.make.")
    truncation_as_terminal: bool = option(
        True,
        doc="Treat a time-limit truncation as terminal (no bootstrap past it); the CartPole-v0 "
        "convention of LightZero. False: bootstrap from the value of the final observation.",
    )
    max_episode_steps: int | None = option(
        None, doc="Override the env's time limit (gymnasium.make max_episode_steps); null keeps the registered one.", min=1
    )


def make_gym_env(cfg: GymEnvConfig, run: Any = None) -> Any:
    """Build a :class:`lzk_envs.gym.GymEnvSpec` (probes one env; raises ConfigError on bad ids/spaces)."""
    from lzk_envs.gym import GymEnvSpec

    return GymEnvSpec.probe(
        cfg.id,
        cfg.kwargs,
        truncation_as_terminal=cfg.truncation_as_terminal,
        max_episode_steps=cfg.max_episode_steps,
    )


@dataclass
class OpenSpielEnvConfig:
    """Options of the ``openspiel`` env component."""

    game: str = option(
        doc="An OpenSpiel game name, e.g. tic_tac_toe, connect_four, breakthrough, hex, othello, go: "
        "sequential, deterministic, perfect-information, two-player zero-sum, with an observation tensor."
    )
    params: dict[str, Any] = option(
        {}, doc="OpenSpiel game parameters, e.g. {rows: 5} for connect_four or {board_size: 9} for go."
    )
    to_play_plane: bool = option(
        True, doc="Prepend a slice that says who moves to every observation (1.0: player 1, 0.0: player 2): "
        "[C, H, W] becomes [C+1, H, W], a 1-D [F] becomes [F+1]. Many OpenSpiel tensors (tic_tac_toe, "
        "connect_four, breakthrough, hex) are the same for both players without it."
    )

    def validate(self) -> list[tuple[str, str]]:
        """Load the game now, so that ``lzkernel config`` already refuses one the env cannot play."""
        from lzk_envs.openspiel_game import game_problems

        return game_problems(self.game, self.params)

    def opponent_problems(self, name: str, params: Mapping[str, Any]) -> list[str]:
        """Why opponent ``name`` with ``params`` cannot play this game (empty: it can), one line
        each naming the opponent and the game; builds no bot. Config checks of the two-player
        workers call it (lzk_workers' ``OpponentOptions``)."""
        from lzkernel import ConfigError
        from lzk_envs.board_bots import opponent_options
        from lzk_envs.openspiel_game import game_id, load_game

        try:
            game = load_game(self.game, self.params)
        except ConfigError:  # the env section's own problem, reported by validate()
            return []
        try:
            opponent_options(game, name, params, who=game_id(game, self.params))
        except ConfigError as exc:
            return [str(exc)]
        return []


def make_openspiel_env(cfg: OpenSpielEnvConfig, run: Any = None) -> Any:
    """Build a :class:`lzk_envs.openspiel.OpenSpielEnvSpec` (ConfigError for a game it cannot play)."""
    from lzk_envs.openspiel import OpenSpielEnvSpec

    return OpenSpielEnvSpec.load(cfg.game, cfg.params, to_play_plane=cfg.to_play_plane)


@hookimpl
def lzkernel_register_envs() -> list[Component]:
    return [
        Component(
            "gymnasium",
            factory=make_gym_env,
            config=GymEnvConfig,
            doc="Any gymnasium env with a Discrete action space and Box observations (float32).",
        ),
        Component(
            "openspiel",
            factory=make_openspiel_env,
            config=OpenSpielEnvConfig,
            provides=(SimulatorEnvSpec,),
            doc="Two-player board games from OpenSpiel (tic-tac-toe, connect four, go, ...), with a "
            "simulator for search and opponents (random, mcts, perfect for tic-tac-toe).",
        ),
    ]
