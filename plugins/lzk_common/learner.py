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
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn

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


def discard_step(optimizer: torch.optim.Optimizer, buffers: Iterable[torch.Tensor],
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


def fused_option(model: nn.Module) -> dict[str, bool]:
    """``{"fused": True}`` where torch has fused optimizer kernels for the model's device (CPU,
    CUDA), else no option."""
    return {"fused": True} if next(model.parameters()).device.type in ("cpu", "cuda") else {}


class LearnerBase:
    """The optimizer, the completed-step count and the non-finite policy of one learner.

    ``steps`` counts completed learner steps (skipped non-finite steps do not count); it and the
    optimizer state are the learner's checkpoint (schedules are functions of ``steps``).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, on_nonfinite: str,
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
