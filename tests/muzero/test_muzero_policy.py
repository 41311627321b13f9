"""MuZeroPolicy: acting modes, replay callbacks, checkpoints, plugin registration."""
from __future__ import annotations

import io
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lzkernel import ActingPolicy, Component
from lzk_muzero.config import MuZeroPolicyConfig
from lzk_muzero.policy import MuZeroPolicy
from muzero_helpers import make_batch, randomize, small_policy_cfg

E, A = 6, 3


def _policy(seed: int = 0, **cfg_kw) -> MuZeroPolicy:
    torch.manual_seed(0)
    pol = MuZeroPolicy(small_policy_cfg(**cfg_kw), (4,), A, seed=seed)
    randomize(pol.model, seed=11, std=0.3)  # a non-trivial (non-uniform) policy and value
    pol.learner.update_target()
    pol.mark_weights_changed()
    return pol


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(E, 4)).astype(np.float32)
    legal = np.ones((E, A), bool)
    legal[0, 1] = legal[1, 0] = legal[2, 2] = False
    return obs, legal, np.full(E, -1, np.int64)


def _act(pol: MuZeroPolicy, mode: str, **kw):
    obs, legal, to_play = kw.pop("inputs", None) or _inputs()
    return pol.act(obs, legal, to_play, mode=mode, env_ids=np.arange(E), **kw)


def test_is_an_acting_policy() -> None:
    assert isinstance(_policy(), ActingPolicy)


def test_eval_is_deterministic_and_greedy() -> None:
    a, b = _policy(seed=1, eval_num_simulations=12), _policy(seed=2, eval_num_simulations=12)
    r1, r2, r3 = _act(a, "eval"), _act(a, "eval"), _act(b, "eval")
    for r in (r2, r3):
        assert np.array_equal(r1.action, r.action) and np.array_equal(r1.visit_dist, r.visit_dist)
        assert np.array_equal(r1.root_value, r.root_value)
    _, legal, _ = _inputs()
    masked = np.where(legal, r1.visit_dist, -1.0)
    assert np.array_equal(r1.action, masked.argmax(axis=1))  # argmax of visits (first maximum)
    assert np.allclose(r1.visit_dist.sum(1), 1.0)
    assert np.allclose(r1.visit_dist * 12, np.round(r1.visit_dist * 12), atol=1e-5)  # 12 eval simulations


def test_collect_outputs_are_legal_and_normalised() -> None:
    pol = _policy()
    _, legal, _ = _inputs()
    actions = []
    for _ in range(5):
        r = _act(pol, "collect", temperature=1.0)
        assert r.action.dtype == np.int64 and legal[np.arange(E), r.action].all()
        assert np.allclose(r.visit_dist.sum(1), 1.0) and (r.visit_dist[~legal] == 0).all()
        assert np.allclose(r.visit_dist * 8, np.round(r.visit_dist * 8), atol=1e-5)  # 8 simulations
        assert np.isfinite(r.root_value).all() and np.isfinite(r.pred_value).all()
        assert 0.0 <= r.metrics["search/network_share"] <= 1.0 and r.metrics["search/ms"] > 0
        actions.append(r.action)
    assert len({tuple(a) for a in actions}) > 1  # noise and sampling: not always the same


def test_pure_policy_collection() -> None:
    pol = _policy(collect_with_pure_policy=True)
    obs, legal, to_play = _inputs()
    obs = np.repeat(obs[:1], E, axis=0)
    legal = np.repeat(legal[:1], E, axis=0)  # action 1 illegal in every row
    counts = np.zeros(A)
    for _ in range(300):
        r = pol.act(obs, legal, to_play, mode="collect", env_ids=np.arange(E), temperature=0.25, epsilon=0.0)
        counts += np.bincount(r.action, minlength=A)
    assert counts[1] == 0
    assert (r.visit_dist == 0).all() and r.visit_dist.shape == (E, A)
    snap = pol._snapshot("online")
    _, value, logits = snap.initial(torch.from_numpy(obs))
    assert np.allclose(r.root_value, value) and np.allclose(r.pred_value, value)
    z = np.where(legal[0], logits[0], -np.inf)
    p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()  # softmax of the legal logits, no temperature
    assert np.allclose(counts / counts.sum(), p, atol=0.04)
    # Eval still searches.
    assert _act(pol, "eval").visit_dist.sum() > 0


