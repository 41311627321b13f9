"""Entry point of the lzk_workers plugin: registers its components with lzkernel.

No gymnasium/torch import at module level: the factories import their implementation modules.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lzkernel import CheckContext, Component, EnvSpec, SegmentBufferOptions, hookimpl, option


@dataclass
class EpisodeCollectorConfig:
    """Options of the ``episode`` collector."""

    envs: int = option(8, doc="Collector envs stepped together (their vector env lives across collects).", min=1)
    n_episode: int = option(8, doc="Whole episodes per collect, split evenly across the envs (>= envs).", min=1)

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


@dataclass
class EpisodeEvaluatorConfig:
    """Options of the ``episodes`` evaluator."""

    envs: int = option(3, doc="Evaluator envs stepped together.", min=1)
    episodes: int = option(10, doc="Greedy episodes per evaluation, split evenly across the envs.", min=1)
    stop_value: float | None = option(
        None, doc="Stop training once the mean evaluation return reaches this (after train iteration 0); null: never."
    )
    every_train_iters: int = option(200, doc="Evaluate at most once per this many train iterations (and at 0).", min=1)


def make_episode_collector(cfg: EpisodeCollectorConfig, run: Any, *, env_spec: EnvSpec, frame_stack: int) -> Any:
    """An :class:`~lzk_workers.collector.EpisodeCollector` (the policy is passed to each ``collect``)."""
    from lzk_workers.collector import EpisodeCollector

    return EpisodeCollector(env_spec, envs=cfg.envs, n_episode=cfg.n_episode, seed=run.seed("collector", run.rank),
                            frame_stack=frame_stack, random_rng=run.rng("collector", "random", run.rank))


def make_segment_collector(cfg: SegmentCollectorConfig, run: Any, *, env_spec: EnvSpec, frame_stack: int) -> Any:
    """A :class:`~lzk_workers.segment_collector.SegmentCollector`."""
    from lzk_workers.segment_collector import SegmentCollector

    return SegmentCollector(env_spec, envs=cfg.envs, num_segments=cfg.num_segments,
                            segment_length=cfg.segment_length, seed=run.seed("collector", run.rank),
                            frame_stack=frame_stack, random_rng=run.rng("collector", "random", run.rank))


def make_episode_evaluator(cfg: EpisodeEvaluatorConfig, run: Any, *, env_spec: EnvSpec, frame_stack: int) -> Any:
    """An :class:`~lzk_workers.evaluator.EpisodeEvaluator` on rank 0 (the policy is passed to each ``evaluate``)."""
    from lzk_workers.evaluator import EpisodeEvaluator

    return EpisodeEvaluator(env_spec, envs=cfg.envs, episodes=cfg.episodes, seed=run.seed("evaluator"),
                            every_train_iters=cfg.every_train_iters, stop_value=cfg.stop_value,
                            frame_stack=frame_stack)


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
    ]


@hookimpl
def lzkernel_register_evaluators() -> list[Component]:
    return [
        Component("episodes", factory=make_episode_evaluator, config=EpisodeEvaluatorConfig,
                  doc="A fixed number of greedy episodes; mean/std/min/max return, best and stop.",
                  resume_safe=("envs", "episodes", "stop_value", "every_train_iters")),
    ]
