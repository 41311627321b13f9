"""Entry point of the lzk_alphazero plugin: the ``alphazero`` policy and trainer.

Imports no torch at module level (``lzkernel plugins`` must stay fast); the factories do.
"""
from __future__ import annotations

from typing import Any

from lzk_alphazero.config import AlphaZeroPolicyConfig
from lzk_alphazero.trainer import AlphaZeroTrainer, AlphaZeroTrainerConfig
from lzk_loop import LOOP_RESUME_SAFE, loop_check
from lzkernel import Component, SimulatorEnvSpec, hookimpl


def make_policy(cfg: AlphaZeroPolicyConfig, run: Any, *, env_spec: SimulatorEnvSpec) -> Any:
    """Build an :class:`~lzk_alphazero.policy.AlphaZeroPolicy` on ``run.device`` (policy RNG seeded
    with ``run.seed("policy", run.rank)``; gradients averaged over ranks)."""
    from lzk_alphazero.policy import AlphaZeroPolicy

    average = run.comm.average_gradients if run.world_size > 1 else None
    return AlphaZeroPolicy(cfg, env_spec, device=run.device, seed=run.seed("policy", run.rank),
                           average_gradients=average)


def _make_trainer(cfg: AlphaZeroTrainerConfig, run: Any) -> AlphaZeroTrainer:
    return AlphaZeroTrainer(cfg, run)


@hookimpl
def lzkernel_register_policies() -> list[Component]:
    return [Component(
        "alphazero", factory=make_policy, config=AlphaZeroPolicyConfig, needs={"env": (SimulatorEnvSpec,)},
        target_spec=AlphaZeroPolicyConfig.target_spec,
        doc="AlphaZero: residual policy-value network, batched search with the real game (cloned simulator "
            "states), outcome value targets, no target network.")]


@hookimpl
def lzkernel_register_trainers() -> list[Component]:
    return [Component("alphazero", factory=_make_trainer, config=AlphaZeroTrainerConfig, check=loop_check,
                      resume_safe=LOOP_RESUME_SAFE,
                      doc="AlphaZero on the shared loop: self-play or bot games, outcome targets (SPEC §5.3).")]
