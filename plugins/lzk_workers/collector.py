"""The episode collector: whole episodes per call, as :class:`~lzkernel.Trajectory` objects.

Behaviour of LightZero's ``MuZeroCollector.collect(n_episode)`` (SPEC §2.4) without the game
segment cutting, which is the replay buffer's job here. :class:`CollectorBase` is what it shares
with the segment collector (:mod:`lzk_workers.segment_collector`).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from lzkernel import ActingPolicy, EnvSpec, Trajectory, generator_state, make_checked_vector, set_generator_state
from lzk_workers.openings import RandomOpenings, opening_moves_of, with_openings
from lzk_workers.rollout import EpisodePlayer, PlayResult, RandomActor, balanced_quotas


def episode_metrics(returns: np.ndarray, lengths: np.ndarray) -> dict[str, float]:
    """``collect/return_*`` and ``collect/episode_length_mean`` of the episodes that ended
    (``returns``, ``lengths`` [n]); nothing when none did (never NaN)."""
    if not len(returns):
        return {}
    return {
        "collect/return_mean": float(np.mean(returns)),
        "collect/return_max": float(np.max(returns)),
        "collect/return_min": float(np.min(returns)),
        "collect/episode_length_mean": float(np.mean(lengths)),
    }


class CollectorBase:
    """A recording :class:`EpisodePlayer` on ``envs`` persistent envs, the random warm-up actor,
    the env-step and episode counters (:meth:`state_dict`), the work in progress
    (:meth:`episode_state`: a :class:`lzkernel.ResumableCollector`) and the ``collect/...`` metrics.

    Subclasses may wrap the acting policy (:meth:`_acting`) and turn what was played into the
    trajectories they return and their episode metrics (:meth:`_summarise`)."""

    def __init__(self, env_spec: EnvSpec, *, envs: int, seed: int, frame_stack: int,
                 random_rng: np.random.Generator | None, opening_moves: int = 0,
                 opening_rng: np.random.Generator | None = None) -> None:
        self.env_spec = env_spec
        venv = with_openings(make_checked_vector(env_spec, envs, seed), opening_moves,
                             opening_rng if opening_rng is not None else np.random.default_rng([seed, 1]))
        self.player = EpisodePlayer(venv, env_spec, frame_stack, mode="collect", record=True)
        self.openings = venv if isinstance(venv, RandomOpenings) else None  # None: no random openings
        self.random_actor = RandomActor(random_rng if random_rng is not None else np.random.default_rng(seed))
        self.total_env_steps = 0
        self.total_episodes = 0

    def _acting(self, actor: ActingPolicy) -> ActingPolicy:
        """What the player steps with, given the policy or the random actor: ``actor`` itself."""
        return actor

    def _summarise(self, result: PlayResult) -> tuple[list[Trajectory], dict[str, float]]:
        """The pieces to return and the metrics of the episodes that ended in ``result``."""
        returns = np.array([ep.episode_return for ep in result.episodes], np.float64)
        lengths = np.array([ep.length for ep in result.episodes], np.float64)
        return result.pieces, episode_metrics(returns, lengths)

    def _play(self, play: Callable[[ActingPolicy], PlayResult], policy: ActingPolicy,
              random_policy: bool) -> tuple[list[Trajectory], dict[str, float]]:
        """Run ``play`` with ``policy`` (or the random actor), count, and measure: the finished
        pieces and the ``collect/...`` metrics plus the policy's mean ``search/...`` ones.
        Return and length statistics appear only when an episode ended (never NaN)."""
        start = time.perf_counter()
        opened = self.openings.opening_steps if self.openings is not None else 0
        result = play(self._acting(self.random_actor if random_policy else policy))
        seconds = time.perf_counter() - start
        # random opening moves: env steps, not data
        opening_steps = self.openings.opening_steps - opened if self.openings is not None else 0
        self.total_env_steps += result.env_steps + opening_steps
        self.total_episodes += len(result.episodes)
        pieces, episodes = self._summarise(result)
        metrics = {
            "collect/env_steps": float(result.env_steps + opening_steps),
            "collect/episodes": float(len(result.episodes)),
            "collect/seconds": seconds,
            "collect/steps_per_second": (result.env_steps + opening_steps) / max(seconds, 1e-9),
            **episodes,
        }
        if self.openings is not None:
            metrics["collect/opening_steps"] = float(opening_steps)
        if result.env_failures:  # envs recreated (env.max_restarts); their running episodes dropped
            metrics["collect/env_failures"] = float(result.env_failures)
        metrics.update({k: v for k, v in result.policy_metrics.items() if k.startswith("search/")})
        return pieces, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"total_env_steps": self.total_env_steps, "total_episodes": self.total_episodes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total_env_steps = int(state["total_env_steps"])
        self.total_episodes = int(state["total_episodes"])

    def episode_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The player's running episodes and pieces (:meth:`EpisodePlayer.state_dict`, arrays
        under ``player/``) and the random actor's RNG state."""
        meta, arrays = self.player.state_dict()
        return ({"player": meta, "random_rng": generator_state(self.random_actor.rng)},
                {f"player/{k}": v for k, v in arrays.items()})

    def load_episode_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        if meta["player"].get("started"):  # running episodes: they must have the same openings
            saved, now = opening_moves_of(meta["player"]["env"]), self.openings.max_moves if self.openings else 0
            if saved != now:
                raise ValueError(f"the collector's episodes were saved with collector.opening_moves {saved}, "
                                 f"this run has {now}")
        set_generator_state(self.random_actor.rng, meta["random_rng"])
        self.player.load_state_dict(meta["player"], {k[7:]: v for k, v in arrays.items() if k.startswith("player/")})

    def close(self) -> None:
        self.player.close()


class EpisodeCollector(CollectorBase):
    """Plays ``n_episode`` whole episodes per :meth:`collect` on ``envs`` persistent envs.

    Env i owes ``balanced_quotas(n_episode, envs)[i]`` episodes per call. The vector env lives
    across calls; an env that met its quota already auto-reset, so the next call starts it from
    that fresh episode.
    """

    def __init__(self, env_spec: EnvSpec, *, envs: int, n_episode: int, seed: int,
                 frame_stack: int = 1, random_rng: np.random.Generator | None = None, opening_moves: int = 0,
                 opening_rng: np.random.Generator | None = None) -> None:
        if n_episode < envs:
            raise ValueError(f"n_episode ({n_episode}) must be >= envs ({envs})")
        super().__init__(env_spec, envs=envs, seed=seed, frame_stack=frame_stack, random_rng=random_rng,
                         opening_moves=opening_moves, opening_rng=opening_rng)
        self.n_episode = n_episode
        self.quota = balanced_quotas(n_episode, envs)  # [E]

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
        return self._play(lambda actor: self.player.play(actor, quota, temperature=temperature, epsilon=epsilon),
                          policy, random_policy)
