"""Entry point of the lzk_envs plugin: registers its components with lzkernel.

Kept free of gymnasium/torch imports at module level (``lzkernel plugins`` must stay fast): the
factories import their implementation modules when called.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lzkernel import Component, hookimpl, option


@dataclass
class GymEnvConfig:
    """Options of the ``gymnasium`` env component."""

    id: str = option(doc="A gymnasium env id, e.g. CartPole-v0 (Discrete action space, Box observations).")
    kwargs: dict[str, Any] = option({}, doc="Keyword arguments passed to gymnasium.make.")
    truncation_as_terminal: bool = option(
        True,
        doc="Treat a time-limit truncation as terminal (no bootstrap past it); the CartPole-v0 "
        "convention of LightZero. False: bootstrap from the value of the final observation.",
    )
    max_episode_steps: int | None = option(
        None, doc="Override the env's time limit (gymnasium.make max_episode_steps); null keeps the registered one.", min=1
    )


def make_gym_env(cfg: GymEnvConfig, run: Any = None) -> Any:
    """Build a :class:`lzk_envs.gym.GymEnvSpec` (probes one env; raises ConfigError on bad ids/spaces)."""
    from lzk_envs.gym import GymEnvSpec

    return GymEnvSpec.probe(
        cfg.id,
        cfg.kwargs,
        truncation_as_terminal=cfg.truncation_as_terminal,
        max_episode_steps=cfg.max_episode_steps,
    )


@hookimpl
def lzkernel_register_envs() -> list[Component]:
    return [
        Component(
            "gymnasium",
            factory=make_gym_env,
            config=GymEnvConfig,
            doc="Any gymnasium env with a Discrete action space and Box observations (float32).",
        )
    ]
