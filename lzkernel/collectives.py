"""Coalesced collectives over many tensors, written against the
:class:`~lzkernel.roles.CommBackend` primitives (``broadcast``, ``all_reduce_sum``), so that any
backend and any trainer can use them. Tensors are grouped by (dtype, device) and each group
travels as one flat buffer: one collective per group instead of one per tensor.

torch is imported inside the functions: importing this module stays light.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable


def _groups(tensors: Iterable[Any], floating_only: bool = False) -> list[list[Any]]:
    out: dict[Any, list[Any]] = {}
    for t in tensors:
        if not floating_only or t.is_floating_point():
            out.setdefault((t.dtype, t.device), []).append(t)
    return list(out.values())


def _scatter(flat: Any, group: list[Any]) -> None:
    """Copy consecutive slices of ``flat`` back into the tensors of ``group`` (in place)."""
    offset = 0
    for t in group:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view_as(t))
        offset += n


def broadcast_tensors(tensors: Iterable[Any], broadcast: Callable[..., Any], src: int = 0) -> None:
    """Overwrite every tensor with ``src``'s value, one ``broadcast`` per (dtype, device)."""
    import torch

    with torch.no_grad():
        for group in _groups(tensors):
            flat = torch.cat([t.detach().reshape(-1) for t in group])
            broadcast(flat, src)
            _scatter(flat, group)


def all_reduce_mean_tensors(tensors: Iterable[Any], world_size: int,
                            all_reduce_sum: Callable[[Any], Any]) -> None:
    """Replace every floating tensor by its mean over ranks (one reduction per dtype); other
    dtypes (e.g. BatchNorm's ``num_batches_tracked``) are left as they are."""
    import torch

    with torch.no_grad():
        for group in _groups(tensors, floating_only=True):
            flat = torch.cat([t.detach().reshape(-1) for t in group])
            all_reduce_sum(flat)
            flat.div_(world_size)
            _scatter(flat, group)


def gather_ints(values: Iterable[int], rank: int, world_size: int,
                all_reduce_sum: Callable[[Any], Any]) -> list[list[int]]:
    """Every rank's ``values`` (n small ints each, the same n on every rank), on every rank:
    ``[W][n]``, row r from rank r. One ``all_reduce_sum`` of a flat ``[W * n]`` int64 table in
    which each rank fills its own row and leaves the others zero (``all_reduce_sum`` is in the
    CommBackend protocol; an all-gather is not)."""
    import torch

    row = [int(v) for v in values]
    n = len(row)
    table = torch.zeros(world_size * n, dtype=torch.int64)
    table[rank * n:(rank + 1) * n] = torch.tensor(row, dtype=torch.int64)
    all_reduce_sum(table)
    flat = [int(v) for v in table.tolist()]
    return [flat[r * n:(r + 1) * n] for r in range(world_size)]
