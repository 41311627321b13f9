"""EfficientZero's search snapshot: the shared BN-folded snapshot
(:class:`~lzk_common.inference.SearchSnapshot`) whose per-node embedding is (latent, h, c,
value prefix, depth), kept at the search's slots (``node·B + b``), and its model step.

The step for new nodes under parents p (H = ``horizon``, depth counted in edges from the root)::

    next, (h', c'), prefix logits, value logits, policy logits = recurrent_inference(latent[p], (h[p], c[p]), a)
    depth = depth[p] + 1;  state stored = (0, 0) if depth % H == 0 else (h', c')
    reward = prefix − prefix[p], or prefix where depth[p] % H == 0 (the parent's state was fresh)

This is LightZero's rule (addendum C.5: a node at depth d with d % H == 0 is ``is_reset``, and
its children's rewards are their prefixes), and it matches the learner, which zeroes the state
after unroll step k when (k + 1) % H == 0 (depth d ↔ unroll step d − 1). The roots have depth 0,
a zero state and prefix 0. No change to ``lzk_mcts`` is needed: the tree only sees rewards.

Two backends (``policy.search_backend``): ``torch``, the reference for any model and device, and
``numba`` (:mod:`lzk_efficientzero.numba_lstm`) for the residual MLP on CPU.
"""
from __future__ import annotations

import numpy as np
import torch

from lzk_common.inference import SearchSnapshot, StepFn, numpy_f32
from lzk_common.slots import TensorSlots
from lzk_common.support import DiscreteSupport
from lzk_efficientzero.net import EfficientZeroNet
from lzk_efficientzero.numba_lstm import NumbaValuePrefixMLP, supports
from lzk_mcts.slots import ArraySlots


def prefix_rewards(prefix: np.ndarray, parent_prefix: np.ndarray, parent_depth: np.ndarray, horizon: int) -> np.ndarray:
    """Edge rewards [n] from the new nodes' value prefixes [n] and their parents' prefixes and
    depths [n]: the difference, or the prefix itself below a fresh state (depth % H == 0)."""
    return np.where(parent_depth % horizon == 0, prefix, prefix - parent_prefix).astype(np.float32)


class ValuePrefixSearchNetwork(SearchSnapshot):
    """EfficientZero's eval snapshot for acting, reanalysis and value targets (see the module
    docstring). ``backend``: ``"torch"`` or ``"numba"`` (the residual MLP on CPU; ``compiled``
    is then set, else None)."""

    def __init__(self, model: EfficientZeroNet, value_support: DiscreteSupport, prefix_support: DiscreteSupport,
                 horizon: int, *, backend: str = "torch") -> None:
        if backend not in ("torch", "numba"):
            raise ValueError(f"backend must be 'torch' or 'numba', got {backend!r}")
        if horizon < 1:
            raise ValueError(f"lstm horizon must be >= 1, got {horizon}")
        super().__init__(model, value_support, prefix_support)
        self.horizon = int(horizon)
        self.compiled = (
            NumbaValuePrefixMLP(self.net, self.value_support, self.reward_support, self.horizon)
            if backend == "numba" and self.device.type == "cpu" and supports(self.net) else None
        )
        hd = int(self.net.lstm_hidden)
        self.hidden = TensorSlots((hd,), self.device)
        self.cell = TensorSlots((hd,), self.device)
        self.prefix = ArraySlots((), np.float32)
        self.depth = ArraySlots((), np.int64)

    def begin(self, root_latent: torch.Tensor, num_simulations: int) -> StepFn:
        """Put the roots (latents [B, *L], zero state, prefix 0, depth 0) at slots 0 … B−1 of
        stores for ``num_simulations`` and return the step for ``lzk_mcts.search``."""
        if self.compiled is not None:
            self.compiled.begin(numpy_f32(root_latent), num_simulations)
            return self.step
        b = self._reserve_latents(root_latent, num_simulations)
        with torch.inference_mode():
            for store in (self.hidden, self.cell):
                store.reserve(num_simulations + 1, b)
                store.tensor[:b].zero_()
        for arr in (self.prefix, self.depth):
            arr.reserve(num_simulations + 1, b)
            arr.array[:b] = 0
        return self.step

    def _step(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        parent = self._tensor(parent_slot)
        state = (self.hidden.take(parent), self.cell.take(parent))
        nxt, (h, c), prefix_logits, value_logits, logits = self.net.recurrent_inference(
            self.latents.take(parent), state, self._tensor(action))
        prefix, value = self._decode_pair((prefix_logits, value_logits))
        parent_depth = self.depth.take(parent_slot)
        depth = parent_depth + 1
        fresh = depth % self.horizon == 0
        if fresh.any():  # LightZero's is_reset: these nodes' children start from a zero state
            reset = torch.from_numpy(fresh).to(self.device)[:, None]
            h, c = h.masked_fill(reset, 0.0), c.masked_fill(reset, 0.0)
        child = self._tensor(child_slot)
        self.latents.put(child, nxt)
        self.hidden.put(child, h)
        self.cell.put(child, c)
        reward = prefix_rewards(prefix, self.prefix.take(parent_slot), parent_depth, self.horizon)
        self.prefix.put(child_slot, prefix)
        self.depth.put(child_slot, depth)
        return reward, value, np.ascontiguousarray(numpy_f32(logits))

    def node_state(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(h [n, Hd], c [n, Hd], prefix [n], depth [n]) stored at ``slots`` by the current
        search, whichever backend ran it (for inspection and tests)."""
        if self.compiled is not None:
            cm = self.compiled
            return cm.hidden.array[slots], cm.cell.array[slots], cm.prefix.array[slots], cm.depth.array[slots]
        idx = self._tensor(np.asarray(slots))
        return (numpy_f32(self.hidden.take(idx)).copy(), numpy_f32(self.cell.take(idx)).copy(),
                self.prefix.take(slots).copy(), self.depth.take(slots).copy())
