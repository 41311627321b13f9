"""Replay buffers: what the loop stores trajectories in and samples learner batches from."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from lzkernel.roles.data import Batch, Trajectory


@runtime_checkable
class ReplayBuffer(Protocol):
    """Stores trajectories and samples batches; enforces its capacity on every push.

    ``sample`` and ``reanalyze`` take the policy as ``source`` and call the value-source Protocol
    the buffer's component declares it needs (``Component.needs["policy"]``, e.g.
    :class:`~lzkernel.ObservationValues`); the config check has made sure the policy provides it.
    """

    #: Stored transitions at most (hard limit, enforced by ``push``).
    capacity: int

    @property
    def num_transitions(self) -> int:
        """Stored transitions (<= capacity)."""

    def push(self, trajectories: Sequence[Trajectory]) -> int:
        """Store ``trajectories``; returns the transitions stored by this call. Afterwards at most
        ``capacity`` transitions are stored (the oldest are dropped)."""

    def sample(self, batch_size: int, rng: np.random.Generator, source: Any) -> Batch:
        """A learner batch of ``batch_size`` samples; bootstrap values (if any) from ``source``."""

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> int:
        """New priorities [B] of transitions ``indices`` [B] (``Batch.indices``); entries dropped
        since sampling are ignored. Returns the number written."""

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(meta, arrays)``: JSON-able meta and numpy arrays of everything stored, including
        what ``push`` keeps back (unfinished pieces waiting for more data), so that a restored
        buffer continues exactly as this one would."""

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None: ...


@runtime_checkable
class ReanalysableBuffer(ReplayBuffer, Protocol):
    """A buffer that can refresh its stored search targets with the current network (ReZero's
    backward-view reanalysis, UniZero's buffer reanalysis). Declared with
    ``Component.provides=(ReanalysableBuffer,)``; trainers that reanalyse need it."""

    def reanalyze(self, source: Any, rng: np.random.Generator, *, reuse: bool = True) -> dict[str, float]:
        """One reanalysis pass with ``source`` (the policy); ``reuse``: ReZero value reuse where
        the buffer supports it. Returns its statistics (logged as ``reanalyze/...``)."""
