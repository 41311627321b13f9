"""Batch inputs and n-step targets against hand computations and slow references."""
from __future__ import annotations

import numpy as np
import pytest
from replay_helpers import A, make_buffer, obs_value, source, traj

from lzk_replay import GameBuffer
from lzk_replay.targets import build_batch

GAMMA = 0.9


def all_roots(buf: GameBuffer) -> tuple[np.ndarray, np.ndarray]:
    """(slots, t) of every stored transition, oldest first."""
    slots = buf.store.live_slots()
    vl = buf.store.valid_len[slots]
    return np.repeat(slots, vl), np.concatenate([np.arange(v) for v in vl])


def batch_at(buf: GameBuffer, slots: np.ndarray, t: np.ndarray, value_fn=obs_value, seed: int = 0):
    return build_batch(buf.store, slots, t, unroll_steps=buf.K, td_steps=buf.n, discount=buf.discount,
                       rng=np.random.default_rng(seed), value_fn=value_fn,
                       weights=np.ones(len(slots)), indices=np.zeros(len(slots), np.int64))


def episode_step(buf: GameBuffer, slots: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Episode step of root (slot, t), from the stored self-describing frames."""
    return buf.store.frames[slots, t + buf.S - 1, 1].astype(int)


def ref_value(tr, c: int, n: int, gamma: float, v) -> float:
    """Our semantics on the whole episode: m = min(n, T - c) rewards, bootstrap unless the
    episode terminated at c + m; 0 past the final observation. Signs on absolute indices."""
    T = len(tr)
    if c > T:
        return 0.0
    m = min(n, T - c)
    sign = lambda j: 1.0 if tr.to_play[j] == tr.to_play[c] else -1.0  # noqa: E731
    z = sum(gamma**i * sign(c + i) * float(tr.rewards[c + i]) for i in range(m))
    if not (c + m == T and tr.terminal):
        z += gamma**m * sign(c + m) * v(c + m)
    return z


def test_n_step_targets_near_a_terminal_end_by_hand() -> None:
    buf = make_buffer(td_steps=3, unroll_steps=3, discount=GAMMA)
    buf.push([traj(5)])  # r_t = 1 + t/10, v(o_t) = t/10
    b = batch_at(buf, np.array([0, 0]), np.array([0, 3]))
    z0 = 1 + 0.9 * 1.1 + 0.81 * 1.2 + 0.729 * 0.3  # full 3-step return + bootstrap v(o_3)
    z1 = 1.1 + 0.9 * 1.2 + 0.81 * 1.3 + 0.729 * 0.4
    np.testing.assert_allclose(b.target_value[0], [z0, z1, 1.2 + 0.9 * 1.3 + 0.81 * 1.4, 1.3 + 0.9 * 1.4],
                               rtol=1e-6)
    # t = 3: two rewards left, terminal: no bootstrap; c = 5 is the terminal obs, c = 6 beyond it.
    np.testing.assert_allclose(b.target_value[1], [1.3 + 0.9 * 1.4, 1.4, 0.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(b.target_reward[1], [1.3, 1.4, 0.0])
    np.testing.assert_array_equal(b.mask[1], [1, 1, 0, 0])


def test_truncated_episode_bootstraps_from_its_final_observation() -> None:
    term, trunc = make_buffer(), make_buffer()
    term.push([traj(5, terminal=True)])
    trunc.push([traj(5, terminal=False)])
    s, t = np.array([0]), np.array([3])
    a, b = batch_at(term, s, t).target_value[0], batch_at(trunc, s, t).target_value[0]
    v5 = 0.5  # v(o_5), the final observation
    np.testing.assert_allclose(b - a, [0.81 * v5, 0.9 * v5, v5, 0.0], rtol=1e-6)


@pytest.mark.parametrize("terminal", [True, False])
@pytest.mark.parametrize("S", [1, 2])
def test_every_target_matches_the_episode_level_reference(terminal: bool, S: int) -> None:
    buf = make_buffer(segment_length=6, unroll_steps=3, td_steps=4, frame_stack=S)
    episodes = [traj(T, ep=ep, env_id=ep % 2, terminal=terminal) for ep, T in enumerate([1, 6, 13, 20])]
    buf.push(episodes)
    slots, t = all_roots(buf)
    b = batch_at(buf, slots, t)
    eps = buf.store.frames[slots, 0, 0].astype(int)
    steps = episode_step(buf, slots, t)
    for row, (ep, st) in enumerate(zip(eps, steps)):
        tr = episodes[ep]
        v = lambda j: ep + j / 10  # noqa: E731  (obs_value of the newest frame)
        expected = [ref_value(tr, st + k, buf.n, GAMMA, v) for k in range(buf.K + 1)]
        np.testing.assert_allclose(b.target_value[row], expected, rtol=1e-5, atol=1e-6)
        T = len(tr)
        for k in range(buf.K + 1):
            c = st + k
            assert b.mask[row, k] == float(c < T)
            np.testing.assert_array_equal(b.obs[row, k, -2:], [ep, min(c, T)])  # newest frame
            if k < buf.K:
                assert b.target_reward[row, k] == pytest.approx(tr.rewards[c] if c < T else 0.0)
                if c < T:
                    assert b.actions[row, k] == tr.actions[c]
            np.testing.assert_array_equal(b.target_policy[row, k], tr.visit_dist[c] if c < T else 0.0)


def lightzero_value(seg_actions_len: int, rewards: np.ndarray, t: int, K: int, n: int, gamma: float, v) -> list:
    """SPEC §2.6 verbatim (terminal ends): n_eff from t once; bootstrap iff c + n_eff < len."""
    D = seg_actions_len
    n_eff = int(np.clip(n, 1, max(1, D - t)))
    out = []
    for k in range(K + 1):
        c = t + k
        z = gamma**n_eff * v(c + n_eff) if c + n_eff < D else 0.0
        z += sum(gamma**i * float(rewards[c + i]) for i in range(n_eff) if c + i < len(rewards))
        out.append(z)
    return out


def test_terminal_targets_equal_lightzero_formula() -> None:
    buf = make_buffer(segment_length=5, unroll_steps=5, td_steps=5)
    buf.push([traj(T, ep=ep, env_id=ep) for ep, T in enumerate([3, 5, 12, 23])])
    slots, t = all_roots(buf)
    b = batch_at(buf, slots, t)
    for row, (s, tt) in enumerate(zip(slots, t)):
        D = int(buf.store.n_data[s])
        rewards = buf.store.rewards[s, : min(D, buf.store.W - 1)]
        first = int(buf.store.timestep[s, 0])
        ep = int(buf.store.frames[s, 0, 0])
        v = lambda j: ep + (first + j) / 10  # noqa: E731
        np.testing.assert_allclose(b.target_value[row], lightzero_value(D, rewards, int(tt), 5, 5, GAMMA, v),
                                   rtol=1e-5, atol=1e-6)


def test_two_player_signs_use_absolute_indices() -> None:
    T = 7
    to_play = np.where(np.arange(T + 1) % 2 == 0, 1, 2).astype(np.int64)
    tr = traj(T, to_play=to_play, terminal=False)
    buf = make_buffer(td_steps=3, unroll_steps=3)
    buf.push([tr])
    b = batch_at(buf, np.array([0, 0]), np.array([1, 4]))
    r, v = tr.rewards, (lambda j: j / 10)
    # root c = 1 (player 2): rewards alternate in sign from the root's view, bootstrap (-1)^3
    assert b.target_value[0, 0] == pytest.approx(r[1] - 0.9 * r[2] + 0.81 * r[3] - 0.729 * v(4))
    # root c = 5 (t=4, k=1): m = 2 to the truncated end, bootstrap sign (-1)^2 = +1
    assert b.target_value[1, 1] == pytest.approx(r[5] - 0.9 * r[6] + 0.81 * v(7))
    np.testing.assert_array_equal(b.to_play[0], to_play[1:5])
    for row, start in enumerate([1, 4]):
        expected = [ref_value(tr, start + k, 3, GAMMA, v) for k in range(4)]
        np.testing.assert_allclose(b.target_value[row], expected, rtol=1e-6)


def test_value_fn_is_called_once_with_every_bootstrap_observation() -> None:
    calls = []

    def value_fn(obs: np.ndarray) -> np.ndarray:
        calls.append(obs.copy())
        return obs_value(obs)

    buf = make_buffer()
    buf.push([traj(30, ep=1), traj(4, ep=2, env_id=1)])
    b = buf.sample(16, np.random.default_rng(0), source(value_fn))
    assert len(calls) == 1 and calls[0].dtype == np.float32 and calls[0].shape[1:] == (2,)
    assert 0 < calls[0].shape[0] <= 16 * (buf.K + 1)
    assert b.target_value.shape == (16, buf.K + 1)


def test_batch_layout_and_padding_past_the_end() -> None:
    buf = make_buffer(frame_stack=2, unroll_steps=4)
    tr = traj(3, ep=5)
    tr.legal[:] = [True, False, True]
    tr.to_play[:] = [-1, -1, -1, -1]
    buf.push([tr])
    b = batch_at(buf, np.array([0]), np.array([2]), seed=3)
    assert b.obs.shape == (1, 5, 4) and b.obs.dtype == np.float32
    np.testing.assert_array_equal(b.obs[0, :, 1::2], [[1, 2], [2, 3], [3, 3], [3, 3], [3, 3]])  # oldest first
    assert b.actions.shape == (1, 4) and b.actions.dtype == np.int64
    assert b.actions[0, 0] == tr.actions[2] and np.all((b.actions >= 0) & (b.actions < A))
    np.testing.assert_array_equal(b.mask[0], [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(b.target_policy[0, 1:], 0.0)
    np.testing.assert_array_equal(b.legal[0, :2], [[True, False, True]] * 2)  # real obs (c <= D)
    assert b.legal[0, 2:].all()  # beyond the final observation
    assert b.legal.dtype == bool and b.to_play.dtype == np.int64 and b.target_policy.shape == (1, 5, A)


def test_random_padding_actions_are_uniform() -> None:
    buf = make_buffer(unroll_steps=5)
    buf.push([traj(1)])
    b = batch_at(buf, np.zeros(3000, np.int64), np.zeros(3000, np.int64))
    counts = np.bincount(b.actions[:, 1:].ravel(), minlength=A) / b.actions[:, 1:].size
    np.testing.assert_allclose(counts, 1 / A, atol=0.02)


def test_image_observations_stack_on_channels() -> None:
    buf = GameBuffer(capacity=100, segment_length=4, unroll_steps=2, td_steps=2, discount=1.0, frame_stack=3,
                     obs_shape=(2, 3, 3), num_actions=A)
    tr = traj(6)
    tr.obs = np.arange(7, dtype=np.float32)[:, None, None, None] * np.ones((7, 2, 3, 3), np.float32)
    buf.push([tr])
    b = buf.sample(4, np.random.default_rng(0), source(lambda o: o.reshape(len(o), -1).mean(1)))
    assert b.obs.shape == (4, 3, 6, 3, 3)
    step = b.obs[:, 0, ::2, 0, 0]  # frame values (= steps) of each stacked root
    assert np.all(np.diff(step, axis=1) >= 0) and np.all(step[:, -1] - step[:, 0] <= 2)
