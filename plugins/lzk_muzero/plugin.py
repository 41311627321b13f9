"""Entry point of the lzk_muzero plugin: registers the ``muzero`` policy.

Imports no torch at module level (``lzkernel plugins`` must stay fast); the factory does.
"""
from __future__ import annotations

from typing import Any

from lzkernel import Component, ObservationValues, hookimpl
from lzk_muzero.config import MuZeroPolicyConfig


def make_policy(cfg: MuZeroPolicyConfig, run: Any, *, env_spec: Any) -> Any:
    """Build a :class:`~lzk_muzero.policy.MuZeroPolicy` for ``env_spec`` on ``run.device``.

    The policy RNG is seeded with ``run.seed("policy", run.rank)``; with several ranks the
    learner averages gradients through ``run.comm.average_gradients`` before clipping.
    """
    from lzk_common.symmetry import batch_symmetries
    from lzk_muzero.policy import MuZeroPolicy

    average = run.comm.average_gradients if run.world_size > 1 else None
    seed = run.seed("policy", run.rank)
    return MuZeroPolicy(
        cfg,
        tuple(env_spec.obs_shape),
        int(env_spec.num_actions),
        device=run.device,
        seed=seed,
        average_gradients=average,
        symmetries=batch_symmetries(env_spec, cfg.augment_symmetries, seed),
    )


@hookimpl
def lzkernel_register_policies() -> list[Component]:
    return [
        Component(
            "muzero",
            factory=make_policy,
            config=MuZeroPolicyConfig,
            provides=(ObservationValues,),
            target_spec=MuZeroPolicyConfig.target_spec,
            doc="MuZero (LightZero-compatible): MLP/conv model with categorical value/reward, batched "
            "MCTS acting, SSL consistency loss, target network; also the model side of ReZero.",
        )
    ]
