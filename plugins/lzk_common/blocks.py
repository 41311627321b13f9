"""Building blocks of the latent-model networks (MuZero, EfficientZero) and their common
interface :class:`LatentNet` (representation, prediction, SSL projection).

Every normalisation layer that can be folded for inference (BatchNorm) directly follows the
Linear/Conv layer it normalises, inside an ``nn.Sequential``: :func:`lzk_common.inference.fold_batchnorm`
relies on that layout.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn
from torch.nn import functional as F


class _GroupedBatchNorm:
    """BatchNorm that can treat its input as ``groups`` independent batches (mixed into
    :class:`GroupedBatchNorm1d`/``2d``).

    With ``groups = G > 1`` in train mode the input [N·G, C, *S] holds G batches interleaved
    sample-major (row ``n·G + g`` is sample n of batch g). Each batch g is normalised with its
    own statistics, exactly as G separate calls would do, and the running statistics receive the
    G updates in order g = 0 … G−1. This lets the learner run K unroll steps' worth of rows
    through one large matmul per layer instead of K small ones (better GEMM efficiency on CPU)
    without changing what BatchNorm computes. ``groups = 1`` (the default) or eval mode is plain
    BatchNorm.

    Inside :func:`step_ordered_statistics` a grouped call does not fold its G updates at once: it
    records them with the groups' step keys (``group_keys``, from :func:`batch_groups`), and the
    block's exit folds every recorded update of the layer in key order. That lets two grouped
    calls over different rows (the unrolled latents, then the SSL targets) update the running
    statistics in the interleaved order of a step-by-step loop.
    """

    groups: int = 1
    group_keys: tuple | None = None  # sort keys of the G groups (deferred folds only)
    # Deferred updates [(keys, m·μ_g [G, C], m·σ²_g [G, C])], or None: fold at once.
    pending: list[tuple[tuple, torch.Tensor, torch.Tensor]] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.groups
        if g == 1 or not self.training:
            if self.pending and self.training:
                raise RuntimeError("grouped BatchNorm: an ungrouped train-mode call between deferred "
                                   "updates would fold out of order")
            return super().forward(x)  # type: ignore[misc]
        if x.shape[0] % g:
            raise ValueError(f"grouped BatchNorm: {x.shape[0]} rows do not split into {g} equal batches")
        n, c = x.shape[0] // g, x.shape[1]
        # Sample-major rows make [N·G, C, *S] a free view as [N, G·C, *S]: channel g·C + c is
        # channel c of batch g, so BatchNorm's per-channel statistics are per-batch statistics.
        xs = x.reshape(n, g * c, *x.shape[2:])
        weight, bias = _tiled(self.weight, g), _tiled(self.bias, g)  # type: ignore[attr-defined]
        if not self.track_running_stats:  # type: ignore[attr-defined]
            return _unview(F.batch_norm(xs, None, None, weight, bias, True, 0.0, self.eps), x)  # type: ignore[attr-defined]
        if self.momentum is None:  # type: ignore[attr-defined]
            raise ValueError("grouped BatchNorm needs an exponential momentum (momentum=None is unsupported)")
        m = float(self.momentum)  # type: ignore[attr-defined]
        r_mean, r_var = self.running_mean, self.running_var  # type: ignore[attr-defined]
        # Each group's slot becomes (1 − m)·r0 + m·μ_g; folding the slots in order gives the result
        # of G sequential updates: r_g = (1 − m)·r_{g−1} + m·μ_g.
        slot_mean, slot_var = _tiled(r_mean, g), _tiled(r_var, g)
        y = F.batch_norm(xs, slot_mean, slot_var, weight, bias, True, m, self.eps)  # type: ignore[attr-defined]
        with torch.no_grad():
            # G sequential updates r_g = (1 − m)·r_{g−1} + m·μ_g in closed form:
            # r_G = (1 − m)^G·r_0 + Σ_g (1 − m)^(G−1−g)·m·μ_g, where m·μ_g = slot_g − (1 − m)·r_0
            # (a handful of ops instead of 3·G; equal up to rounding).
            decay = 1.0 - m
            powers = _decay_powers(decay, g, r_mean.dtype, r_mean.device)  # [G]
            # Through ``.data``, as BatchNorm's own kernel does: an earlier ungrouped call may
            # have saved these tensors for its backward, which checks their version counters.
            if self.pending is not None:
                keys = self.group_keys if self.group_keys is not None else tuple(range(g))
                if len(keys) != g:
                    raise ValueError(f"grouped BatchNorm: {len(keys)} group keys for {g} groups")
                self.pending.append((keys, slot_mean.view(g, c) - decay * r_mean.data,
                                     slot_var.view(g, c) - decay * r_var.data))
            else:
                for r, slots in ((r_mean.data, slot_mean), (r_var.data, slot_var)):
                    increments = slots.view(g, c) - decay * r  # [G, C] = m·μ_g
                    r.mul_(decay ** g).add_(powers @ increments)
            self.num_batches_tracked.data.add_(g)  # type: ignore[attr-defined]
        return _unview(y, x)

    def fold_pending(self) -> None:
        """Apply the deferred updates in the order of their keys (stable: equal keys keep call
        order), in closed form as one grouped call does: r_N = (1 − m)^N·r_0 + Σ_i (1 − m)^(N−1−i)·inc_i.
        Every deferred call read the same r_0, since nothing folded in between."""
        pending, self.pending = self.pending, None
        if not pending:
            return
        keys = [k for entry in pending for k in entry[0]]
        order = sorted(range(len(keys)), key=keys.__getitem__)
        n, decay = len(keys), 1.0 - float(self.momentum)  # type: ignore[attr-defined]
        r_mean, r_var = self.running_mean, self.running_var  # type: ignore[attr-defined]
        powers = _decay_powers(decay, n, r_mean.dtype, r_mean.device)  # [N]
        with torch.no_grad():
            for r, column in ((r_mean.data, 1), (r_var.data, 2)):
                increments = torch.cat([entry[column] for entry in pending])  # [N, C], call order
                if order != list(range(n)):
                    increments = increments[order]
                r.mul_(decay ** n).add_(powers @ increments)


def _tiled(t: torch.Tensor | None, g: int) -> torch.Tensor | None:
    """[C] → [G·C], ``t`` repeated G times (None stays None), as a copy of the broadcast [G, C]:
    the values and, backward, the gradient (the G slices summed over the broadcast dimension)
    bit for bit those of ``t.repeat(G)``, at less dispatch cost. (A ``cat`` of G references is
    cheaper still but sums the slices in another order: not bit for bit.)"""
    return None if t is None else t.expand(g, *t.shape).reshape(-1)


_POWERS: dict[tuple[float, int, torch.dtype, torch.device], torch.Tensor] = {}


def _decay_powers(decay: float, g: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[(1 − m)^(G−1), …, (1 − m), 1]: the weights of the G folded running-statistics updates,
    built once per (decay, G, dtype, device) — the same tensor ``decay ** arange(G − 1, −1, −1)``
    gives, without two ops per call. Read only (used as a matmul operand)."""
    key = (decay, g, dtype, device)
    powers = _POWERS.get(key)
    if powers is None:
        powers = _POWERS[key] = decay ** torch.arange(g - 1, -1, -1, dtype=dtype, device=device)
    return powers


