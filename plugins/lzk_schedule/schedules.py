"""Update schedules: how many learner updates follow one collect.

Every rank must return the same number (each update runs collectives), so schedules that depend
on the amount collected sum it over ranks through the comm backend first.
"""
from __future__ import annotations

from typing import Any


def _check_count(collected_transitions: int) -> int:
    if isinstance(collected_transitions, bool) or int(collected_transitions) != collected_transitions:
        raise TypeError(f"collected_transitions must be an int, got {collected_transitions!r}")
    if collected_transitions < 0:
        raise ValueError(f"collected_transitions must be >= 0, got {collected_transitions}")
    return int(collected_transitions)


class FixedSchedule:
    """A constant number of updates per collect (LightZero's ``update_per_collect``)."""

    def __init__(self, updates_per_collect: int) -> None:
        if updates_per_collect < 1:
            raise ValueError(f"updates_per_collect must be >= 1, got {updates_per_collect}")
        self.updates_per_collect = int(updates_per_collect)

    def updates(self, collected_transitions: int) -> int:
        _check_count(collected_transitions)
        return self.updates_per_collect


class ReplayRatioSchedule:
    """``max(min_updates, int(N * ratio))`` where N is the transitions collected by all ranks.

    N is summed with ``comm.all_reduce_sum`` on every call, also on CPU and with one rank
    (LightZero only sums under CUDA, so gloo ranks could disagree and deadlock).
    """

    def __init__(self, ratio: float, comm: Any, min_updates: int = 1) -> None:
        if not ratio > 0:
            raise ValueError(f"ratio must be > 0, got {ratio}")
        if min_updates < 0:
            raise ValueError(f"min_updates must be >= 0, got {min_updates}")
        self.ratio = float(ratio)
        self.min_updates = int(min_updates)
        self.comm = comm

    def updates(self, collected_transitions: int) -> int:
        import torch

        n = torch.tensor([_check_count(collected_transitions)], dtype=torch.int64)
        total = int(self.comm.all_reduce_sum(n).item())  # [1] int64: the sum over ranks
        return max(self.min_updates, int(total * self.ratio))