def test_epsilon_greedy() -> None:
    pol = _policy(eps_greedy=True)
    greedy = _act(pol, "collect", epsilon=0.0)
    assert np.array_equal(greedy.action, np.where(_inputs()[1], greedy.visit_dist, -1).argmax(1))
    obs, legal, to_play = _inputs()
    counts = np.zeros((E, A))
    for _ in range(60):
        r = pol.act(obs, legal, to_play, mode="collect", env_ids=np.arange(E), epsilon=1.0)
        counts[np.arange(E), r.action] += 1
    assert (counts[~legal] == 0).all() and (counts[legal] > 5).all()  # uniform over legal actions


def test_bad_mode() -> None:
    with pytest.raises(ValueError):
        _act(_policy(), "train")


def test_value_fn_uses_the_target_network_in_chunks() -> None:
    pol = _policy(mini_infer_size=4)
    obs = np.random.default_rng(3).normal(size=(10, 4)).astype(np.float32)
    with torch.no_grad():
        ref = pol.value_support.decode(pol.target_model.eval().initial_inference(torch.from_numpy(obs))[1])
    values = pol.value_fn(obs)
    assert values.shape == (10,) and values.dtype == np.float32
    assert np.allclose(values, ref.numpy(), atol=1e-4)
    # Learning changes the online model, not the target (until the next assignment).
    pol.learn(make_batch(8, 3, A, (4,)))
    assert np.allclose(pol.value_fn(obs), values, atol=1e-6)
    assert pol.target_version == 1 and pol.model_version == 2


def test_reanalyze_fn() -> None:
    pol = _policy()
    obs, legal, to_play = _inputs(1)
    true_action = np.array([0, 1, 0, -1, 2, 1])
    for reuse in (None, np.linspace(-1, 1, E).astype(np.float32)):
        dist, values = pol.reanalyze_fn(obs, legal, to_play, true_action, reuse)
        assert dist.shape == (E, A) and dist.dtype == np.float32 and values.shape == (E,)
        assert np.allclose(dist.sum(1), 1.0) and (dist[~legal] == 0).all() and np.isfinite(values).all()
    # Chunked searches give well-formed rows too.
    pol.cfg.search_chunk = 4
    dist, _ = pol.reanalyze_fn(obs, legal, to_play, true_action, None)
    assert np.allclose(dist.sum(1), 1.0)


def test_snapshot_follows_learning() -> None:
    pol = _policy()
    before = _act(pol, "eval").root_value
    for _ in range(3):
        pol.learn(make_batch(8, 3, A, (4,)))
    assert pol.learner_steps == 3
    assert not np.allclose(_act(pol, "eval").root_value, before)


def test_state_dict_round_trip_weights_only() -> None:
    pol = _policy(target_update_freq=2)
    for i in range(3):
        pol.learn(make_batch(8, 3, A, (4,), seed=i))
    _act(pol, "collect")  # advance the policy RNG
    buf = io.BytesIO()
    torch.save(pol.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)

    other = _policy(seed=99)
    other.load_state_dict(state)
    assert other.learner_steps == 3
    for a, b in ((pol.model, other.model), (pol.target_model, other.target_model)):
        sa, sb = a.state_dict(), b.state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(v, pol.target_model.state_dict()[k]) for k, v in pol.model.state_dict().items())
    opt_a, opt_b = pol.learner.optimizer.state_dict(), other.learner.optimizer.state_dict()
    assert all(torch.equal(opt_a["state"][i]["exp_avg"], opt_b["state"][i]["exp_avg"]) for i in opt_a["state"])
    # Same RNG state and weights: the next collect step and learner step are identical.
    r1, r2 = _act(pol, "collect"), _act(other, "collect")
    assert np.array_equal(r1.action, r2.action) and np.array_equal(r1.visit_dist, r2.visit_dist)
    m1, _ = pol.learn(make_batch(8, 3, A, (4,), seed=9))
    m2, _ = other.learn(make_batch(8, 3, A, (4,), seed=9))
    assert m1 == m2


def test_config_schedules() -> None:
    cfg = MuZeroPolicyConfig()
    assert cfg.temperature(0) == 0.25 and cfg.epsilon(0) == 0.0 and cfg.eval_simulations == 25
    cfg.manual_temperature_decay = True
    assert [cfg.temperature(s) for s in (0, 49_999, 50_000, 74_999, 75_000)] == [1.0, 1.0, 0.5, 0.5, 0.25]
    cfg.eps_greedy = True
    assert cfg.epsilon(0) == 1.0 and cfg.epsilon(50_000) == pytest.approx(0.525) and cfg.epsilon(10**6) == 0.05
    cfg.eps_type = "exp"
    assert cfg.epsilon(100_000) == pytest.approx(0.95 * np.exp(-1) + 0.05)


