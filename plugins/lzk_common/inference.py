"""Search snapshots of a latent-model network (MuZero, EfficientZero): a BN-folded eval copy, its
per-node embeddings at the search's slots, and the model step ``lzk_mcts.search`` calls once per
simulation.

Why a snapshot: search needs eval-mode semantics (BatchNorm with running statistics), while the
learner keeps the live model in train mode. In eval mode BN is an affine map, so it is folded into
the preceding Linear/Conv once per weight version (the policy rebuilds the snapshot when its
version counter moves), which removes a third of the ops.

A snapshot (:class:`SearchSnapshot`) serves three callers: ``initial`` (root inference: latents,
decoded values, policy logits), ``values`` (bootstrap values in chunks) and, between ``begin`` and
the next ``begin``, ``step(parent_slot [B'], action [B'], child_slot [B'])``: a node's embedding
lives at its slot (``node·B + b``), so parents are gathered with one ``index_select`` and children
written with one ``index_copy_``. Subclasses say what an embedding is (a latent; a latent with an
LSTM state and a value prefix) and may run the step through a compiled backend (``compiled``).
"""
from __future__ import annotations

import copy
import time
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

from lzk_common.blocks import LatentNet
from lzk_common.slots import TensorSlots
from lzk_common.support import DiscreteSupport, inverse_scalar_transform_np
from lzk_mcts import StepOutput

StepFn = Callable[[np.ndarray, np.ndarray, np.ndarray], StepOutput]


def fold_batchnorm(model: nn.Module, drop: Iterable[nn.Module | None] = ()) -> nn.Module:
    """An eval-mode copy of ``model`` without gradients, where every BatchNorm that directly
    follows a Linear/Conv inside an ``nn.Sequential`` is folded into it (the BN becomes
    ``nn.Identity``). Outputs equal ``model.eval()``'s up to float rounding. The submodules in
    ``drop`` (None entries ignored) are None in the copy: a latent model's SSL heads, never used
    for inference, hold most of its weights."""
    memo: dict[int, Any] = {id(m): None for m in drop if m is not None}
    folded = copy.deepcopy(model, memo).eval()
    for seq in folded.modules():
        if not isinstance(seq, nn.Sequential):
            continue
        for i in range(len(seq) - 1):
            layer, norm = seq[i], seq[i + 1]
            if isinstance(layer, nn.Linear) and isinstance(norm, nn.BatchNorm1d):
                seq[i], seq[i + 1] = fuse_linear_bn_eval(layer, norm), nn.Identity()
            elif isinstance(layer, nn.Conv2d) and isinstance(norm, nn.BatchNorm2d):
                seq[i], seq[i + 1] = fuse_conv_bn_eval(layer, norm), nn.Identity()
    for p in folded.parameters():
        p.requires_grad_(False)
    return folded


def numpy_f32(t: torch.Tensor) -> np.ndarray:
    """A float32 numpy view (CPU float32 tensors) or copy (other devices/dtypes) of ``t``."""
    if t.dtype == torch.float32 and t.device.type == "cpu":
        return t.numpy()
    return t.float().cpu().numpy()


def decode_np(logits: torch.Tensor, support: torch.Tensor) -> np.ndarray:
    """h⁻¹(E_softmax[support]) of logits [..., N] → numpy [...] float32."""
    return inverse_scalar_transform_np(numpy_f32(torch.matmul(torch.softmax(logits, dim=-1), support)))


