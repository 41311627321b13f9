"""Fast inference for search: a BN-folded eval snapshot of a model, its latents at the search's
slots, and the model step that ``lzk_mcts.search`` calls once per simulation.

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

The tree calls ``step(parent_slot [B'], action [B'], child_slot [B'])``; a node's latent lives at
its slot (``node·B + b``) of a :class:`~lzk_common.slots.TensorSlots` store ([(S+1)·B, *L]), so the
parents are gathered with one ``index_select`` and the children written with one ``index_copy_``.
"""
from __future__ import annotations

import copy
import time
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

from lzk_common.slots import TensorSlots
from lzk_mcts import StepOutput
from lzk_muzero.blocks import MuZeroNet
from lzk_muzero.model_mlp import MuZeroMLP
from lzk_muzero.numba_mlp import NumbaMLP, folded_residual_mlp
from lzk_common.support import DiscreteSupport, inverse_scalar_transform_np

StepFn = Callable[[np.ndarray, np.ndarray, np.ndarray], StepOutput]


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
    Accumulates ``forward_seconds`` (time inside ``step``) and ``forward_calls`` for the
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
        self.latents = TensorSlots(self.latent_shape, self.device)  # grows, never shrinks: no per-search alloc
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
    def begin(self, root_latent: torch.Tensor, num_simulations: int) -> StepFn:
        """Put the roots' latents [B, *L] at slots 0 … B−1 of a store for ``num_simulations``
        and return the step for ``lzk_mcts.search`` (valid until the next ``begin``)."""
        if self.compiled is not None:
            self.compiled.begin(_numpy_f32(root_latent), num_simulations)
            return self.step
        b = int(root_latent.shape[0])
        self.latents.reserve(num_simulations + 1, b)
        with torch.inference_mode():
            self.latents.tensor[:b].copy_(root_latent)
        return self.step

    def step(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray) -> StepOutput:
        """One batched dynamics + prediction step for B' = len(parent_slot) trees.

        Expands ``action`` [B'] from the latents at ``parent_slot`` and writes the new latents at
        ``child_slot``. Returns rewards and values decoded to scalars and the policy logits,
        float32 numpy.
        """
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

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        """An int64 index tensor on the device; zero-copy for the search's int64 arrays."""
        if x.dtype != np.int64 or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype=np.int64)
        t = torch.from_numpy(x)
        return t if self.device.type == "cpu" else t.to(self.device)

    def _step(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = self.latents.take(self._tensor(parent_slot))
        a = self._tensor(action)
        if self.fused is not None and s.shape[0] <= self.fuse_max_batch:
            nxt, rv, logits = self.fused(s, a)  # rv [2, B', N]: reward, value logits
        else:
            nxt, r_logits, v_logits, logits = self.net.recurrent_inference(s, a)
            rv = torch.stack([r_logits, v_logits]) if self.joint_decode else (r_logits, v_logits)
        if self.joint_decode:  # one softmax·support reduction for both heads
            reward, value = _decode_np(rv, self.value_support.values)
        else:
            reward = _decode_np(rv[0], self.reward_support.values)
            value = _decode_np(rv[1], self.value_support.values)
        self.latents.put(self._tensor(child_slot), nxt)
        # Rows of a fresh [2, B'] array are contiguous; the numpy arrays keep their tensors alive.
        return reward, value, np.ascontiguousarray(_numpy_f32(logits))
