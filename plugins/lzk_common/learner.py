"""What every learner of the search-based family shares: the optimizer step with gradient
averaging and clipping, the non-finite-step policy, the learner's checkpoint state.

A learner subclasses :class:`LearnerBase`, computes its loss, then calls
:meth:`LearnerBase.backward_and_clip` and :meth:`LearnerBase.commit`::

    grad_norm = self.backward_and_clip(loss, params, grad_scale=1/K)   # zero_grad, backward, average, clip
    values = torch.stack([loss, ..., grad_norm]).tolist()               # one host sync
    finite = self.commit(values[0], grad_norm_value, buffers, saved)    # step, raise or discard

Order (LightZero's): gradients are averaged over ranks **before** clipping, so every rank clips
the same averaged gradient; with several ranks a step is skipped or applied on the averaged
gradient's norm alone, which every rank shares.

:class:`LatentLearner` is the whole step of the latent-model family (MuZero, EfficientZero,
SPEC §2.7 steps 6–10), given the algorithm's loss:

1. ``model.train()``; the observations augmented (``image_augmentation``); loss = the
   subclass's :meth:`LatentLearner.loss` (forward in ``learn_dtype``).
2. ``zero_grad``; backward with the whole gradient scaled by 1/K (LightZero registers a hook on
   the loss that multiplies its gradient by 1/K; seeding ``backward`` with 1/K is the same).
3. ``average_gradients(params)`` when given (multi-rank), before clipping.
4. ``clip_grad_norm_(params, grad_clip)``; its pre-clip norm is ``train/grad_norm``.
5. The LR for this step (base, or base × piecewise factor of the steps done so far), then
   ``optimizer.step()``.
6. ``steps += 1``; when ``steps % target_update_freq == 0`` the target network is assigned the
   online weights, buffers (BN running statistics) included.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn

from lzk_common.latent_loss import LatentLossWeights, LossOutput
from lzk_common.losses import TensorBatch
from lzk_common.optim import Optimizer, adam, decay_groups, sgd
from lzk_common.precision import resolve_learn_dtype
from lzk_common.support import DiscreteSupport

AverageGradients = Callable[[Iterable[nn.Parameter]], None]


class NonFiniteLossError(FloatingPointError):
    """The loss or the gradient norm was NaN/Inf (``on_nonfinite: raise``)."""


def step_is_finite(loss: float, grad_norm: float, multi_rank: bool) -> bool:
    """Whether to apply the step. With several ranks decide on the averaged gradient's norm alone,
    which every rank shares, so that all ranks skip (or raise) together; a local NaN loss poisons
    that norm anyway."""
    return bool(np.isfinite(grad_norm) and (multi_rank or np.isfinite(loss)))


def nonfinite_error(loss: float, grad_norm: float, steps: int) -> NonFiniteLossError:
    return NonFiniteLossError(f"non-finite loss {loss} or gradient norm {grad_norm} at learner step {steps} "
                              f"(set on_nonfinite: skip to drop such batches)")


def discard_step(optimizer: Optimizer, buffers: Iterable[torch.Tensor],
                 saved: Iterable[torch.Tensor] | None) -> None:
    """``on_nonfinite: skip``: drop the gradients and restore the buffers (BN running statistics,
    moved by the train-mode forward) from the copies ``saved`` before it, so a bad batch leaves
    no trace."""
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        for b, old in zip(buffers, saved or []):
            b.copy_(old)


def finite_priorities(priorities: np.ndarray) -> np.ndarray:
    """Never hand NaN priorities to the buffer: the non-finite entries of a skipped batch become
    its largest finite priority (1 if none), so such samples stay likely. In place."""
    bad = ~np.isfinite(priorities)
    priorities[bad] = priorities[~bad].max() if (~bad).any() else 1.0
    return priorities


def piecewise_lr_factor(step: int, threshold: float) -> float:
    """LightZero's piecewise schedule: 1 until 0.5·T steps, 0.1 until T, 0.01 after."""
    if step < 0.5 * threshold:
        return 1.0
    if step < threshold:
        return 0.1
    return 0.01


