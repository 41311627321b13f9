"""UniZeroPolicy.reanalyze_fn (SPEC §4.5 reanalyze_buffer): shapes and normalisation, legality,
chunking, the same root window as ``act``, the target network, and the snapshot/cache contract."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

import lzk_mcts
from lzkernel import generator_state, set_generator_state
from lzk_unizero.config import UniZeroPolicyConfig
from lzk_unizero.kv_cache import root_pairs
from lzk_unizero.policy import UniZeroPolicy
from unizero_helpers import NUM_ACTIONS, OBS_DIM, tiny_cfg


def _policy(search_module: Any = None, **kw: Any) -> UniZeroPolicy:
    cfg = UniZeroPolicyConfig(model=tiny_cfg(), num_simulations=8, eval_num_simulations=4, batch_size=2,
                              unroll_steps=3, **kw)
    pol = UniZeroPolicy(cfg, (OBS_DIM,), NUM_ACTIONS, seed=0, search_module=search_module)
    with torch.no_grad():  # non-trivial heads (they start at zero), same in both networks
        for m in (pol.model, pol.target_model):
            torch.manual_seed(1)
            for head in (m.head_value, m.head_policy, m.head_reward, m.head_next_latent):
                head.last.weight.normal_(0.0, 0.5)
                head.last.bias.normal_(0.0, 0.5)
    pol.mark_weights_changed()
    return pol


def _windows(pol: UniZeroPolicy, R: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """R right-padded root windows of W = history_pairs + 1 observations in the buffer's format."""
    rng = np.random.default_rng(seed)
    W = pol.history_pairs + 1
    n_obs = rng.integers(1, W + 1, size=R)
    obs = rng.normal(size=(R, W, OBS_DIM)).astype(np.float32)
    actions = rng.integers(0, NUM_ACTIONS, size=(R, W - 1))
    for r in range(R):  # padding as the buffer writes it: zeros
        obs[r, n_obs[r]:] = 0.0
        actions[r, n_obs[r] - 1:] = 0
    legal = np.ones((R, NUM_ACTIONS), bool)
    legal[::3, 1] = False
    legal[1::4, 0] = False
    return obs, actions, n_obs, legal, np.full(R, -1, np.int64)


def test_history_pairs_and_output_contract():
    pol = _policy()
    assert pol.history_pairs == root_pairs(pol.cfg.model.context_length) == 3
    obs, actions, n_obs, legal, to_play = _windows(pol, 7)
    dist, value = pol.window_reanalyze_fn(obs, actions, n_obs, legal, to_play)
    assert dist.shape == (7, NUM_ACTIONS) and dist.dtype == np.float32
    assert value.shape == (7,) and value.dtype == np.float32 and np.isfinite(value).all()
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, rtol=1e-6)
    assert (dist[~legal] == 0).all()  # illegal actions never visited
    # Visit fractions are multiples of 1/S.
    np.testing.assert_allclose(dist * pol.cfg.num_simulations, np.round(dist * pol.cfg.num_simulations), atol=1e-4)


def test_chunking_does_not_change_results():
    """Without noise, the per-root tie-breaking streams (consecutive draws of the policy RNG) and
    the model outputs (rows are independent) do not depend on how the roots are chunked."""
    a = _policy(reanalyze_noise=False, search_chunk=3)
    b = _policy(reanalyze_noise=False, search_chunk=64)
    b.load_state_dict(a.state_dict())
    inputs = _windows(a, 10, seed=1)
    dist_a, value_a = a.window_reanalyze_fn(*inputs)
    dist_b, value_b = b.window_reanalyze_fn(*inputs)
    np.testing.assert_array_equal(dist_a, dist_b)
    np.testing.assert_allclose(value_a, value_b, rtol=1e-5, atol=1e-5)


class _RecordingSearch(SimpleNamespace):
    """lzk_mcts with ``search`` recording the root logits it is given."""

    def __init__(self) -> None:
        super().__init__(SearchConfig=lzk_mcts.SearchConfig, select_action=lzk_mcts.select_action)
        self.root_logits: list[np.ndarray] = []

    def search(self, recurrent_fn: Any, root_logits: np.ndarray, *args: Any, **kw: Any) -> Any:
        self.root_logits.append(np.array(root_logits))
        return lzk_mcts.search(recurrent_fn, root_logits, *args, **kw)


