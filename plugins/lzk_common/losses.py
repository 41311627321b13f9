"""Loss pieces every search-based policy uses: the learner batch as tensors, soft cross-entropy,
entropy, the negative cosine of SSL consistency, and the loss weights they share.

Shapes: B batch, K unroll steps, A actions, N support size, O' stacked observation shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F

from lzk_common import numba_rows


@dataclass
class LossWeights:
    """Weights of the loss terms every MuZero-family policy has (subclasses add their own)."""

    value: float = 0.25
    reward: float = 1.0
    policy: float = 1.0
    entropy: float = 5e-3


@dataclass
class TensorBatch:
    """The learner batch as tensors on the model's device (see :class:`lzkernel.Batch`)."""

    obs: torch.Tensor  # [B, K+1, *O'] float32
    actions: torch.Tensor  # [B, K] int64
    mask: torch.Tensor  # [B, K+1] float32
    target_reward: torch.Tensor  # [B, K] float32
    target_value: torch.Tensor  # [B, K+1] float32
    target_policy: torch.Tensor  # [B, K+1, A] float32
    weights: torch.Tensor  # [B] float32
    target_value_prefix: torch.Tensor | None = None  # [B, K] float32 (value-prefix models only)

    @classmethod
    def from_batch(cls, batch: Any, device: torch.device | str) -> TensorBatch:
        """From any object with the numpy fields above (extra fields are ignored)."""

        def t(x: Any, dtype: torch.dtype) -> torch.Tensor:
            return torch.as_tensor(x).to(device=device, dtype=dtype)

        return cls(
            obs=t(batch.obs, torch.float32),
            actions=t(batch.actions, torch.int64),
            mask=t(batch.mask, torch.float32),
            target_reward=t(batch.target_reward, torch.float32),
            target_value=t(batch.target_value, torch.float32),
            target_policy=t(batch.target_policy, torch.float32),
            weights=t(batch.weights, torch.float32),
            target_value_prefix=(None if getattr(batch, "target_value_prefix", None) is None
                                 else t(batch.target_value_prefix, torch.float32)),
        )


def soft_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """−Σ target · log_softmax(logits) over the last axis, in float32: [*S, N] → [*S].

    bfloat16 logits on CPU (autocast) with a float32 target that needs no gradient take the fused
    row kernels (:mod:`lzk_common.numba_rows`: two passes forward, one backward, the gradient
    written in bf16; the value and reward supports' [1536, 601] and [1280, 601] rows), the same
    value up to float32 rounding; everything else, float32 included, takes torch's passes."""
    n = logits.shape[-1]
    if (logits.dtype == torch.bfloat16 and not target.requires_grad and logits.is_contiguous()
            and target.is_contiguous()):
        rows, targets = logits.view(-1, n), target.view(-1, n)
        if numba_rows.ce_supported(rows, targets):
            return _SoftCrossEntropy.apply(rows, targets).view(logits.shape[:-1])
    return -(target * F.log_softmax(logits.float(), dim=-1)).sum(-1)


class _SoftCrossEntropy(torch.autograd.Function):
    """f = −Σ t·log_softmax(z) per row of [R, N] logits z (bf16) and targets t (float32, no
    gradient). Its gradient: ∂f/∂z = Σt · softmax(z) − t, returned in z's dtype."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss, lse, sum_t = numba_rows.row_soft_cross_entropy(logits, target)  # [R] each, float32
        ctx.save_for_backward(logits, target, lse, sum_t)
        return loss

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        logits, target, lse, sum_t = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None
        return numba_rows.row_soft_cross_entropy_grad(logits, target, lse, grad * sum_t, grad), None


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """H(softmax(logits)) over the last axis, in float32: [*S, N] → [*S]."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def negative_cosine(x: torch.Tensor, y: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """−⟨x/‖x‖, y/‖y‖⟩ per row, each norm clamped below at ``eps`` (as ``F.normalize``):
    [B, P] × [B, P] → [B], in float32 (x and y may be bfloat16, as under autocast; float64 stays
    float64).

    Computed as −⟨x, y⟩ / (‖x‖·‖y‖) from three row reductions instead of normalising both
    [B, P] operands (the same value up to rounding, ~1e-7 relative), with the gradient written
    out (:class:`_NegativeCosine`): two passes over [B, P] per operand that needs a gradient,
    where autograd's chain through the norms and the dot product takes five or six (the SSL
    heads' rows are [1280, 1024]). bfloat16 rows on CPU (autocast) take one fused pass forward
    and one per gradient backward in their own storage type (:mod:`lzk_common.numba_rows`),
    without float32 copies."""
    return _NegativeCosine.apply(x, y, eps)


def _at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32, or as it is when its dtype is wider (float64 in gradient checks)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


class _NegativeCosine(torch.autograd.Function):
    """f = −⟨x, y⟩ / (n_x·n_y), n = max(‖·‖, eps), per row. Its gradient:

        ∂f/∂x = (c_x·x − y) / (n_x·n_y),   c_x = ⟨x, y⟩ / n_x²  (0 where ‖x‖ < eps: n_x is constant there)

    and symmetrically for y; each gradient is returned in its operand's dtype."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
        # Fused where it removes the float32 copies of bf16 rows (≈ 6 ms of a ≈ 100 ms bf16 step on
        # two cores, benchmarks/fused_rows_ab.py);
        # float32 rows keep torch's two-thread passes, which the one-thread kernels only matched.
        ctx.fused = torch.bfloat16 in (x.dtype, y.dtype) and numba_rows.supported(x, y)
        if ctx.fused:
            dot, sq_x, sq_y = numba_rows.row_cosine_sums(x, y)  # [B] each, float32
            norm_x, norm_y = sq_x.sqrt(), sq_y.sqrt()
        else:
            xf, yf = _at_least_float32(x), _at_least_float32(y)
            norm_x, norm_y = torch.linalg.vector_norm(xf, dim=-1), torch.linalg.vector_norm(yf, dim=-1)  # [B]
            dot = torch.linalg.vecdot(xf, yf)  # [B]
        ctx.eps = eps
        ctx.save_for_backward(x, y, dot, norm_x, norm_y)
        return -dot / (norm_x.clamp_min(eps) * norm_y.clamp_min(eps))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        x, y, dot, norm_x, norm_y = ctx.saved_tensors
        n_x, n_y = norm_x.clamp_min(ctx.eps), norm_y.clamp_min(ctx.eps)
        scale = grad / (n_x * n_y)  # [B]

        def grad_of(a: torch.Tensor, b: torch.Tensor, norm_a: torch.Tensor, n_a: torch.Tensor) -> torch.Tensor:
            """∂f/∂a · grad = (c_a·a − b)·scale in a's dtype: one pass over [B, P] fused, two in torch."""
            c_a = torch.where(norm_a >= ctx.eps, dot / n_a.square(), 0.0)
            if ctx.fused:
                return numba_rows.row_scaled_sum(a, b, scale * c_a, -scale)
            return torch.addcmul(_at_least_float32(b) * (-scale).unsqueeze(-1), _at_least_float32(a),
                                 (scale * c_a).unsqueeze(-1)).to(a.dtype)

        grad_x = grad_of(x, y, norm_x, n_x) if ctx.needs_input_grad[0] else None
        grad_y = grad_of(y, x, norm_y, n_y) if ctx.needs_input_grad[1] else None
        return grad_x, grad_y, None
