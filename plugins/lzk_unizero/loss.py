"""The UniZero loss (SPEC §4.2): one teacher-forced pass over K (obs, action) steps.

Shapes: B batch, K steps, E width, N support atoms, A actions. The batch has the fields of
``lzk_replay.Batch`` (K+1 observations, K actions, mask [B, K+1], targets); mask[:, k] = 1 where
step t+k is real.

    out      = model.forward_sequence(obs[:, :K], actions)            (online, train mode)
    z_{k+1}  = sg(target.encode(obs[:, k+1])), k = 0…K−2               (target model, train mode)

    obs_k    = mse(out.next_latent[:, k], z_{k+1})  (mean over E)      mask m_obs = mask[:, 1:K]
    rew_k    = CE(out.reward[:, k],  (1−ε)·φh(r_{t+k}) + ε/N)          mask m = mask[:, :K]
    val_k    = CE(out.value[:, k],   (1−ε)·φh(z_{t+k}) + ε/N)          mask m
    pol_k    = CE(out.policy[:, k],  (1−ε_π)·π_{t+k} + ε_π/A) − α·H(out.policy[:, k])    mask m

    component c (scalar)   = Σ_{b,k} c_{b,k}·mask_{b,k} / Σ_{b,k} mask_{b,k}
    component c of sample b = B · Σ_k c_{b,k}·mask_{b,k} / Σ_{b,k} mask_{b,k}   (mean over b = scalar)
    total_b = w_obs·obs_b + w_r·rew_b + w_π·pol_b + w_v·val_b
    loss    = mean_b(IS_b · total_b)                 (= the weighted scalar sum when IS ≡ 1)

    priority_b = mean over valid k of |h⁻¹(E[out.value[b, k]]) − z_{t+k}| + 1e-6

The discount γ_wm of LightZero's per-step weighting is 1 and omitted.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from lzk_common.losses import LossWeights, TensorBatch, entropy, soft_cross_entropy
from lzk_common.support import DiscreteSupport
from lzk_unizero.model import WorldModel


@dataclass
class UniZeroLossWeights(LossWeights):
    """The shared weights (``entropy``: α of the entropy bonus inside the policy term) plus the
    next-latent loss and the label smoothing of UniZero's targets."""

    value: float = 0.5
    obs: float = 10.0
    label_smoothing: float = 0.1  # value and reward targets
    policy_label_smoothing: float = 0.0
    latent_loss: str = "mse"  # or "cos_sim"


@dataclass
class UniZeroLossOutput:
    loss: torch.Tensor  # [] the quantity differentiated
    obs: torch.Tensor  # [] masked means of each component (before weights)
    reward: torch.Tensor
    policy: torch.Tensor  # CE − α·H
    value: torch.Tensor
    entropy: torch.Tensor  # [] masked mean policy entropy
    per_sample: torch.Tensor  # [B] weighted total per sample (before IS weights)
    priorities: torch.Tensor  # [B] (no grad)
    value_mean: torch.Tensor  # [] masked mean decoded predicted value (no grad)


def masked_sum_over_count(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scalar Σ x·mask / Σ mask, per-sample B·Σ_k x·mask / Σ mask) for x, mask [B, T]."""
    count = mask.sum().clamp(min=1.0)
    per_sample = (x * mask).sum(1) * (x.shape[0] / count)
    return (x * mask).sum() / count, per_sample


def latent_loss(pred: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    """[B, T, E] × [B, T, E] → [B, T]: mean squared error over E, or 1 − cosine similarity."""
    if kind == "mse":
        return ((pred.float() - target.float()) ** 2).mean(-1)
    return 1.0 - F.cosine_similarity(pred.float(), target.float(), dim=-1, eps=1e-8)


def unizero_loss(model: WorldModel, target_model: WorldModel, batch: TensorBatch,
                 value_support: DiscreteSupport, reward_support: DiscreteSupport,
                 weights: UniZeroLossWeights) -> UniZeroLossOutput:
    """The weighted UniZero loss of ``batch`` (both models in whatever mode they are in)."""
    K = batch.actions.shape[1]
    mask = batch.mask[:, :K].float()  # [B, K]
    out = model.forward_sequence(batch.obs[:, :K], batch.actions)

    if K > 1:
        with torch.no_grad():
            # All K observations through the target encoder, o_0 included, then the K − 1 labels:
            # in train mode its BatchNorm normalises with (and updates its statistics from) the
            # same rows as LightZero's target tokenizer (world_model.compute_labels_world_model).
            z_next = target_model.encode(batch.obs[:, :K])[:, 1:]  # [B, K−1, E]
        obs_loss, obs_ps = masked_sum_over_count(
            latent_loss(out.next_latent[:, : K - 1], z_next, weights.latent_loss), batch.mask[:, 1:K].float())
    else:  # no observation inside the sequence to predict
        obs_loss = out.next_latent.sum() * 0.0
        obs_ps = torch.zeros_like(mask[:, 0])

    eps = weights.label_smoothing
    reward_ce = soft_cross_entropy(out.reward, reward_support.encode(batch.target_reward[:, :K], eps))
    value_ce = soft_cross_entropy(out.value, value_support.encode(batch.target_value[:, :K], eps))
    target_pi = batch.target_policy[:, :K]
    if weights.policy_label_smoothing > 0.0:
        target_pi = (1.0 - weights.policy_label_smoothing) * target_pi + weights.policy_label_smoothing / target_pi.shape[-1]
    ent = entropy(out.policy)  # [B, K]
    policy_term = soft_cross_entropy(out.policy, target_pi) - weights.entropy * ent

    reward_loss, reward_ps = masked_sum_over_count(reward_ce, mask)
    value_loss, value_ps = masked_sum_over_count(value_ce, mask)
    policy_loss, policy_ps = masked_sum_over_count(policy_term, mask)
    ent_mean, _ = masked_sum_over_count(ent.detach(), mask)

    per_sample = (weights.obs * obs_ps + weights.reward * reward_ps + weights.policy * policy_ps
                  + weights.value * value_ps)
    loss = (batch.weights * per_sample).mean()

    with torch.no_grad():
        pred_v = value_support.decode(out.value)  # [B, K]
        err = (pred_v - batch.target_value[:, :K].float()).abs()
        priorities = (err * mask).sum(1) / mask.sum(1).clamp(min=1.0) + 1e-6
        value_mean = (pred_v * mask).sum() / mask.sum().clamp(min=1.0)
    return UniZeroLossOutput(loss, obs_loss, reward_loss, policy_loss, value_loss, ent_mean, per_sample,
                             priorities, value_mean)
