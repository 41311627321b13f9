"""The episode collector: whole episodes per call, as :class:`~lzkernel.Trajectory` objects.

Behaviour of LightZero's ``MuZeroCollector.collect(n_episode)`` (SPEC §2.4) without the game
segment cutting, which is the replay buffer's job here.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from lzkernel import ActingPolicy, EnvSpec, Trajectory
from lzk_workers.rollout import EpisodePlayer, RandomActor, balanced_quotas


class EpisodeCollector:
    """Plays ``n_episode`` whole episodes per :meth:`collect` on ``envs`` persistent envs.

    Env i owes ``balanced_quotas(n_episode, envs)[i]`` episodes per call. The vector env lives
    across calls; an env that met its quota already auto-reset, so the next call starts it from
    that fresh episode.
    """

    def __init__(self, env_spec: EnvSpec, *, envs: int, n_episode: int, seed: int,
                 frame_stack: int = 1, random_rng: np.random.Generator | None = None) -> None:
        if n_episode < envs:
            raise ValueError(f"n_episode ({n_episode}) must be >= envs ({envs})")
        self.env_spec = env_spec
        self.n_episode = n_episode
        self.quota = balanced_quotas(n_episode, envs)  # [E]
        self.player = EpisodePlayer(env_spec.make_vector(envs, seed), env_spec, frame_stack,
                                    mode="collect", record=True)
        self.random_actor = RandomActor(random_rng if random_rng is not None else np.random.default_rng(seed))
        self.total_env_steps = 0
        self.total_episodes = 0

    def collect(self, policy: ActingPolicy, *, temperature: float, epsilon: float,
                random_policy: bool = False, n_episode: int | None = None,
                ) -> tuple[list[Trajectory], dict[str, float]]:
        """Play until ``n_episode`` episodes have finished; one trajectory per episode (in order
        of completion) and the ``collect/...`` (plus the policy's mean ``search/...``) metrics.

        ``random_policy``: act uniformly at random over legal actions instead of ``policy``
        (random warm-up; visit_dist uniform over legal, values 0). ``n_episode``: this call's
        episode count instead of the configured one (e.g. a random warm-up of N episodes); when
        it is below the number of envs, the envs without quota wait at their episode start.
        """
        if n_episode is None:
            quota = self.quota
        elif n_episode < 1:
            raise ValueError(f"n_episode must be >= 1, got {n_episode}")
        else:
            quota = balanced_quotas(n_episode, self.player.num_envs)
        start = time.perf_counter()
        actor = self.random_actor if random_policy else policy
        result = self.player.play(actor, quota, temperature=temperature, epsilon=epsilon)
        seconds = time.perf_counter() - start
        self.total_env_steps += result.env_steps
        self.total_episodes += len(result.episodes)
        returns = np.array([ep.episode_return for ep in result.episodes], np.float64)
        lengths = np.array([ep.length for ep in result.episodes], np.float64)
        metrics = {
            "collect/env_steps": float(result.env_steps),
            "collect/episodes": float(len(result.episodes)),
            "collect/return_mean": float(returns.mean()),
            "collect/return_max": float(returns.max()),
            "collect/return_min": float(returns.min()),
            "collect/episode_length_mean": float(lengths.mean()),
            "collect/seconds": seconds,
            "collect/steps_per_second": result.env_steps / max(seconds, 1e-9),
        }
        metrics.update({k: v for k, v in result.policy_metrics.items() if k.startswith("search/")})
        trajectories = [ep.trajectory for ep in result.episodes]
        assert all(t is not None for t in trajectories)  # the player records
        return trajectories, metrics  # type: ignore[return-value]

    def state_dict(self) -> dict[str, Any]:
        return {"total_env_steps": self.total_env_steps, "total_episodes": self.total_episodes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total_env_steps = int(state["total_env_steps"])
        self.total_episodes = int(state["total_episodes"])

    def close(self) -> None:
        self.player.close()
