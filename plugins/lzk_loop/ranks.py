"""Keeping ranks identical: the collectives the loop skeleton runs when ``world_size > 1``.

Rank 0's initial weights are broadcast once; after every update the online model's floating
buffers (BatchNorm running statistics) are averaged; checkpoints gather every rank's own state
(RNGs, collector counters, replay buffer) on rank 0. Tensors are flattened per (dtype, device)
so each step is one collective.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable

import numpy as np


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
    import torch

    tensors = [t for m in policy_modules(policy) for t in (*m.parameters(), *m.buffers())]
    groups: dict[Any, list[Any]] = defaultdict(list)
    for t in tensors:
        groups[(t.dtype, t.device)].append(t)
    with torch.no_grad():
        for group in groups.values():
            flat = torch.cat([t.detach().reshape(-1) for t in group])
            comm.broadcast(flat, 0)
            unflatten(flat, group)
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
    floats = [b for b in model.buffers() if b.is_floating_point()]
    if not floats:
        return
    with torch.no_grad():
        flat = torch.cat([b.detach().reshape(-1) for b in floats])
        comm.all_reduce_sum(flat)
        flat.div_(world_size)
        unflatten(flat, floats)
        target = getattr(policy, "target_model", None)
        if isinstance(target, torch.nn.Module) and target is not model:
            version = getattr(policy, "target_version", None)
            if version is None:  # unknown policy: average the target's buffers as well
                tfloats = [b for b in target.buffers() if b.is_floating_point()]
                if tfloats:
                    tflat = torch.cat([b.detach().reshape(-1) for b in tfloats])
                    comm.all_reduce_sum(tflat)
                    tflat.div_(world_size)
                    unflatten(tflat, tfloats)
            elif version != target_version_before:
                online = dict(model.named_buffers())
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


def unflatten(flat: Any, tensors: list[Any]) -> None:
    """Copy consecutive slices of ``flat`` back into ``tensors`` (in place)."""
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view_as(t))
        offset += n
