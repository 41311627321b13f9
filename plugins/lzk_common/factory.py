"""The policy component of the latent-model family, for algorithm plugins' entry modules.

Imports nothing heavy (``lzkernel plugins`` imports every entry module): the policy class is
imported when the factory runs.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from lzkernel import Component, ObservationValues


def latent_policy_factory(policy_class: str) -> Callable[..., Any]:
    """``make_policy(cfg, run, *, env_spec)`` building ``policy_class`` ("module:Class", a
    :class:`~lzk_common.latent_policy.LatentSearchPolicy` subclass) for ``env_spec`` on
    ``run.device``: the policy RNG is seeded with ``run.seed("policy", run.rank)``; with several
    ranks the learner averages gradients through ``run.comm.average_gradients`` before clipping;
    with ``augment_symmetries`` every learner batch is transformed by a random symmetry of the env's board."""
    module, name = policy_class.split(":")

    def make_policy(cfg: Any, run: Any, *, env_spec: Any) -> Any:
        from lzk_common.symmetry import batch_symmetries

        average = run.comm.average_gradients if run.world_size > 1 else None
        cls = getattr(importlib.import_module(module), name)
        seed = run.seed("policy", run.rank)
        policy = cls(cfg, tuple(env_spec.obs_shape), int(env_spec.num_actions), device=run.device, seed=seed,
                     average_gradients=average, symmetries=batch_symmetries(env_spec, cfg.augment_symmetries, seed))
        run.note("policy.learn_dtype", policy.learner.learn_dtype)  # what learn_dtype 'auto' chose
        return policy

    make_policy.__doc__ = f"Build a {name} for ``env_spec`` on ``run.device`` (see latent_policy_factory)."
    return make_policy


def latent_policy_component(name: str, policy_class: str, config: type, doc: str) -> Component:
    """The policy :class:`lzkernel.Component` ``name`` of a latent-model algorithm: its config
    schema ``config`` (whose ``target_spec`` the checks use), ``policy_class`` ("module:Class")
    built by :func:`latent_policy_factory`, providing :class:`lzkernel.ObservationValues`."""
    return Component(name, factory=latent_policy_factory(policy_class), config=config,
                     provides=(ObservationValues,), target_spec=config.target_spec, doc=doc)