class LearnerBase:
    """The optimizer, the completed-step count and the non-finite policy of one learner.

    ``steps`` counts completed learner steps (skipped non-finite steps do not count); it and the
    optimizer state are the learner's checkpoint (schedules are functions of ``steps``).
    """

    def __init__(self, optimizer: Optimizer, on_nonfinite: str,
                 average_gradients: AverageGradients | None) -> None:
        self.optimizer = optimizer
        self.on_nonfinite = on_nonfinite
        self.average_gradients = average_gradients
        self.steps = 0

    def backward_and_clip(self, loss: torch.Tensor, params: list[nn.Parameter], grad_clip: float,
                          grad_scale: float | None = None) -> torch.Tensor:
        """zero_grad; backward (the gradient seeded with ``grad_scale`` when given); average over
        ranks; clip to ``grad_clip``. Returns the pre-clip gradient norm (a 0-dim tensor)."""
        self.optimizer.zero_grad(set_to_none=True)
        if grad_scale is None:
            loss.backward()
        else:
            loss.backward(gradient=torch.full_like(loss, grad_scale))
        if self.average_gradients is not None:
            self.average_gradients(params)
        return torch.nn.utils.clip_grad_norm_(params, grad_clip)

    def commit(self, loss: float, grad_norm: float, buffers: Iterable[torch.Tensor],
               saved: list[torch.Tensor] | None, lr: float | None = None) -> bool:
        """Apply the step (at learning rate ``lr`` when given) and count it, or — non-finite —
        raise (``on_nonfinite: raise``) or drop it and restore ``buffers`` from ``saved``
        (``skip``). Returns whether the step was applied."""
        finite = step_is_finite(loss, grad_norm, self.average_gradients is not None)
        if finite:
            if lr is not None:
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
            self.optimizer.step()
            self.steps += 1
        elif self.on_nonfinite == "raise":
            raise nonfinite_error(loss, grad_norm, self.steps)
        else:
            discard_step(self.optimizer, buffers, saved)
        return finite

    def saved_buffers(self, *modules: nn.Module) -> list[torch.Tensor] | None:
        """Copies of the modules' buffers to restore after a skipped step (``skip`` mode only:
        the train-mode forward moves BN running statistics)."""
        if self.on_nonfinite != "skip":
            return None
        return [b.clone() for m in modules for b in m.buffers()]

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state and the step count."""
        return {"optimizer": self.optimizer.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])


def decayed_weights(model: nn.Module) -> set[int]:
    """ids of the parameters AdamW decays: the weight matrices of Linear and Conv layers and the
    input/hidden weight matrices of recurrent layers (LSTM, GRU and their cells, e.g.
    EfficientZero's value-prefix LSTM), as LightZero's ``configure_optimizers``; biases, norm
    and embedding parameters are not decayed."""
    decayed = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d))}
    for m in model.modules():
        if isinstance(m, (nn.RNNBase, nn.RNNCellBase)):
            decayed |= {id(p) for name, p in m.named_parameters(recurse=False) if name.startswith("weight_")}
    return decayed


def build_optimizer(model: nn.Module, cfg: Any) -> Optimizer:
    """``cfg.optimizer`` with ``cfg.lr`` and ``cfg.weight_decay``: Adam (L2 decay on every
    parameter), AdamW (decoupled decay on the weight matrices of :func:`decayed_weights` only;
    biases and norm parameters undecayed) or SGD (momentum 0.9, decay on every parameter).

    Fused implementations (one kernel for all parameters; 15 → 5 ms per CartPole step on two CPU
    cores) where torch has them for the model's device: :mod:`lzk_common.optim`."""
    if cfg.optimizer == "adam":
        return adam(model.parameters(), cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return sgd(model.parameters(), cfg.lr, weight_decay=cfg.weight_decay)
    return adam(decay_groups(model.parameters(), decayed_weights(model), cfg.weight_decay), cfg.lr,
                decoupled_weight_decay=True)


class LatentLearner(LearnerBase):
    """The optimizer and the target-network schedule of one latent-model pair (see the module
    docstring); subclasses supply :meth:`loss`. ``model`` and ``target_model`` are modified in
    place; ``cfg`` is a :class:`~lzk_common.options.LatentPolicyOptions`."""

    #: The metric name of the transition head's loss term (``train/<name>``).
    reward_metric = "loss_reward"

    def __init__(self, model: nn.Module, target_model: nn.Module, cfg: Any, value_support: DiscreteSupport,
                 reward_support: DiscreteSupport, *, average_gradients: AverageGradients | None = None) -> None:
        super().__init__(build_optimizer(model, cfg), cfg.on_nonfinite, average_gradients)
        self.model, self.target_model, self.cfg = model, target_model, cfg
        self.value_support, self.reward_support = value_support, reward_support
        self.weights = LatentLossWeights(
            value=cfg.value_loss_weight, reward=cfg.reward_loss_weight, policy=cfg.policy_loss_weight,
            ssl=cfg.ssl_loss_weight, entropy=cfg.entropy_loss_weight,
        )
        device = next(model.parameters()).device.type
        self.learn_dtype = resolve_learn_dtype(cfg.learn_dtype, device)  # 'auto' resolved for this device
        self.autocast_dtype = torch.bfloat16 if self.learn_dtype == "bfloat16" else None
        #: Image augmentation of ``obs`` [B, K+1, C', H, W] before the loss (lzk_common.image_augment),
        #: set by the policy with ``image_augmentation``; None: none.
        self.augment: Callable[[torch.Tensor], torch.Tensor] | None = None

    def loss(self, tb: TensorBatch) -> LossOutput:  # pragma: no cover - abstract
        """The algorithm's loss of ``tb`` under ``self.model`` (in train mode)."""
        raise NotImplementedError

    def lr_at(self, step: int) -> float:
        """Learning rate of the step that follows ``step`` completed steps."""
        if not self.cfg.lr_piecewise:
            return self.cfg.lr
        return self.cfg.lr * piecewise_lr_factor(step, self.cfg.lr_piecewise_threshold)

    def step(self, batch: Any) -> tuple[dict[str, float], np.ndarray, bool]:
        """One update on ``batch`` (numpy fields as in :class:`lzkernel.Batch`).

        Returns (metrics ``train/*``, priorities [B] float32 = |v_root − target_value[:, 0]| + 1e-6,
        whether the target network was assigned by this step). A non-finite loss or gradient norm
        raises :class:`NonFiniteLossError` (``on_nonfinite: raise``) or skips the update,
        restores the BN statistics and reports ``train/skipped_nonfinite = 1`` (``skip``);
        non-finite priorities of a skipped batch are replaced by the batch's largest finite one.
        """
        device = next(self.model.parameters()).device
        tb = TensorBatch.from_batch(batch, device)
        if self.augment is not None:
            tb = dataclasses.replace(tb, obs=self.augment(tb.obs))
        k_steps = tb.actions.shape[1]
        saved = self.saved_buffers(self.model)
        self.model.train()
        out = self.loss(tb)

        params = [p for p in self.model.parameters() if p.requires_grad]
        # LightZero scales the whole gradient by 1/K (a hook on the loss); seeding backward is the same.
        grad_norm = self.backward_and_clip(out.loss, params, self.cfg.grad_clip, grad_scale=1.0 / k_steps)
        lr = self.lr_at(self.steps)
        # One host sync for every scalar metric.
        values = torch.stack([
            out.loss.detach(), out.value.mean(), out.reward.mean(), out.policy.mean(), out.ssl.mean(),
            out.entropy.mean() / (k_steps + 1), grad_norm.detach().float(), out.root_value.mean(),
            tb.target_value[:, 0].mean(),
            # Entropy of the visit targets [B, K+1, A], per step (padded steps' zero targets give 0).
            torch.special.entr(tb.target_policy).sum(-1).mean(),
        ]).tolist()
        finite = self.commit(values[0], values[6], self.model.buffers(), saved, lr=lr)
        target_updated = finite and self.steps % self.cfg.target_update_freq == 0
        if target_updated:
            self.update_target()

        names = ("loss_total", "loss_value", self.reward_metric, "loss_policy", "loss_ssl", "policy_entropy",
                 "grad_norm", "value_mean", "target_value_mean", "target_policy_entropy")
        metrics = {f"train/{n}": float(v) for n, v in zip(names, values)}
        metrics["train/lr"] = lr
        metrics["train/skipped_nonfinite"] = 0.0 if finite else 1.0
        priorities = ((out.root_value - tb.target_value[:, 0]).abs() + 1e-6).detach().float().cpu().numpy()
        metrics["train/priority_mean"] = float(priorities.mean())
        return metrics, priorities if finite else finite_priorities(priorities), target_updated

    def update_target(self) -> None:
        """Assign the online weights and buffers to the target network."""
        with torch.no_grad():
            self.target_model.load_state_dict(self.model.state_dict())
