"""Entry point of the lzk_envs plugin: registers its components with lzkernel.

Kept free of gymnasium/torch/pyspiel imports at module level (``lzkernel plugins`` must stay fast): the
factories import their implementation modules when called.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from lzkernel import (Component, EvalVariantEnvSpec, FrameEnvSpec, RenderableEnvSpec, SimulatorEnvSpec,
                      TextGameEnvSpec, hookimpl, option)


def _max_restarts() -> Any:
    """The ``max_restarts`` option of the envs run through :class:`lzk_envs.gym.GymVectorEnv`."""
    return option(0, doc="Times in a row an env that raises in reset or step is closed and made anew (its running "
                  "episode dropped, counted in collect/env_failures or eval/env_failures) before the error "
                  "ends the run; the count starts again when one of its episodes ends. 0: the first error "
                  "ends the run (resumable from the last completed iteration).", min=0)


def _restart_backoff_s() -> Any:
    return option(1.0, doc="Seconds before recreating an env that raised; doubles with each restart in a row "
                  "(at most 60).", min=0.0)


#: How failures are answered, and where the envs run, change no data: a resume may change them.
_RESTART_KEYS = ("max_restarts", "restart_backoff_s", "workers", "step_timeout_s")


def _workers() -> Any:
    """The ``workers`` option of the envs run through :class:`lzk_envs.gym_vector.GymVectorEnv`."""
    return option(0, doc="Env worker processes: the envs split into this many shares, each stepped in its own "
                  "process (at the same time; an env that crashes or hangs its process does not take the trainer "
                  "down: its worker's envs restart in a new worker as max_restarts allows, else the run ends with "
                  "one line). 0: every env in the trainer's process. Results are the same either way, and a "
                  "checkpoint resumes with any value.", min=0)


def _step_timeout_s() -> Any:
    return option(60.0, doc="With workers: seconds a worker may take to answer a step (or reset) before it counts "
                  "as hung and is killed (its envs restarted in a new worker as max_restarts allows, else the run "
                  "ends).", min=0.1)


def _restarts(cfg: GymEnvConfig | AtariEnvConfig) -> Any:
    from lzk_envs.restarts import EnvRestarts

    return EnvRestarts(cfg.max_restarts, cfg.restart_backoff_s)


@dataclass
class GymEnvConfig:
    """Options of the ``gymnasium`` env component."""

    id: str = option(doc="A gymnasium env id, e.g. CartPole-v0 (Discrete action space, Box observations), or "
                         "module:Id to import module first so that it registers Id (a class path is not "
                         "accepted: call gymnasium.register in that module). Legal actions come from "
                         "info['action_mask'] ([A] bool, at least one legal) of reset and step, ignored at an "
                         "episode's final state; without it every action is legal.")
    kwargs: dict[str, Any] = option({}, doc="Keyword arguments passed to gymnasium.make.")
    truncation_as_terminal: bool = option(
        True,
        doc="Treat a time-limit truncation as terminal (no bootstrap past it); the CartPole-v0 "
        "convention of LightZero. False: bootstrap from the value of the final observation.",
    )
    max_episode_steps: int | None = option(
        None, doc="Override the env's time limit (gymnasium.make max_episode_steps); null keeps the registered one.", min=1
    )
    max_restarts: int = _max_restarts()
    restart_backoff_s: float = _restart_backoff_s()
    workers: int = _workers()
    step_timeout_s: float = _step_timeout_s()

    def validate(self) -> list[tuple[str, str]]:
        """Look the id up in gymnasium's registry now (imports gymnasium, makes no env), so that
        ``lzkernel config`` already refuses an id that ``lzkernel run`` could not make."""
        from lzk_envs.gym import id_problem

        problem = id_problem(self.id)
        return [("id", problem)] if problem else []


def make_gym_env(cfg: GymEnvConfig, run: Any = None) -> Any:
    """Build a :class:`lzk_envs.gym.GymEnvSpec` (probes one env; raises ConfigError on bad ids/spaces)."""
    from lzk_envs.gym import GymEnvSpec

    return GymEnvSpec.probe(
        cfg.id,
        cfg.kwargs,
        truncation_as_terminal=cfg.truncation_as_terminal,
        max_episode_steps=cfg.max_episode_steps,
        restarts=_restarts(cfg),
        workers=cfg.workers,
        step_timeout_s=cfg.step_timeout_s,
    )


@dataclass
class AtariEnvConfig:
    """Options of the ``atari`` env component (ale-py, LightZero's preprocessing; defaults are
    LightZero's Atari env defaults, the MuZero config's 64×64 frames)."""

    game: str = option(doc="ALE ROM name, e.g. pong, breakout, ms_pacman, seaquest (ale-py ships the ROMs).")
    frame_size: int = option(64, doc="Frames are resized to frame_size x frame_size (LightZero: 64 for MuZero and "
                             "UniZero, 96 for ReZero).", min=8)
    gray_scale: bool = option(True, doc="Grayscale frames [1, H, W]; false: RGB [3, H, W] (LightZero's UniZero).")
    frame_skip: int = option(4, doc="Raw frames per agent step (the action repeats; the observation is the "
                             "max of the last two raw frames).", min=1)
    noop_max: int = option(30, doc="No-op starts: 1..noop_max NOOP raw frames after a reset (0: none).", min=0)
    sticky_action_prob: float = option(0.0, doc="ALE's repeat_action_probability (LightZero's NoFrameskip-v4 "
                                       "envs: 0.0; ALE v5 envs: 0.25).", min=0.0, max=1.0)
    full_action_space: bool = option(False, doc="All 18 ALE actions; false: the game's minimal set (LightZero).")
    episode_life: bool = option(True, doc="Collection: a lost life ends the episode (evaluation never does).")
    clip_rewards: bool = option(True, doc="Collection: rewards clipped to their sign (evaluation never clips).")
    max_episode_steps: int = option(108_000, doc="Agent steps after which an episode is truncated (LightZero's "
                                    "collect/eval_max_episode_steps).", min=1)
    max_episode_frames: int = option(108_000, doc="ALE's own cap on raw frames per game (the cap that binds "
                                     "with LightZero's settings).", min=1)
    truncation_as_terminal: bool = option(True, doc="Treat a truncation as terminal (LightZero's convention).")
    max_restarts: int = _max_restarts()
    restart_backoff_s: float = _restart_backoff_s()
    workers: int = _workers()
    step_timeout_s: float = _step_timeout_s()


def make_atari_env(cfg: AtariEnvConfig, run: Any = None) -> Any:
    """Build a :class:`lzk_envs.atari.AtariEnvSpec` (loads the ROM once; ConfigError without ale-py or the ROM)."""
    from lzk_envs.atari import AtariEnvSpec, AtariSettings

    settings = AtariSettings(
        game=cfg.game, frame_size=cfg.frame_size, gray_scale=cfg.gray_scale, frame_skip=cfg.frame_skip,
        noop_max=cfg.noop_max, sticky_action_prob=cfg.sticky_action_prob, full_action_space=cfg.full_action_space,
        episode_life=cfg.episode_life, clip_rewards=cfg.clip_rewards, max_episode_steps=cfg.max_episode_steps,
        max_episode_frames=cfg.max_episode_frames)
    return AtariEnvSpec.probe(settings, truncation_as_terminal=cfg.truncation_as_terminal, restarts=_restarts(cfg),
                              workers=cfg.workers, step_timeout_s=cfg.step_timeout_s)


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
    mover_planes: list[int] = option(
        [], doc="Two slices [a, b] of the game's observation tensor holding player 1's and player 2's pieces, "
        "swapped wherever player 2 moves, so slice a always holds the mover's pieces (AlphaGo Zero's and "
        "LightZero's encoding): tic_tac_toe [2, 1], connect_four [0, 1]. Empty: the tensor as OpenSpiel gives it."
    )

    def validate(self) -> list[tuple[str, str]]:
        """Load the game now, so that ``lzkernel config`` already refuses one the env cannot play."""
        from lzk_envs.openspiel_game import game_problems

        problems = game_problems(self.game, self.params)
        if self.mover_planes and not problems:
            from lzk_envs.openspiel_game import load_game
            from lzk_envs.openspiel_sim import mover_planes_problem

            problem = mover_planes_problem(load_game(self.game, self.params), self.mover_planes)
            if problem:
                problems.append(("mover_planes", problem))
        return problems

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

    return OpenSpielEnvSpec.load(cfg.game, cfg.params, to_play_plane=cfg.to_play_plane,
                                 mover_planes=cfg.mover_planes)


@hookimpl
def lzkernel_register_envs() -> list[Component]:
    return [
        Component(
            "gymnasium",
            factory=make_gym_env,
            config=GymEnvConfig,
            provides=(RenderableEnvSpec,),
            doc="Any gymnasium env with a Discrete action space and Box observations (float32).",
            resume_safe=_RESTART_KEYS,
        ),
        Component(
            "atari",
            factory=make_atari_env,
            config=AtariEnvConfig,
            provides=(FrameEnvSpec, EvalVariantEnvSpec, RenderableEnvSpec),
            doc="Atari games through ale-py with LightZero's preprocessing (frame skip and max-pool, no-op "
            "starts, grayscale, resize, episodic life and reward clipping while collecting); uint8 frames.",
            resume_safe=_RESTART_KEYS,
        ),
        Component(
            "openspiel",
            factory=make_openspiel_env,
            config=OpenSpielEnvConfig,
            provides=(SimulatorEnvSpec, TextGameEnvSpec),
            doc="Two-player board games from OpenSpiel (tic-tac-toe, connect four, go, ...), with a "
            "simulator for search and opponents (random, mcts, perfect for tic-tac-toe).",
        ),
    ]