def _unview(y: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``y`` (a fresh BatchNorm output) reshaped to ``like``'s shape, not recorded by autograd as a
    view. A plain ``view`` would make the in-place ReLU that follows an in-place op on a view, which
    autograd undoes in backward with a zero-filled copy of the base, two copies and a clone of the
    [B·K, C] activations per layer; nothing else holds ``y``, so the unrecorded view is safe."""
    return torch.ops.aten._unsafe_view(y, like.shape)


class GroupedBatchNorm1d(_GroupedBatchNorm, nn.BatchNorm1d):
    """``nn.BatchNorm1d`` with the ``groups`` mode of :class:`_GroupedBatchNorm` (same state dict)."""


class GroupedBatchNorm2d(_GroupedBatchNorm, nn.BatchNorm2d):
    """``nn.BatchNorm2d`` with the ``groups`` mode of :class:`_GroupedBatchNorm` (same state dict)."""


@contextlib.contextmanager
def batch_groups(model: nn.Module, groups: int, keys: Sequence[Any] | None = None) -> Iterator[None]:
    """Within the block, every grouped BatchNorm of ``model`` treats its input as ``groups``
    sample-major interleaved batches (see :class:`_GroupedBatchNorm`); ``keys`` (one sortable key
    per group) place the groups' running-statistics updates inside :func:`step_ordered_statistics`."""
    if keys is not None and len(keys) != groups:
        raise ValueError(f"batch_groups: {len(keys)} keys for {groups} groups")
    norms = [m for m in model.modules() if isinstance(m, _GroupedBatchNorm)]
    for m in norms:
        m.groups, m.group_keys = groups, None if keys is None else tuple(keys)
    try:
        yield
    finally:
        for m in norms:
            m.groups, m.group_keys = 1, None


@contextlib.contextmanager
def step_ordered_statistics(model: nn.Module) -> Iterator[None]:
    """Within the block, the grouped BatchNorms of ``model`` record their running-statistics
    updates; on exit each layer folds its records in the order of the groups' keys (see
    :func:`batch_groups`). E.g. the unrolled latents s_0 … s_K with keys (k, 0) and the SSL
    targets o_1 … o_K with keys (k, 1), batched in two calls, update the prediction network's
    statistics in the order s_0, s_1, o_1, s_2, o_2, … of a loop that handles one step at a time.
    On an exception the records are dropped."""
    norms = [m for m in model.modules() if isinstance(m, _GroupedBatchNorm)]
    for m in norms:
        m.pending = []
    ok = False
    try:
        yield
        ok = True
    finally:
        for m in norms:
            if ok:
                m.fold_pending()
            m.pending = None


def norm1d(kind: str, n: int) -> nn.Module:
    """BatchNorm1d ('BN', groupable) or LayerNorm ('LN') over ``n`` features."""
    return GroupedBatchNorm1d(n) if kind == "BN" else nn.LayerNorm(n)


def norm2d(kind: str, c: int) -> nn.Module:
    """BatchNorm2d ('BN', groupable) or a per-sample LayerNorm over [C, H, W] ('LN', as GroupNorm(1, C))."""
    return GroupedBatchNorm2d(c) if kind == "BN" else nn.GroupNorm(1, c)


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    *,
    norm: str = "BN",
    activation: Callable[[], nn.Module] = nn.ReLU,
    output_norm_act: bool = False,
    zero_last: bool = False,
) -> nn.Sequential:
    """Linear → norm → act for each hidden size, then Linear(→ out_dim) [→ norm → act].

    ``zero_last`` zeroes the last Linear's weight and bias (heads start at uniform logits, i.e. a
    decoded value/reward of exactly 0 and a uniform policy).
    """
    layers: list[nn.Module] = []
    dims = [in_dim, *hidden]
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), norm1d(norm, b), activation()]
    last = nn.Linear(dims[-1], out_dim)
    if zero_last:
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
    layers.append(last)
    if output_norm_act:
        layers += [norm1d(norm, out_dim), activation()]
    return nn.Sequential(*layers)