class SearchSnapshot:
    """Eval snapshot of a latent-model network for acting, reanalysis and value targets.

    Built from the live model at one weight version; the owner rebuilds it when the weights
    change. Accumulates ``forward_seconds`` (time inside ``step``) and ``forward_calls`` for the
    search metrics. ``compiled``: an optional backend object with ``predict(latent [n, D]) ->
    (value [n], logits [n, A])``, ``begin`` and ``__call__(parent_slot, action, child_slot) ->
    (reward, value, logits)``; None runs the torch path (``_step``). Subclasses implement
    :meth:`begin` and :meth:`_step`.
    """

    compiled: Any = None

    def __init__(self, model: LatentNet, value_support: DiscreteSupport, reward_support: DiscreteSupport) -> None:
        self.net = fold_batchnorm(model, drop=(model.ssl,))
        self.device = next(self.net.parameters()).device
        self.value_support = value_support.to(self.device)
        self.reward_support = reward_support.to(self.device)
        self.joint_decode = self.value_support.same_as(self.reward_support)
        self.latent_shape = tuple(self.net.latent_shape)
        self.latents = TensorSlots(self.latent_shape, self.device)  # grows, never shrinks: no per-search alloc
        self.forward_seconds = 0.0
        self.forward_calls = 0

    # --------------------------------------------------------------------------------------------
    def initial(self, obs: torch.Tensor) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """obs [B, *O'] → (latent [B, *L] tensor, value [B] f32, policy_logits [B, A] f32)."""
        with torch.inference_mode():
            if self.compiled is not None:  # representation in torch, prediction compiled
                latent = self.net.represent(obs.to(self.device, torch.float32))
                return (latent, *self.compiled.predict(numpy_f32(latent)))
            latent, value_logits, logits = self.net.initial_inference(obs.to(self.device, torch.float32))
            value = decode_np(value_logits, self.value_support.values)
            return latent, value, numpy_f32(logits)

    def values(self, obs: torch.Tensor, chunk: int) -> np.ndarray:
        """Decoded values of obs [M, *O'] → [M] f32, in chunks of ``chunk`` rows."""
        out = [self.initial(obs[i:i + chunk])[1] for i in range(0, obs.shape[0], chunk)]
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    # --------------------------------------------------------------------------------------------
    def begin(self, root_latent: torch.Tensor, num_simulations: int) -> StepFn:  # pragma: no cover
        """Put the roots' embeddings at slots 0 … B−1 of stores for ``num_simulations`` and
        return the step for ``lzk_mcts.search`` (valid until the next ``begin``)."""
        raise NotImplementedError

    def _reserve_latents(self, root_latent: torch.Tensor, num_simulations: int) -> int:
        """The torch path's latent store for ``num_simulations`` with the roots' latents [B, *L]
        at slots 0 … B−1; returns B."""
        b = int(root_latent.shape[0])
        self.latents.reserve(num_simulations + 1, b)
        with torch.inference_mode():
            self.latents.tensor[:b].copy_(root_latent)
        return b

    def step(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray) -> StepOutput:
        """One batched recurrent step for B' = len(parent_slot) trees: expands ``action`` [B']
        from the embeddings at ``parent_slot`` and writes the new ones at ``child_slot``.
        Returns rewards and values decoded to scalars and the policy logits, float32 numpy."""
        t0 = time.perf_counter()
        if self.compiled is not None:
            out = self.compiled(parent_slot, action, child_slot)
        elif torch.is_inference_mode_enabled():
            out = self._step(parent_slot, action, child_slot)
        else:
            with torch.inference_mode():
                out = self._step(parent_slot, action, child_slot)
        self.forward_seconds += time.perf_counter() - t0
        self.forward_calls += 1
        return StepOutput(*out)

    def _step(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
        """The torch path of :meth:`step`: (reward [B'], value [B'], logits [B', A]) float32."""
        raise NotImplementedError

    def _decode_pair(self, rv: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
        """Decoded (reward [B'], value [B']) from ``rv``: reward and value logits stacked
        [2, B', N] or as a pair. Where the supports agree, one softmax·support reduction serves
        both heads."""
        if self.joint_decode:
            reward, value = decode_np(rv if torch.is_tensor(rv) else torch.stack(rv), self.value_support.values)
            return reward, value
        return decode_np(rv[0], self.reward_support.values), decode_np(rv[1], self.value_support.values)

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        """An int64 index tensor on the device; zero-copy for the search's int64 arrays."""
        if x.dtype != np.int64 or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype=np.int64)
        t = torch.from_numpy(x)
        return t if self.device.type == "cpu" else t.to(self.device)
