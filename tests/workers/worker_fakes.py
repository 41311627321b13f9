"""Fakes for collector/evaluator tests: a scripted vector env, a recording policy, a stand-in run.

(A uniquely named module rather than conftest.py: several test folders have a conftest.)
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from lzkernel import ActResult, StepBatch


def default_length(i: int, k: int) -> int:
    """Episode k of env i lasts this many steps (differs per env and per episode)."""
    return 2 + i + (k % 3)


class FakeVectorEnv:
    """Scripted envs with same-step auto-reset and the ``active`` mask of lzk_envs' vector env.

    Env i's episode k (k counts from 0 over the env's life) lasts ``length(i, k)`` steps; the
    observation at step t is ``[i, k, t]``, the reward of the step into t is ``t``, the legal
    actions at step t are all but ``t % A``. Even episodes terminate, odd ones are truncated.
    """

    def __init__(self, num_envs: int, seed: int, num_actions: int = 3,
                 length: Callable[[int, int], int] = default_length) -> None:
        self.num_envs, self.seed, self.num_actions, self.length = num_envs, seed, num_actions, length
        self.k = np.full(num_envs, -1)  # episode index of each env
        self.t = np.zeros(num_envs, np.int64)
        self.ret = np.zeros(num_envs)
        self.resets = 0
        self.steps_per_env = np.zeros(num_envs, np.int64)  # env steps actually taken
        self.closed = False

    def obs_of(self, i: int) -> np.ndarray:
        return np.array([i, self.k[i], self.t[i]], np.float32)

    def legal_of(self, t: int) -> np.ndarray:
        legal = np.ones(self.num_actions, bool)
        legal[t % self.num_actions] = False
        return legal

    def _start(self, i: int) -> None:
        self.k[i] += 1
        self.t[i] = 0
        self.ret[i] = 0.0

    def _batch(self, **kw: Any) -> StepBatch:
        e = self.num_envs
        rows = dict(
            obs=np.stack([self.obs_of(i) for i in range(e)]),
            legal=np.stack([self.legal_of(int(self.t[i])) for i in range(e)]),
            to_play=np.full(e, -1, np.int64), reward=np.zeros(e, np.float32),
            terminated=np.zeros(e, bool), truncated=np.zeros(e, bool),
            episode_return=np.zeros(e, np.float32), episode_length=np.zeros(e, np.int64),
        )
        rows.update(kw)
        rows.setdefault("final_obs", rows["obs"].copy())
        return StepBatch(**rows)

    def reset(self) -> StepBatch:
        self.resets += 1
        for i in range(self.num_envs):
            self._start(i)
        return self._batch()

    def step(self, actions: np.ndarray, active: np.ndarray | None = None) -> StepBatch:
        e = self.num_envs
        active = np.ones(e, bool) if active is None else active
        reward = np.zeros(e, np.float32)
        term, trunc = np.zeros(e, bool), np.zeros(e, bool)
        ep_ret, ep_len = np.zeros(e, np.float32), np.zeros(e, np.int64)
        final = np.stack([self.obs_of(i) for i in range(e)])
        for i in np.flatnonzero(active):
            assert self.legal_of(int(self.t[i]))[actions[i]], "illegal action stepped"
            self.steps_per_env[i] += 1
            self.t[i] += 1
            reward[i] = self.t[i]
            self.ret[i] += reward[i]
            final[i] = self.obs_of(i)
            if self.t[i] == self.length(i, int(self.k[i])):
                term[i], trunc[i] = self.k[i] % 2 == 0, self.k[i] % 2 == 1
                ep_ret[i], ep_len[i] = self.ret[i], self.t[i]
                self._start(i)
        return self._batch(reward=reward, terminated=term, truncated=trunc, final_obs=final,
                           episode_return=ep_ret, episode_length=ep_len)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeEnvSpec:
    num_actions: int = 3
    truncation_as_terminal: bool = False
    length: Callable[[int, int], int] = default_length
    id: str = "fake"
    obs_shape: tuple[int, ...] = (3,)
    two_player: bool = False
    made: list[FakeVectorEnv] = field(default_factory=list)

    def make_vector(self, num_envs: int, seed: int) -> FakeVectorEnv:
        venv = FakeVectorEnv(num_envs, seed, self.num_actions, self.length)
        self.made.append(venv)
        return venv


class RecordingPolicy:
    """Picks the first legal action; records every call. ``root_value = 10 * env_id + timestep``."""

    def __init__(self, num_actions: int = 3, metrics: dict[str, float] | None = None) -> None:
        self.num_actions = num_actions
        self.metrics = metrics
        self.calls: list[dict[str, Any]] = []
        self.resets: list[tuple[list[int], str]] = []

    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, *, mode: str,
            env_ids: np.ndarray, temperature: float = 1.0, epsilon: float = 0.0,
            timestep: np.ndarray | None = None, states: Any = None) -> ActResult:
        assert timestep is not None
        self.calls.append(dict(obs=obs.copy(), legal=legal.copy(), env_ids=env_ids.copy(), mode=mode,
                               temperature=temperature, epsilon=epsilon, timestep=timestep.copy()))
        action = np.argmax(legal, axis=1).astype(np.int64)
        visit = np.eye(self.num_actions, dtype=np.float32)[action]
        root = (10 * env_ids + timestep).astype(np.float32)
        return ActResult(action, visit, root, -root, self.metrics)

    def reset_envs(self, env_ids: Sequence[int], mode: str) -> None:
        self.resets.append((list(env_ids), mode))


class StubRun:
    """The parts of the kernel's RunContext that worker factories use."""

    rank = 0
    stop_requested = False  # set by a test: the "signal" the evaluators' interrupt reads

    def __init__(self, seed: int = 0) -> None:
        self.root = seed

    def seed(self, *keys: Any) -> int:
        return zlib.crc32(repr((self.root, *keys)).encode()) & 0x7FFFFFFF

    def rng(self, *keys: Any) -> np.random.Generator:
        return np.random.default_rng(self.seed(*keys))

