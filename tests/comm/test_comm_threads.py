"""The in-process ``threads`` backend: real collectives between W ranks in one process."""
from __future__ import annotations

import time

import pytest
import torch

from lzkernel import CommBackend, ConfigError
from lzk_comm.plugin import ThreadsConfig, make_threads
from lzk_comm.threads import CommAborted, CommTimeout, RankFailed, ThreadComm, ThreadGroup, current, run_ranks
from lzk_schedule.schedules import FixedSchedule, ReplayRatioSchedule


def test_gather_ints_gives_every_rank_every_row_with_one_all_reduce() -> None:
    from lzkernel import gather_ints

    def rank_main(comm: ThreadComm) -> tuple[list[list[int]], int]:
        rows = gather_ints([comm.rank, -7 * comm.rank, 2**40], comm.rank, comm.world_size, comm.all_reduce_sum)
        return rows, comm.calls

    expected = [[r, -7 * r, 2**40] for r in range(3)]
    assert run_ranks(3, rank_main, timeout_s=10) == [(expected, 1)] * 3


def test_collectives_with_four_ranks() -> None:
    def rank_main(comm: ThreadComm) -> dict:
        assert isinstance(comm, CommBackend) and current() is comm
        r = comm.rank
        comm.barrier()
        out = {
            "sum_int": comm.all_reduce_sum(torch.tensor([r, 10 * r], dtype=torch.int64)).tolist(),
            "sum_float": comm.all_reduce_sum(torch.tensor([0.1 * (r + 1)])),
            "bcast": comm.broadcast(torch.full((2,), float(r)), src=2).tolist(),
            "obj": comm.broadcast_object({"stop": r == 3, "info": (r, "x")} if r == 3 else None, src=3),
            "gather": comm.gather(torch.tensor([r]), dst=1),
            "gather_obj": comm.gather_object({"r": r}, dst=0),
            "main": comm.is_main,
        }
        return out

    res = run_ranks(4, rank_main, timeout_s=10)
    for r, out in enumerate(res):
        assert out["sum_int"] == [6, 60]
        assert out["bcast"] == [2.0, 2.0]
        assert out["main"] == (r == 0)
    # Floating sums are computed once, in rank order: bit-identical on every rank.
    assert all(torch.equal(out["sum_float"], res[0]["sum_float"]) for out in res)
    assert res[0]["sum_float"].item() == pytest.approx(1.0)
    assert res[3]["obj"] == {"stop": True, "info": (3, "x")}  # the source keeps its own object
    assert all(out["obj"] == {"stop": True, "info": [3, "x"]} for out in res[:3])  # JSON on the wire
    assert [t.item() for t in res[1]["gather"]] == [0, 1, 2, 3]
    assert all(out["gather"] is None for r, out in enumerate(res) if r != 1)
    assert res[0]["gather_obj"] == [{"r": r} for r in range(4)]


def test_average_gradients_handles_missing_grads() -> None:
    def rank_main(comm: ThreadComm) -> tuple:
        lin = torch.nn.Linear(2, 1)
        with torch.no_grad():
            lin.weight.fill_(1.0)
        unused = torch.nn.Parameter(torch.zeros(3))  # no rank computes a gradient for it
        some = torch.nn.Parameter(torch.zeros(1))  # only ranks 0 and 1 do
        loss = lin(torch.tensor([[float(comm.rank), 1.0]])).sum()
        if comm.rank < 2:
            loss = loss + 8 * some.sum()
        loss.backward()
        comm.average_gradients(p for p in [*lin.parameters(), unused, some])
        return lin.weight.grad.clone(), unused.grad, some.grad.clone(), comm.calls

    res = run_ranks(4, rank_main, timeout_s=10)
    for w, unused, some, calls in res:
        assert w.tolist() == [[1.5, 1.0]]  # mean of [0..3] and of ones
        assert unused is None
        assert some.tolist() == [4.0]  # (8 + 8 + 0 + 0) / 4
        assert calls == 1  # one (coalesced) collective
    assert all(torch.equal(r[0], res[0][0]) for r in res)


@pytest.mark.parametrize("counts", [[3, 10, 0, 7], [0, 0, 0, 1], [250, 1, 1, 1]])
def test_replay_ratio_schedule_agrees_across_four_ranks(counts: list[int]) -> None:
    """Each rank collected a different number of transitions; every rank runs the same number
    of updates, computed from the sum (also on CPU)."""

    def rank_main(comm: ThreadComm) -> tuple[int, int]:
        ratio = ReplayRatioSchedule(0.25, comm, min_updates=1)
        fixed = FixedSchedule(5)
        return ratio.updates(counts[comm.rank]), fixed.updates(counts[comm.rank])

    res = run_ranks(4, rank_main, timeout_s=10)
    assert res == [(max(1, int(sum(counts) * 0.25)), 5)] * 4