class ResBlock(nn.Module):
    """Basic residual block: relu(x + BN(conv(relu(BN(conv(x)))))), 3×3 convs without bias."""

    def __init__(self, channels: int, norm: str = "BN") -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), norm2d(norm, channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), norm2d(norm, channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + x)


class BatchNormedLinear(nn.Linear):
    """A Linear whose output goes only into a BatchNorm in train mode (the SSL heads: they never run
    in eval mode). Subtracting the batch mean cancels a per-channel bias exactly, in value and in
    gradient, so the forward pass skips it: a ``mm`` instead of an ``addmm``, which on CPU first
    broadcasts the bias over the [N, out] output, and no column sum of [N, out] in backward. The
    bias stays in the module, frozen, so the parameter layout and the checkpoints are unchanged
    (LightZero's layers have it)."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self.bias.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class SSLHeads(nn.Module):
    """EfficientZero/SimSiam heads (SPEC §2.2): projection D→P→P→P (BN, ReLU; BN on the output)
    and prediction head P→Q→P (BN, ReLU)."""

    def __init__(self, in_dim: int, proj_hidden: int, proj_out: int, pred_hidden: int, pred_out: int) -> None:
        super().__init__()
        # In-place ReLUs: BatchNorm's backward needs its input, not its output, so the [B·K, P]
        # activations can be overwritten (one fewer large buffer per layer).
        self.projection = nn.Sequential(
            BatchNormedLinear(in_dim, proj_hidden), GroupedBatchNorm1d(proj_hidden), nn.ReLU(inplace=True),
            BatchNormedLinear(proj_hidden, proj_hidden), GroupedBatchNorm1d(proj_hidden), nn.ReLU(inplace=True),
            BatchNormedLinear(proj_hidden, proj_out), GroupedBatchNorm1d(proj_out),
        )
        self.prediction_head = nn.Sequential(
            BatchNormedLinear(proj_out, pred_hidden), GroupedBatchNorm1d(pred_hidden), nn.ReLU(inplace=True),
            nn.Linear(pred_hidden, pred_out),
        )

    def forward(self, latent: torch.Tensor, with_grad: bool = True) -> torch.Tensor:
        """[B, *L] → [B, P]. ``with_grad``: prediction_head(projection(x)) (online side);
        otherwise projection(x) detached (target side)."""
        proj = self.projection(latent.flatten(1))
        return self.prediction_head(proj) if with_grad else proj.detach()


class SimNorm(nn.Module):
    """Softmax over consecutive groups of ``group`` features: [*, E] → [*, E] (no parameters)."""

    def __init__(self, group: int) -> None:
        super().__init__()
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        return F.softmax(x.reshape(*shape[:-1], -1, self.group), dim=-1).reshape(shape)


class LatentNet(nn.Module):
    """What every latent-model network has (MuZero, EfficientZero): a representation, a
    prediction network and the optional SSL heads. The recurrent step is the algorithm's.

    Shapes: B batch, O' the (frame-stacked) observation shape, L the latent shape (``[D]`` or
    ``[C, H, W]``), A actions, Nv/Nr the value/reward (or value-prefix) support sizes.
    """

    num_actions: int
    latent_shape: tuple[int, ...]
    value_support_size: int
    reward_support_size: int
    ssl: SSLHeads | None

    def initial_inference(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """obs [B, *O'] → (latent [B, *L], value_logits [B, Nv], policy_logits [B, A])."""
        latent = self.represent(obs)
        value_logits, policy_logits = self.predict(latent)
        return latent, value_logits, policy_logits

    def project(self, latent: torch.Tensor, with_grad: bool = True) -> torch.Tensor:
        """SSL embedding of ``latent`` [B, *L] → [B, P] (see :class:`SSLHeads`)."""
        if self.ssl is None:
            raise RuntimeError("this model was built without SSL heads (model.ssl: false)")
        return self.ssl(latent, with_grad)

    # Implemented by subclasses.
    def represent(self, obs: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def predict(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError
