"""The general search interface (after mctx): what a model step returns, and where callers keep
the per-node embeddings.

A search over B trees calls ``step_fn(parent_slot [B'], action [B'], child_slot [B'])`` once per
simulation for the B' trees whose descent ended at an unexpanded edge. Slots number the nodes of
all trees: node n of tree b is slot ``n·B + b`` (so the B roots are slots 0 … B−1, and the slots
of one node index are contiguous and ordered by tree). The step expands ``action`` from the
embedding at ``parent_slot``, stores the child's embedding at ``child_slot`` and returns a
:class:`StepOutput`. What an embedding is belongs to the caller: a latent row (MuZero), a
KV-cache row (UniZero), a cloned simulator state (AlphaZero); :mod:`lzk_mcts.slots` has stores
for arrays and for Python objects.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np


@dataclass
class StepOutput:
    """One model step for B' new nodes (mctx's ``RecurrentFnOutput`` plus the node's legal mask
    and player). Optional fields left None take the search's defaults."""

    reward: np.ndarray  # [B'] float32: reward of the edge, for the player who moved (the parent's)
    value: np.ndarray  # [B'] float32: the new node's value, from its player-to-move's view
    prior_logits: np.ndarray  # [B', A] float32: policy logits at the new node
    #: [B'] float: γ of the edge; 0 marks a terminal node (value 0, never expanded). None: the
    #: config's discount everywhere (learned models: no terminal).
    discount: np.ndarray | None = None
    #: [B', A] bool: the new node's legal actions (at least one where not terminal). None: all.
    legal: np.ndarray | None = None
    #: [B'] int64: the new node's player to move. None: players alternate in two-player trees
    #: (LightZero's MuZero assumption), -1 stays -1.
    to_play: np.ndarray | None = None


#: ``step_fn(parent_slot [B'] int64, action [B'] int64, child_slot [B'] int64) -> StepOutput``.
#: The index arrays are views of the search's workspace, valid only during the call.
StepFn = Callable[[np.ndarray, np.ndarray, np.ndarray], StepOutput]


@runtime_checkable
class SlotStore(Protocol):
    """Per-node embeddings of one search, at the search's slots (``node·B + b``)."""

    def reserve(self, num_nodes: int, batch: int) -> None:
        """Room for ``num_nodes`` nodes of ``batch`` trees (slots 0 … num_nodes·batch − 1);
        earlier contents may be dropped. Called before the roots are written."""

    def put(self, slots: np.ndarray, values: Any) -> None:
        """Store ``values`` (one per slot, in order) at ``slots`` [n] int64."""

    def take(self, slots: np.ndarray) -> Any:
        """The values at ``slots`` [n] int64, in order."""