def test_stop_decision_is_broadcast() -> None:
    """Only rank 0 evaluates; the others follow its broadcast decision."""

    def rank_main(comm: ThreadComm) -> list[bool]:
        decisions = []
        for step in range(5):
            local = step == 3 if comm.is_main else False
            decisions.append(bool(comm.broadcast_object(local)))
        return decisions

    assert run_ranks(4, rank_main, timeout_s=10) == [[False, False, False, True, False]] * 4


def test_a_raising_rank_releases_the_others_at_once() -> None:
    def rank_main(comm: ThreadComm) -> None:
        if comm.rank == 2:
            time.sleep(0.2)
            raise KeyError("boom")
        comm.barrier()  # would wait forever without the abort

    t0 = time.monotonic()
    with pytest.raises(RankFailed, match=r"^rank 2: KeyError: 'boom'") as info:
        run_ranks(4, rank_main, timeout_s=30)
    assert time.monotonic() - t0 < 5
    assert info.value.rank == 2 and isinstance(info.value.__cause__, KeyError)


def test_released_ranks_see_an_error_naming_the_failed_rank() -> None:
    seen: dict[int, str] = {}

    def rank_main(comm: ThreadComm) -> None:
        if comm.rank == 1:
            raise ValueError("bad")
        try:
            comm.all_reduce_sum(torch.ones(1))
        except CommAborted as exc:
            seen[comm.rank] = str(exc)
            raise

    with pytest.raises(RankFailed, match="^rank 1: ValueError: bad"):
        run_ranks(3, rank_main, timeout_s=30)
    assert seen and all(msg == "rank 1 failed: ValueError: bad" for msg in seen.values())


def test_divergent_collectives_fail_instead_of_hanging() -> None:
    def rank_main(comm: ThreadComm) -> None:
        if comm.rank == 1:
            comm.all_reduce_sum(torch.ones(1))  # e.g. one extra learner update
        comm.barrier()

    with pytest.raises(RankFailed, match="different collectives.*rank 0: barrier, rank 1: all_reduce_sum"):
        run_ranks(2, rank_main, timeout_s=30)


def test_mismatched_shapes_fail() -> None:
    with pytest.raises(RankFailed, match="different shapes"):
        run_ranks(2, lambda c: c.all_reduce_sum(torch.ones(c.rank + 1)), timeout_s=10)


def test_a_missing_rank_times_out_and_is_named() -> None:
    def rank_main(comm: ThreadComm) -> None:
        if comm.rank == 0:
            comm.barrier()
        else:
            time.sleep(1.0)  # never arrives, and does not close its backend before returning

    t0 = time.monotonic()
    with pytest.raises(RankFailed, match=r"barrier timed out after 0.3 s waiting for rank\(s\) 1") as info:
        run_ranks(2, rank_main, timeout_s=0.3)
    assert isinstance(info.value.__cause__, CommTimeout)
    assert time.monotonic() - t0 < 3


def test_closing_a_rank_releases_its_peers() -> None:
    def rank_main(comm: ThreadComm) -> None:
        if comm.rank == 1:
            comm.close()
            return
        time.sleep(0.1)
        comm.barrier()

    with pytest.raises(RankFailed, match="rank 1 has closed its comm backend"):
        run_ranks(2, rank_main, timeout_s=30)


def test_deterministic_results() -> None:
    def rank_main(comm: ThreadComm) -> torch.Tensor:
        g = torch.Generator().manual_seed(comm.rank)
        return comm.all_reduce_sum(torch.randn(100, generator=g))

    a = run_ranks(4, rank_main, timeout_s=10)
    b = run_ranks(4, rank_main, timeout_s=10)
    assert all(torch.equal(x, a[0]) for x in a + b)


def test_factory_inside_and_outside_run_ranks() -> None:
    solo = make_threads(ThreadsConfig(), None)
    assert (solo.rank, solo.world_size) == (0, 1)
    solo.barrier()
    assert solo.all_reduce_sum(torch.tensor([2.0])).item() == 2.0
    with pytest.raises(ConfigError, match="run_ranks.*lzkernel launch --nproc N"):
        make_threads(ThreadsConfig(world_size=2), None)
    res = run_ranks(3, lambda comm: make_threads(ThreadsConfig(), None) is comm, timeout_s=10)
    assert res == [True, True, True]
    with pytest.raises(RankFailed, match="comm.world_size=2"):
        run_ranks(3, lambda comm: make_threads(ThreadsConfig(world_size=2), None), timeout_s=10)


def test_inputs_are_checked() -> None:
    comm = ThreadComm(ThreadGroup(1), 0)
    with pytest.raises(TypeError):
        comm.all_reduce_sum([1.0])
    with pytest.raises(ValueError):
        comm.broadcast(torch.ones(1), src=1)
    with pytest.raises(TypeError):
        comm.broadcast_object({"a": object()})
    comm.close()
    with pytest.raises(RuntimeError, match="closed"):
        comm.barrier()
