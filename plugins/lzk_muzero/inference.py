"""Fast inference for search: a BN-folded eval snapshot of a model, a latent store, and the
``recurrent_fn`` callback that ``lzk_mcts.search`` calls once per simulation.

Two backends (``policy.search_backend``): ``torch``, the reference for any model and device, and
``numba`` (:mod:`lzk_muzero.numba_mlp`) for the residual MLP on CPU, where the root prediction
and each simulation's recurrent step are one compiled call each (the representation stays in
torch); other models and devices fall back to torch.

Why a snapshot: search needs eval-mode semantics (BatchNorm with running statistics), while the
learner keeps the live model in train mode. In eval mode BN is an affine map, so it is folded into
the preceding Linear/Conv once per weight version (the policy rebuilds the snapshot when its
version counter moves), which removes a third of the ops. For the standard CartPole MLP the
dynamics and prediction networks are further fused into 6 matmuls (:class:`FusedMLPRecurrent`),
because at search batch sizes (B ≈ 8..64) the cost is per-op overhead, not FLOPs.

The tree calls ``recurrent_fn(batch_idx [B'], parent_node [B'], action [B'], new_node)``; node s+1
of every tree is created by simulation s, so latents live in ``store[node, b]`` ([S+1, B, *L]) and
the parents are gathered with one ``index_select`` on the flattened store.
"""
from __future__ import annotations

import copy
import time
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

from lzk_muzero.blocks import MuZeroNet
from lzk_muzero.model_mlp import MuZeroMLP
from lzk_muzero.numba_mlp import NumbaMLP, folded_residual_mlp
from lzk_muzero.support import DiscreteSupport, inverse_scalar_transform_np

