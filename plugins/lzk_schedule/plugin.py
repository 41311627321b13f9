"""Entry point of the lzk_schedule plugin: registers its components with lzkernel.

No torch import at module level; the schedules import it when they need it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lzkernel import Component, hookimpl, option


@dataclass
class FixedScheduleConfig:
    """Options of the ``fixed`` update schedule."""

    updates_per_collect: int = option(100, doc="Learner updates after every collect.", min=1)


@dataclass
class ReplayRatioScheduleConfig:
    """Options of the ``replay_ratio`` update schedule."""

    ratio: float = option(
        0.25,
        doc="Updates per collected transition: updates = max(min_updates, int(N * ratio)), N summed over ranks.",
        min=0.0,
        min_exclusive=True,
    )
    min_updates: int = option(1, doc="Lower bound on the updates after a collect.", min=0)


def make_fixed(cfg: FixedScheduleConfig, run: Any = None) -> Any:
    from lzk_schedule.schedules import FixedSchedule

    return FixedSchedule(cfg.updates_per_collect)


def make_replay_ratio(cfg: ReplayRatioScheduleConfig, run: Any) -> Any:
    from lzk_schedule.schedules import ReplayRatioSchedule

    return ReplayRatioSchedule(cfg.ratio, run.comm, min_updates=cfg.min_updates)


@hookimpl
def lzkernel_register_update_schedules() -> list[Component]:
    return [
        Component("fixed", factory=make_fixed, config=FixedScheduleConfig,
                  doc="A constant number of updates per collect.", resume_safe=("updates_per_collect",)),
        Component("replay_ratio", factory=make_replay_ratio, config=ReplayRatioScheduleConfig,
                  doc="ratio x transitions collected (summed over ranks) updates per collect.",
                  resume_safe=("ratio", "min_updates")),
    ]
