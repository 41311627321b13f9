"""The ``local`` comm backend: one process, rank 0 of a world of one.

Every collective is the identity, but inputs are still type-checked so that code which runs fine
locally does not first fail on a cluster.
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

from lzk_comm.checks import check_plain, check_src, check_tensor

class LocalComm:
    """:class:`lzkernel.CommBackend` for a single process."""

    rank: int = 0
    world_size: int = 1
    seconds: float = 0.0  # no collective takes time here

    @property
    def is_main(self) -> bool:
        return True

    def barrier(self) -> None:
        """Nothing to wait for."""

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum over one rank is the tensor itself (returned, unchanged)."""
        check_tensor(tensor, "all_reduce_sum")
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        check_tensor(tensor, "broadcast")
        check_src(src, self.world_size, "broadcast")
        return tensor

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        check_src(src, self.world_size, "broadcast_object")
        check_plain(obj)
        return obj

    def average_gradients(self, parameters: Iterable[torch.Tensor]) -> None:
        """The average over one rank is the gradient itself; parameters are still checked."""
        for i, p in enumerate(parameters):
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"average_gradients: parameter {i} is a {type(p).__name__}, not a torch.Tensor")

    def close(self) -> None:
        """Nothing to release."""
