"""The interfaces between roles, as Protocols (structural: implement them without inheriting).

These are the contracts first-party and third-party plugins meet at, one module per side:
``env`` (vector envs, env specs, simulators), ``policy`` (acting, learning, value sources),
``data`` (trajectories, batches), ``replay``, ``workers`` (collectors, evaluators), ``infra``
(update schedules, comm backends, trainers), and ``table``, the one table of roles. They are
torch-free: arrays crossing role boundaries are numpy arrays.
"""
from __future__ import annotations

from lzkernel.roles.data import Batch, Trajectory
from lzkernel.roles.env import (EnvSpec, EvalVariantEnvSpec, FrameCallback, FrameEnvSpec, Opponent,
                                RenderableEnvSpec, RestartingVectorEnv, ResumableVectorEnv, Simulator, SimulatorEnvSpec, SimulatorStep, StepBatch,
                                SymmetricEnvSpec, Symmetry, TextGameEnvSpec, VectorEnv)
from lzkernel.roles.infra import CommBackend, Trainer, UpdateSchedule
from lzkernel.roles.policy import (
    ActingPolicy,
    ActResult,
    LearningPolicy,
    ObservationValues,
    SearchCaches,
    SequenceValues,
    TargetSpec,
)
from lzkernel.roles.replay import ReanalysableBuffer, ReplayBuffer
from lzkernel.roles.table import ROLE_SPECS, ROLE_TABLE, ROLES, RoleSpec
from lzkernel.roles.workers import Collector, Evaluator, ReplayableEvaluator, ResumableCollector

__all__ = [
    "ROLES", "ROLE_SPECS", "ROLE_TABLE", "ActResult", "ActingPolicy", "Batch", "Collector", "CommBackend",
    "EnvSpec", "EvalVariantEnvSpec", "Evaluator", "FrameCallback", "FrameEnvSpec", "RenderableEnvSpec", "LearningPolicy", "ObservationValues", "Opponent", "ReanalysableBuffer", "ReplayBuffer", "ReplayableEvaluator", "RestartingVectorEnv", "ResumableCollector", "ResumableVectorEnv",
    "RoleSpec", "SearchCaches", "SequenceValues", "Simulator", "SimulatorEnvSpec", "SimulatorStep", "StepBatch", "SymmetricEnvSpec", "Symmetry", "TargetSpec", "TextGameEnvSpec",
    "Trainer", "Trajectory", "UpdateSchedule", "VectorEnv",
]
