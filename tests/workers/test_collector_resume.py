"""Collectors as :class:`lzkernel.ResumableCollector`: a saved episode state continues exactly.

A collector that collected, was saved and is restored into a fresh collector (same config and
seed) returns bit-identical trajectories from then on: running episodes, frame windows,
timesteps, unfinished pieces and the random actor's RNG all come back.
"""
from __future__ import annotations

import json
from dataclasses import fields
from typing import Any, Callable

import numpy as np
import pytest
from worker_fakes import FakeEnvSpec

from lzkernel import ResumableCollector
from lzk_envs.gym import GymEnvSpec
from lzk_workers.collector import EpisodeCollector
from lzk_workers.segment_collector import SegmentCollector


@pytest.fixture(scope="module")
def cartpole() -> GymEnvSpec:
    return GymEnvSpec.probe("CartPole-v1")


def _episode(spec: Any) -> EpisodeCollector:
    return EpisodeCollector(spec, envs=3, n_episode=4, seed=5, frame_stack=2, random_rng=np.random.default_rng(1))


def _segment(spec: Any) -> SegmentCollector:
    return SegmentCollector(spec, envs=3, num_segments=4, segment_length=7, seed=5, frame_stack=2,
                            random_rng=np.random.default_rng(1))


def _collect(c: Any) -> list[Any]:
    return c.collect(None, temperature=1.0, epsilon=0.0, random_policy=True)[0]


def _same(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b) > 0
    for ta, tb in zip(a, b):
        for f in fields(ta):
            x, y = getattr(ta, f.name), getattr(tb, f.name)
            if isinstance(x, np.ndarray):
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f.name
            else:
                assert x == y, f.name


@pytest.mark.parametrize("make", [_episode, _segment], ids=["episode", "segment"])
def test_a_restored_collector_continues_exactly(cartpole: GymEnvSpec, make: Callable[[Any], Any]) -> None:
    col = make(cartpole)
    assert isinstance(col, ResumableCollector)
    for _ in range(2):
        _collect(col)
    meta, arrays = col.episode_state()
    counters = col.state_dict()
    if make is _segment:
        assert "player/piece/env" in arrays  # unfinished pieces are part of the state
    fresh = make(cartpole)
    fresh.load_state_dict(counters)
    fresh.load_episode_state(json.loads(json.dumps(meta)), {k: v.copy() for k, v in arrays.items()})
    for _ in range(3):
        _same(_collect(col), _collect(fresh))
    assert fresh.state_dict() == col.state_dict()


def test_a_collector_before_its_first_collect_restores_to_a_fresh_one(cartpole: GymEnvSpec) -> None:
    meta, arrays = _segment(cartpole).episode_state()
    fresh = _segment(cartpole)
    fresh.load_episode_state(meta, arrays)
    _same(_collect(fresh), _collect(_segment(cartpole)))


def test_envs_that_cannot_be_saved_leave_a_note_and_fresh_episodes() -> None:
    col = _segment(FakeEnvSpec())
    _collect(col)
    meta, arrays = col.episode_state()
    assert meta["player"] == {"started": False, "skipped": "FakeVectorEnv is not a ResumableVectorEnv"}
    assert arrays == {}
    fresh = _segment(FakeEnvSpec())
    fresh.load_episode_state(meta, arrays)
    assert fresh.player.venv.resets == 0  # nothing restored: the first collect resets
