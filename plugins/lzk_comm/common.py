"""Pieces every multi-rank backend shares: coalesced gradient averaging, coalesced
parameter broadcast, the plain-object codec, and the collective-time counter.

Each helper is written against the :class:`lzkernel.CommBackend` collectives only, so a backend
gets them by providing ``all_reduce_sum`` and ``broadcast``.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

import torch

from lzk_comm.local import check_plain


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


def broadcast_tensors(tensors: Iterable[torch.Tensor], broadcast: Callable[..., torch.Tensor],
                      src: int = 0) -> None:
    """Overwrite every tensor with ``src``'s value using one ``broadcast`` per (dtype, device)."""
    groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.dtype, t.device), []).append(t)
    for (dtype, device), group in groups.items():
        flat = torch.cat([t.detach().reshape(-1) for t in group]) if group else torch.zeros(0, dtype=dtype)
        broadcast(flat, src)
        offset = 0
        with torch.no_grad():
            for t in group:
                n = t.numel()
                t.copy_(flat[offset:offset + n].view_as(t))
                offset += n


def all_reduce_mean_tensors(tensors: Iterable[torch.Tensor], world_size: int,
                            all_reduce_sum: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Replace every floating tensor by its mean over ranks (one reduction per dtype); other
    dtypes (e.g. BatchNorm's ``num_batches_tracked``) are left as they are."""
    groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for t in tensors:
        if t.is_floating_point():
            groups.setdefault((t.dtype, t.device), []).append(t)
    for group in groups.values():
        flat = torch.cat([t.detach().reshape(-1) for t in group])
        all_reduce_sum(flat)
        flat.div_(world_size)
        offset = 0
        with torch.no_grad():
            for t in group:
                n = t.numel()
                t.copy_(flat[offset:offset + n].view_as(t))
                offset += n


def encode_object(obj: Any) -> bytes:
    """A plain value (see :func:`lzk_comm.local.check_plain`) as UTF-8 JSON (no pickle on the
    wire). Tuples arrive as lists."""
    check_plain(obj)
    return json.dumps(obj, allow_nan=True, separators=(",", ":")).encode("utf-8")


def decode_object(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))
