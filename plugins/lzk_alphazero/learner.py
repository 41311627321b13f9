"""The AlphaZero learner step (paper; SPEC §5.1): one network, no target network, no unroll.

    logits, v = net(s)                              (illegal actions masked out of the softmax)
    loss_b    = CE(π_b, softmax(logits)) + w_v·(v − z_b)² − w_H·H(softmax(logits))
    loss      = mean_b(IS_b · loss_b)               (+ weight decay in the optimizer)

then backward, gradient averaging over ranks, clipping, the optimizer step (lzk_common's
:class:`~lzk_common.learner.LearnerBase`). Priorities: |v − z| + 1e-6.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from lzk_alphazero.config import AlphaZeroPolicyConfig
from lzk_common.learner import AverageGradients, LearnerBase, build_optimizer, finite_priorities
from lzk_common.losses import entropy, soft_cross_entropy
from lzkernel import Batch

#: Logit of an illegal action in the loss: exp() of it is 0 in float32, and 0·it stays finite.
ILLEGAL_LOGIT = -1e4


class AlphaZeroLearner(LearnerBase):
    """Owns the optimizer of one network (modified in place)."""

    def __init__(self, model: nn.Module, cfg: AlphaZeroPolicyConfig, *,
                 average_gradients: AverageGradients | None = None) -> None:
        super().__init__(build_optimizer(model, cfg), cfg.on_nonfinite, average_gradients)
        self.model, self.cfg = model, cfg

    def step(self, batch: Batch) -> tuple[dict[str, float], np.ndarray]:
        """One update on a K = 0 batch (:class:`lzkernel.Batch`) → (metrics ``train/*``, priorities [B])."""
        device = next(self.model.parameters()).device
        obs = torch.as_tensor(np.asarray(batch.obs)[:, 0], dtype=torch.float32, device=device)  # [B, *O]
        legal = torch.as_tensor(np.asarray(batch.legal)[:, 0], dtype=torch.bool, device=device)  # [B, A]
        target_pi = torch.as_tensor(np.asarray(batch.target_policy)[:, 0], dtype=torch.float32, device=device)
        z = torch.as_tensor(np.asarray(batch.target_value)[:, 0], dtype=torch.float32, device=device)  # [B]
        weights = torch.as_tensor(np.asarray(batch.weights), dtype=torch.float32, device=device)
        saved = self.saved_buffers(self.model)
        self.model.train()
        logits, value = self.model(obs)
        masked = torch.where(legal, logits, torch.full_like(logits, ILLEGAL_LOGIT))
        policy_loss = soft_cross_entropy(masked, target_pi)  # [B]
        value_loss = (value - z).pow(2)  # [B]
        ent = entropy(masked)  # [B]
        per_sample = policy_loss + self.cfg.value_loss_weight * value_loss - self.cfg.entropy_loss_weight * ent
        loss = (weights * per_sample).mean()
        params = [p for p in self.model.parameters() if p.requires_grad]
        grad_norm = self.backward_and_clip(loss, params, self.cfg.grad_clip)
        values = torch.stack([loss.detach(), policy_loss.mean().detach(), value_loss.mean().detach(), ent.mean().detach(),
                              grad_norm.detach().float(), value.mean().detach(), z.mean(),
                              torch.special.entr(target_pi).sum(-1).mean()]).tolist()
        finite = self.commit(values[0], values[4], self.model.buffers(), saved)
        names = ("loss_total", "loss_policy", "loss_value", "policy_entropy", "grad_norm", "value_mean",
                 "target_value_mean", "target_policy_entropy")
        metrics = {f"train/{n}": float(v) for n, v in zip(names, values)}
        metrics["train/lr"] = float(self.cfg.lr)
        metrics["train/skipped_nonfinite"] = 0.0 if finite else 1.0
        priorities = ((value.detach() - z).abs() + 1e-6).float().cpu().numpy()
        metrics["train/priority_mean"] = float(priorities.mean())
        return metrics, priorities if finite else finite_priorities(priorities)
