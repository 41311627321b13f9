"""Entry point of the lzk_workers plugin: registers its components with lzkernel.

No gymnasium/torch import at module level: the factories import their implementation modules.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from lzkernel import CheckContext, Component, EnvSpec, SegmentBufferOptions, SimulatorEnvSpec, hookimpl, option
from lzk_workers.opponents import OpponentSpec, opponent_check_problems, parse_opponent, parse_opponents


def _opening_moves_option() -> Any:
    """The ``opening_moves`` option every collector config shares (:mod:`lzk_workers.openings`)."""
    return option(0, doc="Each training episode starts after k uniformly random legal moves, k drawn uniformly "
                         "from 0 to this (0: off); the opening is not training data. Evaluators always start "
                         "from the game's start.", min=0)


@dataclass
class EpisodeCollectorConfig:
    """Options of the ``episode`` collector."""

    envs: int = option(8, doc="Collector envs stepped together (their vector env lives across collects).", min=1)
    n_episode: int = option(8, doc="Whole episodes per collect, split evenly across the envs (>= envs).", min=1)
    opening_moves: int = _opening_moves_option()

    def validate(self) -> list[tuple[str, str]]:
        if self.n_episode < self.envs:
            return [("n_episode", f"must be >= envs ({self.envs}), got {self.n_episode}")]
        return []


@dataclass
class SegmentCollectorConfig:
    """Options of the ``segment`` collector."""

    envs: int = option(8, doc="Collector envs stepped together (they keep running across collects).", min=1)
    num_segments: int = option(
        8, doc="Finished segments per collect (a segment finishes when full or when its episode ends); "
               "unfinished ones carry over to the next collect.", min=1)
    segment_length: int = option(
        50, doc="Transitions per segment, counted from the episode start; set it to the replay buffer's "
                "segment_length so a collect returns whole buffer segments.", min=1)
    opening_moves: int = _opening_moves_option()


@dataclass
class VersusCollectorConfig(EpisodeCollectorConfig):
    """Options of the ``versus`` collector (the ``episode`` collector's, and the opponent)."""

    opponent: dict[str, Any] = option(
        default_factory=lambda: {"name": "random"},
        doc="The bot the agent plays, alternating sides: {name: random}, {name: mcts, simulations: 200} "
            "or {name: perfect} (tic_tac_toe); keys besides name are the bot's params.")

    def validate(self) -> list[tuple[str, str]]:
        _, problems = parse_opponent(self.opponent, labelled=False)
        return super().validate() + [(f"opponent.{key}" if key else "opponent", msg) for key, msg in problems]

    @property
    def opponent_spec(self) -> OpponentSpec:
        spec, _ = parse_opponent(self.opponent, labelled=False)
        assert spec is not None, "validated options"
        return spec


@dataclass
class EvaluatorScheduleConfig:
    """When evaluators run and when training stops (shared by the evaluators' options)."""

    stop_value: float | None = option(
        None, doc="Stop training once the mean evaluation return reaches this (after train iteration 0); null: never."
    )
    every_train_iters: int = option(200, doc="Evaluate at most once per this many train iterations (and at 0).", min=1)


@dataclass
class EpisodeEvaluatorConfig(EvaluatorScheduleConfig):
    """Options of the ``episodes`` evaluator."""

    envs: int = option(3, doc="Evaluator envs stepped together.", min=1)
    episodes: int = option(10, doc="Greedy episodes per evaluation, split evenly across the envs.", min=1)


@dataclass
class VersusEvaluatorConfig(EvaluatorScheduleConfig):
    """Options of the ``versus`` evaluator (``stop_value`` compares the mean of win 1, draw 0, loss -1)."""

    envs: int = option(8, doc="Evaluator envs stepped together.", min=1)
    games: int = option(50, doc="Greedy games per opponent and side (as first and as second player).", min=1)
    opponents: list[dict[str, Any]] = option(
        default_factory=lambda: [{"name": "random"}],
        doc="The bots to play, e.g. [{name: random}, {name: mcts, simulations: 1000}, {name: perfect}]; keys "
            "besides name and label are the bot's params; label names the metrics eval/vs_<label>/... "
            "(default: the name, plus the simulations for mcts: mcts1000).")

    def validate(self) -> list[tuple[str, str]]:
        _, problems = parse_opponents(self.opponents)
        return [(f"opponents{key}", msg) for key, msg in problems]

    @property
    def opponent_specs(self) -> list[OpponentSpec]:
        return parse_opponents(self.opponents)[0]


def _openings(cfg: EpisodeCollectorConfig | SegmentCollectorConfig, run: Any) -> dict[str, Any]:
    """The collector's random-opening arguments: the option and its own RNG stream (per rank)."""
    return {"opening_moves": cfg.opening_moves, "opening_rng": run.rng("collector", "openings", run.rank)}


def make_episode_collector(cfg: EpisodeCollectorConfig, run: Any, *, env_spec: EnvSpec, frame_stack: int) -> Any:
    """An :class:`~lzk_workers.collector.EpisodeCollector` (the policy is passed to each ``collect``)."""
    from lzk_workers.collector import EpisodeCollector

    return EpisodeCollector(env_spec, envs=cfg.envs, n_episode=cfg.n_episode, seed=run.seed("collector", run.rank),
                            frame_stack=frame_stack, random_rng=run.rng("collector", "random", run.rank),
                           **_openings(cfg, run))


def make_segment_collector(cfg: SegmentCollectorConfig, run: Any, *, env_spec: EnvSpec, frame_stack: int) -> Any:
    """A :class:`~lzk_workers.segment_collector.SegmentCollector`."""
    from lzk_workers.segment_collector import SegmentCollector

    return SegmentCollector(env_spec, envs=cfg.envs, num_segments=cfg.num_segments,
                            segment_length=cfg.segment_length, seed=run.seed("collector", run.rank),
                            frame_stack=frame_stack, random_rng=run.rng("collector", "random", run.rank),
                           **_openings(cfg, run))


def _stop_flag(run: Any) -> Callable[[], bool]:
    """The run's stop flag as an evaluator's ``interrupt`` (read between env steps)."""
    return lambda: bool(run.stop_requested)


def make_episode_evaluator(cfg: EpisodeEvaluatorConfig, run: Any, *, env_spec: EnvSpec, frame_stack: int) -> Any:
    """An :class:`~lzk_workers.evaluator.EpisodeEvaluator` on rank 0 (the policy is passed to each ``evaluate``)."""
    from lzk_workers.evaluator import EpisodeEvaluator

    return EpisodeEvaluator(env_spec, envs=cfg.envs, episodes=cfg.episodes, seed=run.seed("evaluator"),
                            every_train_iters=cfg.every_train_iters, stop_value=cfg.stop_value,
                            frame_stack=frame_stack, interrupt=_stop_flag(run))


def make_versus_collector(cfg: VersusCollectorConfig, run: Any, *, env_spec: SimulatorEnvSpec,
                          frame_stack: int) -> Any:
    """A :class:`~lzk_workers.versus_collector.VersusCollector` (its opponent seeded per rank)."""
    from lzk_workers.versus_collector import VersusCollector

    return VersusCollector(env_spec, envs=cfg.envs, n_episode=cfg.n_episode, opponent=cfg.opponent_spec,
                           seed=run.seed("collector", run.rank), opponent_seed=run.seed("collector", "opponent", run.rank),
                           frame_stack=frame_stack, random_rng=run.rng("collector", "random", run.rank),
                           **_openings(cfg, run))


def make_versus_evaluator(cfg: VersusEvaluatorConfig, run: Any, *, env_spec: SimulatorEnvSpec,
                          frame_stack: int) -> Any:
    """A :class:`~lzk_workers.versus_evaluator.VersusEvaluator` on rank 0."""
    from lzk_workers.versus_evaluator import VersusEvaluator

    return VersusEvaluator(env_spec, envs=cfg.envs, games=cfg.games, opponents=cfg.opponent_specs,
                           seed=run.seed("evaluator"), opponent_seed=run.seed("evaluator", "opponents"),
                           every_train_iters=cfg.every_train_iters, stop_value=cfg.stop_value,
                           frame_stack=frame_stack, interrupt=_stop_flag(run))


def check_versus_collector(ctx: CheckContext) -> list[str]:
    """The env offers the collector's bot with its params (when its options can tell), and the
    policy acts on single frames (agent views cannot be frame-stacked consistently)."""
    from lzk_workers.versus_collector import STACK_REASON

    problems = opponent_check_problems(ctx.options("env"), [("collector.opponent", ctx.options("collector").opponent_spec)])
    spec = ctx.target_spec
    if spec is not None and spec.frame_stack != 1:
        problems.append(f"needs a policy with frame_stack 1, got {spec.frame_stack} (policy '{ctx.name('policy')}'): "
                        f"{STACK_REASON}")
    return problems


def check_evaluator_opponents(ctx: CheckContext) -> list[str]:
    """The env offers each of the evaluator's bots with its params (when its options can tell)."""
    specs = ctx.options("evaluator").opponent_specs
    return opponent_check_problems(ctx.options("env"), [(f"evaluator.opponents[{i}]", s) for i, s in enumerate(specs)])


#: What the two-player workers need of the env: game states for the bots, and the bots.
NEEDS_SIMULATOR_ENV = {"env": (SimulatorEnvSpec,)}


def check_segment_length(ctx: CheckContext) -> list[str]:
    """Segments finish where the buffer cuts them only when both count the same length."""
    cfg, buf = ctx.options("collector"), ctx.options("buffer")
    if isinstance(buf, SegmentBufferOptions) and buf.segment_length != cfg.segment_length:
        return [f"collector.segment_length ({cfg.segment_length}) must equal buffer.segment_length "
                f"({buf.segment_length}) of buffer '{ctx.name('buffer')}', so that a collect returns whole "
                f"buffer segments"]
    return []


@hookimpl
def lzkernel_register_collectors() -> list[Component]:
    return [
        Component("episode", factory=make_episode_collector, config=EpisodeCollectorConfig,
                  doc="Whole episodes per collect on persistent envs, one Trajectory per episode."),
        Component("segment", factory=make_segment_collector, config=SegmentCollectorConfig,
                  check=check_segment_length,
                  doc="A number of finished episode pieces per collect (UniZero); envs and unfinished "
                      "pieces persist across collects."),
        Component("versus", factory=make_versus_collector, config=VersusCollectorConfig,
                  needs=NEEDS_SIMULATOR_ENV, check=check_versus_collector,
                  doc="Whole two-player games against a bot (random, mcts, perfect), the agent alternating "
                      "sides; one agent-view Trajectory per game; win/draw/loss rates."),
    ]


@hookimpl
def lzkernel_register_evaluators() -> list[Component]:
    return [
        Component("versus", factory=make_versus_evaluator, config=VersusEvaluatorConfig,
                  needs=NEEDS_SIMULATOR_ENV, check=check_evaluator_opponents,
                  resume_safe=("envs", "games", "opponents", "stop_value", "every_train_iters"),
                  doc="Greedy two-player games against each configured bot as first and second player; "
                      "win/draw/loss rates per bot and side; return = win 1, draw 0, loss -1."),
        Component("episodes", factory=make_episode_evaluator, config=EpisodeEvaluatorConfig,
                  doc="A fixed number of greedy episodes; mean/std/min/max return, best and stop.",
                  resume_safe=("envs", "episodes", "stop_value", "every_train_iters")),
    ]
