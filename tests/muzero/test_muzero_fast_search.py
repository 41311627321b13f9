"""The compiled search backend (``lzk_muzero.numba_mlp``) against the torch path.

Exactness: latents and policy logits match torch's float32 forward within 1e-5·max(1, |x|).
Decoded rewards/values are compared with the same torch modules run in float64: the torch
float32 decode (softmax, then a float32 dot with a ±300 support) is itself off by up to ~1e-4
on near-uniform 601-atom logits, so the backend must be within 1e-5·max(1, |x|) of float64 and
at least as close to it as the torch float32 path. Searches with a fixed seed give the same
visit counts with either backend.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from lzk_muzero.config import MuZeroModelConfig, MuZeroPolicyConfig
from lzk_common import numba_mlp
from lzk_common.inference import fold_batchnorm
from lzk_common.numba_mlp import decode_row, dense, exp_f32
from lzk_muzero.inference import SearchNetwork
from lzk_muzero.models import build_model
from lzk_muzero.numba_mlp import NumbaMLP, folded_residual_mlp, pack_weights
from lzk_muzero.policy import MuZeroPolicy
from lzk_common.support import DiscreteSupport, inverse_scalar_transform
from muzero_helpers import make_batch, randomize, small_model_cfg, small_policy_cfg
from numba import njit


def _close(got: np.ndarray, ref: np.ndarray, tol: float = 1e-5) -> bool:
    ref = np.asarray(ref, np.float64)
    return bool(np.all(np.abs(np.asarray(got, np.float64) - ref) <= tol * np.maximum(1.0, np.abs(ref))))


def _decode64(logits: torch.Tensor, support: DiscreteSupport) -> np.ndarray:
    p = torch.softmax(logits.double(), -1)
    return inverse_scalar_transform(p @ support.values.double()).numpy()


# --------------------------------------------------------------------------------------------
# kernels

@njit(cache=False)
def _exp_all(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = exp_f32(x[i])
    return out


@njit(cache=False)
def _decode_all(z: np.ndarray, support: np.ndarray) -> np.ndarray:
    out = np.empty(z.shape[0], np.float32)
    e = np.empty(z.shape[1], np.float32)
    for r in range(z.shape[0]):
        out[r] = decode_row(z[r], support, e)
    return out


def test_exp_is_within_3_ulp() -> None:
    x = np.concatenate([np.linspace(-87.3, 0, 200001), [-0.0, -1e-30, 1.0, 10.0]]).astype(np.float32)
    ref = np.exp(x.astype(np.float64))
    assert np.max(np.abs(_exp_all(x) - ref) / ref) < 3 * 2.0 ** -23
    assert np.isnan(_exp_all(np.array([np.nan], np.float32))[0])
    assert 0.0 < _exp_all(np.array([-200.0], np.float32))[0] < 1.2e-38  # clamped, never inf/NaN


@pytest.mark.parametrize("start,stop,step", [(-300, 301, 1), (-10, 11, 1), (-2, 2.5, 0.5)])
def test_decode_row_matches_float64(start: float, stop: float, step: float) -> None:
    support = DiscreteSupport(start, stop, step)
    g = torch.Generator().manual_seed(0)
    n = support.size
    logits = torch.cat([
        torch.randn(8, n, generator=g) * 0.01,           # near uniform: the sum cancels most
        torch.randn(8, n, generator=g) * 3.0,            # peaked
        torch.randn(4, n, generator=g) * 3.0 + 500.0,    # large offsets (max subtraction)
        torch.full((1, n), -1e4).index_fill_(1, torch.tensor([n // 3]), 0.0),  # one-hot
    ]).float()
    got = _decode_all(np.ascontiguousarray(logits.numpy()), support.values.double().numpy())
    ref = _decode64(logits, support)
    assert _close(got, ref), np.abs(got - ref).max()
    z = logits[:1].numpy().copy()
    z[0, 5] = np.nan
    assert np.isnan(_decode_all(z, support.values.double().numpy())[0])


@pytest.mark.parametrize("n", [1, 3, 4, 8, 9])
@pytest.mark.parametrize("k,n_out", [(130, 128), (32, 601), (7, 5)])
def test_dense_matches_torch_linear(n: int, k: int, n_out: int) -> None:
    g = torch.Generator().manual_seed(n * 1000 + k)
    lin = torch.nn.Linear(k, n_out)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n_out, k, generator=g) * 0.2)
        lin.bias.copy_(torch.randn(n_out, generator=g))
    x = torch.randn(n, k, generator=g)
    n_pad = -(-n_out // 16) * 16
    panels = lin.weight.detach().numpy()
    packed = np.zeros((n_pad, k), np.float32)
    packed[:n_out] = panels
    bias = np.zeros(n_pad, np.float32)
    bias[:n_out] = lin.bias.detach().numpy()
    params = np.concatenate([packed.reshape(n_pad // 16, 16, k).transpose(0, 2, 1).reshape(-1), bias])
    layer = np.array([0, k, n_pad, packed.size, 1], np.int64)
    with torch.no_grad():
        ref = lin(x).numpy()
    for relu in (False, True):
        out = np.full((n, n_pad), np.nan, np.float32)
        dense(x.numpy(), params, layer if relu else layer * np.array([1, 1, 1, 1, 0]), out)
        assert _close(out[:, :n_out], np.maximum(ref, 0) if relu else ref)
        assert (out[:, n_out:] == 0).all()  # padded columns are exactly zero


# --------------------------------------------------------------------------------------------
# the recurrent step

def _folded(cfg: MuZeroModelConfig, seed: int, num_actions: int = 3, std: float = 0.3) -> torch.nn.Module:
    model = build_model(cfg, (4,), num_actions)
    randomize(model, seed=seed, std=std)
    return fold_batchnorm(model, drop=(model.ssl,))


CASES = {
    "small": dict(cfg=small_model_cfg(), actions=3, std=0.3),
    "uneven_heads": dict(cfg=small_model_cfg(latent_dim=20, reward_head_hidden=[5], value_head_hidden=[12],
                                             policy_head_hidden=[17], reward_support_range=[-5, 6, 1]),
                         actions=4, std=0.3),
    "cartpole": dict(cfg=MuZeroModelConfig(), actions=2, std=0.1),
}


@pytest.mark.parametrize("case,chunk_rows", [(c, 128) for c in sorted(CASES)] + [("small", 4)])
def test_step_matches_torch(case: str, chunk_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numba_mlp, "CHUNK_ROWS", chunk_rows)  # 4: 9 trees run in 3 compiled calls
    c = CASES[case]
    net = _folded(c["cfg"], seed=5, num_actions=c["actions"], std=c["std"])
    assert folded_residual_mlp(net)
    vs = DiscreteSupport.from_range(c["cfg"].value_support_range)
    rs = DiscreteSupport.from_range(c["cfg"].reward_support_range)
    rec = NumbaMLP(net, vs, rs)
    net64 = copy.deepcopy(net).double()
    rng = np.random.default_rng(1)
    b, d = 9, net.latent_shape[0]
    root = rng.normal(size=(b, d)).astype(np.float32)
    # Root inference: the prediction network.
    value, logits = rec.predict(root)
    with torch.no_grad():
        v, p = net.predict(torch.from_numpy(root))
        v64, _ = net64.predict(torch.from_numpy(root).double())
    assert _close(logits, p.numpy()) and _close(value, _decode64(v64, vs))
    rec.begin(root, num_simulations=3)
    latents = {(0, i): root[i] for i in range(b)}
    # Three simulations: all trees, then subsets of trees expanding from nodes 0 and 1.
    calls = [(np.arange(b), np.zeros(b, int)), (np.array([1, 3, 4, 8]), np.array([1, 0, 1, 1])),
             (np.array([1, 6, 8]), np.array([2, 1, 2]))]
    for sim, (trees, parents) in enumerate(calls):
        action = rng.integers(0, c["actions"], len(trees))
        reward, value, logits = rec(parents * b + trees, action, (sim + 1) * b + trees)
        s = torch.from_numpy(np.stack([latents[(p, t)] for p, t in zip(parents, trees)]))
        with torch.no_grad():
            nxt, r, v, p = net.recurrent_inference(s, torch.from_numpy(action))
            _, r64, v64, _ = net64.recurrent_inference(s.double(), torch.from_numpy(action))
        new = rec.store[(sim + 1) * b + trees]
        assert _close(new, nxt.numpy()) and _close(logits, p.numpy())
        for got, f32, f64, sup in ((reward, r, r64, rs), (value, v, v64, vs)):
            ref = _decode64(f64, sup)
            torch_err = np.abs(sup.decode(f32).numpy() - ref)
            assert _close(got, ref), np.abs(got - ref).max()
            assert (np.abs(got - ref) <= torch_err + 1e-6 * np.maximum(1, np.abs(ref))).all()
        assert reward.dtype == value.dtype == logits.dtype == np.float32 and logits.shape == (len(trees), c["actions"])
        latents.update({(sim + 1, t): new[i] for i, t in enumerate(trees)})


def test_backend_selection_and_fallbacks() -> None:
    vs = rs = DiscreteSupport.from_range([-10, 11, 1])
    mlp = build_model(small_model_cfg(), (4,), 3)
    assert SearchNetwork(mlp, vs, rs, backend="numba").compiled is not None
    assert SearchNetwork(mlp, vs, rs, backend="torch").compiled is None
    plain = build_model(small_model_cfg(res_connection_in_dynamics=False), (4,), 3)
    conv = build_model(small_model_cfg(type="conv", latent_dim=8, head_channels=2), (2, 5, 5), 3)
    for model in (plain, conv):  # layouts the backend does not know: the torch path
        assert SearchNetwork(model, vs, rs, backend="numba").compiled is None
    with pytest.raises(ValueError):
        SearchNetwork(mlp, vs, rs, backend="jax")
    with pytest.raises(ValueError):
        NumbaMLP(mlp, vs, rs)  # not folded: BatchNorm still there
    assert MuZeroPolicyConfig().search_backend == "numba"
    params, layers = pack_weights(fold_batchnorm(mlp))
    assert params.dtype == np.float32 and params.size == layers[-1, 3] + layers[-1, 2]
    assert (layers[:, 2] % 16 == 0).all() and (layers[:, 0] + layers[:, 1] * layers[:, 2] == layers[:, 3]).all()


# --------------------------------------------------------------------------------------------
# whole searches: same visit counts with either backend

def _policy_pair(model_kw: dict, num_actions: int, **cfg_kw) -> list[MuZeroPolicy]:
    pols = []
    for backend in ("torch", "numba"):
        torch.manual_seed(0)
        cfg = small_policy_cfg(model=dict(model_kw), search_backend=backend, **cfg_kw)
        pol = MuZeroPolicy(cfg, (4,), num_actions, seed=7)
        randomize(pol.model, seed=11, std=0.3)
        pol.learner.update_target()
        pol.mark_weights_changed()
        pols.append(pol)
    return pols


@pytest.mark.parametrize("model_kw,num_actions", [({}, 3), ({"latent_dim": 128, "value_support_range": [-300, 301, 1],
                                                             "reward_support_range": [-300, 301, 1]}, 2)])
def test_searches_give_the_same_visit_counts(model_kw: dict, num_actions: int) -> None:
    ref, fast = _policy_pair(model_kw, num_actions, num_simulations=25)
    assert fast._snapshot("online").compiled is not None and ref._snapshot("online").compiled is None
    rng = np.random.default_rng(2)
    e = 8
    obs = rng.normal(size=(e, 4)).astype(np.float32)
    legal = np.ones((e, num_actions), bool)
    legal[0, 1] = False
    to_play = np.full(e, -1)
    for mode in ("collect", "eval", "collect"):
        a, b = (p.act(obs, legal, to_play, mode=mode, env_ids=np.arange(e)) for p in (ref, fast))
        assert np.array_equal(a.visit_dist, b.visit_dist) and np.array_equal(a.action, b.action)
        assert _close(b.root_value, a.root_value, 1e-3)
    true_action = np.array([0, 1, 0, -1, 1, 0, -1, 1]) % num_actions
    reuse = np.linspace(-1, 1, e).astype(np.float32)
    (da, va), (db, vb) = (p.reanalyze_fn(obs, legal, to_play, true_action, reuse) for p in (ref, fast))
    assert np.array_equal(da, db) and _close(vb, va, 1e-3)
    # After a learner step both rebuild their snapshots from the new weights.
    for p in (ref, fast):
        p.learn(make_batch(8, 3, num_actions, (4,)))
    a, b = (p.act(obs, legal, to_play, mode="eval", env_ids=np.arange(e)) for p in (ref, fast))
    assert np.array_equal(a.visit_dist, b.visit_dist)
