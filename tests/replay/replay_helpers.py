"""Shared helpers for the replay tests: synthetic trajectories whose observations name themselves.

Observation at step t of episode ``ep``: ``[ep, t]`` (O = (2,)), so any gathered frame tells
which (episode, step) it came from.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from lzk_replay import GameBuffer
from lzkernel import Trajectory

A = 3


def traj(T: int, *, ep: int = 0, env_id: int = 0, t0: int = 0, ended: bool = True, terminal: bool = True,
         to_play: np.ndarray | None = None, rewards: np.ndarray | None = None) -> Trajectory:
    """Steps t0..t0+T of episode ``ep``: reward r_t = 1 + t/10 (+ep), root value ep + t/100,
    pred value root - 0.25 * (t % 3), action (t + ep) % A, visits one-hot on the action."""
    steps = np.arange(t0, t0 + T + 1)
    obs = np.stack([np.full(T + 1, ep, np.float32), steps.astype(np.float32)], axis=-1)
    actions = (steps[:T] + ep) % A
    root = (ep + steps[:T] / 100).astype(np.float32)
    return Trajectory(
        obs=obs,
        actions=actions.astype(np.int64),
        rewards=(1 + steps[:T] / 10 + ep).astype(np.float32) if rewards is None else rewards.astype(np.float32),
        visit_dist=np.eye(A, dtype=np.float32)[actions],
        root_values=root,
        pred_values=(root - 0.25 * (steps[:T] % 3)).astype(np.float32),
        legal=np.ones((T + 1, A), bool),
        to_play=np.full(T + 1, -1, np.int64) if to_play is None else to_play,
        timestep=steps.astype(np.int64),
        ended=ended, terminal=terminal, env_id=env_id,
    )


def obs_value(obs: np.ndarray) -> np.ndarray:
    """A deterministic 'target network': v = ep + step / 10 of the newest frame ([M, S*2])."""
    return (obs[:, -2] + obs[:, -1] / 10).astype(np.float32)


def make_buffer(**kw: Any) -> GameBuffer:
    args: dict[str, Any] = dict(capacity=10_000, segment_length=10, unroll_steps=3, td_steps=3,
                                discount=0.9, frame_stack=1, obs_shape=(2,), num_actions=A)
    args.update(kw)
    return GameBuffer(**args)


def source(fn: Callable[..., Any], history_pairs: int = 0) -> SimpleNamespace:
    """A value source (what buffers ask of a policy) serving one test callable as every method of
    :class:`lzkernel.ObservationValues` and :class:`lzkernel.SequenceValues`."""
    return SimpleNamespace(value_fn=fn, reanalyze_fn=fn, sequence_value_fn=fn, window_reanalyze_fn=fn,
                           history_pairs=history_pairs)


#: Buffer reanalysis takes an rng; the ``game`` buffer's round-robin selection does not use it.
NO_RNG = np.random.default_rng(0)
