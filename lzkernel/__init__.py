"""lzkernel: a plugin-based microkernel for MCTS-based reinforcement learning.

The public API a plugin author needs. Importing this package does not import torch.
"""
from __future__ import annotations

from lzkernel.collectives import all_reduce_mean_tensors, broadcast_tensors, gather_ints
from lzkernel.component import ROLES, Component
from lzkernel.config.compat import BufferOptions, CheckContext, SegmentBufferOptions
from lzkernel.config.schema import option
from lzkernel.errors import CheckpointError, ConfigError, LzkernelError, PluginError, Stalled, StopRequested
from lzkernel.frames import FrameWindow, decode_frames, encode_frames
from lzkernel.hookspecs import hookimpl, hookspec
from lzkernel.sampling import masked_softmax_weights, sample_from_weights, uniform_legal
from lzkernel.seeding import generator_state, set_generator_state
from lzkernel.watchdog import progressed
from lzkernel.roles.env import make_checked_vector
from lzkernel.roles import (
    ROLE_TABLE,
    ActingPolicy,
    ActResult,
    Batch,
    Collector,
    CommBackend,
    EnvSpec,
    EvalVariantEnvSpec,
    Evaluator,
    FrameCallback,
    FrameEnvSpec,
    LearningPolicy,
    ObservationValues,
    Opponent,
    ReanalysableBuffer,
    RenderableEnvSpec,
    ReplayBuffer,
    ReplayableEvaluator,
    RestartingVectorEnv,
    ResumableCollector,
    ResumableVectorEnv,
    RoleSpec,
    SearchCaches,
    SequenceValues,
    Simulator,
    SimulatorEnvSpec,
    SimulatorStep,
    StepBatch,
    SymmetricEnvSpec,
    Symmetry,
    TargetSpec,
    TextGameEnvSpec,
    Trainer,
    Trajectory,
    UpdateSchedule,
    VectorEnv,
)

__version__ = "0.1.0"

__all__ = [
    "ROLES",
    "ROLE_TABLE",
    "ActResult",
    "ActingPolicy",
    "Batch",
    "BufferOptions",
    "CheckContext",
    "CheckpointError",
    "Collector",
    "CommBackend",
    "Component",
    "ConfigError",
    "EnvSpec",
    "EvalVariantEnvSpec",
    "Evaluator",
    "FrameCallback",
    "FrameEnvSpec",
    "FrameWindow",
    "LearningPolicy",
    "LzkernelError",
    "ObservationValues",
    "Opponent",
    "PluginError",
    "ReanalysableBuffer",
    "RenderableEnvSpec",
    "ReplayableEvaluator",
    "ReplayBuffer",
    "RestartingVectorEnv",
    "ResumableCollector",
    "ResumableVectorEnv",
    "RoleSpec",
    "SearchCaches",
    "SegmentBufferOptions",
    "SequenceValues",
    "Simulator",
    "SimulatorEnvSpec",
    "SimulatorStep",
    "Stalled",
    "StepBatch",
    "StopRequested",
    "SymmetricEnvSpec",
    "Symmetry",
    "TargetSpec",
    "TextGameEnvSpec",
    "Trainer",
    "Trajectory",
    "UpdateSchedule",
    "VectorEnv",
    "__version__",
    "all_reduce_mean_tensors",
    "broadcast_tensors",
    "decode_frames",
    "encode_frames",
    "gather_ints",
    "generator_state",
    "make_checked_vector",
    "masked_softmax_weights",
    "progressed",
    "sample_from_weights",
    "uniform_legal",
    "set_generator_state",
    "hookimpl",
    "hookspec",
    "option",
]
