"""Cached inference equals uncached recomputation (SPEC §4.4, exact by design; kv_cache.py).

Every root output is compared with an uncached causal forward of the window the test rebuilds
from its own record of the episode, across window slides, episode boundaries and a weight
change; every search node's outputs with an uncached forward of the node's token sequence,
rebuilt by the test from the recorded search calls with the documented window rule.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lzk_mcts
from lzk_common.support import DiscreteSupport
from lzk_unizero.inference import InferenceNet, SearchSession, root_inference
from lzk_unizero.kv_cache import EnvHistory, NodeStore, keep_tokens, root_pairs, window_inputs
from unizero_helpers import NUM_ACTIONS, OBS_DIM, random_model, tiny_cfg, tree_step

TOL = 1e-5


def _reference_root(model, pairs, obs):
    """Uncached: value/policy logits at the last token of [o, a, …, o] built from scratch."""
    o = torch.as_tensor(np.stack([p[0] for p in pairs] + [obs]), dtype=torch.float32)[None]
    a = torch.as_tensor([p[1] for p in pairs], dtype=torch.int64)[None]
    h = model.forward_tokens(model.interleave(model.encode(o), model.embed_actions(a)))
    return model.obs_heads(h[:, -1])


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_root_inference_matches_uncached_window_across_slides_resets_and_weight_changes(pos):
    model = random_model(tiny_cfg(pos_encoding=pos))
    C = model.cfg.context_length
    M = root_pairs(C)
    hist = EnvHistory(M)
    rng = np.random.default_rng(0)
    E = 3
    truth: list[list[tuple[np.ndarray, int]]] = [[] for _ in range(E)]  # the test's own episode record
    t = np.zeros(E, dtype=np.int64)
    checked_full = checked_reset = 0
    with torch.inference_mode():
        for step in range(24):
            if step == 12:  # weights change (a learner epoch): nothing may go stale
                for p in model.parameters():
                    p.add_(0.05 * torch.randn_like(p))
            obs = rng.normal(size=(E, OBS_DIM)).astype(np.float32)
            keys = [("collect", e) for e in range(E)]
            w_obs, w_act, n_obs = window_inputs(hist, keys, obs, t)
            value, policy, _ = root_inference(InferenceNet(model, C), torch.as_tensor(w_obs),
                                              torch.as_tensor(w_act), n_obs)
            assert int(2 * n_obs.max() - 1) <= C
            for e in range(E):
                ref_v, ref_p = _reference_root(model, truth[e][-M:], obs[e])
                assert (ref_v[0] - value[e]).abs().max() < TOL, (step, e)
                assert (ref_p[0] - policy[e]).abs().max() < TOL
                checked_full += len(truth[e]) > M
                checked_reset += t[e] == 0 and step > 0
            actions = rng.integers(0, NUM_ACTIONS, size=E)
            for e in range(E):
                hist.record(keys[e], obs[e], int(actions[e]), int(t[e]))
                truth[e].append((obs[e], int(actions[e])))
            t += 1
            # env 1: episodes of 5 steps signalled through timestep 0; env 2: explicit reset at step 9.
            if t[1] == 5:
                t[1] = 0
                truth[1] = []
            if step == 9:
                hist.reset(keys[2])
                t[2] = 0
                truth[2] = []
            assert all(len(q) <= M for q in hist._pairs.values())  # bounded history
    assert checked_full > 10 and checked_reset >= 4


def _reference_search_outputs(model, root_tokens, record, C, store=None):
    """Replay the recorded search calls with uncached forwards of each node's token sequence.

    The sequences are rolled out by the test (root window, then per call: the window rule, the
    action token, the predicted latent). With ``store`` given, each call starts instead from the
    parent's tokens as cached in the store: this isolates one step's cached-vs-uncached error
    from float32 rounding that compounds along a predicted-latent rollout (measured separately
    as the token drift). Returns (worst output error, relative to max(1, max |logit|) of
    its vector, longest sequence, worst token drift).
    """
    keep = keep_tokens(C)
    seqs = {(0, b): toks for b, toks in enumerate(root_tokens)}
    worst = drift = 0.0
    for batch_idx, parent, action, new_node, r_log, v_log, p_log in record:
        for i, (b, par, a) in enumerate(zip(batch_idx, parent, action)):
            s = seqs[(int(par), int(b))]
            if store is not None:
                row = int(par) * store.B + int(b)
                cached = store.tokens[row, : int(store.length[row])]
                drift = max(drift, float((cached - s).abs().max()))
                s = cached
            if s.shape[0] + 2 > C:
                s = s[-keep:]
            a_tok = model.embed_actions(torch.tensor([int(a)]))
            h = model.forward_tokens(torch.cat([s, a_tok])[None])
            latent, reward = model.action_heads(h[:, -1])
            child = torch.cat([s, a_tok, latent])
            h2 = model.forward_tokens(child[None])
            value, policy = model.obs_heads(h2[:, -1])
            seqs[(int(new_node), int(b))] = child
            for ref, got in ((reward[0], r_log[i]), (value[0], v_log[i]), (policy[0], p_log[i])):
                # error relative to the logit vector's scale (float32 keeps ~7 significant digits)
                err = (ref - torch.as_tensor(got)).abs().max() / max(1.0, float(ref.abs().max()))
                worst = max(worst, float(err))
    return worst, max(s.shape[0] for s in seqs.values()), drift


@pytest.mark.parametrize("pos,context_length,dtype,extra", [
    ("rope", 8, torch.float32, {}), ("rope", 5, torch.float32, {}), ("learned", 8, torch.float32, {}),
    ("rope", 8, torch.float64, {}), ("rope", 8, torch.float32, {"final_norm": "SimNorm", "bias": False}),
])
def test_search_recurrent_outputs_match_uncached_node_sequences(pos, context_length, dtype, extra):
    """Every recurrent call's reward/value/policy logits equal an uncached forward of the node's
    token sequence: float64 whole rollouts within 1e-10 (the same maths), float32 each step
    within 1e-5 (rollout drift from float32 rounding stays below 1e-4)."""
    model = random_model(tiny_cfg(pos_encoding=pos, context_length=context_length, **extra),
                         head_std=0.5).to(dtype)
    C = context_length
    M = root_pairs(C)
    rng = np.random.default_rng(1)
    B, S = 4, 12
    n_obs = np.array([1, 2, M + 1, M + 1])  # short and full windows: rebuilt and extended rows mixed
    w_obs = rng.normal(size=(B, M + 1, OBS_DIM))
    w_act = rng.integers(0, NUM_ACTIONS, size=(B, M))
    support = DiscreteSupport(-10, 11)
    with torch.inference_mode():
        store = NodeStore(C, model.cfg.num_layers, model.cfg.embed_dim, "cpu", dtype)
        session = SearchSession(InferenceNet(model, C), store, torch.as_tensor(w_obs, dtype=dtype),
                                torch.as_tensor(w_act), n_obs, S, support, support)
        root_tokens = [store.tokens[b, : int(store.length[b])].clone() for b in range(B)]
        # The root tokens themselves are the test's own encodings of the window.
        for b in range(B):
            k = int(n_obs[b])
            ref = model.interleave(model.encode(torch.as_tensor(w_obs[b:b + 1, :k], dtype=dtype)),
                                   model.embed_actions(torch.as_tensor(w_act[b:b + 1, : k - 1])))[0]
            assert torch.allclose(ref, root_tokens[b], atol=1e-6)
        session.record = []
        lzk_mcts.search(session, session.root_policy_logits.float().numpy(), np.ones((B, NUM_ACTIONS), bool),
                        np.full(B, -1), lzk_mcts.SearchConfig(num_simulations=S), np.random.default_rng(0),
                        add_noise=True, deterministic=False)
        assert session.calls == S and store.R == (S + 1) * B  # bounded store
        if dtype == torch.float64:
            worst, longest, _ = _reference_search_outputs(model, root_tokens, session.record, C)
            assert worst < 1e-10
        else:
            worst, longest, drift = _reference_search_outputs(model, root_tokens, session.record, C, store)
            assert worst < TOL and drift < 1e-4
    assert longest <= C


@pytest.mark.parametrize("n_obs", [[1, 2, 3], [1, 3, 4], [4, 4, 4]])
def test_search_step_paths_agree_and_rebuild_only_full_contexts(n_obs):
    """All-extend (cached K/V), mixed and all-rebuild steps: the cached session equals the
    uncached one (every pass recomputed from the tokens), and only full contexts are rebuilt."""
    model = random_model(head_std=1.0)
    C = 8
    support = DiscreteSupport(-10, 11)
    n_obs = np.array(n_obs)
    obs, acts = torch.randn(3, 4, OBS_DIM), torch.randint(0, NUM_ACTIONS, (3, 3))
    outs, lengths = [], []
    with torch.inference_mode():
        for cached in (True, False):
            store = NodeStore(C, 2, 16, "cpu")
            session = SearchSession(InferenceNet(model, C), store, obs, acts, n_obs, 2, support, support,
                                    cached=cached)
            session.record = []
            tree_step(session, np.arange(3), np.zeros(3, np.int64), np.array([0, 1, 2]), 1)
            tree_step(session, np.arange(3), np.ones(3, np.int64), np.array([2, 0, 1]), 2)
            outs.append([x for call in session.record for x in call[4:]])  # reward, value, policy logits
            lengths.append((store.length[3:6].tolist(), store.length[6:9].tolist()))
    for got, ref in zip(*outs):
        np.testing.assert_allclose(got, ref, rtol=TOL, atol=TOL)  # logits of magnitude ~10
    assert lengths[0] == lengths[1]
    # +2 where it fits; a full context (7 tokens) is rebuilt from its last keep_tokens(8) = 5, then +2.
    assert lengths[0][0] == [min(2 * k + 1, 7) for k in n_obs]


def test_search_rows_subset_matches_full_batch():
    """A call with B' < B trees (scratch rows, copied back) equals the same rows of a full call."""
    model = random_model(head_std=1.0)
    C, B = 8, 4
    support = DiscreteSupport(-10, 11)
    obs, acts, n_obs = torch.randn(B, 4, OBS_DIM), torch.randint(0, NUM_ACTIONS, (B, 3)), np.array([1, 2, 4, 4])
    with torch.inference_mode():
        full = SearchSession(InferenceNet(model, C), NodeStore(C, 2, 16, "cpu"), obs, acts, n_obs, 2, support,
                             support)
        part = SearchSession(InferenceNet(model, C), NodeStore(C, 2, 16, "cpu"), obs, acts, n_obs, 2, support,
                             support)
        full.record, part.record = [], []
        a = np.array([0, 1, 2, 1])
        tree_step(full, np.arange(B), np.zeros(B, np.int64), a, 1)
        rows = np.array([1, 3])
        tree_step(part, rows, np.zeros(2, np.int64), a[rows], 1)
        for g, r in zip(part.record[0][4:], full.record[0][4:]):
            np.testing.assert_allclose(g, r[rows], rtol=0, atol=TOL)
        for store_a, store_b in ((full.store, part.store),):
            for b in rows:
                n = int(store_a.length[B + b])
                assert n == store_b.length[B + b]
                torch.testing.assert_close(store_a.tokens[B + b, :n], store_b.tokens[B + b, :n])
