"""The one table of roles: config section, registration hook, what the factory is called with
and what it returns. The registry, the hook specs' documentation, the config sections and the
check of every ``run.build`` call are derived from it.
"""
from __future__ import annotations

from dataclasses import dataclass

from lzkernel.roles.env import EnvSpec
from lzkernel.roles.infra import CommBackend, Trainer, UpdateSchedule
from lzkernel.roles.policy import LearningPolicy
from lzkernel.roles.replay import ReplayBuffer
from lzkernel.roles.workers import Collector, Evaluator


@dataclass(frozen=True)
class RoleSpec:
    """One role: config section ``name``, built by ``factory(cfg, run, **kwargs)`` with exactly the
    keyword arguments ``kwargs`` (name → what it is), returning a ``protocol``."""

    name: str
    hook: str
    protocol: type
    kwargs: tuple[tuple[str, str], ...]
    doc: str

    @property
    def kwarg_names(self) -> frozenset[str]:
        return frozenset(k for k, _ in self.kwargs)

    def call_signature(self) -> str:
        extra = "".join(f", {k}=..." for k, _ in self.kwargs)
        return f"factory(cfg, run{extra})"

    def hook_doc(self) -> str:
        """The registration hook's docstring."""
        lines = [f"{self.doc} (config section ``{self.name}``).", "",
                 f"Each component's factory is called as ``{self.call_signature()}`` and returns a "
                 f":class:`~lzkernel.{self.protocol.__name__}`."]
        if self.kwargs:
            lines += ["", "Keyword arguments:", ""]
            lines += [f"* ``{k}``: {what}" for k, what in self.kwargs]
        return "\n".join(lines)


_ENV_SPEC = ("env_spec", "the run's :class:`~lzkernel.EnvSpec` (built from the ``env`` section)")
_FRAME_STACK = ("frame_stack", "int, observations the policy stacks per input (``policy.target_spec.frame_stack``)")

#: Every role, in the order config sections are validated and listed.
ROLE_TABLE: tuple[RoleSpec, ...] = (
    RoleSpec("trainer", "lzkernel_register_trainers", Trainer, (),
             "Trainers: the orchestrator loop of one algorithm family; it builds the other roles"),
    RoleSpec("env", "lzkernel_register_envs", EnvSpec, (),
             "Environments: an env spec that makes vector envs (and, for board games, a simulator)"),
    RoleSpec("policy", "lzkernel_register_policies", LearningPolicy, (_ENV_SPEC,),
             "Policies: one model, three modes (collect, eval, learn)"),
    RoleSpec("buffer", "lzkernel_register_buffers", ReplayBuffer,
             (_ENV_SPEC, ("target_spec", "the policy's :class:`~lzkernel.TargetSpec` (K, n, γ, frame stack, batch)")),
             "Replay buffers: store trajectories, sample learner batches"),
    RoleSpec("collector", "lzkernel_register_collectors", Collector, (_ENV_SPEC, _FRAME_STACK),
             "Collectors: step vector envs with a policy and return trajectories"),
    RoleSpec("evaluator", "lzkernel_register_evaluators", Evaluator, (_ENV_SPEC, _FRAME_STACK),
             "Evaluators: play greedy episodes on rank 0, report ``eval/...``, decide best and stop"),
    RoleSpec("update_schedule", "lzkernel_register_update_schedules", UpdateSchedule, (),
             "Update schedules: learner updates per collect, identical on every rank"),
    RoleSpec("comm", "lzkernel_register_comm_backends", CommBackend, (),
             "Communication backends: rank, world size and collectives; built first, on every rank"),
)

ROLE_SPECS: dict[str, RoleSpec] = {r.name: r for r in ROLE_TABLE}
#: The roles a component can play, in the order config sections are validated.
ROLES: tuple[str, ...] = tuple(r.name for r in ROLE_TABLE)
