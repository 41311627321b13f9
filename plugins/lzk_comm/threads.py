"""The ``threads`` comm backend: W ranks as threads of one process, with real collectives.

Made for testing multi-rank control flow (update schedules, stop decisions, gradient averaging)
without processes or sockets::

    from lzk_comm.threads import run_ranks

    def rank_main(comm):                      # runs once per rank, each in its own thread
        t = torch.tensor([comm.rank + 1])
        return int(comm.all_reduce_sum(t))

    assert run_ranks(4, rank_main, timeout_s=10) == [10, 10, 10, 10]

Semantics:

* Every collective is a rendezvous of all W ranks. The last rank to arrive combines the values
  once (sums in rank order), so every rank receives the *same* result object's values:
  deterministic and bit-identical across ranks.
* Each collective has a deadline (``timeout_s``). A rank that waits past it aborts the group
  with a :class:`CommTimeout` naming the ranks that never arrived.
* If a rank raises, :func:`run_ranks` aborts the group: every rank blocked in (or later entering)
  a collective gets :class:`CommAborted` naming the failing rank and its exception, instead of
  hanging. Ranks calling *different* collectives in the same round (a control-flow divergence
  that would deadlock a real backend) abort the group with the op each rank called.
* :func:`run_ranks` re-raises the root cause as :class:`RankFailed` (``rank R: Type: message``).

Inside :func:`run_ranks`, the ``threads`` component factory returns the calling thread's
backend, so a whole :class:`lzkernel.run.RunContext` can run per thread. Outside it the
backend is a world of one.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Sequence, cast

import torch

from lzkernel.errors import error_line

from lzk_comm.common import CommTimer, TimedCommMixin, average_gradients, decode_object, encode_object
from lzk_comm.local import check_plain, check_src, check_tensor

_local = threading.local()


class CommAborted(RuntimeError):
    """A collective was abandoned because another rank failed (or left). ``failed_rank``: the
    rank whose failure (or absence, for a timeout) caused it, where known."""

    failed_rank: int | None = None


class CommTimeout(CommAborted, TimeoutError):
    """A collective's deadline passed before every rank arrived."""


class RankFailed(RuntimeError):
    """What :func:`run_ranks` raises: the root-cause rank and its exception (also ``__cause__``)."""

    def __init__(self, rank: int, exc: BaseException, others: Sequence[int] = ()) -> None:
        msg = f"rank {rank}: {error_line(exc)}"  # with the plugin that raised it, where a note names it
        if others:
            msg += f" (ranks {', '.join(map(str, others))} were released with an error)"
        super().__init__(msg)
        self.rank = rank
        self.exc = exc


class ThreadGroup:
    """The state W :class:`ThreadComm` instances share: one rendezvous per collective round."""

    def __init__(self, world_size: int, timeout_s: float = 60.0) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.world_size = int(world_size)
        self.timeout_s = float(timeout_s)
        self._cond = threading.Condition()
        self._generation = 0
        self._ops: list[str | None] = [None] * world_size
        self._values: list[Any] = [None] * world_size
        self._arrived = 0
        self._result: Any = None
        self._error: CommAborted | None = None
        self._closed: set[int] = set()

    @property
    def error(self) -> CommAborted | None:
        return self._error

    def abort(self, rank: int | None, exc: BaseException) -> None:
        """Fail the group: every waiting and future collective raises. The first abort wins."""
        with self._cond:
            if self._error is None:
                if isinstance(exc, CommAborted):
                    self._error = exc
                else:
                    who = f"rank {rank}" if rank is not None else "a rank"
                    self._error = CommAborted(f"{who} failed: {type(exc).__name__}: {exc}")
                    self._error.failed_rank = rank
            self._cond.notify_all()

    def leave(self, rank: int) -> None:
        """``rank`` closed its backend: a collective that needs it can never complete."""
        with self._cond:
            self._closed.add(rank)
            if 0 < self._arrived and self._ops[rank] is None and self._error is None:
                self._error = CommAborted(f"rank {rank} closed its comm backend while other ranks "
                                          f"wait in {self._pending_ops()}")
            self._cond.notify_all()

    def _pending_ops(self) -> str:
        return ", ".join(f"rank {r}: {op}" for r, op in enumerate(self._ops) if op is not None)

    def exchange(self, rank: int, op: str, value: Any,
                 combine: Callable[[list[Any]], Any] | None = None) -> Any:
        """Rendezvous of every rank in collective ``op``: returns ``combine(values in rank order)``
        (computed once, by the last rank to arrive) or the list of values."""
        with self._cond:
            if self._error is not None:
                raise self._error
            closed = sorted(self._closed - {rank})
            if closed:
                err = CommAborted(f"rank {rank} entered {op} but rank {closed[0]} has closed its comm backend")
                self._error = err
                self._cond.notify_all()
                raise err
            gen = self._generation
            self._ops[rank] = op
            self._values[rank] = value
            self._arrived += 1
            if self._arrived == self.world_size:
                ops = self._ops
                values = self._values
                try:
                    if len(set(ops)) > 1:
                        raise CommAborted("ranks called different collectives in one round (their control flow "
                                          "diverged): " + ", ".join(f"rank {r}: {o}" for r, o in enumerate(ops)))
                    result = combine(values) if combine is not None else list(values)
                except BaseException as exc:
                    self._error = exc if isinstance(exc, CommAborted) else CommAborted(f"{op}: {exc}")
                    self._cond.notify_all()
                    raise self._error from None
                self._result = result
                self._ops = [None] * self.world_size
                self._values = [None] * self.world_size
                self._arrived = 0
                self._generation += 1
                self._cond.notify_all()
                return result
            deadline = time.monotonic() + self.timeout_s
            while self._generation == gen and self._error is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    missing = [r for r, o in enumerate(self._ops) if o is None]
                    self._error = CommTimeout(
                        f"rank {rank}: {op} timed out after {self.timeout_s:g} s waiting for rank(s) "
                        f"{', '.join(map(str, missing))}")
                    self._error.failed_rank = missing[0] if missing else None
                    self._cond.notify_all()
                    break
                self._cond.wait(remaining)
            if self._generation != gen:
                # The round completed; no later round can complete without this rank, so the
                # shared result is still this round's.
                return self._result
            raise self._error  # type: ignore[misc]


