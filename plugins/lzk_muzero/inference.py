"""Fast inference for MuZero's search: the shared BN-folded snapshot
(:class:`~lzk_common.inference.SearchSnapshot`) whose per-node embedding is a latent row, and
its model step.

Two backends (``policy.search_backend``): ``torch``, the reference for any model and device, and
``numba`` (:mod:`lzk_muzero.numba_mlp`) for the residual MLP on CPU, where the root prediction
and each simulation's recurrent step are one compiled call each (the representation stays in
torch); other models and devices fall back to torch. For the standard CartPole MLP the torch
path fuses the dynamics and prediction networks into 7 matmuls (:class:`FusedMLPRecurrent`),
because at search batch sizes (B ≈ 8..64) the cost is per-op overhead, not FLOPs.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from lzk_common.inference import SearchSnapshot, StepFn, numpy_f32
from lzk_common.support import DiscreteSupport
from lzk_muzero.model_mlp import MuZeroMLP
from lzk_muzero.net import MuZeroNet
from lzk_muzero.numba_mlp import NumbaMLP, folded_residual_mlp


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


class SearchNetwork(SearchSnapshot):
    """MuZero's eval snapshot for acting, reanalysis and value targets (see
    :class:`~lzk_common.inference.SearchSnapshot`). ``backend``: ``"torch"`` or ``"numba"``
    (used where :func:`~lzk_muzero.numba_mlp.folded_residual_mlp` holds and the model is on the
    CPU; the ``compiled`` attribute is then set, else None)."""

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
        super().__init__(model, value_support, reward_support)
        self.compiled = (
            NumbaMLP(self.net, self.value_support, self.reward_support)
            if backend == "numba" and self.device.type == "cpu" and folded_residual_mlp(self.net) else None
        )
        fusable = self.compiled is None and FusedMLPRecurrent.supports(self.net)
        self.fused = FusedMLPRecurrent(self.net) if fusable else None
        self.fuse_max_batch = fuse_max_batch

    def begin(self, root_latent: torch.Tensor, num_simulations: int) -> StepFn:
        """Put the roots' latents [B, *L] at slots 0 … B−1 of a store for ``num_simulations``
        and return the step for ``lzk_mcts.search`` (valid until the next ``begin``)."""
        if self.compiled is not None:
            self.compiled.begin(numpy_f32(root_latent), num_simulations)
        else:
            self._reserve_latents(root_latent, num_simulations)
        return self.step

    def _step(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = self.latents.take(self._tensor(parent_slot))
        a = self._tensor(action)
        if self.fused is not None and s.shape[0] <= self.fuse_max_batch:
            nxt, rv, logits = self.fused(s, a)  # rv [2, B', N]: reward, value logits
        else:
            nxt, r_logits, v_logits, logits = self.net.recurrent_inference(s, a)
            rv = (r_logits, v_logits)
        reward, value = self._decode_pair(rv)
        self.latents.put(self._tensor(child_slot), nxt)
        # Rows of a fresh [2, B'] array are contiguous; the numpy arrays keep their tensors alive.
        return reward, value, np.ascontiguousarray(numpy_f32(logits))