def test_plugin_registration_and_factory() -> None:
    from lzk_muzero import plugin

    (component,) = plugin.lzkernel_register_policies()
    assert isinstance(component, Component) and component.name == "muzero"
    assert component.config is MuZeroPolicyConfig
    run = SimpleNamespace(device="cpu", rank=0, world_size=1, seed=lambda *keys: 123, comm=None, note=lambda k, v: None)
    env_spec = SimpleNamespace(obs_shape=(4,), num_actions=2)
    pol = component.factory(small_policy_cfg(), run, env_spec=env_spec)
    assert isinstance(pol, MuZeroPolicy) and pol.learner.average_gradients is None
    calls = []
    run2 = SimpleNamespace(device="cpu", rank=1, world_size=2, seed=lambda *keys: 7, note=lambda k, v: None,
                           comm=SimpleNamespace(average_gradients=lambda params: calls.append(1)))
    pol2 = component.factory(small_policy_cfg(), run2, env_spec=env_spec)
    pol2.learn(make_batch(4, 3, 2, (4,)))
    assert calls == [1]


def test_plugin_module_does_not_import_torch() -> None:
    code = "import sys, lzk_muzero.plugin; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_conv_policy_on_a_two_player_board() -> None:
    cfg = small_policy_cfg(model=dict(type="conv", latent_dim=8, head_channels=2), num_simulations=6)
    pol = MuZeroPolicy(cfg, (3, 3, 3), 9, seed=0)
    randomize(pol.model, seed=12, std=0.2)
    pol.mark_weights_changed()
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 2, size=(4, 3, 3, 3)).astype(np.float32)
    legal = rng.random((4, 9)) < 0.6
    legal[:, 4] = True
    to_play = np.array([1, 2, 1, 2])
    r = pol.act(obs, legal, to_play, mode="eval", env_ids=np.arange(4))
    assert legal[np.arange(4), r.action].all() and np.allclose(r.visit_dist.sum(1), 1.0)
    assert pol._snapshot("online").fused is None  # the conv model takes the generic folded path
    dist, values = pol.reanalyze_fn(obs, legal, to_play, np.full(4, -1), None)
    assert np.allclose(dist.sum(1), 1.0) and values.shape == (4,)
    metrics, prio = pol.learn(make_batch(4, 3, 9, (3, 3, 3)))
    assert np.isfinite(metrics["train/loss_total"]) and prio.shape == (4,)


def test_gumbel_search_acts_with_its_own_choice_and_stores_the_improved_policy() -> None:
    """``search_algorithm: gumbel``: act plays the search's Sequential Halving winner and stores
    its improved policy (not visit fractions); eval is noise-free and reproducible; reanalysis
    returns the improved policy too."""
    import lzk_mcts

    pol = _policy(search_algorithm="gumbel", num_simulations=8)
    obs, legal, to_play = _inputs()
    # The same search by hand, from the policy's own snapshot and root values.
    snap = pol._snapshot("online")
    with torch.inference_mode():
        latent, value, logits = snap.initial(pol._obs_tensor(obs))
        ref = lzk_mcts.search(snap.begin(latent, 8), logits, legal, to_play, pol.cfg.search_config(8),
                              np.random.default_rng(5), add_noise=False, deterministic=True, root_value=value)
    e1, e2 = _act(pol, "eval"), _act(_policy(seed=9, search_algorithm="gumbel", num_simulations=8), "eval")
    assert np.array_equal(e1.action, ref.action) and np.array_equal(e2.action, ref.action)
    np.testing.assert_allclose(e1.visit_dist, ref.policy_target)
    visit_frac = ref.visit_counts / 8.0
    assert not np.allclose(e1.visit_dist, visit_frac)  # the target is not the visit distribution
    assert (e1.visit_dist[~legal] == 0).all() and np.allclose(e1.visit_dist.sum(1), 1.0, atol=1e-5)
    collected = [_act(pol, "collect", temperature=1.0) for _ in range(6)]
    for r in collected:
        assert legal[np.arange(E), r.action].all() and np.allclose(r.visit_dist.sum(1), 1.0, atol=1e-5)
    assert len({tuple(r.action) for r in collected}) > 1  # the Gumbel draws explore
    dist, values = pol.reanalyze_fn(obs, legal, to_play, np.array([0, 1, 0, -1, 2, 1]),
                                    np.linspace(-1, 1, E).astype(np.float32))
    assert np.allclose(dist.sum(1), 1.0, atol=1e-5) and (dist[~legal] == 0).all() and np.isfinite(values).all()
    assert not np.allclose(dist * 8, np.round(dist * 8), atol=1e-3)  # improved policy, not visit counts / 8
