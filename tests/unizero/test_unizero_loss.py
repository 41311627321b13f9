"""The UniZero loss (SPEC §4.2) against an independent scalar computation on a hand-built batch."""
from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import numpy as np
import torch

from lzk_common.losses import TensorBatch
from lzk_common.support import DiscreteSupport
from lzk_unizero.loss import UniZeroLossWeights, unizero_loss
from unizero_helpers import NUM_ACTIONS, OBS_DIM, random_model, tiny_cfg

LO, HI, EPS_LS, ALPHA = -10, 10, 0.1, 5e-3


def _twohot_smoothed(x: float) -> np.ndarray:
    """(1 − ε)·φ(h(x)) + ε/N written out by hand."""
    h = math.copysign(math.sqrt(abs(x) + 1) - 1, x) + 0.001 * x
    h = min(max(h, LO), HI)
    low = math.floor(h)
    p = np.zeros(HI - LO + 1)
    p[low - LO] += 1 - (h - low)
    if low < HI:
        p[low - LO + 1] += h - low
    return (1 - EPS_LS) * p + EPS_LS / p.size


def _ce(logits: np.ndarray, target: np.ndarray) -> float:
    z = logits - logits.max()
    logp = z - math.log(np.exp(z).sum())
    return float(-(target * logp).sum())


def _entropy(logits: np.ndarray) -> float:
    z = logits - logits.max()
    p = np.exp(z) / np.exp(z).sum()
    return float(-(p * np.log(p)).sum())


def _inv_h(y: float) -> float:
    return math.copysign(((math.sqrt(1 + 4 * 0.001 * (abs(y) + 1 + 0.001)) - 1) / (2 * 0.001)) ** 2 - 1, y)


def _batch(rng: np.random.Generator, B: int = 2, K: int = 3) -> SimpleNamespace:
    mask = np.ones((B, K + 1), np.float32)
    mask[1, 2:] = 0.0  # sample 1: steps t+2, t+3 are padding
    pol = rng.random((B, K + 1, NUM_ACTIONS)).astype(np.float32)
    return SimpleNamespace(
        obs=rng.normal(size=(B, K + 1, OBS_DIM)).astype(np.float32),
        actions=rng.integers(0, NUM_ACTIONS, size=(B, K)),
        mask=mask,
        target_reward=rng.uniform(-3, 3, size=(B, K)).astype(np.float32),
        target_value=rng.uniform(-20, 20, size=(B, K + 1)).astype(np.float32),
        target_policy=pol / pol.sum(-1, keepdims=True),
        weights=np.array([0.7, 1.6], np.float32),
    )


def _setup():
    cfg = tiny_cfg(dropout=0.0, hidden_norm="LN")
    model = random_model(cfg, seed=1).train()
    target = random_model(cfg, seed=2).train()
    support = DiscreteSupport(LO, HI + 1)
    return model, target, support


def test_loss_matches_an_independent_computation():
    model, target, support = _setup()
    batch = _batch(np.random.default_rng(0))
    tb = TensorBatch.from_batch(batch, "cpu")
    out = unizero_loss(model, target, tb, support, support, UniZeroLossWeights())

    B, K = batch.actions.shape
    with torch.no_grad():
        seq = model.forward_sequence(tb.obs[:, :K], tb.actions)
        z = target.encode(tb.obs[:, :K])[:, 1:].numpy()
    nl, rl, vl, pl = (x.detach().numpy().astype(np.float64) for x in (seq.next_latent, seq.reward, seq.value, seq.policy))
    m = batch.mask
    sums = {"obs": np.zeros(B), "reward": np.zeros(B), "value": np.zeros(B), "policy": np.zeros(B)}
    count, count_obs, ent_sum, prio = 0.0, 0.0, 0.0, np.zeros(B)
    for b in range(B):
        valid = 0
        for k in range(K):
            if k < K - 1 and m[b, k + 1]:
                sums["obs"][b] += float(((nl[b, k] - z[b, k]) ** 2).mean())
                count_obs += 1
            if not m[b, k]:
                continue
            count += 1
            valid += 1
            sums["reward"][b] += _ce(rl[b, k], _twohot_smoothed(float(batch.target_reward[b, k])))
            sums["value"][b] += _ce(vl[b, k], _twohot_smoothed(float(batch.target_value[b, k])))
            h_pi = _entropy(pl[b, k])
            sums["policy"][b] += _ce(pl[b, k], batch.target_policy[b, k].astype(np.float64)) - ALPHA * h_pi
            ent_sum += h_pi
            expect = float((np.exp(vl[b, k] - vl[b, k].max()) / np.exp(vl[b, k] - vl[b, k].max()).sum())
                           @ np.arange(LO, HI + 1))
            prio[b] += abs(_inv_h(expect) - float(batch.target_value[b, k]))
        prio[b] = prio[b] / valid + 1e-6
    scal = {"obs": sums["obs"].sum() / count_obs}
    scal.update({c: sums[c].sum() / count for c in ("reward", "value", "policy")})
    per_sample = (10 * sums["obs"] * B / count_obs
                  + (sums["reward"] + sums["policy"] + 0.5 * sums["value"]) * B / count)
    expected_loss = float((batch.weights * per_sample).mean())

    for c in scal:
        assert math.isclose(float(getattr(out, c).detach()), scal[c], rel_tol=1e-5, abs_tol=1e-6), c
    assert math.isclose(float(out.entropy), ent_sum / count, rel_tol=1e-5)
    np.testing.assert_allclose(out.per_sample.detach().numpy(), per_sample, rtol=1e-5)
    assert math.isclose(float(out.loss.detach()), expected_loss, rel_tol=1e-5)
    np.testing.assert_allclose(out.priorities.numpy(), prio, rtol=1e-4)
    # With uniform IS weights the loss is LightZero's 10·obs + reward + policy + 0.5·value.
    tb.weights = torch.ones(B)
    uniform = unizero_loss(model, target, tb, support, support, UniZeroLossWeights())
    weighted = 10 * scal["obs"] + scal["reward"] + scal["policy"] + 0.5 * scal["value"]
    assert math.isclose(float(uniform.loss.detach()), weighted, rel_tol=1e-5)