def test_reanalysis_roots_see_the_window_act_saw():
    """A buffer window built from an env's recorded history gives the root prior ``act`` computed
    for that env at that step (target = online weights here), and equals the model's own
    uncached forward of the window."""
    rec = _RecordingSearch()
    pol = _policy(search_module=rec)
    rng = np.random.default_rng(3)
    E, steps = 2, 6
    M = pol.history_pairs
    seen_obs, seen_act = [[] for _ in range(E)], [[] for _ in range(E)]
    for t in range(steps):
        obs = rng.normal(size=(E, OBS_DIM)).astype(np.float32)
        res = pol.act(obs, np.ones((E, NUM_ACTIONS), bool), np.full(E, -1), mode="collect",
                      env_ids=np.arange(E), temperature=1.0, timestep=np.full(E, t))
        for e in range(E):
            seen_obs[e].append(obs[e])
            seen_act[e].append(int(res.action[e]))
    act_logits = rec.root_logits[-1]  # the last act: windows of M past pairs
    # The buffer's windows for step t = steps − 1 of each env.
    W = M + 1
    w_obs = np.stack([np.stack(seen_obs[e][-W:]) for e in range(E)])
    w_act = np.array([seen_act[e][-W:-1] for e in range(E)])
    pol.target_model.load_state_dict(pol.model.state_dict())
    pol.mark_weights_changed()
    pol.window_reanalyze_fn(w_obs, w_act, np.full(E, W), np.ones((E, NUM_ACTIONS), bool), np.full(E, -1))
    np.testing.assert_allclose(rec.root_logits[-1], act_logits, rtol=1e-5, atol=1e-5)
    m = pol.target_model.eval()
    with torch.no_grad():
        h = m.forward_tokens(m.interleave(m.encode(torch.as_tensor(w_obs)), m.embed_actions(torch.as_tensor(w_act))))
        _, policy = m.obs_heads(h[:, -1])
    np.testing.assert_allclose(rec.root_logits[-1], policy.numpy(), rtol=1e-5, atol=1e-5)


def test_reanalysis_uses_the_target_network():
    pol = _policy(reanalyze_noise=True)
    inputs = _windows(pol, 6, seed=2)
    state = generator_state(pol.rng)
    ref = pol.window_reanalyze_fn(*inputs)
    with torch.no_grad():  # the online model changes (a learner step would): no effect
        for p in pol.model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    pol.mark_weights_changed()
    set_generator_state(pol.rng, state)
    same = pol.window_reanalyze_fn(*inputs)
    np.testing.assert_array_equal(ref[0], same[0])
    np.testing.assert_array_equal(ref[1], same[1])
    with torch.no_grad():  # the target changes: the search sees it
        for p in pol.target_model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    pol.mark_weights_changed()
    set_generator_state(pol.rng, state)
    other = pol.window_reanalyze_fn(*inputs)
    assert not np.allclose(ref[1], other[1])


def test_snapshots_follow_weight_changes_and_clear_caches_keeps_histories():
    """Search snapshots are rebuilt after clear_caches (as after learn / load_state_dict /
    mark_weights_changed); clear_caches frees the search buffers but keeps env histories."""
    pol = _policy()
    obs = np.random.default_rng(4).normal(size=(1, OBS_DIM)).astype(np.float32)

    def pred_value() -> float:
        res = pol.act(obs, np.ones((1, NUM_ACTIONS), bool), np.full(1, -1), mode="eval",
                      env_ids=np.zeros(1, np.int64), timestep=np.array([0]))
        pol.reset_envs([0], "eval")
        return float(res.pred_value[0])

    def reference() -> float:
        m = pol.model.eval()
        with torch.no_grad():
            h = m.forward_tokens(m.encode(torch.as_tensor(obs))[:, None])
            return float(pol.value_support.decode(m.obs_heads(h[:, -1])[0])[0])

    first = pred_value()
    np.testing.assert_allclose(first, reference(), rtol=1e-5, atol=1e-5)
    pol.act(obs, np.ones((1, NUM_ACTIONS), bool), np.full(1, -1), mode="collect", env_ids=np.zeros(1, np.int64))
    with torch.no_grad():  # a folded weight changes behind the policy's back ...
        pol.model.blocks[0].attn.qkv.weight.add_(0.5 * torch.randn_like(pol.model.blocks[0].attn.qkv.weight))
        pol.model.head_value.last.weight.add_(0.5)
    pol.clear_caches()  # ... and the trainer says so
    assert len(pol.history) == 1 and pol._store.R == 0  # histories kept, buffers freed
    second = pred_value()
    assert second != first
    np.testing.assert_allclose(second, reference(), rtol=1e-5, atol=1e-5)


def test_learn_invalidates_the_search_snapshots():
    from test_unizero_loss import _batch

    pol = _policy()
    pol.act(np.zeros((1, OBS_DIM), np.float32), np.ones((1, NUM_ACTIONS), bool), np.full(1, -1), mode="eval",
            env_ids=np.zeros(1, np.int64))
    before = (pol._net("online"), pol._net("target"))
    pol.learn(_batch(np.random.default_rng(5)))
    after = (pol._net("online"), pol._net("target"))
    assert before[0] is not after[0] and before[1] is not after[1]  # rebuilt from the new weights
    assert pol._net("online") is after[0]  # and reused until the next change
