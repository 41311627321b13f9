"""When the ReZero trainer reanalyses the buffer (SPEC §1.1, with LightZero's two defects fixed)."""
from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

from lzk_loop.skeleton import _Timer
from lzk_rezero.trainers import ReZeroConfig, ReZeroTrainer


class _Buffer:
    def __init__(self, n: int) -> None:
        self.num_transitions = n
        self.calls: list[object] = []

    def reanalyze(self, source: object, rng: object, *, reuse: bool = True) -> dict[str, float]:
        self.calls.append((source, reuse))
        return {"roots": float(self.num_transitions)}


def _trainer(freq: float, n: int = 5000, reuse: bool = True) -> ReZeroTrainer:
    t = ReZeroTrainer.__new__(ReZeroTrainer)  # the schedule needs no env, policy or run
    t.cfg = ReZeroConfig(buffer_reanalyze_freq=freq, reuse_search=reuse, reanalyze_min_transitions=2000)
    t.buffer = _Buffer(n)
    t.policy = SimpleNamespace(reanalyze_fn=lambda *a: ("policy", a))
    t.sample_rng = np.random.default_rng(0)
    t.timer = _Timer()
    t._pending = defaultdict(list)
    t.epoch = 0
    return t


def _epoch_calls(t: ReZeroTrainer, updates: int) -> list[int]:
    """Indices of the updates before which a reanalysis ran, plus -1 for the epoch-level one."""
    hits = []
    before = len(t.buffer.calls)
    t.before_train(updates)
    if len(t.buffer.calls) > before:
        hits.append(-1)
    for i in range(updates):
        before = len(t.buffer.calls)
        t.before_update(i, updates)
        if len(t.buffer.calls) > before:
            hits.append(i)
    t.epoch += 1
    return hits


@pytest.mark.parametrize(
    ("freq", "updates", "expected"),
    [
        (1.0, 100, [0]),            # once per epoch, before the first update
        (2.0, 100, [0, 50]),        # twice, spread over the updates
        (4.0, 10, [0, 2, 4, 6, 8]),  # interval 10 // 4 = 2
        (3.0, 2, [0, 1]),           # fewer updates than f: LightZero's interval 0 raised here
        (1.5, 100, [0, 66]),        # LightZero's 100 // 1.5 = 66.0, not 100 // int(1.5)
    ],
)
def test_in_loop_reanalysis(freq: float, updates: int, expected: list[int]) -> None:
    assert _epoch_calls(_trainer(freq), updates) == expected


@pytest.mark.parametrize(("freq", "period"), [(0.1, 10), (0.2, 5), (0.02, 50), (0.5, 2)])
def test_epoch_period_for_fractional_frequency(freq: float, period: int) -> None:
    """Once every round(1/f) epochs: LightZero's 1 // f gives 9, 4 and 49 for the first three."""
    t = _trainer(freq)
    epochs = [e for e in range(3 * period) if _epoch_calls(t, 7) == [-1]]
    assert epochs == [0, period, 2 * period]


def test_small_buffers_are_not_reanalysed() -> None:
    t = _trainer(1.0, n=2000)  # not more than reanalyze_min_transitions
    assert _epoch_calls(t, 10) == []


def test_reuse_can_be_switched_off() -> None:
    """The trainer asks the buffer to reanalyse the policy with its ``reuse_search`` setting (what
    reuse=False does inside the buffer: tests/replay/test_reanalyze.py)."""
    t = _trainer(1.0, reuse=False)
    _epoch_calls(t, 1)
    assert t.buffer.calls[0] == (t.policy, False)
    t2 = _trainer(1.0, reuse=True)
    _epoch_calls(t2, 1)
    assert t2.buffer.calls[0] == (t2.policy, True)