RecurrentFn = Callable[[np.ndarray, np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


def fold_batchnorm(model: MuZeroNet) -> MuZeroNet:
    """An eval-mode copy of ``model`` without SSL heads and without gradients, where every
    BatchNorm that directly follows a Linear/Conv inside an ``nn.Sequential`` is folded into it
    (the BN becomes ``nn.Identity``). Outputs equal ``model.eval()``'s up to float rounding."""
    # memo maps the SSL heads to None: they are never used for inference and hold most weights.
    memo = {id(model.ssl): None} if getattr(model, "ssl", None) is not None else {}
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


class FusedMLPRecurrent:
    """``recurrent_inference`` of a folded :class:`MuZeroMLP` (residual dynamics, BN, one hidden
    layer per head, equal reward/value head widths and supports) in 7 matmuls.

    At search batch sizes a matmul's cost is a fixed overhead plus streaming its weights, so the
    layers that share an input or run side by side are batched into one op each: fc2 and the
    prediction trunk both read ``next`` and run as one [2, B, D] batched matmul, and so on::

        h    = relu(T[a] + s·W1sᵀ)                  T[a] = W1[:, D + a] + b1 (no one-hot concat)
        next = relu(h·W2ᵀ + b2) + s                 [B, D]
        u, v = two [2, B, D] layers                 u[0], v[0]: fc2;  u[1], v[1]: trunk
        w    = relu(v ⊗ [[Wr1 | 0], [Wv1 | Wq1]])   [2, B, H + Hp]  (reward | value, policy) hidden
        rv   = w[:, :, :H] ⊗ [Wr2, Wv2]             [2, B, N]  reward (0) and value (1) logits
        pol  = w[1, :, H:]·Wq2ᵀ + bq                [B, A]
    (⊗: batched matmul over the leading 2.) The one zero block (w[0, :, H:], 4% of the MACs)
    saves an op; folding the policy layer into the [2, B, N] matmul as well would double the
    largest layer's work, which costs more than the op it saves once B grows.
    """

    def __init__(self, net: MuZeroMLP) -> None:
        if not self.supports(net):
            raise ValueError("FusedMLPRecurrent needs the residual-dynamics BN MLP with 1-layer heads")
        d = net.latent_shape[0]
        fc1, fc2, trunk = net.fc_dynamics_1, net.fc_dynamics_2, net.prediction_trunk
        rh, vh, ph = net.reward_head, net.value_head, net.policy_head
        w1 = fc1[0].weight
        self.w1s_t = w1[:, :d].t().contiguous()
        self.act_table = (w1[:, d:].t() + fc1[0].bias).contiguous()  # [A, D]
        self.w2_t, self.b2 = fc1[3].weight.t().contiguous(), fc1[3].bias.clone()

        def pair(a: nn.Linear, b: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.stack([a.weight.t(), b.weight.t()]).contiguous(), torch.stack([a.bias, b.bias])[:, None]

        self.w_u, self.b_u = pair(fc2[0], trunk[0])
        self.w_v, self.b_v = pair(fc2[3], trunk[3])
        self.hidden = h = vh[0].out_features
        hp = ph[0].out_features
        self.w_h = torch.zeros(2, d, h + hp, dtype=w1.dtype, device=w1.device)
        self.b_h = torch.zeros(2, 1, h + hp, dtype=w1.dtype, device=w1.device)
        self.w_h[0, :, :h], self.b_h[0, 0, :h] = rh[0].weight.t(), rh[0].bias  # [0, :, h:] stays 0: unused
        self.w_h[1, :, :h], self.b_h[1, 0, :h] = vh[0].weight.t(), vh[0].bias
        self.w_h[1, :, h:], self.b_h[1, 0, h:] = ph[0].weight.t(), ph[0].bias
        self.w_o, self.b_o = pair(rh[3], vh[3])
        self.w_q_t, self.b_q = ph[3].weight.t().contiguous(), ph[3].bias.clone()

    @staticmethod
    def supports(net: nn.Module) -> bool:
        """True for a folded MLP whose layout this class knows (others use the generic path)."""
        return (
            folded_residual_mlp(net)
            and net.reward_head[0].out_features == net.value_head[0].out_features
            and net.reward_support_size == net.value_support_size
        )

    def __call__(self, s: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(latent [B, D], action [B] int64) → (next_latent [B, D], reward/value logits [2, B, N],
        policy_logits [B, A])."""
        h = torch.addmm(self.act_table.index_select(0, a), s, self.w1s_t).relu_()
        nxt = torch.addmm(self.b2, h, self.w2_t).relu_().add_(s)
        u = torch.baddbmm(self.b_u, nxt.expand(2, *nxt.shape), self.w_u).relu_()
        v = torch.baddbmm(self.b_v, u, self.w_v).relu_()
        w = torch.baddbmm(self.b_h, v, self.w_h).relu_()
        rv = torch.baddbmm(self.b_o, w[:, :, : self.hidden], self.w_o)
        return nxt, rv, torch.addmm(self.b_q, w[1, :, self.hidden:], self.w_q_t)


def _numpy_f32(t: torch.Tensor) -> np.ndarray:
    """A float32 numpy view (CPU float32 tensors) or copy (other devices/dtypes) of ``t``."""
    if t.dtype == torch.float32 and t.device.type == "cpu":
        return t.numpy()
    return t.float().cpu().numpy()


def _decode_np(logits: torch.Tensor, support: torch.Tensor) -> np.ndarray:
    """h⁻¹(E_softmax[support]) of logits [..., N] → numpy [...] float32."""
    return inverse_scalar_transform_np(_numpy_f32(torch.matmul(torch.softmax(logits, dim=-1), support)))


class SearchNetwork:
    """Eval snapshot of a model for acting, reanalysis and value targets.

    Built from the live model at one weight version; the owner rebuilds it when the weights change.
    Accumulates ``forward_seconds`` (time inside ``recurrent_fn``) and ``forward_calls`` for the
    search metrics. ``backend``: ``"torch"`` or ``"numba"`` (used where
    :func:`~lzk_muzero.numba_mlp.folded_residual_mlp` holds and the model is on the CPU; the
    ``compiled`` attribute is then set, else None).
    """

    def __init__(
        self,
        model: MuZeroNet,
        value_support: DiscreteSupport,
        reward_support: DiscreteSupport,
        *,
        backend: str = "torch",
        fuse_max_batch: int = 256,
    ) -> None:
        if backend not in ("torch", "numba"):
            raise ValueError(f"backend must be 'torch' or 'numba', got {backend!r}")
        self.net = fold_batchnorm(model)
        self.device = next(self.net.parameters()).device
        self.value_support = value_support.to(self.device)
        self.reward_support = reward_support.to(self.device)
        self.joint_decode = self.value_support.same_as(self.reward_support)
        self.compiled = (
            NumbaMLP(self.net, self.value_support, self.reward_support)
            if backend == "numba" and self.device.type == "cpu" and folded_residual_mlp(self.net) else None
        )
        fusable = self.compiled is None and FusedMLPRecurrent.supports(self.net)
        self.fused = FusedMLPRecurrent(self.net) if fusable else None
        self.fuse_max_batch = fuse_max_batch
        self.latent_shape = tuple(self.net.latent_shape)
        self._buffer = torch.empty(0, device=self.device)  # grows, never shrinks: no per-search alloc
        self._store = self._store_flat = self._buffer
        self._batch = 0
        self.forward_seconds = 0.0
        self.forward_calls = 0

    # --------------------------------------------------------------------------------------------
    def initial(self, obs: torch.Tensor) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """obs [B, *O'] → (latent [B, *L] tensor, value [B] f32, policy_logits [B, A] f32)."""
        with torch.inference_mode():
            if self.compiled is not None:  # representation in torch, prediction compiled
                latent = self.net.represent(obs.to(self.device, torch.float32))
                return (latent, *self.compiled.predict(_numpy_f32(latent)))
            latent, value_logits, logits = self.net.initial_inference(obs.to(self.device, torch.float32))
            value = _decode_np(value_logits, self.value_support.values)
            return latent, value, _numpy_f32(logits)

    def values(self, obs: torch.Tensor, chunk: int) -> np.ndarray:
        """Decoded values of obs [M, *O'] → [M] f32, in chunks of ``chunk`` rows."""
        out = [self.initial(obs[i:i + chunk])[1] for i in range(0, obs.shape[0], chunk)]
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    # --------------------------------------------------------------------------------------------
    def begin(self, root_latent: torch.Tensor, num_simulations: int) -> RecurrentFn:
        """Put the roots' latents [B, *L] at node 0 of a store for ``num_simulations`` and return
        the callback for ``lzk_mcts.search`` (valid until the next ``begin``)."""
        if self.compiled is not None:
            self.compiled.begin(_numpy_f32(root_latent), num_simulations)
            return self.recurrent_fn
        b = int(root_latent.shape[0])
        nodes = num_simulations + 1
        numel = nodes * b * int(np.prod(self.latent_shape))
        if self._buffer.numel() < numel:
            self._buffer = torch.empty(numel, device=self.device)
        self._store = self._buffer[:numel].view(nodes, b, *self.latent_shape)
        self._store_flat = self._store.view(nodes * b, *self.latent_shape)
        self._batch = b
        with torch.inference_mode():
            self._store[0].copy_(root_latent)
        return self.recurrent_fn

    def recurrent_fn(
        self, batch_idx: np.ndarray, parent_node: np.ndarray, action: np.ndarray, new_node: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One batched dynamics + prediction step for the trees ``batch_idx`` [B'].

        Expands ``action`` [B'] from ``store[parent_node, batch_idx]`` and writes the new latents
        to ``store[new_node, batch_idx]``. Returns (reward [B'], value [B'], logits [B', A]),
        float32 numpy, rewards and values decoded to scalars.
        """
        t0 = time.perf_counter()
        if self.compiled is not None:
            out = self.compiled(batch_idx, parent_node, action, new_node)
        elif torch.is_inference_mode_enabled():
            out = self._step(batch_idx, parent_node, action, new_node)
        else:
            with torch.inference_mode():
                out = self._step(batch_idx, parent_node, action, new_node)
        self.forward_seconds += time.perf_counter() - t0
        self.forward_calls += 1
        return out

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        """An int64 index tensor on the device; zero-copy for the search's int64 arrays."""
        if x.dtype != np.int64 or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype=np.int64)
        t = torch.from_numpy(x)
        return t if self.device.type == "cpu" else t.to(self.device)

    def _step(
        self, batch_idx: np.ndarray, parent_node: np.ndarray, action: np.ndarray, new_node: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = self._tensor(batch_idx)
        flat = parent_node * self._batch
        flat += batch_idx  # in place: one temporary instead of two
        s = self._store_flat.index_select(0, self._tensor(flat))
        a = self._tensor(action)
        if self.fused is not None and rows.shape[0] <= self.fuse_max_batch:
            nxt, rv, logits = self.fused(s, a)  # rv [2, B', N]: reward, value logits
        else:
            nxt, r_logits, v_logits, logits = self.net.recurrent_inference(s, a)
            rv = torch.stack([r_logits, v_logits]) if self.joint_decode else (r_logits, v_logits)
        if self.joint_decode:  # one softmax·support reduction for both heads
            reward, value = _decode_np(rv, self.value_support.values)
        else:
            reward = _decode_np(rv[0], self.reward_support.values)
            value = _decode_np(rv[1], self.value_support.values)
        self._store[new_node].index_copy_(0, rows, nxt)
        # Rows of a fresh [2, B'] array are contiguous; the numpy arrays keep their tensors alive.
        return reward, value, np.ascontiguousarray(_numpy_f32(logits))
