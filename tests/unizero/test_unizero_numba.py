"""The numba search step equals the torch one (and the model's uncached forward).

Errors are measured as in ``test_unizero_cache``: per logit vector, relative to
max(1, max |logit|) (float32 keeps ~7 significant digits), bounded by 1e-5; across extend,
mixed and rebuild steps, learned positions and RoPE, LayerNorm and SimNorm latents, bias on/off,
1–3 layers and 1, 2 or 4 heads.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lzk_mcts
from lzk_common.support import DiscreteSupport
from lzk_unizero.config import UniZeroPolicyConfig
from lzk_unizero.inference import InferenceNet, SearchSession
from lzk_unizero.kv_cache import NodeStore, keep_tokens, root_pairs
from lzk_unizero.numba_ops import gelu, layer_norm
from lzk_unizero.snapshot import weights_of
from lzk_unizero.policy import UniZeroPolicy
from test_unizero_cache import _reference_search_outputs
from unizero_helpers import NUM_ACTIONS, OBS_DIM, random_model, tiny_cfg, tree_step

TOL = 1e-5

CONFIGS = [
    pytest.param("rope", 8, {}, id="rope"),
    pytest.param("rope", 5, {}, id="rope-context5"),
    pytest.param("learned", 8, {}, id="learned"),
    pytest.param("rope", 8, {"final_norm": "SimNorm", "bias": False}, id="rope-simnorm-nobias"),
    pytest.param("learned", 7, {"final_norm": "SimNorm", "num_heads": 4}, id="learned-simnorm-4heads"),
    pytest.param("rope", 8, {"num_layers": 1, "num_heads": 1}, id="rope-1layer-1head"),
    pytest.param("rope", 6, {"num_layers": 3, "num_heads": 4, "bias": False}, id="rope-3layers-4heads-nobias"),
    pytest.param("learned", 8, {"num_layers": 1, "num_heads": 1}, id="learned-1layer-1head"),
]


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got − ref| over each row, relative to max(1, max |ref|) of that row; the worst row."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    scale = np.maximum(1.0, np.abs(ref).max(axis=-1))
    return float((np.abs(got - ref).max(axis=-1) / scale).max())


def _session(model, C, obs, acts, n_obs, sims, backend, support=DiscreteSupport(-10, 11)) -> SearchSession:
    store = NodeStore(C, model.cfg.num_layers, model.cfg.embed_dim, "cpu")
    session = SearchSession(InferenceNet(model, C), store, obs, acts, n_obs, sims, support, support, backend=backend)
    session.record = []
    return session


@pytest.mark.parametrize("pos,context_length,extra", CONFIGS)
def test_numba_search_matches_uncached_node_sequences(pos, context_length, extra):
    """A whole search on the numba backend: every call's reward/value/policy logits equal an
    uncached model forward of the node's token sequence (rebuilt by the test with the documented
    window rule from the recorded calls), and the predicted-latent tokens drift < 1e-4."""
    model = random_model(tiny_cfg(pos_encoding=pos, context_length=context_length, **extra), head_std=0.5)
    C = context_length
    M = root_pairs(C)
    rng = np.random.default_rng(1)
    B, S = 4, 12
    n_obs = np.array([1, 2, M + 1, M + 1])  # short and full windows: rebuilt and extended rows mixed
    obs = torch.as_tensor(rng.normal(size=(B, M + 1, OBS_DIM)), dtype=torch.float32)
    acts = torch.as_tensor(rng.integers(0, NUM_ACTIONS, size=(B, M)))
    with torch.inference_mode():
        session = _session(model, C, obs, acts, n_obs, S, "numba")
        store = session.store
        root_tokens = [store.tokens[b, : int(store.length[b])].clone() for b in range(B)]
        lzk_mcts.search(session, session.root_policy_logits.numpy(), np.ones((B, NUM_ACTIONS), bool),
                        np.full(B, -1), lzk_mcts.SearchConfig(num_simulations=S), np.random.default_rng(0),
                        add_noise=True, deterministic=False)
        assert session.calls == S
        worst, longest, drift = _reference_search_outputs(model, root_tokens, session.record, C, store)
    assert worst < TOL and drift < 1e-4
    assert longest <= C


@pytest.mark.parametrize("pos,context_length,extra", CONFIGS)
@pytest.mark.parametrize("n_obs", [[1, 2, 3], [1, 3, 4], [4, 4, 4]], ids=["extend", "mixed", "rebuild"])
def test_numba_steps_equal_torch_steps(pos, context_length, extra, n_obs):
    """Three calls (the last on a subset of the trees) replayed on both backends: the same
    outputs, decoded rewards/values, context lengths, tokens and K/V. The windows are cut to
    the context, so n_obs = [4, 4, 4] rebuilds every row whenever C < 9."""
    model = random_model(tiny_cfg(pos_encoding=pos, context_length=context_length, **extra), head_std=1.0)
    C = context_length
    M = root_pairs(C)
    n_obs = np.minimum(np.array(n_obs), M + 1)
    obs, acts = torch.randn(3, M + 1, OBS_DIM), torch.randint(0, NUM_ACTIONS, (3, M))
    calls = [(np.arange(3), np.zeros(3, np.int64), np.array([0, 1, 2]), 1),
             (np.arange(3), np.ones(3, np.int64), np.array([2, 0, 1]), 2),
             (np.array([0, 2]), np.array([2, 1]), np.array([1, 1]), 3)]
    outs, stores = {}, {}
    with torch.inference_mode():
        for backend in ("torch", "numba"):
            session = _session(model, C, obs, acts, n_obs, 3, backend)
            outs[backend] = [tree_step(session, *call) for call in calls]
            stores[backend] = session
    for (r_t, v_t, p_t), (r_n, v_n, p_n) in zip(outs["torch"], outs["numba"]):
        assert r_n.dtype == v_n.dtype == p_n.dtype == np.float32
        assert _rel_err(p_n, p_t) < TOL
        np.testing.assert_allclose(np.stack([r_n, v_n]), np.stack([r_t, v_t]), rtol=1e-4, atol=1e-4)
    for call_t, call_n in zip(stores["torch"].record, stores["numba"].record):
        for got, ref in zip(call_n[:4], call_t[:4]):
            np.testing.assert_array_equal(got, ref)
        for got, ref in zip(call_n[4:], call_t[4:]):  # reward, value, policy logits
            assert _rel_err(got, ref) < TOL
    st, sn = stores["torch"].store, stores["numba"].store
    np.testing.assert_array_equal(sn.length, st.length)
    root_len = 2 * n_obs - 1  # the first call's children: +2 where it fits, else rebuilt to keep + 2
    np.testing.assert_array_equal(st.length[3:6], np.where(root_len + 2 <= C, root_len + 2, keep_tokens(C) + 2))
    for row in np.flatnonzero(st.length):
        n = int(st.length[row])
        torch.testing.assert_close(sn.tokens[row, :n], st.tokens[row, :n], rtol=0, atol=1e-5)
        torch.testing.assert_close(sn.kv[row, :, :n], st.kv[row, :, :n], rtol=0, atol=1e-4)


def test_numba_rows_subset_matches_full_batch():
    """A call with B' < B trees equals the same rows of a full call (built in place)."""
    model = random_model(head_std=1.0)
    C, B = 8, 4
    obs, acts, n_obs = torch.randn(B, 4, OBS_DIM), torch.randint(0, NUM_ACTIONS, (B, 3)), np.array([1, 2, 4, 4])
    a = np.array([0, 1, 2, 1])
    rows = np.array([1, 3])
    with torch.inference_mode():
        full = _session(model, C, obs, acts, n_obs, 2, "numba")
        part = _session(model, C, obs, acts, n_obs, 2, "numba")
        ref = tree_step(full, np.arange(B), np.zeros(B, np.int64), a, 1)
        got = tree_step(part, rows, np.zeros(2, np.int64), a[rows], 1)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r[rows])
    for b in rows:
        assert part.store.length[B + b] == full.store.length[B + b]
    assert part.store.length[B + 0] == part.store.length[B + 2] == 0  # untouched trees


