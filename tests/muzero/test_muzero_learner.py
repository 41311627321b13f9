"""The learner step: 1/K scaling, comm hook order, clipping, target network, optimizers."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from lzk_common.learner import NonFiniteLossError, piecewise_lr_factor
from lzk_muzero.learner import Learner, build_optimizer
from lzk_common.losses import TensorBatch
from lzk_common.latent_loss import LatentLossWeights
from lzk_muzero.loss import muzero_loss
from lzk_muzero.models import build_model
from lzk_common.support import DiscreteSupport
from muzero_helpers import make_batch, randomize, small_policy_cfg

SUPPORT = DiscreteSupport.from_range([-10, 11, 1])


def _learner(**cfg_kw) -> Learner:
    cfg = small_policy_cfg(**cfg_kw)
    model = build_model(cfg.model, (4,), 2)
    target = copy.deepcopy(model).eval()
    return Learner(model, target, cfg, SUPPORT, SUPPORT)


def _state_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa)


def test_gradient_is_scaled_by_one_over_k() -> None:
    k = 4
    # float32 as the reference: on a native-bf16 CPU ``learn_dtype: auto`` would autocast to bf16.
    learner = _learner(unroll_steps=k, grad_clip=1e9, learn_dtype="float32")
    reference = copy.deepcopy(learner.model).train()
    batch = make_batch(8, k, 2, (4,))
    captured = {}

    def hook(params):  # called between backward and clipping: sees the raw gradients
        captured["grads"] = [p.grad.clone() for p in params]

    learner.average_gradients = hook
    learner.step(batch)
    w = learner.weights
    loss = muzero_loss(reference, TensorBatch.from_batch(batch, "cpu"), SUPPORT, SUPPORT, w).loss
    # The learner's parameters: the SSL heads' frozen biases (cancelled by BatchNorm) are not among them.
    expected = torch.autograd.grad(loss, [p for p in reference.parameters() if p.requires_grad], allow_unused=True)
    for g, e in zip(captured["grads"], expected):
        e = torch.zeros_like(g) if e is None else e
        assert torch.allclose(g, e / k, rtol=1e-4, atol=1e-7)


def test_average_gradients_runs_before_clipping() -> None:
    learner = _learner(grad_clip=1e-3)

    def hook(params):  # e.g. a comm backend: here it multiplies instead of averaging
        for p in params:
            p.grad.mul_(1000.0)

    learner.average_gradients = hook
    before = copy.deepcopy(learner.model)
    metrics, _, _ = learner.step(make_batch(8, 3, 2, (4,)))
    grads = [p.grad for p in learner.model.parameters() if p.grad is not None]
    clipped_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    assert clipped_norm.item() == pytest.approx(1e-3, rel=1e-3)  # clipped after the hook
    assert metrics["train/grad_norm"] > 1e-3 * 1000  # the reported norm is the pre-clip, scaled one
    assert not _state_equal(before, learner.model)


def test_target_network_assigned_exactly_every_n_steps() -> None:
    learner = _learner(target_update_freq=3)
    batch = make_batch(8, 3, 2, (4,))
    initial = copy.deepcopy(learner.target_model)
    assigned_at = copy.deepcopy(learner.model)
    for step in range(1, 8):
        _, _, updated = learner.step(batch)
        assert updated == (step % 3 == 0)
        if updated:
            assigned_at = copy.deepcopy(learner.model)
            assert _state_equal(learner.target_model, learner.model)  # buffers (BN stats) included
        else:
            assert not _state_equal(learner.target_model, learner.model)
        expected = initial if step < 3 else assigned_at
        assert _state_equal(learner.target_model, expected)
    assert learner.steps == 7 and not learner.target_model.training


def test_a_few_steps_reduce_the_loss_and_priorities() -> None:
    learner = _learner()
    batch = make_batch(16, 3, 2, (4,), seed=3)
    first, prio0, _ = learner.step(batch)
    assert prio0.shape == (16,) and prio0.dtype == np.float32 and (prio0 >= 1e-6).all()
    for _ in range(30):
        last, prio, _ = learner.step(batch)
    assert last["train/loss_total"] < 0.7 * first["train/loss_total"]
    assert np.mean(prio) < np.mean(prio0)  # the root value moves towards its target
    expected = {"train/loss_total", "train/loss_value", "train/loss_reward", "train/loss_policy", "train/loss_ssl",
                "train/policy_entropy", "train/grad_norm", "train/lr", "train/value_mean", "train/target_value_mean"}
    assert expected <= set(last)
    assert last["train/target_value_mean"] == pytest.approx(float(batch.target_value[:, 0].mean()), rel=1e-5)
    # The visit targets' entropy per step, averaged over the batch and the K + 1 steps.
    tp = np.asarray(batch.target_policy, np.float64)
    entropy = -np.where(tp > 0, tp * np.log(np.where(tp > 0, tp, 1.0)), 0.0).sum(-1).mean()
    assert last["train/target_policy_entropy"] == pytest.approx(entropy, rel=1e-5)
    assert last["train/priority_mean"] == pytest.approx(float(np.mean(prio)), rel=1e-6)


def test_priorities_formula() -> None:
    learner = _learner()
    batch = make_batch(8, 3, 2, (4,))
    model = copy.deepcopy(learner.model).train()
    with torch.no_grad():
        v = SUPPORT.decode(model.initial_inference(torch.from_numpy(batch.obs[:, 0]))[1])
    _, prio, _ = learner.step(batch)
    assert np.allclose(prio, np.abs(v.numpy() - batch.target_value[:, 0]) + 1e-6, atol=1e-5)


def test_nonfinite_loss_raises_or_skips() -> None:
    batch = make_batch(8, 3, 2, (4,))
    batch.target_value[0, 0] = np.nan
    with pytest.raises(NonFiniteLossError):
        _learner().step(batch)
    learner = _learner(on_nonfinite="skip")
    before = copy.deepcopy(learner.model.state_dict())
    batch.obs[1, 0, 0] = np.nan  # NaN input: would poison the BN running statistics
    metrics, prio, _ = learner.step(batch)
    assert metrics["train/skipped_nonfinite"] == 1.0 and learner.steps == 0
    assert all(torch.equal(before[k], v) for k, v in learner.model.state_dict().items())  # buffers too
    assert np.isfinite(prio).all()
    batch = make_batch(8, 3, 2, (4,))
    assert learner.step(batch)[0]["train/skipped_nonfinite"] == 0.0 and learner.steps == 1


def test_piecewise_lr() -> None:
    assert [piecewise_lr_factor(s, 100) for s in (0, 49, 50, 99, 100, 10**6)] == [1, 1, 0.1, 0.1, 0.01, 0.01]
    learner = _learner(lr_piecewise=True, lr_piecewise_threshold=4.0, lr=0.2, optimizer="sgd")
    lrs = [learner.step(make_batch(8, 3, 2, (4,)))[0]["train/lr"] for _ in range(5)]
    assert lrs == pytest.approx([0.2, 0.2, 0.02, 0.02, 0.002])
    assert learner.optimizer.param_groups[0]["momentum"] == 0.9


def test_adamw_decays_linear_and_conv_weights_only() -> None:
    cfg = small_policy_cfg(optimizer="adamw", weight_decay=0.5)
    model = build_model(cfg.model, (4,), 2)
    opt = build_optimizer(model, cfg)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.5 and no_decay["weight_decay"] == 0.0
    linear_weights = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    assert {id(p) for p in decay["params"]} == linear_weights
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_bfloat16_learning_step_is_close_to_float32() -> None:
    # A randomised model: at initialisation every latent is 0 and the SSL cosine compares
    # BN-amplified rounding noise, which no precision reproduces.
    batch = make_batch(16, 3, 2, (4,))
    metrics = {}
    for dtype in ("float32", "bfloat16"):
        learner = _learner(learn_dtype=dtype)
        randomize(learner.model, seed=7, std=0.2)
        metrics[dtype] = learner.step(batch)[0]
    for name in ("train/loss_total", "train/loss_value", "train/loss_ssl", "train/grad_norm"):
        assert np.isfinite(metrics["bfloat16"][name])
        assert metrics["bfloat16"][name] == pytest.approx(metrics["float32"][name], rel=0.05, abs=0.02), name


def test_loss_weights_default_to_lightzero_cartpole() -> None:
    learner = _learner()
    assert learner.weights == LatentLossWeights(value=0.25, reward=1.0, policy=1.0, ssl=2.0, entropy=0.0)
