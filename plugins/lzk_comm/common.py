"""Pieces every multi-rank backend shares: coalesced gradient averaging, the plain-object codec,
and the collective-time counter (coalesced broadcast and mean live in
:mod:`lzkernel.collectives`, which trainers use too).

Each helper is written against the :class:`lzkernel.CommBackend` collectives only, so a backend
gets them by providing ``all_reduce_sum`` and ``broadcast``.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

import torch

from lzk_comm.checks import check_plain


class CommTimer:
    """Cumulative wall-clock seconds spent inside collectives, and their count.

    Backends expose ``seconds`` and ``calls``; the loop skeleton reports ``time/comm_s``. Nested
    collectives (``average_gradients`` calls ``all_reduce_sum``) count once.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._depth = 0

    @contextmanager
    def timed(self) -> Iterator[None]:
        self._depth += 1
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - t0
                self.calls += 1


class TimedCommMixin:
    """What every multi-rank backend exposes besides its collectives: ``is_main`` and the
    collective-time counters (``seconds`` feeds the loop skeleton's ``time/comm_s``). The backend
    sets ``self.rank`` and ``self.timer = CommTimer()``."""

    rank: int
    timer: CommTimer

    @property
    def seconds(self) -> float:
        """Seconds spent in collectives so far."""
        return self.timer.seconds

    @property
    def calls(self) -> int:
        return self.timer.calls

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def average_gradients(parameters: Iterable[torch.Tensor], world_size: int,
                      all_reduce_sum: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Average ``p.grad`` over ranks with one ``all_reduce_sum`` per dtype (coalesced).

    A parameter whose grad is None on this rank takes part with zeros. One extra element per
    parameter counts the ranks that had a gradient: where no rank had one, ``p.grad`` stays None
    (so optimizers skip it exactly as in a single process); elsewhere it becomes the sum over
    ranks divided by ``world_size`` (DistributedDataParallel's semantics). The summed buffer is
    identical on every rank, so the averaged gradients are bit-identical everywhere.
    """
    params = []
    for i, p in enumerate(parameters):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"average_gradients: parameter {i} is a {type(p).__name__}, not a torch.Tensor")
        params.append(p)
    groups: dict[torch.dtype, list[torch.Tensor]] = {}
    for p in params:
        dtype = p.grad.dtype if p.grad is not None else p.dtype
        groups.setdefault(dtype, []).append(p)
    for dtype, group in groups.items():
        device = group[0].device
        sizes = [p.numel() for p in group]
        flat = torch.zeros(sum(sizes) + len(group), dtype=dtype, device=device)
        offset = 0
        for j, (p, n) in enumerate(zip(group, sizes)):
            if p.grad is not None:
                flat[offset:offset + n].copy_(p.grad.detach().reshape(-1))
                flat[sum(sizes) + j] = 1
            offset += n
        all_reduce_sum(flat)
        total = sum(sizes)
        had = flat[total:].tolist()  # one host sync for every count
        offset = 0
        for j, (p, n) in enumerate(zip(group, sizes)):
            if had[j] > 0:
                avg = flat[offset:offset + n].view_as(p).div_(world_size)
                if p.grad is None:
                    p.grad = avg.clone().to(p.device)
                else:
                    p.grad.copy_(avg)
            offset += n


def encode_object(obj: Any) -> bytes:
    """A plain value (see :func:`lzk_comm.local.check_plain`) as UTF-8 JSON (no pickle on the
    wire). Tuples arrive as lists."""
    check_plain(obj)
    return json.dumps(obj, allow_nan=True, separators=(",", ":")).encode("utf-8")


def decode_object(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))