def test_numba_helpers_match_torch():
    """The hand-written LayerNorm and GELU (rational tanh) equal torch's in float32."""
    x = torch.randn(5, 67) * 4 + 1  # a width that is not a multiple of 4 exercises the tails
    out = np.empty((5, 67), np.float32)
    layer_norm(x.numpy(), np.float32(1e-5), out)
    torch.testing.assert_close(torch.from_numpy(out), torch.layer_norm(x, (67,), eps=1e-5), rtol=0, atol=2e-6)
    g = torch.linspace(-12, 12, 4001).reshape(1, -1).contiguous()
    ref = torch.nn.functional.gelu(g.double(), approximate="tanh")
    y = g.numpy().copy()
    gelu(y)
    assert float((torch.from_numpy(y).double() - ref).abs().max()) < 5e-6  # 4e-7 relative at |x| = 12


def test_numba_backend_needs_a_float32_cpu_snapshot():
    model = random_model().to(torch.float64)
    support = DiscreteSupport(-10, 11)
    with torch.inference_mode(), pytest.raises(ValueError, match="float32"):
        SearchSession(InferenceNet(model, 8), NodeStore(8, 2, 16, "cpu", torch.float64),
                      torch.zeros(1, 4, OBS_DIM, dtype=torch.float64), torch.zeros(1, 3, dtype=torch.int64),
                      np.ones(1, np.int64), 2, support, support, backend="numba")
    with pytest.raises(ValueError, match="backend"):
        SearchSession(InferenceNet(random_model(), 8), NodeStore(8, 2, 16, "cpu"), torch.zeros(1, 4, OBS_DIM),
                      torch.zeros(1, 3, dtype=torch.int64), np.ones(1, np.int64), 2, support, support,
                      backend="jax")


