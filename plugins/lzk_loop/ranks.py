"""Keeping ranks identical: the collectives the loop skeleton runs when ``world_size > 1``.

Rank 0's initial weights are broadcast once; after every update the online model's floating
buffers (BatchNorm running statistics) are averaged; checkpoints gather every rank's own state
(RNGs, collector counters, replay buffer) on rank 0. Tensors are flattened per (dtype, device)
so each step is one collective.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from lzkernel import all_reduce_mean_tensors, broadcast_tensors


def policy_modules(policy: Any) -> list[Any]:
    """The policy's torch modules that must agree over ranks (``model``, ``target_model``)."""
    import torch

    out = []
    for name in ("model", "target_model"):
        m = getattr(policy, name, None)
        if isinstance(m, torch.nn.Module):
            out.append(m)
    return out


def broadcast_initial_weights(comm: Any, policy: Any) -> None:
    """Every rank starts from rank 0's parameters and buffers (torch is seeded identically on
    every rank, so this is a safety net against rank-dependent construction)."""
    broadcast_tensors([t for m in policy_modules(policy) for t in (*m.parameters(), *m.buffers())],
                      comm.broadcast, 0)
    mark = getattr(policy, "mark_weights_changed", None)
    if callable(mark):
        mark()


def sync_buffers(comm: Any, world_size: int, policy: Any, target_version_before: Any) -> None:
    """After an update: average the online model's floating buffers (BatchNorm running
    statistics, which each rank's own batches moved) over ranks; if this update also copied
    the online weights into the target network, copy the averaged buffers there too."""
    import torch

    mods = policy_modules(policy)
    if not mods:
        return
    model = mods[0]
    all_reduce_mean_tensors(model.buffers(), world_size, comm.all_reduce_sum)
    target = getattr(policy, "target_model", None)
    if not isinstance(target, torch.nn.Module) or target is model:
        return
    version = getattr(policy, "target_version", None)
    if version is None:  # unknown policy: average the target's buffers as well
        all_reduce_mean_tensors(target.buffers(), world_size, comm.all_reduce_sum)
    elif version != target_version_before:
        online = dict(model.named_buffers())
        with torch.no_grad():
            for name, b in target.named_buffers():
                if b.is_floating_point() and name in online:
                    b.copy_(online[name])


def gather_rank_states(run: Any, rank_state: Callable[[], tuple[dict[str, Any], dict[str, Any]]]
                       ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Ranks 1..W-1 send ``rank_state()`` to rank 0 (a header as a plain object, then each
    array's bytes with ``broadcast(src=r)``); rank 0 gets the list, the others ``[]``."""
    import torch

    comm = run.comm
    received: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for r in range(1, run.world_size):
        plain: dict[str, Any] = {}
        arrays: dict[str, Any] = {}
        if run.rank == r:
            plain, arrays = rank_state()
            arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
        header = {"plain": plain, "arrays": {k: [v.dtype.str, list(v.shape)] for k, v in arrays.items()}}
        header = comm.broadcast_object(header if run.rank == r else None, src=r)
        got: dict[str, Any] = {}
        for name, (dtype, shape) in header["arrays"].items():
            dt = np.dtype(dtype)
            nbytes = dt.itemsize * math.prod(shape)
            if nbytes == 0:
                got[name] = np.zeros(shape, dtype=dt)
                continue
            if run.rank == r:
                t = torch.from_numpy(arrays[name].reshape(-1).view(np.uint8).copy())
            else:
                t = torch.empty(nbytes, dtype=torch.uint8)
            comm.broadcast(t, r)
            if run.is_main:
                got[name] = t.numpy().view(dt).reshape(shape)
        if run.is_main:
            received.append((header["plain"], got))
    return received

