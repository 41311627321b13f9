"""Gymnasium adapter: an :class:`~lzkernel.EnvSpec` and a synchronous same-step auto-reset vector env.

Why our own vector env rather than ``gymnasium.vector.SyncVectorEnv(autoreset_mode=SAME_STEP)``:

* the episode collector and the evaluator step only the envs that still owe episodes (the
  ``active`` mask of :meth:`GymVectorEnv.step`); ``SyncVectorEnv`` always steps every env;
* per-env legal masks come from each env's ``info["action_mask"]`` (not read at an episode's
  final state, where no action is chosen and envs may report none legal), and errors
  (non-finite values, illegal actions, exceptions the env raises) must name the env id and the
  env index;
* the episode return and length of a finished episode are tracked here, not read back from
  wrappers; and gymnasium's vector API has changed between releases (0.29 → 1.0), this has not.

Shape letters: E envs, A actions, O observation shape.
"""
from __future__ import annotations

import importlib
import logging
import warnings
from dataclasses import dataclass, field
from typing import Any

import gymnasium

from lzkernel import ConfigError, FrameCallback
from lzk_envs.gym_vector import EnvError, GymVectorEnv
from lzk_envs.restarts import EnvRestarts

__all__ = ["EnvError", "GymEnvSpec", "GymVectorEnv", "id_problem"]

log = logging.getLogger("lzkernel")

#: ids whose "out of date" notice was logged in this process (once each, not once per env made)
_OUTDATED_NOTED: set[str] = set()


def id_problem(env_id: str) -> str | None:
    """Why ``gymnasium.make`` cannot find ``env_id`` (None: it can), without making an env: the
    module of ``module:Id`` is imported (it registers Id), then Id is looked up in gymnasium's
    registry as ``make`` looks it up (an unversioned Id means its highest registered version).
    The message is gymnasium's (it names close ids or the versions that exist). Config checks
    call it (:class:`lzk_envs.plugin.GymEnvConfig`), so ``lzkernel config`` refuses what
    ``lzkernel run`` could not make."""
    from gymnasium.envs.registration import find_highest_version, parse_env_id

    parts = env_id.split(":")
    if len(parts) > 2:
        return f"{env_id!r} is neither a gymnasium env id nor module:Id (one colon at most)"
    module, name = (parts[0], parts[1]) if len(parts) == 2 else (None, env_id)
    try:
        if module is not None:
            importlib.import_module(module)
        if gymnasium.registry.get(name) is None:
            ns, base, version = parse_env_id(name)  # gymnasium.error.Error for a malformed id
            if version is not None or find_highest_version(ns, base) is None:
                gymnasium.spec(name)  # raises: NameNotFound, VersionNotFound, NamespaceNotFound, ...
    except (gymnasium.error.Error, ImportError) as exc:
        return f"cannot make gymnasium env {env_id!r}: {exc}"
    return None


def _make(env_id: str, kwargs: dict[str, Any], max_episode_steps: int | None) -> gymnasium.Env:
    """``gymnasium.make`` with creation problems turned into a :class:`ConfigError`."""
    extra = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    try:
        with warnings.catch_warnings():  # every other warning goes by the caller's filters
            warnings.filterwarnings("ignore", message=".*is out of date", category=DeprecationWarning)
            env = gymnasium.make(env_id, **extra, **kwargs)
        _note_outdated(env_id)
        return env
    except gymnasium.error.Error as exc:  # unknown id or version, missing dependency, ...
        raise ConfigError(f"env.id: cannot make gymnasium env {env_id!r}: {exc}") from exc
    except TypeError as exc:  # the env constructor rejected a keyword
        raise ConfigError(f"env.kwargs: gymnasium env {env_id!r} rejected kwargs {kwargs!r}: {exc}") from exc
    except ImportError as exc:  # "module:Id" whose module is missing (gymnasium imports it first)
        raise ConfigError(f"env.id: cannot make gymnasium env {env_id!r}: {exc}") from exc