def test_padding_is_excluded_from_the_loss_and_priorities():
    model, target, support = _setup()
    batch = _batch(np.random.default_rng(3))
    base = unizero_loss(model, target, TensorBatch.from_batch(batch, "cpu"), support, support, UniZeroLossWeights())
    garbage = copy.deepcopy(batch)
    # Sample 1 is padding from step 2 on: inputs and targets there must not matter.
    garbage.obs[1, 2:] = 50.0
    garbage.actions[1, 2:] = (garbage.actions[1, 2:] + 1) % NUM_ACTIONS
    garbage.target_reward[1, 2:] = 1e4
    garbage.target_value[1, 2:] = -1e4
    garbage.target_policy[1, 2:] = np.eye(NUM_ACTIONS)[0]
    other = unizero_loss(model, target, TensorBatch.from_batch(garbage, "cpu"), support, support,
                         UniZeroLossWeights())
    for name in ("loss", "obs", "reward", "policy", "value", "per_sample", "priorities"):
        torch.testing.assert_close(getattr(other, name), getattr(base, name), rtol=0, atol=1e-6)
    # A real step does matter (the test would pass vacuously otherwise).
    garbage.target_value[1, 1] += 5.0
    moved = unizero_loss(model, target, TensorBatch.from_batch(garbage, "cpu"), support, support,
                         UniZeroLossWeights())
    assert abs(float(moved.value.detach()) - float(base.value.detach())) > 1e-4


def test_loss_gradients_reach_the_online_model_only():
    model, target, support = _setup()
    out = unizero_loss(model, target, TensorBatch.from_batch(_batch(np.random.default_rng(4)), "cpu"),
                       support, support, UniZeroLossWeights())
    out.loss.backward()
    assert all(p.grad is None for p in target.parameters())
    assert model.encoder.net[0].weight.grad.abs().sum() > 0
    assert model.act_emb.weight.grad.abs().sum() > 0


def test_the_target_encoder_normalises_over_all_k_observations():
    """LightZero's target tokenizer encodes the K observations of the sequence and drops the first
    (compute_labels_world_model): with BatchNorm in train mode, o_0's rows are in the statistics
    the labels are normalised with and that the target's running statistics are updated from."""
    cfg = tiny_cfg(dropout=0.0, hidden_norm="BN")
    model, target = random_model(cfg, seed=1).train(), random_model(cfg, seed=2).train()
    support = DiscreteSupport(LO, HI + 1)
    batch = _batch(np.random.default_rng(5), B=4, K=3)
    batch.mask[:] = 1.0
    batch.weights = np.ones(4, np.float32)
    batch.obs[:, 0] += 3.0  # o_0 unlike the others: leaving it out moves the BN statistics
    tb = TensorBatch.from_batch(batch, "cpu")
    reference = copy.deepcopy(target)
    out = unizero_loss(model, target, tb, support, support, UniZeroLossWeights())
    K = batch.actions.shape[1]
    with torch.no_grad():
        seq = model.forward_sequence(tb.obs[:, :K], tb.actions)
        labels = reference.encode(tb.obs[:, :K])[:, 1:]
    expected = float(((seq.next_latent[:, : K - 1] - labels) ** 2).mean())
    assert math.isclose(float(out.obs.detach()), expected, rel_tol=1e-5)
    for ours, ref in zip(target.buffers(), reference.buffers()):
        torch.testing.assert_close(ours, ref)
