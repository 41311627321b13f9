"""Update schedules, communication backends and trainers."""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class UpdateSchedule(Protocol):
    def updates(self, collected_transitions: int) -> int:
        """Learner updates to run after a collect of ``collected_transitions`` (this rank's
        count). Implementations that depend on the count sum it across ranks through the comm
        backend, so every rank returns the same number."""


@runtime_checkable
class CommBackend(Protocol):
    """Rank, world size and the collectives trainers need. Tensors are torch tensors; the
    backend moves them to the device its transport needs and back. Coalesced many-tensor
    versions are in :mod:`lzkernel.collectives`."""

    rank: int
    world_size: int
    #: Seconds this process has spent inside collectives (logged as ``time/comm_s``).
    seconds: float

    @property
    def is_main(self) -> bool: ...

    def barrier(self) -> None: ...

    def all_reduce_sum(self, tensor: Any) -> Any:
        """Sum ``tensor`` over ranks, in place; returns it."""

    def broadcast(self, tensor: Any, src: int = 0) -> Any:
        """Overwrite ``tensor`` on every rank with ``src``'s value, in place; returns it."""

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """``src``'s plain value (None, bool, int, float, str, lists/dicts of them)."""

    def average_gradients(self, parameters: Any) -> None:
        """Average ``p.grad`` over ranks for every parameter in ``parameters``; parameters whose
        grad is None on this rank take part with zeros (so every rank runs the same collective)."""

    def close(self) -> None: ...


@runtime_checkable
class Trainer(Protocol):
    def train(self) -> None:
        """Run until a budget or stop condition; checkpoint through ``run.save_checkpoint``."""
