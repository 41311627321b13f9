"""Value-prefix targets (EfficientZero, addendum C.4): hand-computed cases with a reset inside the
unroll, an episode end inside the horizon and rewards from a segment's K + n padding; the
rewards recovered from the prefixes equal the per-step reward targets."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from replay_helpers import make_buffer, obs_value, source, traj

from lzk_replay.targets import build_batch, value_prefix

ROOT = Path(__file__).resolve().parents[2]


def prefix_batch(buf, slots, t, horizon: int):
    return build_batch(buf.store, np.asarray(slots), np.asarray(t), unroll_steps=buf.K, td_steps=buf.n,
                       discount=buf.discount, rng=np.random.default_rng(0), value_fn=obs_value,
                       weights=np.ones(len(slots)), indices=np.zeros(len(slots), np.int64),
                       value_prefix_horizon=horizon)


def recovered_rewards(prefix: np.ndarray, horizon: int) -> np.ndarray:
    """r_k = prefix_k − prefix_{k−1}, or prefix_k where the sum restarted (k % H == 0)."""
    prev = np.concatenate([np.zeros((prefix.shape[0], 1), prefix.dtype), prefix[:, :-1]], axis=1)
    restart = np.arange(prefix.shape[1]) % horizon == 0
    return np.where(restart, prefix, prefix - prev)


def test_value_prefix_restarts_every_horizon() -> None:
    r = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]], np.float32)
    np.testing.assert_array_equal(value_prefix(r, 3), [[1, 3, 6, 4, 9, 15, 7]])
    np.testing.assert_array_equal(value_prefix(r, 1), r)
    np.testing.assert_array_equal(value_prefix(r, 7), np.cumsum(r, axis=1))
    with pytest.raises(ValueError):
        value_prefix(r, 0)


def test_a_reset_inside_the_unroll_by_hand() -> None:
    buf = make_buffer(unroll_steps=7, td_steps=3, segment_length=10)
    buf.push([traj(20)])  # r_t = 1 + t/10
    b = prefix_batch(buf, [0], [2], horizon=3)  # rewards r_2 … r_8; the sum restarts before k = 3 and 6
    np.testing.assert_allclose(b.target_value_prefix[0], [1.2, 2.5, 3.9, 1.5, 3.1, 4.8, 1.8], rtol=1e-6)
    np.testing.assert_allclose(recovered_rewards(b.target_value_prefix, 3), b.target_reward, rtol=1e-6, atol=1e-6)


def test_an_episode_end_inside_the_horizon_holds_the_prefix() -> None:
    buf = make_buffer(unroll_steps=5, td_steps=5, segment_length=10)
    buf.push([traj(5)])  # terminal after r_4
    b = prefix_batch(buf, [0, 0], [3, 0], horizon=5)
    np.testing.assert_allclose(b.target_value_prefix[0], [1.3, 2.7, 2.7, 2.7, 2.7], rtol=1e-6)  # r_3 + r_4, then 0s
    np.testing.assert_allclose(b.target_value_prefix[1], [1.0, 2.1, 3.3, 4.6, 6.0], rtol=1e-6)
    np.testing.assert_array_equal(b.mask[0], [1, 1, 0, 0, 0, 0])


def test_prefixes_read_the_successor_padding() -> None:
    buf = make_buffer(unroll_steps=5, td_steps=3, segment_length=10)
    buf.push([traj(25)])  # segments [0, 10), [10, 20), [20, 25); the first padded with steps 10 … 17
    first = int(buf.store.live_slots()[0])
    b = prefix_batch(buf, [first], [8], horizon=3)  # r_8, r_9 own, r_10 … r_12 from the padding
    np.testing.assert_allclose(b.target_reward[0], [1.8, 1.9, 2.0, 2.1, 2.2], rtol=1e-6)
    np.testing.assert_allclose(b.target_value_prefix[0], [1.8, 3.7, 5.7, 2.1, 4.3], rtol=1e-6)


@pytest.mark.parametrize("horizon", [1, 2, 3, 5])
def test_rewards_recovered_from_prefixes_equal_the_rewards(horizon: int) -> None:
    """Every stored root of random-length episodes (ends inside and beyond the unroll)."""
    rng = np.random.default_rng(horizon)
    buf = make_buffer(unroll_steps=6, td_steps=2, segment_length=7, value_prefix_horizon=horizon)
    buf.push([traj(int(T), ep=e, env_id=e, rewards=rng.normal(size=int(T)))
              for e, T in enumerate(rng.integers(1, 30, 6))])
    b = buf.sample(buf.num_transitions, np.random.default_rng(0), source(obs_value))
    assert b.target_value_prefix.shape == b.target_reward.shape and b.target_value_prefix.dtype == np.float32
    np.testing.assert_allclose(recovered_rewards(b.target_value_prefix, horizon), b.target_reward, atol=1e-5)
    assert (b.target_value_prefix != np.cumsum(b.target_reward, axis=1)).any() or horizon >= 6


def test_no_prefixes_without_a_horizon() -> None:
    buf = make_buffer()
    buf.push([traj(12)])
    assert buf.sample(8, np.random.default_rng(0), source(obs_value)).target_value_prefix is None


def test_buffers_without_prefix_targets_are_refused_at_config_time() -> None:
    proc = subprocess.run([sys.executable, "-m", "lzkernel", "config", str(ROOT / "configs" / "cartpole_efficientzero.yaml"),
                           "buffer.name=unizero"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    assert "trains on value prefixes (horizon 5): use buffer 'game'" in proc.stderr
