"""The UniZero learner step (SPEC §4.2 step 8, §4.3): AdamW, clipping, EMA target network.

One step, in order:

1. ``model.train()``, ``target_model.train()`` (LightZero computes the next-latent labels with the
   target in train mode, so its BN uses batch statistics and updates its own running stats);
   loss = :func:`lzk_unizero.loss.unizero_loss`.
2. ``zero_grad``; backward; ``average_gradients(params)`` when given (multi-rank), before clipping.
3. ``clip_grad_norm_(params, grad_clip)``; the pre-clip norm is ``train/grad_norm``.
4. ``optimizer.step()`` (AdamW, nanoGPT groups: weight decay on parameters with >= 2 dims — Linear
   weights, embeddings, conv kernels — none on biases and norm affines).
5. EMA target update after **every** step, on ``named_parameters()`` only:
   p_target ← (1 − θ)·p_target + θ·p. Buffers (BN running statistics) are **not** averaged
   [FAITHFUL, SPEC §4.3]. Then the target goes back to eval mode.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from lzk_common.learner import AverageGradients, LearnerBase, finite_priorities
from lzk_common.losses import TensorBatch
from lzk_common.optim import Optimizer, adam, decay_groups
from lzk_common.support import DiscreteSupport
from lzk_unizero.config import UniZeroPolicyConfig
from lzk_unizero.loss import UniZeroLossWeights, unizero_loss
from lzk_unizero.model import WorldModel

def build_optimizer(model: nn.Module, cfg: UniZeroPolicyConfig) -> Optimizer:
    """AdamW with decay on parameters of >= 2 dims only (nanoGPT's ``configure_optimizers``)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decayed = {id(p) for p in params if p.dim() >= 2}
    return adam(decay_groups(params, decayed, cfg.weight_decay), cfg.lr, betas=tuple(cfg.adam_betas),
                decoupled_weight_decay=True)


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, theta: float) -> None:
    """p_target ← (1 − θ)·p_target + θ·p_online for every named parameter; buffers untouched."""
    online_params = dict(online.named_parameters())
    for name, p_t in target.named_parameters():
        p_t.mul_(1.0 - theta).add_(online_params[name].detach(), alpha=theta)


def loss_weights(cfg: UniZeroPolicyConfig) -> UniZeroLossWeights:
    return UniZeroLossWeights(
        obs=cfg.obs_loss_weight, reward=cfg.reward_loss_weight, policy=cfg.policy_loss_weight,
        value=cfg.value_loss_weight, entropy=cfg.entropy_weight, label_smoothing=cfg.label_smoothing,
        policy_label_smoothing=cfg.policy_label_smoothing, latent_loss=cfg.latent_loss,
    )


class Learner(LearnerBase):
    """Owns the optimizer and the EMA target of one world-model pair (both modified in place).

    ``steps`` counts completed learner steps (skipped non-finite steps do not count).
    """

    def __init__(self, model: WorldModel, target_model: WorldModel, cfg: UniZeroPolicyConfig,
                 value_support: DiscreteSupport, reward_support: DiscreteSupport, *,
                 average_gradients: AverageGradients | None = None) -> None:
        super().__init__(build_optimizer(model, cfg), cfg.on_nonfinite, average_gradients)
        self.model, self.target_model, self.cfg = model, target_model, cfg
        self.value_support, self.reward_support = value_support, reward_support
        self.weights = loss_weights(cfg)

    def step(self, batch: Any) -> tuple[dict[str, float], np.ndarray]:
        """One update on ``batch`` (numpy fields as in :class:`lzkernel.Batch`) →
        (metrics ``train/*``, priorities [B] float32)."""
        device = next(self.model.parameters()).device
        tb = TensorBatch.from_batch(batch, device)
        saved = self.saved_buffers(self.model, self.target_model)
        self.model.train()
        self.target_model.train()
        out = unizero_loss(self.model, self.target_model, tb, self.value_support, self.reward_support,
                           self.weights)
        params = [p for p in self.model.parameters() if p.requires_grad]
        grad_norm = self.backward_and_clip(out.loss, params, self.cfg.grad_clip)
        k_steps = tb.actions.shape[1]
        mask = tb.mask[:, :k_steps].float()  # [B, K]: the steps the loss uses
        # Entropy of the visit targets [B, K, A], a masked mean as the loss terms (before smoothing).
        target_entropy = (torch.special.entr(tb.target_policy[:, :k_steps]).sum(-1) * mask).sum() / mask.sum().clamp(min=1.0)
        values = torch.stack([out.loss.detach(), out.obs.detach(), out.reward.detach(), out.policy.detach(),
                              out.value.detach(), out.entropy, grad_norm.detach().float(), out.value_mean,
                              tb.target_value[:, 0].mean(), target_entropy]).tolist()
        finite = self.commit(values[0], values[6], [*self.model.buffers(), *self.target_model.buffers()], saved)
        if finite:
            ema_update(self.target_model, self.model, self.cfg.target_update_theta)
        self.target_model.eval()

        names = ("loss_total", "loss_obs", "loss_reward", "loss_policy", "loss_value", "policy_entropy",
                 "grad_norm", "value_mean", "target_value_mean", "target_policy_entropy")
        metrics = {f"train/{n}": float(v) for n, v in zip(names, values)}
        metrics["train/lr"] = float(self.cfg.lr)
        metrics["train/skipped_nonfinite"] = 0.0 if finite else 1.0
        priorities = out.priorities.detach().float().cpu().numpy()
        metrics["train/priority_mean"] = float(priorities.mean())
        return metrics, priorities if finite else finite_priorities(priorities)
