"""Shared helpers of the lzk_muzero tests: small configs, random batches, randomised models."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from lzk_muzero.config import MuZeroModelConfig, MuZeroPolicyConfig


#: The CartPole MLP layout at a fraction of the width (fast tests), shared by the latent-model tests.
SMALL_MODEL = dict(latent_dim=16, reward_head_hidden=[8], value_head_hidden=[8], policy_head_hidden=[8],
                   value_support_range=[-10, 11, 1], reward_support_range=[-10, 11, 1],
                   proj_hidden=32, proj_out=32, pred_hidden=16, pred_out=32)


def small_model_cfg(**kw) -> MuZeroModelConfig:
    """The CartPole MLP layout at a fraction of the width (fast tests)."""
    return MuZeroModelConfig(**{**SMALL_MODEL, **kw})


def small_policy_cfg(**kw) -> MuZeroPolicyConfig:
    model_kw = kw.pop("model", {})
    base = dict(model=small_model_cfg(**model_kw), num_simulations=8, unroll_steps=3, batch_size=16)
    base.update(kw)
    return MuZeroPolicyConfig(**base)


def make_batch(b: int, k: int, a: int, obs_shape: tuple[int, ...], seed: int = 0, **override) -> SimpleNamespace:
    """A random learner batch with the fields of ``lzk_replay``'s ``Batch``."""
    rng = np.random.default_rng(seed)
    policy = rng.random((b, k + 1, a)).astype(np.float32)
    policy /= policy.sum(-1, keepdims=True)
    mask = np.ones((b, k + 1), np.float32)
    mask[0, k - 1:] = 0.0  # one sample whose episode ends inside the unroll
    batch = SimpleNamespace(
        obs=rng.normal(size=(b, k + 1, *obs_shape)).astype(np.float32),
        actions=rng.integers(0, a, size=(b, k)).astype(np.int64),
        mask=mask,
        target_reward=rng.uniform(-2, 2, size=(b, k)).astype(np.float32),
        target_value=rng.uniform(-5, 8, size=(b, k + 1)).astype(np.float32),
        target_policy=policy,
        weights=rng.uniform(0.5, 1.5, size=b).astype(np.float32),
        indices=np.arange(b, dtype=np.int64),
        to_play=np.full((b, k + 1), -1, np.int64),
        legal=np.ones((b, k + 1, a), bool),
    )
    for name, value in override.items():
        setattr(batch, name, value)
    return batch


def randomize(model: torch.nn.Module, seed: int = 0, obs_shape: tuple[int, ...] = (4,), std: float = 0.3) -> None:
    """Random weights (zero-initialised layers included) and non-trivial BN running statistics,
    so that folding and eval-mode tests exercise every parameter. Leaves the model in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.5)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    model.eval()
