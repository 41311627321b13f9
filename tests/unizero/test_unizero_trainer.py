"""The ``unizero_segment`` trainer's own decisions (the loop itself is lzk_loop's, tested there
and end to end): resume warm-up, cache clearing after each epoch, buffer reanalysis wiring."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from lzk_loop.skeleton import _Timer
from lzk_unizero.trainer import UniZeroSegmentConfig, UniZeroSegmentTrainer


class _Buffer:
    def __init__(self, n: int) -> None:
        self.num_transitions = n
        self.calls: list[tuple[Any, Any, int]] = []

    def reanalyze(self, source: Any, rng: Any, *, reuse: bool = True) -> dict[str, float]:
        self.calls.append((source, rng, source.history_pairs))
        return {"roots": 7.0}


class _Policy:
    history_pairs = 3

    def __init__(self) -> None:
        self.cleared = 0

    def window_reanalyze_fn(self, *args: Any) -> Any:
        raise AssertionError("the buffer calls this, not the trainer")

    def clear_caches(self) -> None:
        self.cleared += 1


def _trainer(**cfg: Any) -> UniZeroSegmentTrainer:
    t = UniZeroSegmentTrainer.__new__(UniZeroSegmentTrainer)  # no env, run or model needed
    t.cfg = UniZeroSegmentConfig(**cfg)
    t.buffer = _Buffer(5000)
    t.policy = _Policy()
    t.sample_rng = np.random.default_rng(0)
    t.timer = _Timer()
    t._pending = defaultdict(list)
    t.epoch = 0
    t.resumed = False
    t.buffer_restored = False
    return t


def test_resume_without_the_buffer_waits_for_fresh_data() -> None:
    t = _trainer(train_start_transitions=10, resume_train_start_transitions=500)
    assert t.train_start_transitions() == 10  # a fresh run
    t.resumed = True
    t.load_extra_state({"reanalyses": 2})  # a checkpoint written without run.save_buffer
    assert t.train_start_transitions() == 500 and t.reanalyses == 2
    t.buffer_restored = True  # the skeleton loaded the buffer with it
    assert t.train_start_transitions() == 10


def test_caches_are_cleared_after_every_epoch() -> None:
    t = _trainer()
    for _ in range(3):
        t.after_epoch()
    assert t.policy.cleared == 3


@pytest.mark.parametrize(("freq", "updates", "expected"), [(0.0, 50, 0), (1.0, 50, 1), (2.0, 50, 2), (0.5, 50, 1)])
def test_buffer_reanalysis_schedule_and_wiring(freq: float, updates: int, expected: int) -> None:
    t = _trainer(buffer_reanalyze_freq=freq)
    t.before_train(updates)
    for i in range(updates):
        t.before_update(i, updates)
    assert len(t.buffer.calls) == expected
    for fn, rng, history in t.buffer.calls:
        assert fn is t.policy and rng is t.sample_rng and history == 3
    assert t.reanalyses == expected
    assert t._pending["reanalyze/roots"] == [7.0] * expected


def test_small_buffers_are_not_reanalysed() -> None:
    t = _trainer(buffer_reanalyze_freq=1.0, reanalyze_min_transitions=5000)
    t.before_update(0, 10)
    assert t.buffer.calls == []
