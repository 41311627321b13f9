"""Entry point of the lzk_unizero plugin: the ``unizero`` policy and the ``unizero_segment`` trainer.

Imports no torch at module level (``lzkernel plugins`` must stay fast); the factories do.
"""
from __future__ import annotations

from typing import Any

from lzkernel import Component, ReanalysableBuffer, SearchCaches, SequenceValues, hookimpl
from lzk_loop import LOOP_RESUME_SAFE, loop_check
from lzk_unizero.config import UniZeroPolicyConfig
from lzk_unizero.trainer import UniZeroSegmentConfig, UniZeroSegmentTrainer


def make_policy(cfg: UniZeroPolicyConfig, run: Any, *, env_spec: Any) -> Any:
    """Build a :class:`~lzk_unizero.policy.UniZeroPolicy` for ``env_spec`` on ``run.device``
    (policy RNG seeded with ``run.seed("policy", run.rank)``; gradients averaged over ranks)."""
    from lzk_unizero.policy import UniZeroPolicy

    average = run.comm.average_gradients if run.world_size > 1 else None
    return UniZeroPolicy(cfg, tuple(env_spec.obs_shape), int(env_spec.num_actions), device=run.device,
                         seed=run.seed("policy", run.rank), average_gradients=average)


def _make_trainer(cfg: UniZeroSegmentConfig, run: Any) -> UniZeroSegmentTrainer:
    return UniZeroSegmentTrainer(cfg, run)


@hookimpl
def lzkernel_register_policies() -> list[Component]:
    return [Component(
        "unizero", factory=make_policy, config=UniZeroPolicyConfig,
        provides=(SequenceValues, SearchCaches), target_spec=UniZeroPolicyConfig.target_spec,
        doc="UniZero: transformer latent world model, exact KV-cached batched MCTS, EMA target network.")]


@hookimpl
def lzkernel_register_trainers() -> list[Component]:
    return [Component(
        "unizero_segment", factory=_make_trainer, config=UniZeroSegmentConfig,
        needs={"policy": (SequenceValues, SearchCaches), "buffer": (ReanalysableBuffer,)}, check=loop_check,
        resume_safe=LOOP_RESUME_SAFE,
        doc="UniZero with segment collection and buffer reanalysis (SPEC §1.2).")]
