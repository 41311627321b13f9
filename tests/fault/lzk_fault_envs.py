"""Test-only gymnasium envs, registered on import (``env.id: lzk_fault_envs:NAME``).

* ``StringObs-v0``: declares a ``Box(4)`` observation space but returns strings;
* ``NanCartPole-v0``: CartPole whose observations turn NaN at step ``LZK_NAN_AT``;
* ``HangCartPole-v0``: CartPole whose ``step`` sleeps ``LZK_HANG_S`` seconds (default 600) at
  step ``LZK_HANG_AT`` of the process whose ``RANK`` equals ``LZK_HANG_RANK`` (a rank alive
  but stuck in ``env.step``, read from the environment so that no config key is needed); with
  ``LZK_HANG_FLAG`` set, only a process that claims (deletes) that file first hangs, so one
  process among several (env workers, the one that replaces a hung worker) hangs once; with
  ``LZK_HANG_RESET_FLAG`` set, ``reset`` hangs in the process that claims that file.
"""
from __future__ import annotations

from typing import Any

import os
import time

import gymnasium
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class StringObsEnv(gymnasium.Env):
    """Two actions, observations that are strings (the env lies about its space)."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return "abcd", {}

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict]:
        return "abcd", 0.0, False, False, {}


class HangCartPoleEnv(CartPoleEnv):
    """CartPole that hangs in ``step`` on one rank (see the module docstring)."""

    steps = 0  # over every instance of the process: the n-th env step of this rank

    def step(self, action: int) -> Any:
        HangCartPoleEnv.steps += 1
        if (os.environ.get("RANK", "0") == os.environ.get("LZK_HANG_RANK")
                and HangCartPoleEnv.steps == int(os.environ.get("LZK_HANG_AT", "50")) and _claim_flag("LZK_HANG_FLAG")):
            time.sleep(float(os.environ.get("LZK_HANG_S", "600")))
        return super().step(action)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        if os.environ.get("LZK_HANG_RESET_FLAG") and _claim_flag("LZK_HANG_RESET_FLAG"):
            time.sleep(float(os.environ.get("LZK_HANG_S", "600")))
        return super().reset(seed=seed, options=options)


def _claim_flag(key: str) -> bool:
    """True unless the environment variable ``key`` names a file that another process deleted first."""
    flag = os.environ.get(key)
    if flag is None:
        return True
    try:
        os.remove(flag)
    except FileNotFoundError:
        return False
    return True


class NanCartPoleEnv(CartPoleEnv):
    """CartPole whose observation turns NaN at step ``LZK_NAN_AT`` of the process (an env that
    breaks mid-run)."""

    steps = 0

    def step(self, action: int) -> Any:
        NanCartPoleEnv.steps += 1
        obs, *rest = super().step(action)
        if NanCartPoleEnv.steps == int(os.environ.get("LZK_NAN_AT", "-1")):
            obs = np.full_like(obs, np.nan)
        return (obs, *rest)


gymnasium.register("NanCartPole-v0", entry_point=NanCartPoleEnv, max_episode_steps=200)
gymnasium.register("StringObs-v0", entry_point=StringObsEnv, max_episode_steps=20)
gymnasium.register("HangCartPole-v0", entry_point=HangCartPoleEnv, max_episode_steps=200)
