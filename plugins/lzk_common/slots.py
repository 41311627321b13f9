"""A torch store for the per-node embeddings of a search (the search's slots ``node·B + b``,
see :mod:`lzk_mcts.interface`): the torch counterpart of :class:`lzk_mcts.slots.ArraySlots`,
for latents that stay on the model's device."""
from __future__ import annotations

from typing import Sequence

import torch


class TensorSlots:
    """Fixed-shape rows in one tensor [slots, *row_shape]; grows on demand, reused across
    searches (no per-search allocation once the largest search has run)."""

    def __init__(self, row_shape: Sequence[int], device: torch.device | str, dtype: torch.dtype = torch.float32) -> None:
        self.row_shape = tuple(int(d) for d in row_shape)
        self._buffer = torch.empty(0, device=device, dtype=dtype)
        self.tensor = self._buffer.view(0, *self.row_shape)

    def reserve(self, num_nodes: int, batch: int) -> None:
        rows = num_nodes * batch
        numel = rows * int(torch.Size(self.row_shape).numel())
        if self._buffer.numel() < numel:
            self._buffer = torch.empty(numel, device=self._buffer.device, dtype=self._buffer.dtype)
        self.tensor = self._buffer[:numel].view(rows, *self.row_shape)

    def put(self, slots: torch.Tensor, values: torch.Tensor) -> None:
        """``values`` [n, *row_shape] at ``slots`` [n] (an int64 tensor on the device)."""
        self.tensor.index_copy_(0, slots, values)

    def take(self, slots: torch.Tensor) -> torch.Tensor:
        return self.tensor.index_select(0, slots)
