"""Stores for the per-node embeddings of a search, at the search's slots (``node·B + b``, see
:mod:`lzk_mcts.interface`). Both grow on demand and are reused across searches: no per-search
allocation once the largest search has run."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


class ArraySlots:
    """Fixed-shape rows (latents) in one numpy array [slots, *row_shape]."""

    def __init__(self, row_shape: Sequence[int], dtype: Any = np.float32) -> None:
        self.row_shape = tuple(int(d) for d in row_shape)
        self.dtype = np.dtype(dtype)
        self._buffer = np.empty(0, self.dtype)
        self.array = self._buffer.reshape(0, *self.row_shape)

    def reserve(self, num_nodes: int, batch: int) -> None:
        numel = num_nodes * batch * int(np.prod(self.row_shape, dtype=np.int64))
        if self._buffer.size < numel:
            self._buffer = np.empty(numel, self.dtype)
        self.array = self._buffer[:numel].reshape(num_nodes * batch, *self.row_shape)

    def put(self, slots: np.ndarray, values: np.ndarray) -> None:
        self.array[slots] = values

    def take(self, slots: np.ndarray) -> np.ndarray:
        return self.array[slots]


class ObjectSlots:
    """Any Python objects (simulator states), one per slot."""

    def __init__(self) -> None:
        self._items: list[Any] = []

    def reserve(self, num_nodes: int, batch: int) -> None:
        need = num_nodes * batch
        if len(self._items) < need:
            self._items.extend([None] * (need - len(self._items)))
        else:
            for i in range(need):  # drop the last search's states (they may be large)
                self._items[i] = None

    def put(self, slots: np.ndarray, values: Sequence[Any]) -> None:
        for s, v in zip(np.asarray(slots).tolist(), values):
            self._items[s] = v

    def take(self, slots: np.ndarray) -> list[Any]:
        items = self._items
        return [items[s] for s in np.asarray(slots).tolist()]
