"""The UniZero policy: acting contract, per-env/per-mode histories, value_fn, learn, state_dict."""
from __future__ import annotations

import numpy as np
import torch

from lzkernel import ActingPolicy
from lzk_unizero.config import UniZeroPolicyConfig
from lzk_unizero.policy import UniZeroPolicy
from test_unizero_loss import _batch
from unizero_helpers import NUM_ACTIONS, OBS_DIM, tiny_cfg


def _policy(**kw) -> UniZeroPolicy:
    cfg = UniZeroPolicyConfig(model=tiny_cfg(), num_simulations=6, eval_num_simulations=4, batch_size=2,
                              unroll_steps=3, **kw)
    return UniZeroPolicy(cfg, (OBS_DIM,), NUM_ACTIONS, seed=0)


def test_act_contract_and_histories():
    pol = _policy()
    assert isinstance(pol, ActingPolicy)
    rng = np.random.default_rng(0)
    E = 3
    legal = np.ones((E, NUM_ACTIONS), bool)
    legal[0, 1] = False
    for t in range(6):
        obs = rng.normal(size=(E, OBS_DIM)).astype(np.float32)
        res = pol.act(obs, legal, np.full(E, -1), mode="collect", env_ids=np.arange(E), temperature=1.0,
                      timestep=np.full(E, t))
        assert res.action.shape == (E,) and legal[np.arange(E), res.action].all()
        np.testing.assert_allclose(res.visit_dist.sum(1), 1.0, rtol=1e-6)
        assert res.visit_dist[0, 1] == 0
        assert res.root_value.shape == res.pred_value.shape == (E,)
        assert res.metrics["search/root_context_tokens"] == min(2 * t + 1, 7)
    res = pol.act(obs, legal, np.full(E, -1), mode="eval", env_ids=np.arange(E))
    assert res.metrics["search/root_context_tokens"] == 1  # eval history is separate from collect
    assert all(len(q) <= 3 for q in pol.history._pairs.values())
    pol.reset_envs([0, 1], "collect")
    assert ("collect", 0) not in pol.history._pairs and ("collect", 2) in pol.history._pairs


def test_pred_value_is_the_root_window_value():
    pol = _policy()
    with torch.no_grad():  # non-trivial value head
        pol.model.head_value.last.weight.normal_(0, 0.3)
    rng = np.random.default_rng(1)
    obs_seq = rng.normal(size=(3, 1, OBS_DIM)).astype(np.float32)
    acts = []
    for t in range(3):
        res = pol.act(obs_seq[t], np.ones((1, NUM_ACTIONS), bool), np.full(1, -1), mode="eval",
                      env_ids=np.zeros(1, np.int64), timestep=np.array([t]))
        acts.append(int(res.action[0]))
    with torch.no_grad():  # the model's own uncached forward of the window [o0, a0, o1, a1, o2]
        pol.model.eval()
        m = pol.model
        h = m.forward_tokens(m.interleave(m.encode(torch.as_tensor(obs_seq[:, 0][None])),
                                          m.embed_actions(torch.as_tensor([acts[:2]]))))
        v, _ = m.obs_heads(h[:, -1])
    np.testing.assert_allclose(res.pred_value, pol.value_support.decode(v).numpy(), rtol=1e-5, atol=1e-5)


def test_value_fn_learn_and_state_dict_roundtrip():
    pol = _policy()
    rng = np.random.default_rng(2)
    v = pol.sequence_value_fn(rng.normal(size=(5, 4, OBS_DIM)).astype(np.float32), rng.integers(0, NUM_ACTIONS, (5, 3)))
    assert v.shape == (5, 4) and np.allclose(v, 0.0, atol=1e-3)  # zero-initialised value head
    metrics, prio = pol.learn(_batch(rng))
    assert pol.learner_steps == 1 and prio.shape == (2,) and np.isfinite(metrics["train/loss_total"])
    state = pol.state_dict()
    other = _policy()
    other.load_state_dict(state)
    for a, b in zip(pol.target_model.parameters(), other.target_model.parameters()):
        assert torch.equal(a, b)
    assert other.learner_steps == 1 and other.rng.random() == pol.rng.random()


def test_state_dict_keeps_the_env_histories_so_acting_continues_exactly():
    """A checkpoint holds each (mode, env)'s history: a restored policy builds the same root
    windows and so takes the same decisions (weights_only-loadable values only)."""
    import io

    pol = _policy()
    rng = np.random.default_rng(4)
    E, legal = 2, np.ones((2, NUM_ACTIONS), bool)
    obs = [rng.normal(size=(E, OBS_DIM)).astype(np.float32) for _ in range(8)]
    for t in range(4):
        pol.act(obs[t], legal, np.full(E, -1), mode="collect", env_ids=np.arange(E), timestep=np.full(E, t))
    buf = io.BytesIO()
    torch.save(pol.state_dict(), buf)
    other = _policy()
    other.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert other.history.state()[0][2] == pol.history.state()[0][2]
    for t in range(4, 8):
        a = pol.act(obs[t], legal, np.full(E, -1), mode="collect", env_ids=np.arange(E), timestep=np.full(E, t))
        b = other.act(obs[t], legal, np.full(E, -1), mode="collect", env_ids=np.arange(E), timestep=np.full(E, t))
        assert a.metrics["search/root_context_tokens"] == b.metrics["search/root_context_tokens"] == 7
        np.testing.assert_array_equal(a.action, b.action)
        np.testing.assert_array_equal(a.visit_dist, b.visit_dist)
        np.testing.assert_array_equal(a.root_value, b.root_value)
