"""EfficientZeroPolicy: acting modes (search, pure policy), replay callbacks including ReZero-EZ
whole-buffer reanalysis through the game buffer, checkpoints and plugin registration."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from ez_helpers import A, OBS, make_policy
from lzkernel import ActingPolicy, ObservationValues
from lzk_replay import GameBuffer
from lzkernel import Trajectory

E = 6


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    legal = np.ones((E, A), bool)
    legal[0, 1] = legal[1, 0] = False
    return rng.normal(size=(E, 4)).astype(np.float32), legal, np.full(E, -1, np.int64)


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
@pytest.mark.parametrize("backend", ["torch", "numba"])
def test_act_collect_and_eval(backend: str, algorithm: str) -> None:
    """Both searches act legally through the value-prefix model; Gumbel's stored target is its
    improved policy, not visit fractions."""
    pol = make_policy(search_backend=backend, search_algorithm=algorithm)
    assert isinstance(pol, ActingPolicy) and isinstance(pol, ObservationValues)
    obs, legal, to_play = _inputs()
    for mode in ("collect", "eval"):
        r = pol.act(obs, legal, to_play, mode=mode, env_ids=np.arange(E), temperature=0.25)
        assert legal[np.arange(E), r.action].all()
        np.testing.assert_allclose(r.visit_dist.sum(1), 1.0, rtol=1e-6)
        assert (r.visit_dist[~legal] == 0).all()
        assert r.metrics["search/inferences_per_sim"] == E
        sims = pol.cfg.num_simulations if mode == "collect" else pol.cfg.eval_simulations
        on_grid = np.allclose(r.visit_dist * sims, np.round(r.visit_dist * sims), atol=1e-4)
        assert on_grid == (algorithm == "puct")
    a = pol.act(obs, legal, to_play, mode="eval", env_ids=np.arange(E)).action
    b = pol.act(obs, legal, to_play, mode="eval", env_ids=np.arange(E)).action
    np.testing.assert_array_equal(a, b)  # eval is deterministic


def test_collect_with_pure_policy_skips_the_search() -> None:
    pol = make_policy(collect_with_pure_policy=True)
    obs, legal, to_play = _inputs()
    r = pol.act(obs, legal, to_play, mode="collect", env_ids=np.arange(E))
    assert (r.visit_dist == 0).all() and legal[np.arange(E), r.action].all()
    np.testing.assert_array_equal(r.root_value, r.pred_value)
    np.testing.assert_allclose(r.pred_value, pol.value_fn(obs), rtol=1e-5, atol=1e-5)  # online == target here
    assert "search/inferences_per_sim" not in r.metrics


def _episode(T: int, seed: int) -> Trajectory:
    rng = np.random.default_rng(seed)
    return Trajectory(obs=rng.normal(size=(T + 1, 4)).astype(np.float32), actions=rng.integers(0, A, T),
                      rewards=np.ones(T, np.float32), visit_dist=np.full((T, A), 1.0 / A, np.float32),
                      root_values=np.zeros(T, np.float32), pred_values=np.zeros(T, np.float32),
                      legal=np.ones((T + 1, A), bool), to_play=np.full(T + 1, -1, np.int64),
                      timestep=np.arange(T + 1), ended=True, terminal=True, env_id=seed)


def test_rezero_ez_whole_buffer_reanalysis_through_the_game_buffer() -> None:
    """The rezero trainer's reanalysis with the EfficientZero policy: every stored transition is
    searched backwards with value reuse; the stored targets are rewritten; reuse saves steps."""
    pol = make_policy(num_simulations=12)
    spec = pol.target_spec
    buf = GameBuffer(capacity=10_000, segment_length=10, unroll_steps=spec.unroll_steps, td_steps=spec.td_steps,
                     discount=spec.discount, frame_stack=1, obs_shape=OBS, num_actions=A,
                     value_prefix_horizon=spec.value_prefix_horizon)
    buf.push([_episode(23, 0), _episode(7, 1)])
    before = buf.store.visit_dist.copy()
    calls = []
    fn = pol.reanalyze_fn

    def counting(*args):
        calls.append(args[4] is not None)
        return fn(*args)

    pol.reanalyze_fn = counting
    stats = buf.reanalyze(pol, np.random.default_rng(0), reuse=True)
    assert stats["roots"] == buf.num_transitions == 30
    assert any(calls) and not calls[0]  # the last offsets first, without reuse; then with reuse
    live = buf.store.live_slots()
    for s in live:
        v = buf.store.valid_len[s]
        np.testing.assert_allclose(buf.store.visit_dist[s, :v].sum(1), 1.0, rtol=1e-6)
    assert not np.array_equal(buf.store.visit_dist, before)
    batch = buf.sample(16, np.random.default_rng(0), pol)
    assert batch.target_value_prefix is not None
    metrics, _ = pol.learn(batch)
    assert np.isfinite(metrics["train/loss_total"])


def test_checkpoint_round_trip() -> None:
    pol = make_policy(seed=3)
    obs, legal, to_play = _inputs(1)
    before = pol.act(obs, legal, to_play, mode="eval", env_ids=np.arange(E))
    buf = io.BytesIO()
    torch.save(pol.state_dict(), buf)
    buf.seek(0)
    other = make_policy(seed=9, std=0.1)
    other.load_state_dict(torch.load(buf, weights_only=True))
    after = other.act(obs, legal, to_play, mode="eval", env_ids=np.arange(E))
    np.testing.assert_array_equal(before.visit_dist, after.visit_dist)
    np.testing.assert_array_equal(before.root_value, after.root_value)


def test_plugin_registers_the_policy_with_its_value_prefix_horizon() -> None:
    from lzk_efficientzero import plugin

    (comp,) = plugin.lzkernel_register_policies()
    assert comp.name == "efficientzero" and ObservationValues in comp.provides
    cfg = comp.config(lstm_horizon_len=4)
    assert comp.target_spec(cfg).value_prefix_horizon == 4
    assert cfg.model.latent_norm == "SimNorm" and cfg.model.lstm_hidden == 128