class ThreadComm(TimedCommMixin):
    """:class:`lzkernel.CommBackend` for rank ``rank`` of a :class:`ThreadGroup`."""

    def __init__(self, group: ThreadGroup, rank: int) -> None:
        if not 0 <= rank < group.world_size:
            raise ValueError(f"rank must be in [0, {group.world_size}), got {rank}")
        self.group = group
        self.rank = int(rank)
        self.world_size = group.world_size
        self.timer = CommTimer()
        self._closed = False

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise RuntimeError(f"{op}: the comm backend of rank {self.rank} is closed")

    # -- collectives ---------------------------------------------------------------------------
    def barrier(self) -> None:
        self._check_open("barrier")
        with self.timer.timed():
            self.group.exchange(self.rank, "barrier", None, combine=lambda v: None)

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum over ranks (in rank order, computed once), written into ``tensor`` in place."""
        check_tensor(tensor, "all_reduce_sum")
        self._check_open("all_reduce_sum")
        with self.timer.timed():
            total = self.group.exchange(self.rank, "all_reduce_sum", tensor.detach().clone(), combine=_sum)
            tensor.copy_(total)
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        check_tensor(tensor, "broadcast")
        check_src(src, self.world_size, "broadcast")
        self._check_open("broadcast")
        with self.timer.timed():
            mine = tensor.detach().clone() if self.rank == src else _Meta(tensor)
            values = self.group.exchange(self.rank, f"broadcast(src={src})", mine,
                                         combine=lambda vals: _check_same(vals, "broadcast") or vals[src])
            if self.rank != src:
                tensor.copy_(values)
        return tensor

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """``src``'s plain value; it travels as JSON, as over a real transport (tuples → lists)."""
        check_src(src, self.world_size, "broadcast_object")
        self._check_open("broadcast_object")
        data = encode_object(obj) if self.rank == src else None
        with self.timer.timed():
            values = self.group.exchange(self.rank, f"broadcast_object(src={src})", data)
        return obj if self.rank == src else decode_object(values[src])

    def gather(self, tensor: torch.Tensor, dst: int = 0) -> list[torch.Tensor] | None:
        """Every rank's ``tensor`` (same shape and dtype everywhere), in rank order, on ``dst``;
        None on the other ranks."""
        check_tensor(tensor, "gather")
        check_src(dst, self.world_size, "gather")
        self._check_open("gather")
        with self.timer.timed():
            values = self.group.exchange(self.rank, f"gather(dst={dst})", tensor.detach().clone(),
                                         combine=lambda vals: _check_same(vals, "gather") or vals)
        return [v.clone() for v in values] if self.rank == dst else None

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        """Every rank's plain value, in rank order, on ``dst``; None elsewhere."""
        check_src(dst, self.world_size, "gather_object")
        check_plain(obj)
        self._check_open("gather_object")
        with self.timer.timed():
            values = self.group.exchange(self.rank, f"gather_object(dst={dst})", encode_object(obj))
        return [decode_object(v) for v in values] if self.rank == dst else None

    def average_gradients(self, parameters: Iterable[torch.Tensor]) -> None:
        """Average ``p.grad`` over ranks (coalesced; see :func:`lzk_comm.common.average_gradients`)."""
        self._check_open("average_gradients")
        with self.timer.timed():
            average_gradients(parameters, self.world_size, self.all_reduce_sum)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.group.leave(self.rank)


