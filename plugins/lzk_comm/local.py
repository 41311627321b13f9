"""The ``local`` comm backend: one process, rank 0 of a world of one.

Every collective is the identity, but inputs are still type-checked so that code which runs fine
locally does not first fail on a cluster.
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

#: Types :meth:`LocalComm.broadcast_object` accepts (containers checked recursively).
_PLAIN = (type(None), bool, int, float, str)


def check_plain(obj: Any, where: str = "obj") -> None:
    """Raise TypeError unless ``obj`` is None/bool/int/float/str or lists/tuples/dicts of them
    (dict keys: str). The same rule every backend applies, so objects that travel over a real
    transport also travel locally."""
    if isinstance(obj, _PLAIN):
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_plain(v, f"{where}[{i}]")
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"broadcast_object: {where} has a non-string key {k!r}")
            check_plain(v, f"{where}[{k!r}]")
        return
    raise TypeError(
        f"broadcast_object: {where} is a {type(obj).__name__}; only None, bool, int, float, str "
        "and lists/dicts of them can be broadcast"
    )


def check_tensor(tensor: Any, op: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{op}: expected a torch.Tensor, got {type(tensor).__name__}")


def check_src(src: int, world_size: int, op: str) -> None:
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < world_size:
        raise ValueError(f"{op}: src must be a rank in [0, {world_size}), got {src!r}")


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
