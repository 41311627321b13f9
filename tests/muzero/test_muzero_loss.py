"""The MuZero loss against an independent per-sample computation (SPEC §2.7)."""
from __future__ import annotations

import math

import numpy as np
import torch

from lzk_muzero.loss import LossWeights, TensorBatch, muzero_loss
from lzk_muzero.models import build_model
from lzk_muzero.support import DiscreteSupport
from muzero_helpers import make_batch, randomize, small_model_cfg

LO, HI = -10, 10  # the small support [-10, 11, 1]


def _h(x: float) -> float:
    return math.copysign(math.sqrt(abs(x) + 1) - 1, x) + 0.001 * x


def _two_hot(x: float) -> np.ndarray:
    x = min(max(x, LO), HI)
    f = math.floor(x)
    out = np.zeros(HI - LO + 1)
    out[f - LO] += 1 - (x - f)
    if f < HI:
        out[f - LO + 1] += x - f
    return out


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    m = z.max()
    return z - m - math.log(np.exp(z - m).sum())


def _ce(logits: torch.Tensor, target: np.ndarray) -> float:
    return float(-(target * _log_softmax(logits.detach().numpy())).sum())


def _entropy(logits: torch.Tensor) -> float:
    lp = _log_softmax(logits.detach().numpy())
    return float(-(np.exp(lp) * lp).sum())


def _cos(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.detach().double().numpy(), y.detach().double().numpy()
    return float(x @ y / (max(np.linalg.norm(x), 1e-5) * max(np.linalg.norm(y), 1e-5)))


def test_loss_equals_independent_computation() -> None:
    b, k, a = 3, 2, 3
    model = build_model(small_model_cfg(), (4,), a)
    randomize(model, seed=5, std=0.2)  # eval mode: outputs do not depend on the batch
    batch = make_batch(b, k, a, (4,), seed=1)
    batch.mask[1, 0] = 0.0  # masks the SSL term of step 0 of sample 1
    w = LossWeights(value=0.25, reward=1.0, policy=1.0, ssl=2.0, entropy=5e-3)
    support = DiscreteSupport.from_range([LO, HI + 1, 1])
    out = muzero_loss(model, TensorBatch.from_batch(batch, "cpu"), support, support, w)

    # Independent: per sample, step by step, with numpy/math formulas.
    totals, parts = [], {"value": [], "reward": [], "policy": [], "ssl": [], "entropy": []}
    with torch.no_grad():
        obs = torch.from_numpy(batch.obs)
        for i in range(b):
            latent, v, p = model.initial_inference(obs[i:i + 1, 0])
            value = _ce(v[0], _two_hot(_h(batch.target_value[i, 0])))
            policy = _ce(p[0], batch.target_policy[i, 0])
            ent = _entropy(p[0])
            reward = ssl = 0.0
            for j in range(k):
                latent, r, v, p = model.recurrent_inference(latent, torch.tensor([batch.actions[i, j]]))
                target_latent = model.initial_inference(obs[i:i + 1, j + 1])[0]
                cos = _cos(model.project(latent, True)[0], model.project(target_latent, False)[0])
                ssl += -cos * batch.mask[i, j]
                value += _ce(v[0], _two_hot(_h(batch.target_value[i, j + 1])))
                policy += _ce(p[0], batch.target_policy[i, j + 1])
                reward += _ce(r[0], _two_hot(_h(batch.target_reward[i, j])))
                ent += _entropy(p[0])
            loss = 2.0 * ssl + policy + 0.25 * value + reward - 5e-3 * ent
            totals.append(batch.weights[i] * loss)
            for name, x in zip(parts, (value, reward, policy, ssl, ent)):
                parts[name].append(x)
    assert np.isclose(out.loss.item(), np.mean(totals), rtol=1e-5)
    for name, values in parts.items():
        assert np.allclose(getattr(out, name).detach().numpy(), values, rtol=1e-5, atol=1e-5), name
    assert parts["ssl"][1] != 0.0  # the unmasked step still counts
    ref_root = support.decode(model.initial_inference(obs[:, 0])[1])
    assert torch.allclose(out.root_value, ref_root)


def test_ssl_weight_zero_skips_ssl_and_padding_policy_is_free() -> None:
    model = build_model(small_model_cfg(), (4,), 2)
    randomize(model, seed=6)
    batch = make_batch(4, 2, 2, (4,))
    batch.target_policy[:, 2] = 0.0  # LightZero zero policy targets past the data: no loss
    w = LossWeights(ssl=0.0)
    out = muzero_loss(model, TensorBatch.from_batch(batch, "cpu"), *(DiscreteSupport.from_range([LO, HI + 1, 1]),) * 2, w)
    assert torch.all(out.ssl == 0.0)
    batch.target_policy[:, 2] = 0.5
    out2 = muzero_loss(model, TensorBatch.from_batch(batch, "cpu"), *(DiscreteSupport.from_range([LO, HI + 1, 1]),) * 2, w)
    assert torch.all(out2.policy > out.policy)
