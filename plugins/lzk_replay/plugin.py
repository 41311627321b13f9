"""Entry point of the lzk_replay plugin: registers its components with lzkernel."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lzkernel import (CheckContext, Component, EnvSpec, FrameEnvSpec, ObservationValues, ReanalysableBuffer,
                      SequenceValues, TargetSpec, hookimpl, option)


@dataclass
class _SegmentBufferConfig:
    """Options shared by the segment buffers (K, n, γ, frame stack and shapes come from the
    algorithm and env through the factory's keyword arguments)."""

    capacity: int = option(1_000_000, doc="Stored transitions at most (hard limit; oldest whole segments are dropped).", min=1)
    segment_length: int = option(50, doc="Game segment length L in transitions.", min=1)
    use_priority: bool = option(False, doc="Prioritised sampling (p^alpha + 1e-6) with IS weights; uniform when false.")
    priority_alpha: float = option(0.6, doc="Priority exponent alpha.", min=0.0)
    priority_beta: float = option(0.4, doc="IS-weight exponent beta: w = (N*P)^-beta / max.", min=0.0)
    use_max_priority_for_new_data: bool = option(
        False, doc="New transitions get the maximum stored priority; when false, |pred_value - root_value| + 1e-6 "
        "(LightZero 0.2.0's collector, whenever use_priority is on). Only read with use_priority.")

    def validate(self) -> list[tuple[str, str]]:
        if self.capacity < self.segment_length:
            return [("capacity", f"must hold at least one segment ({self.segment_length} transitions)")]
        return []

    def buffer_kwargs(self) -> dict[str, Any]:
        """The shared constructor arguments."""
        return dict(capacity=self.capacity, segment_length=self.segment_length, use_priority=self.use_priority,
                    priority_alpha=self.priority_alpha, priority_beta=self.priority_beta,
                    use_max_priority_for_new_data=self.use_max_priority_for_new_data)


@dataclass
class GameBufferConfig(_SegmentBufferConfig):
    """Options of the ``game`` replay buffer (MuZero / ReZero)."""

    reanalyze_max_roots: int = option(
        0, doc="ReZero buffer reanalysis: roots per call at most, whole segments round-robin (0: the whole buffer).", min=0)
    reanalyze_batch_size: int = option(
        4096, doc="ReZero buffer reanalysis: roots per reanalyze_fn call at most (0: one call per backward group).", min=0)
    reuse_chain: str = option(
        "segment", doc="ReZero value reuse: 'segment' walks each segment backwards as one reuse chain; 'lightzero' "
                       "restarts the chain every max(1, N // 2000) positions (N stored transitions), as LightZero's "
                       "reanalysis chunks do (no reuse below 4000 transitions).", choices=("segment", "lightzero"))


@dataclass
class SequenceGameBufferConfig(_SegmentBufferConfig):
    """Options of the ``unizero`` replay buffer (sequence bootstrap values, UniZero buffer reanalysis)."""

    reanalyze_partition: float = option(
        0.75, doc="Buffer reanalysis draws from the oldest fraction P of the segments "
                  "(LightZero asserts P <= 0.75; up to 1 is allowed here).", min=0.0, min_exclusive=True, max=1.0)
    reanalyze_sequences: int = option(
        160, doc="Buffer reanalysis budget R in LightZero's K+1-root sequences: ceil(R / floor(L/K)) segments "
                 "are drawn and every own position of each is searched once.", min=1)
    reanalyze_batch_size: int = option(
        256, doc="Buffer reanalysis: roots (history windows) per reanalyze_fn call at most (0: one call).", min=0)


@dataclass
class OutcomeBufferConfig:
    """Options of the ``outcome`` replay buffer (AlphaZero)."""

    capacity: int = option(1_000_000, doc="Stored positions at most (the oldest are dropped first).", min=1)
    root_value_weight: float = option(
        0.0, doc="w in the value target (1 − w)·z + w·q: z the game's outcome, q the search's root value at the "
        "position (0: the outcome alone, as the paper; 0.5: the average, as Oracle's connect-four study).",
        min=0.0, max=1.0)


def _geometry(env_spec: EnvSpec, target_spec: TargetSpec) -> dict[str, Any]:
    """The constructor arguments that come from the policy's target spec and the env (image
    frames of a :class:`lzkernel.FrameEnvSpec` env are stored as uint8)."""
    return dict(unroll_steps=target_spec.unroll_steps, td_steps=target_spec.td_steps, discount=target_spec.discount,
                frame_stack=target_spec.frame_stack, obs_shape=tuple(env_spec.obs_shape),
                num_actions=int(env_spec.num_actions),
                frame_scale=float(env_spec.frame_scale) if isinstance(env_spec, FrameEnvSpec) else None)


def make_game_buffer(cfg: GameBufferConfig, run: Any, *, env_spec: EnvSpec, target_spec: TargetSpec) -> Any:
    """Build a :class:`~lzk_replay.buffer.GameBuffer` for the policy's K, n, γ (and value-prefix
    horizon) and the env's shapes."""
    from lzk_replay.buffer import GameBuffer

    return GameBuffer(**cfg.buffer_kwargs(), **_geometry(env_spec, target_spec),
                      reanalyze_max_roots=cfg.reanalyze_max_roots, reanalyze_batch_size=cfg.reanalyze_batch_size,
                      reuse_chain=cfg.reuse_chain,
                      value_prefix_horizon=target_spec.value_prefix_horizon)


def make_sequence_buffer(cfg: SequenceGameBufferConfig, run: Any, *, env_spec: EnvSpec,
                         target_spec: TargetSpec) -> Any:
    """Build a :class:`~lzk_replay.sequence_buffer.SequenceGameBuffer` (UniZero)."""
    from lzk_replay.sequence_buffer import SequenceGameBuffer

    return SequenceGameBuffer(**cfg.buffer_kwargs(), **_geometry(env_spec, target_spec),
                              reanalyze_partition=cfg.reanalyze_partition,
                              reanalyze_sequences=cfg.reanalyze_sequences,
                              reanalyze_batch_size=cfg.reanalyze_batch_size)


def make_outcome_buffer(cfg: OutcomeBufferConfig, run: Any, *, env_spec: EnvSpec, target_spec: TargetSpec) -> Any:
    """Build an :class:`~lzk_replay.outcome_buffer.OutcomeBuffer` (value targets: the outcome, γ
    of the policy's target spec)."""
    from lzk_replay.outcome_buffer import OutcomeBuffer

    return OutcomeBuffer(capacity=cfg.capacity, obs_shape=tuple(env_spec.obs_shape),
                         num_actions=int(env_spec.num_actions), discount=target_spec.discount,
                         root_value_weight=cfg.root_value_weight)


def check_outcome_geometry(ctx: CheckContext) -> list[str]:
    """Outcome targets are single positions: no unroll, no stacked frames."""
    spec = ctx.target_spec
    problems = check_per_step_rewards(ctx)
    if spec is not None and (spec.unroll_steps != 0 or spec.frame_stack != 1):
        problems.append(f"the outcome buffer serves single positions (K = 0, one frame); policy '{ctx.name('policy')}' "
                        f"unrolls {spec.unroll_steps} steps over {spec.frame_stack} frames: use buffer 'game'")
    return problems


def check_per_step_rewards(ctx: CheckContext) -> list[str]:
    """Buffers without value-prefix targets (``unizero``, ``outcome``) refuse a policy whose
    target spec asks for them, plus the capacity rule."""
    spec = ctx.target_spec
    problems = check_capacity(ctx)
    if spec is not None and spec.value_prefix_horizon > 0:
        problems.append(f"this buffer builds per-step reward targets only; policy '{ctx.name('policy')}' trains "
                        f"on value prefixes (horizon {spec.value_prefix_horizon}): use buffer 'game'")
    return problems


def check_capacity(ctx: CheckContext) -> list[str]:
    """A batch must fit the buffer: a capacity below the policy's batch size could never train."""
    spec, cfg = ctx.target_spec, ctx.options("buffer")
    if spec is not None and spec.batch_size > cfg.capacity:
        return [f"buffer.capacity ({cfg.capacity}) is smaller than the policy's batch size ({spec.batch_size}): "
                f"the run could never train; raise buffer.capacity or lower policy.batch_size"]
    return []


@hookimpl
def lzkernel_register_buffers() -> list[Component]:
    return [
        Component("game", factory=make_game_buffer, config=GameBufferConfig,
                  provides=(ReanalysableBuffer,), needs={"policy": (ObservationValues,)}, check=check_capacity,
                  doc="Game-segment replay buffer (MuZero/EfficientZero/ReZero): n-step targets, value "
                      "prefixes when the policy asks, optional PER, ReZero buffer reanalysis."),
        Component("outcome", factory=make_outcome_buffer, config=OutcomeBufferConfig, check=check_outcome_geometry,
                  doc="Positions of whole episodes with the game's outcome as value target (AlphaZero): "
                      "uniform replay, no bootstrap."),
        Component("unizero", factory=make_sequence_buffer, config=SequenceGameBufferConfig,
                  provides=(ReanalysableBuffer,), needs={"policy": (SequenceValues,)}, check=check_per_step_rewards,
                  doc="Game-segment replay buffer (UniZero): sequence bootstrap values, optional PER, "
                      "history-window buffer reanalysis of the oldest segments."),
    ]
