"""Keeping ranks identical: the collectives the loop skeleton runs when ``world_size > 1``.

Rank 0's initial weights are broadcast once; after every update the floating buffers the update
moved (BatchNorm running statistics) are averaged; checkpoints gather every rank's own state
(RNGs, collector counters, replay buffer) on rank 0. Tensors are flattened per (dtype, device)
so each step is one collective.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from lzkernel import CommBackend, LearningPolicy, LzkernelError, all_reduce_mean_tensors, broadcast_tensors, gather_ints


class RanksDiverged(LzkernelError, RuntimeError):
    """The ranks were about to run a different number of learner updates (each one runs
    collectives, so they would deadlock or fail later, far from the cause); raised on every rank
    at once, naming every rank's values."""


def agree_on_epoch(run: Any, updates: int, ready: bool, schedule: str) -> bool:
    """The start of an epoch with several ranks: one all-reduce of every rank's
    ``[train_iter, updates, not ready]`` (:func:`lzkernel.gather_ints`). Raises
    :class:`RanksDiverged` on every rank when they disagree on ``train_iter`` or on this epoch's
    ``updates`` (the schedule's count: ``schedule`` names it); else True when every rank is
    ``ready`` (holds enough data to train)."""
    rows = gather_ints([run.train_iter, updates, int(not ready)], run.rank, run.world_size, run.comm.all_reduce_sum)
    if len({(r[0], r[1]) for r in rows}) > 1:
        raise RanksDiverged(
            f"ranks disagree on the learner updates of this epoch, by rank: train_iter {[r[0] for r in rows]}, "
            f"updates {[r[1] for r in rows]} ({schedule} must return the same count on every rank: sum a "
            "rank-local count over ranks first, as replay_ratio does)")
    return not any(r[2] for r in rows)


def broadcast_initial_weights(comm: CommBackend, policy: LearningPolicy) -> None:
    """Every rank starts from rank 0's parameters and buffers (torch is seeded identically on
    every rank, so this is a safety net against rank-dependent construction)."""
    broadcast_tensors(policy.replicated_tensors(), comm.broadcast, 0)
    policy.mark_weights_changed()


def average_updated_buffers(comm: CommBackend, world_size: int, policy: LearningPolicy) -> None:
    """After an update: average over ranks the floating buffers the update moved with this rank's
    batch (BatchNorm running statistics; ``policy.updated_buffers()``), so they stay identical."""
    # learn() already invalidated the snapshots of what it changed; none was rebuilt since.
    all_reduce_mean_tensors(policy.updated_buffers(), world_size, comm.all_reduce_sum)


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

