"""The unrolled loss of the latent-model family (SPEC §2.7 steps 2–5 for MuZero, addendum C.3
for EfficientZero): a root step plus K recurrent steps. What a recurrent step is (MuZero's
dynamics; EfficientZero's dynamics with an LSTM state) and what its head on the reward support
is trained on (rewards; value prefixes) is the caller's: ``recurrent(s, k)`` and
``reward_target`` [B, K].

Shapes: B batch, K unroll steps, A actions, N support size, O' stacked observation shape.

    root      s_0 = represent(obs[:, 0])
    k < K     s_{k+1}, r_k = recurrent(s_k, k)               (gradients flow through s, unscaled)
    k ≤ K     v_k, π_k = predict(s_k)
              value  += CE(v_k, φh(z_k)),  policy += CE(π_k, p_k),  entropy += H(π_k)
    k < K     reward += CE(r_k, φh(u_k))
              ssl    += negcos(project(s_{k+1}), sg(project(initial_inference(obs[:, k+1]).s))) · mask[:, k]
    loss_b  = w_ssl·ssl + w_π·policy + w_v·value + w_r·reward − w_H·entropy    (sums over steps)
    loss    = mean_b(IS_b · loss_b)

``mask[:, k]`` is 1 where step t+k is a real transition (lzk_replay convention, = LightZero's):
then a_{t+k} exists and o_{t+k+1}, the SSL target of recurrent step k, is a real observation.
The SSL target latent comes from the online network in its current (train) mode without
gradient, as LightZero does; BatchNorm therefore normalises it with the batch's statistics.

Only the recurrence is sequential. The prediction of all K + 1 latents runs after the unroll as
one [B·(K+1)] batch, and the SSL terms of all K steps as one [B·K] batch (the K latents and the
K target observations through the projection), with every BatchNorm in grouped mode
(:func:`lzk_common.blocks.batch_groups`), so each step is still normalised with its own batch
statistics; the cross-entropies of all steps are then one call per term. The values and
gradients are those of step-by-step calls (LightZero's order); a few large matmuls and a few
dozen ops replace K small ones and several hundred (on two CPU cores the SSL batching made
learner steps ≈ 15% faster). Each BatchNorm's running statistics receive the same updates in the
same order as LightZero's step-by-step loop, in closed form
(:func:`lzk_common.blocks.step_ordered_statistics`): the prediction network s_0, s_1, o_1, s_2,
o_2, … (unrolled latents and SSL targets alternating), the projection s_1, o_1, s_2, o_2, ….
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Tuple

import torch

from lzk_common.losses import LossWeights, TensorBatch, entropy, negative_cosine, soft_cross_entropy
from lzk_common.support import DiscreteSupport
from lzk_common.blocks import LatentNet, batch_groups, step_ordered_statistics


#: ``recurrent(latent [B, *L], k) -> (next_latent [B, *L], reward_logits [B, Nr])``: the dynamics
#: of recurrent step k of the unroll (it reads a_k itself); the prediction is the unroll's.
Recurrent = Callable[[torch.Tensor, int], Tuple[torch.Tensor, torch.Tensor]]


@dataclass
class LatentLossWeights(LossWeights):
    """The shared loss weights plus the SSL consistency weight of the latent-model family."""

    ssl: float = 2.0


@dataclass
class LossOutput:
    loss: torch.Tensor  # [] mean(IS weights · per-sample loss), the quantity differentiated
    value: torch.Tensor  # [B] value CE summed over K+1 steps
    reward: torch.Tensor  # [B] reward (EfficientZero: value-prefix) CE summed over K steps
    policy: torch.Tensor  # [B] policy CE summed over K+1 steps
    ssl: torch.Tensor  # [B] negative cosine summed over K steps (masked)
    entropy: torch.Tensor  # [B] policy entropy summed over K+1 steps
    root_value: torch.Tensor  # [B] decoded root value h⁻¹(E[v]) (no grad), for priorities


def ssl_consistency(
    model: LatentNet,
    latents: torch.Tensor,
    next_obs: torch.Tensor,
    amp: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> torch.Tensor:
    """Negative cosine between the projected unrolled latents and the (stop-gradient) projected
    representations of the observations they should match, all K steps in one batch:
    latents [B, K, *L] (step k = recurrent step k), next_obs [B, K, *O'] (o_{t+k+1}) → [B, K].

    Rows are flattened sample-major (row b·K + k) and every BatchNorm runs in grouped mode, so
    step k is normalised with the statistics of its own B rows, as a per-step call would be.
    """
    b, k = latents.shape[:2]
    # Step keys (k + 1, 0) online, (k + 1, 1) target: inside step_ordered_statistics the running
    # statistics see online and target rows alternately, step by step (LightZero's loop order).
    with amp():
        with batch_groups(model, k, keys=[(j + 1, 0) for j in range(k)]):
            online = model.project(latents.flatten(0, 1), with_grad=True)  # [B·K, P]
        with torch.no_grad(), batch_groups(model, k, keys=[(j + 1, 1) for j in range(k)]):
            target_latent = model.initial_inference(next_obs.flatten(0, 1))[0]
            target = model.project(target_latent, with_grad=False)  # [B·K, P]
    return negative_cosine(online, target).view(b, k)


def unrolled_loss(
    model: LatentNet,
    batch: TensorBatch,
    value_support: DiscreteSupport,
    reward_support: DiscreteSupport,
    weights: LatentLossWeights,
    recurrent: Recurrent,
    reward_target: torch.Tensor,
    *,
    autocast_dtype: torch.dtype | None = None,
) -> LossOutput:
    """The weighted loss of ``batch`` under ``model`` (in whatever mode it is in), unrolled by
    ``recurrent`` with its head on the reward support trained on ``reward_target`` [B, K].

    ``autocast_dtype`` (e.g. ``torch.bfloat16``) runs the network's matmuls under autocast; the
    losses are always computed in float32.
    """
    device_type = batch.obs.device.type

    def amp() -> contextlib.AbstractContextManager:
        if autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=autocast_dtype)

    b, k_steps = batch.actions.shape
    use_ssl = weights.ssl > 0.0 and model.ssl is not None
    value_targets = value_support.encode(batch.target_value)  # [B, K+1, Nv]
    reward_targets = reward_support.encode(reward_target)  # [B, K, Nr]

    # Grouped BatchNorms fold their running statistics on leaving this block, in step order.
    with step_ordered_statistics(model):
        with amp():
            latent = model.represent(batch.obs[:, 0])
            latents, r_logits = [latent], []
            for k in range(k_steps):
                latent, r = recurrent(latent, k)
                latents.append(latent)
                r_logits.append(r)
            unrolled = torch.stack(latents, dim=1)  # [B, K+1, *L], sample-major when flattened
            with batch_groups(model, k_steps + 1, keys=[(j, 0) for j in range(k_steps + 1)]):
                v_logits, p_logits = model.predict(unrolled.flatten(0, 1))  # [B·(K+1), Nv], [B·(K+1), A]
        v_logits, p_logits = v_logits.view(b, k_steps + 1, -1), p_logits.view(b, k_steps + 1, -1)
        root_value = value_support.decode(v_logits[:, 0].detach())
        value_loss = soft_cross_entropy(v_logits, value_targets).sum(1)
        policy_loss = soft_cross_entropy(p_logits, batch.target_policy).sum(1)
        ent = entropy(p_logits).sum(1)
        reward_loss = torch.zeros_like(value_loss)
        ssl_loss = torch.zeros_like(value_loss)
        if k_steps > 0:
            reward_loss = soft_cross_entropy(torch.stack(r_logits, dim=1), reward_targets).sum(1)
        if use_ssl and k_steps > 0:
            per_step = ssl_consistency(model, unrolled[:, 1:], batch.obs[:, 1:], amp)  # [B, K]
            ssl_loss = (per_step * batch.mask[:, :k_steps]).sum(1)

    per_sample = (
        weights.ssl * ssl_loss
        + weights.policy * policy_loss
        + weights.value * value_loss
        + weights.reward * reward_loss
        - weights.entropy * ent
    )
    loss = (batch.weights * per_sample).mean()
    return LossOutput(loss, value_loss, reward_loss, policy_loss, ssl_loss, ent, root_value)
