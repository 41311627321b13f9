"""Update schedules, table-driven; the replay-ratio count is summed over ranks through comm."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lzkernel import UpdateSchedule
from lzkernel.config.schema import validate
from lzk_comm.local import LocalComm
from lzk_schedule.plugin import (
    FixedScheduleConfig,
    ReplayRatioScheduleConfig,
    lzkernel_register_update_schedules,
    make_fixed,
    make_replay_ratio,
)


class ScaledComm:
    """A fake world of ``world_size`` ranks that all collected the same amount."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.calls: list[torch.Tensor] = []

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        assert tensor.dtype == torch.int64 and tensor.shape == (1,)
        self.calls.append(tensor.clone())
        tensor.mul_(self.world_size)  # in place, as the contract says
        return tensor


@pytest.mark.parametrize("updates_per_collect, collected", [(1, 0), (100, 0), (100, 1600), (7, 3)])
def test_fixed(updates_per_collect: int, collected: int) -> None:
    schedule = make_fixed(FixedScheduleConfig(updates_per_collect), None)
    assert isinstance(schedule, UpdateSchedule)
    assert schedule.updates(collected) == updates_per_collect


@pytest.mark.parametrize(
    "ratio, min_updates, world, collected, expected",
    [
        (0.25, 1, 1, 1600, 400),  # UniZero CartPole: replay_ratio 0.25
        (0.25, 1, 1, 3, 1),  # int(0.75) = 0, floored to min_updates
        (0.25, 1, 1, 0, 1),
        (0.25, 0, 1, 3, 0),  # min_updates 0 allows a collect without updates
        (0.25, 1, 4, 1600, 1600),  # summed over 4 ranks before the ratio
        (0.25, 1, 4, 3, 3),  # int(12 * 0.25): the sum, not 4 x int(3 * 0.25) = 0
        (0.1, 5, 2, 10, 5),
        (1.5, 1, 2, 5, 15),
    ],
)
def test_replay_ratio(ratio: float, min_updates: int, world: int, collected: int, expected: int) -> None:
    comm = ScaledComm(world)
    schedule = make_replay_ratio(ReplayRatioScheduleConfig(ratio, min_updates), SimpleNamespace(comm=comm))
    assert isinstance(schedule, UpdateSchedule)
    assert schedule.updates(collected) == expected
    assert [t.tolist() for t in comm.calls] == [[collected]]  # always reduced, also on CPU / 1 rank


def test_replay_ratio_with_local_comm() -> None:
    schedule = make_replay_ratio(ReplayRatioScheduleConfig(0.5), SimpleNamespace(comm=LocalComm()))
    assert schedule.updates(10) == 5


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_counts(bad: object, error: type) -> None:
    for schedule in (make_fixed(FixedScheduleConfig(), None),
                     make_replay_ratio(ReplayRatioScheduleConfig(), SimpleNamespace(comm=LocalComm()))):
        with pytest.raises(error):
            schedule.updates(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "schema, data, bad_key",
    [
        (FixedScheduleConfig, {"updates_per_collect": 0}, "updates_per_collect"),
        (ReplayRatioScheduleConfig, {"ratio": 0}, "ratio"),
        (ReplayRatioScheduleConfig, {"ratio": -0.5}, "ratio"),
        (ReplayRatioScheduleConfig, {"min_updates": -1}, "min_updates"),
    ],
)
def test_config_ranges(schema: type, data: dict, bad_key: str) -> None:
    _, problems = validate(schema, data, "update_schedule")
    assert len(problems) == 1 and f"update_schedule.{bad_key}" in problems[0]


def test_registration() -> None:
    names = {c.name: c for c in lzkernel_register_update_schedules()}
    assert set(names) == {"fixed", "replay_ratio"}
    assert names["fixed"].config is FixedScheduleConfig and names["replay_ratio"].config is ReplayRatioScheduleConfig