class _Meta:
    """Shape and dtype of a non-source rank's tensor, to check a broadcast's agreement."""

    def __init__(self, t: torch.Tensor) -> None:
        self.shape, self.dtype = tuple(t.shape), t.dtype


def _describe(v: Any) -> tuple[tuple[int, ...], torch.dtype]:
    return (tuple(v.shape), v.dtype)


def _check_same(values: list[Any], op: str) -> None:
    described = [_describe(v) for v in values]
    if len(set(described)) > 1:
        raise CommAborted(f"{op}: ranks passed tensors of different shapes/dtypes: "
                          + ", ".join(f"rank {r}: {list(s)} {d}" for r, (s, d) in enumerate(described)))


def _sum(values: list[torch.Tensor]) -> torch.Tensor:
    _check_same(values, "all_reduce_sum")
    total = values[0].clone()
    for v in values[1:]:
        total.add_(v.to(total.device))
    return total


# -- running W ranks ---------------------------------------------------------------------------


def current() -> ThreadComm | None:
    """The backend of the calling thread when it runs inside :func:`run_ranks`, else None."""
    return getattr(_local, "comm", None)


def run_ranks(world_size: int, fn: Callable[[ThreadComm], Any], *, timeout_s: float = 60.0) -> list[Any]:
    """Run ``fn(comm)`` once per rank, each in its own thread with its own :class:`ThreadComm`,
    and return the results in rank order.

    If any rank raises, the others are released from their collectives with
    :class:`CommAborted`, and :class:`RankFailed` is raised for the root cause (the first rank
    whose error was not a consequence of another's). Once one rank has finished, the others get
    ``timeout_s`` more to finish; a rank still running after that is reported as stuck (its
    thread is a daemon and cannot be killed).
    """
    group = ThreadGroup(world_size, timeout_s)
    results: list[Any] = [None] * world_size
    errors: dict[int, BaseException] = {}
    order: list[int] = []
    done = threading.Condition()

    def target(rank: int) -> None:
        comm = ThreadComm(group, rank)
        _local.comm = comm
        try:
            results[rank] = fn(comm)
        except BaseException as exc:  # noqa: BLE001 - reported through RankFailed
            errors[rank] = exc
            group.abort(rank, exc)
        finally:
            _local.comm = None
            with done:
                order.append(rank)
                done.notify_all()

    threads = [threading.Thread(target=target, args=(r,), name=f"lzk-rank-{r}", daemon=True)
               for r in range(world_size)]
    for t in threads:
        t.start()
    with done:
        done.wait_for(lambda: bool(order))
        deadline = time.monotonic() + timeout_s
        while len(order) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            done.wait(remaining)
    stuck = [r for r in range(world_size) if r not in order]
    if stuck and not errors:
        exc = CommTimeout(f"still running {timeout_s:g} s after rank {order[0]} finished")
        group.abort(stuck[0], exc)
        raise RankFailed(stuck[0], exc)
    if errors:
        root = _root_cause(errors, order)
        raise RankFailed(root, errors[root], [r for r in sorted(errors) if r != root] + stuck) from errors[root]
    return results


def _root_cause(errors: dict[int, BaseException], order: list[int]) -> int:
    """The rank whose error started it: the first (in finishing order) that was not released by
    another rank's failure; a collective timeout blames the rank that never arrived when it
    also failed, else the rank that timed out."""
    finished = [r for r in order if r in errors]
    for r in finished:
        if not isinstance(errors[r], CommAborted):
            return r
    for r in finished:  # every one of them a CommAborted here
        blamed = cast(CommAborted, errors[r]).failed_rank
        if blamed in errors and not isinstance(errors[blamed], CommAborted):
            return blamed
    return finished[0]


__all__ = ["CommAborted", "CommTimeout", "RankFailed", "ThreadComm", "ThreadGroup", "current", "run_ranks"]