def _policy(backend: str, seed: int = 0) -> UniZeroPolicy:
    cfg = UniZeroPolicyConfig(model=tiny_cfg(), num_simulations=10, eval_num_simulations=12, search_backend=backend)
    pol = UniZeroPolicy(cfg, (OBS_DIM,), NUM_ACTIONS, seed=seed)
    pol.model.load_state_dict(random_model(head_std=0.5).state_dict())  # non-trivial heads, same weights
    pol.mark_weights_changed()
    return pol


def test_act_numba_equals_torch_in_eval_mode():
    """Eval acts (no noise, deterministic ties) over an episode: same actions, visits and root
    values on both backends; the default backend is numba."""
    assert UniZeroPolicyConfig().search_backend == "numba"
    pols = {b: _policy(b) for b in ("torch", "numba")}
    rng = np.random.default_rng(3)
    E = 4
    legal = np.ones((E, NUM_ACTIONS), bool)
    legal[1, 0] = False
    for t in range(8):  # past the context: root windows slide and search contexts are rebuilt
        obs = rng.normal(size=(E, OBS_DIM)).astype(np.float32)
        res = {b: p.act(obs, legal, np.full(E, -1), mode="eval", env_ids=np.arange(E), timestep=np.full(E, t))
               for b, p in pols.items()}
        np.testing.assert_array_equal(res["numba"].action, res["torch"].action)
        np.testing.assert_array_equal(res["numba"].visit_dist, res["torch"].visit_dist)
        np.testing.assert_allclose(res["numba"].root_value, res["torch"].root_value, rtol=1e-4, atol=1e-4)


def test_numba_weights_follow_weight_versions():
    """The kernel's weights live on the snapshot: a weight change (new version) rebuilds them."""
    pol = _policy("numba")
    w0 = weights_of(pol._net("online"))
    assert weights_of(pol._net("online")) is w0  # same version: reused
    with torch.no_grad():
        pol.model.head_policy.last.bias.add_(1.0)
    pol.mark_weights_changed()
    w1 = weights_of(pol._net("online"))
    assert w1 is not w0
    np.testing.assert_allclose(w1.obs_bb, w0.obs_bb + 1.0, rtol=1e-6)
    # float64 models search with torch whatever the config says
    pol64 = _policy("numba")
    pol64.model.to(torch.float64)
    pol64.mark_weights_changed()
    assert pol64._backend(pol64._net("online")) == "torch"
