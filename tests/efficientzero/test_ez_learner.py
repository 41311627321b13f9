"""EfficientZero's unrolled loss and learner: the LSTM state restarts every H unroll steps (as
the value-prefix targets do), value-prefix targets are required, the learner step's metrics,
priorities and target schedule; both model families."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ez_helpers import A, OBS, make_policy, small_model_cfg
from lzk_common.latent_loss import LatentLossWeights
from lzk_common.losses import TensorBatch, soft_cross_entropy
from lzk_efficientzero.loss import efficientzero_loss
from lzk_efficientzero.models import build_model
from lzk_replay.targets import value_prefix
from muzero_helpers import make_batch, randomize

K = 5


def _batch(horizon: int, b: int = 8, seed: int = 0, obs_shape=OBS):
    batch = make_batch(b, K, A, obs_shape, seed=seed)
    batch.target_value_prefix = value_prefix(batch.target_reward, horizon)
    return batch


def _manual_prefix_loss(model, tb: TensorBatch, support, horizon: int | None) -> torch.Tensor:
    """Σ_k CE(prefix logits, φh(target_value_prefix[:, k])) with the state zeroed after step k
    when (k + 1) % horizon == 0 (never when horizon is None), step by step."""
    latent = model.represent(tb.obs[:, 0])
    state = model.initial_state(latent.shape[0], "cpu")
    total = torch.zeros(latent.shape[0])
    targets = support.encode(tb.target_value_prefix)
    for k in range(K):
        latent, state, vp_logits, _, _ = model.recurrent_inference(latent, state, tb.actions[:, k])
        total = total + soft_cross_entropy(vp_logits, targets[:, k])
        if horizon is not None and (k + 1) % horizon == 0:
            state = tuple(torch.zeros_like(s) for s in state)
    return total


@pytest.mark.parametrize("horizon", [1, 2, 3])
def test_the_unroll_restarts_the_lstm_state_every_horizon(horizon: int) -> None:
    from lzk_common.support import DiscreteSupport

    model = build_model(small_model_cfg(), OBS, A)
    randomize(model, seed=horizon)  # eval mode: the per-step BN statistics are the running ones
    support = DiscreteSupport.from_range([-10, 11, 1])
    tb = TensorBatch.from_batch(_batch(horizon), "cpu")
    with torch.no_grad():
        out = efficientzero_loss(model, tb, support, support, LatentLossWeights(), horizon)
        want = _manual_prefix_loss(model, tb, support, horizon)
        never = _manual_prefix_loss(model, tb, support, None)
    torch.testing.assert_close(out.reward, want, rtol=1e-5, atol=1e-5)
    assert (want - never).abs().max() > 1e-3  # the resets matter with K > H (tolerance above: 1e-5)


def test_the_loss_needs_value_prefix_targets() -> None:
    pol = make_policy()
    with pytest.raises(ValueError, match="value-prefix targets"):
        pol.learn(make_batch(8, K, A, OBS))


@pytest.mark.parametrize("kind", ["mlp", "conv"])
def test_learn_step_metrics_priorities_and_target_schedule(kind: str) -> None:
    obs_shape = OBS if kind == "mlp" else (2, 5, 5)
    torch.manual_seed(0)
    from lzk_efficientzero.policy import EfficientZeroPolicy
    from ez_helpers import small_policy_cfg

    cfg = small_policy_cfg(unroll_steps=K, target_update_freq=2, model={"type": kind, "latent_dim": 8})
    pol = EfficientZeroPolicy(cfg, obs_shape, A, seed=0)
    batch = _batch(cfg.lstm_horizon_len, obs_shape=obs_shape)
    losses = []
    for i in range(4):
        metrics, prio = pol.learn(batch)
        losses.append(metrics["train/loss_total"])
        assert prio.shape == (8,) and np.isfinite(prio).all() and (prio > 0).all()
        same = all(torch.equal(p, q) for p, q in zip(pol.model.state_dict().values(),
                                                      pol.target_model.state_dict().values()))
        assert same == (i % 2 == 1)  # assigned after every 2nd step
    for name in ("loss_value_prefix", "loss_value", "loss_policy", "loss_ssl", "grad_norm", "lr"):
        assert np.isfinite(metrics[f"train/{name}"])
    assert "train/loss_reward" not in metrics
    assert losses[-1] < losses[0]


def test_numba_step_agrees_with_torch_across_resets() -> None:
    """Rewards (from prefixes), values, logits and the stored states of the compiled step match
    the torch path within float32 rounding, four levels deep with H = 2."""
    pols = {b: make_policy(seed=5, std=0.3, search_backend=b) for b in ("torch", "numba")}
    obs = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    outs = {}
    for backend, pol in pols.items():
        snap = pol._snapshot("online")
        assert (snap.compiled is not None) == (backend == "numba")
        latent, value, logits = snap.initial(torch.as_tensor(obs))
        step = snap.begin(latent, 8)
        rows, parent = [value, logits], np.arange(6)
        for depth in range(1, 5):
            child = np.arange(6) + 6 * depth  # node index = depth: slot depth·B + b
            out = step(parent, np.arange(6) % A, child)
            rows += [out.reward, out.value, out.prior_logits, *snap.node_state(child)]
            parent = child
        outs[backend] = rows
    for got, ref in zip(outs["numba"], outs["torch"]):
        ref = np.asarray(ref, np.float64)
        assert np.all(np.abs(np.asarray(got, np.float64) - ref) <= 2e-5 * np.maximum(1.0, np.abs(ref)))


def test_a_nonfinite_loss_raises_or_skips_the_step() -> None:
    """RELIABILITY R7 for EfficientZero: a NaN value-prefix target raises by default; with
    ``on_nonfinite: skip`` the step changes nothing of the model and is reported."""
    from lzk_common.learner import NonFiniteLossError

    batch = _batch(2)
    batch.target_value_prefix[0, 0] = np.nan
    with pytest.raises(NonFiniteLossError):
        make_policy().learn(batch)
    pol = make_policy(on_nonfinite="skip")
    before = {k: v.clone() for k, v in pol.model.state_dict().items()}
    metrics, _ = pol.learn(batch)
    assert metrics["train/skipped_nonfinite"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in pol.model.state_dict().items())
    assert pol.learn(_batch(2, seed=1))[0]["train/skipped_nonfinite"] == 0.0