def _note_outdated(env_id: str) -> None:
    """Where gymnasium has a newer version of ``env_id``, say so in one log line per id and process.
    ``gymnasium.make`` warns of it (a coloured DeprecationWarning) at every env made, collector and
    evaluator alike; :func:`_make` silences that one warning. CartPole-v0 is such an id, used on
    purpose: LightZero's CartPole configs and ours (200-step episodes, solved at 195)."""
    from gymnasium.envs.registration import find_highest_version, parse_env_id

    if env_id in _OUTDATED_NOTED:
        return
    _OUTDATED_NOTED.add(env_id)
    try:
        ns, name, version = parse_env_id(env_id.split(":")[-1])
    except gymnasium.error.Error:
        return
    newest = find_highest_version(ns, name)
    if version is not None and newest is not None and newest > version:
        log.info("env.id %s: gymnasium has a newer version of this env (v%d); using %s as configured",
                 env_id, newest, env_id)


@dataclass
class GymEnvSpec:
    """What a policy needs to know about a gymnasium env, and how to make vector envs of it."""

    id: str
    obs_shape: tuple[int, ...]
    num_actions: int
    truncation_as_terminal: bool = True
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None
    two_player: bool = False
    render_fps: float = 30.0
    restarts: EnvRestarts = EnvRestarts()
    workers: int = 0  # env worker processes (lzk_envs.workers); 0: the envs run in this process
    step_timeout_s: float = 60.0  # how long a worker may take to answer

    @classmethod
    def probe(
        cls,
        env_id: str,
        kwargs: dict[str, Any] | None = None,
        *,
        truncation_as_terminal: bool = True,
        max_episode_steps: int | None = None,
        restarts: EnvRestarts = EnvRestarts(),
        workers: int = 0,
        step_timeout_s: float = 60.0,
    ) -> GymEnvSpec:
        """Make one env to read its spaces; reject anything but a ``Box`` observation and a
        ``Discrete`` action space with a :class:`ConfigError` naming the env and the space."""
        kwargs = dict(kwargs or {})
        env = _make(env_id, kwargs, max_episode_steps)
        try:
            act_space, obs_space = env.action_space, env.observation_space
            fps = float(env.metadata.get("render_fps") or 30.0)
        finally:
            env.close()
        if not isinstance(act_space, gymnasium.spaces.Discrete):
            raise ConfigError(
                f"env.id: gymnasium env {env_id!r} has action space {act_space!r}; only Discrete "
                "action spaces are supported (MCTS needs a finite action set)"
            )
        if act_space.start != 0:
            raise ConfigError(
                f"env.id: gymnasium env {env_id!r} has action space {act_space!r} starting at "
                f"{act_space.start}; only Discrete(n) starting at 0 is supported"
            )
        if not isinstance(obs_space, gymnasium.spaces.Box):
            raise ConfigError(
                f"env.id: gymnasium env {env_id!r} has observation space {obs_space!r}; only Box "
                "observation spaces are supported"
            )
        return cls(
            id=env_id,
            obs_shape=tuple(int(d) for d in obs_space.shape),
            num_actions=int(act_space.n),
            truncation_as_terminal=truncation_as_terminal,
            kwargs=kwargs,
            max_episode_steps=max_episode_steps,
            render_fps=fps,
            restarts=restarts,
            workers=workers,
            step_timeout_s=step_timeout_s,
        )

    def make_vector(self, num_envs: int, seed: int) -> Any:
        """``num_envs`` envs; env i is seeded with ``seed + i`` at its first reset; in
        ``workers`` processes when set (:mod:`lzk_envs.workers`)."""
        from lzk_envs.workers import make_vector

        return make_vector(self, num_envs, seed)

    def make_local_vector(self, num_envs: int, seed: int, first_index: int = 0) -> GymVectorEnv:
        """Envs ``first_index`` .. ``first_index + num_envs - 1`` of the run, in this process."""
        return GymVectorEnv(self.id, lambda i: _make(self.id, self.kwargs, self.max_episode_steps), num_envs, seed,
                            self.obs_shape, self.num_actions, restarts=self.restarts, first_index=first_index)

    def make_rendering_vector(self, num_envs: int, seed: int, on_frame: FrameCallback) -> GymVectorEnv:
        """As :meth:`make_vector`, env 0 made with ``render_mode="rgb_array"`` drawing into ``on_frame``."""
        def make(i: int) -> gymnasium.Env:
            return _make(self.id, {**self.kwargs, "render_mode": "rgb_array"} if i == 0 else self.kwargs,
                         self.max_episode_steps)

        # No restarts: a recreated env 0 would leave a half-drawn episode in the video.
        return GymVectorEnv(self.id, make, num_envs, seed, self.obs_shape, self.num_actions, on_frame=on_frame)
