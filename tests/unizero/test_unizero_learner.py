"""The learner step: AdamW groups, EMA target update on parameters only (SPEC §4.3), a smoke fit."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from lzk_common.support import DiscreteSupport
from lzk_unizero.config import UniZeroPolicyConfig
from lzk_unizero.learner import Learner, build_optimizer, ema_update
from test_unizero_loss import _batch
from unizero_helpers import ATOMS, NUM_ACTIONS, OBS_DIM, tiny_cfg
from lzk_unizero.model import WorldModel


def _pair(cfg):
    model = WorldModel(cfg.model, (OBS_DIM,), NUM_ACTIONS, ATOMS, ATOMS)
    target = copy.deepcopy(model).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    return model, target


def _policy_cfg(**kw):
    return UniZeroPolicyConfig(model=tiny_cfg(), **kw)


def test_adamw_decays_matrices_only():
    cfg = _policy_cfg()
    model, _ = _pair(cfg)
    opt = build_optimizer(model, cfg)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 1e-4 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert decay["betas"] == (0.9, 0.95) and decay["lr"] == 1e-4


def test_ema_update_touches_parameters_only():
    cfg = _policy_cfg()
    online, target = _pair(cfg)
    with torch.no_grad():
        for p in online.parameters():
            p.add_(torch.randn_like(p))
        for b in online.buffers():
            b.add_(3)  # BN running statistics (and num_batches_tracked) differ between the two models
    before_t = {k: v.clone() for k, v in target.state_dict().items()}
    ema_update(target, online, 0.05)
    params = dict(online.named_parameters())
    buffers = {k for k, _ in target.named_buffers()}
    assert buffers  # the BN encoder has running statistics
    for name, value in target.state_dict().items():
        if name in buffers:
            assert torch.equal(value, before_t[name]), name
        else:
            torch.testing.assert_close(value, 0.95 * before_t[name] + 0.05 * params[name].detach())


def test_learner_step_applies_ema_after_the_optimizer_step_and_returns_priorities():
    cfg = _policy_cfg()
    model, target = _pair(cfg)
    support = DiscreteSupport(-10, 11)
    learner = Learner(model, target, cfg, support, support)
    batch = _batch(np.random.default_rng(0))
    t_before = {k: p.detach().clone() for k, p in target.named_parameters()}
    metrics, prio = learner.step(batch)
    for name, p in target.named_parameters():
        torch.testing.assert_close(p, 0.95 * t_before[name] + 0.05 * dict(model.named_parameters())[name].detach())
    assert not target.training and learner.steps == 1
    assert prio.shape == (2,) and np.all(prio > 0)
    assert {"train/loss_total", "train/loss_obs", "train/grad_norm"} <= set(metrics)
    # named as the other algorithms' (docs/metrics.md): the new priorities' mean, the visit targets' entropy
    assert metrics["train/priority_mean"] == pytest.approx(float(prio.mean()))
    k = batch.actions.shape[1]
    mask = batch.mask[:, :k]
    pi = batch.target_policy[:, :k]
    ent = -(pi * np.log(np.where(pi > 0, pi, 1.0))).sum(-1)
    assert metrics["train/target_policy_entropy"] == pytest.approx(float((ent * mask).sum() / mask.sum()), rel=1e-5)


def test_learner_fits_a_fixed_batch():
    cfg = _policy_cfg(lr=3e-3)
    cfg.model.dropout = 0.0
    model, target = _pair(cfg)
    support = DiscreteSupport(-10, 11)
    learner = Learner(model, target, cfg, support, support)
    batch = _batch(np.random.default_rng(1))
    first = learner.step(batch)[0]["train/loss_total"]
    for _ in range(40):
        last = learner.step(batch)[0]["train/loss_total"]
    assert last < 0.7 * first


def test_a_nonfinite_loss_raises_or_skips_the_step():
    """RELIABILITY R7 for UniZero's learner: a NaN target raises by default; with
    ``on_nonfinite: skip`` the step changes no weight (nor the EMA target) and is reported."""
    import pytest

    from lzk_common.learner import NonFiniteLossError

    support = DiscreteSupport(-10, 11)
    batch = _batch(np.random.default_rng(2))
    batch.target_value[0, 0] = np.nan
    with pytest.raises(NonFiniteLossError):
        Learner(*_pair(_policy_cfg()), _policy_cfg(), support, support).step(batch)
    cfg = _policy_cfg(on_nonfinite="skip")
    model, target = _pair(cfg)
    learner = Learner(model, target, cfg, support, support)
    before = copy.deepcopy(model.state_dict()), copy.deepcopy(target.state_dict())
    metrics, prio = learner.step(batch)
    assert metrics["train/skipped_nonfinite"] == 1.0 and learner.steps == 0
    for now, then in zip((model.state_dict(), target.state_dict()), before):
        assert all(torch.equal(then[k], v) for k, v in now.items())
    metrics, _ = learner.step(_batch(np.random.default_rng(3)))
    assert metrics["train/skipped_nonfinite"] == 0.0 and learner.steps == 1
