"""Frames stored once: uint8 pooling, sharing between consecutive segments, stacks at sampling,
trimming frees frames, and a checkpoint that is proportional to the frames stored."""
from __future__ import annotations

import numpy as np
import pytest

from lzk_replay.buffer import GameBuffer
from lzk_replay.frame_pool import FramePool
from lzkernel import Trajectory, decode_frames

SHAPE = (1, 64, 64)
FRAME = 64 * 64  # bytes of one uint8 frame


def frames_traj(T: int, ep: int, env_id: int, rng: np.random.Generator, terminal: bool = True) -> Trajectory:
    """An episode of T steps whose frames are random uint8 pictures (scale 255), frame 0 carrying
    (ep, step) in its first pixels so that stacks can be checked against the source."""
    q = rng.integers(0, 256, size=(T + 1, *SHAPE), dtype=np.uint8)
    q[:, 0, 0, 0], q[:, 0, 0, 1] = ep, np.arange(T + 1) % 256
    A = 6
    return Trajectory(obs=decode_frames(q, 255.0), actions=rng.integers(0, A, T), rewards=np.ones(T, np.float32),
                      visit_dist=np.full((T, A), 1 / A, np.float32), root_values=np.zeros(T, np.float32),
                      pred_values=np.zeros(T, np.float32), legal=np.ones((T + 1, A), bool),
                      to_play=np.full(T + 1, -1), timestep=np.arange(T + 1), ended=True, terminal=terminal,
                      env_id=env_id), q


def buffer(L: int, K: int, n: int, S: int, capacity: int = 100_000) -> GameBuffer:
    return GameBuffer(capacity=capacity, segment_length=L, unroll_steps=K, td_steps=n, discount=0.997, frame_stack=S,
                      obs_shape=SHAPE, num_actions=6, frame_scale=255.0)


@pytest.mark.parametrize("L, K, n, S", [(20, 10, 5, 1), (400, 5, 5, 4), (5, 10, 5, 4)])
def test_each_frame_is_stored_once_as_uint8(L: int, K: int, n: int, S: int) -> None:
    rng = np.random.default_rng(0)
    buf = buffer(L, K, n, S)
    sources = {}
    total_obs = 0
    for ep in range(4):
        traj, q = frames_traj(int(rng.integers(150, 500)), ep, ep % 2, rng)
        sources[ep] = q
        buf.push([traj])
        total_obs += len(traj) + 1
    pool = buf.store.pool
    assert pool.dtype == np.uint8 and pool.num_frames == total_obs  # T + 1 frames per episode, no copies
    per_transition = pool.nbytes / buf.num_transitions
    assert per_transition <= 1.1 * FRAME  # padding (K + n) and history (S - 1) share the neighbours' frames
    # Stacks built at sampling are the source frames, decoded exactly (bit-identical to what the env emitted).
    b = buf.sample(64, rng, type("S", (), {"value_fn": staticmethod(lambda o: np.zeros(len(o), np.float32))})())
    st = buf.store
    slots, t = np.divmod(b.indices, L)
    slots = st.slot_of(slots)
    for row in range(8):
        ep, t0 = int(st.slot_frames(slots[row])[0, 0, 0, 0] * 255 + 0.5), int(st.timestep[slots[row], 0])
        step = t0 + int(t[row])
        want = [sources[ep][max(step - S + 1 + j, 0)] for j in range(S)]  # episode start: first frame repeated
        np.testing.assert_array_equal(b.obs[row, 0], decode_frames(np.concatenate(want), 255.0))


def test_trim_frees_frames_and_the_state_is_proportional_to_frames() -> None:
    rng = np.random.default_rng(1)
    buf = buffer(20, 10, 5, 1, capacity=2_000)
    sizes = []
    for ep in range(30):
        buf.push([frames_traj(200, ep, ep % 3, rng)[0]])
        assert buf.num_transitions <= 2_000
        # pool refcounts: exactly the frames the live segments use (freed ones are reused)
        st = buf.store
        used = st.frame_ids[st.live_slots()][st._frame_mask(st.live_slots())]
        assert st.pool.num_frames == np.unique(used).size
        meta, arrays = buf.state_dict()
        sizes.append((buf.store.pool.num_frames, arrays["frame_pool"].nbytes, sum(a.nbytes for a in arrays.values())))
    frames, pool_bytes, total = np.array(sizes).T
    assert np.all(pool_bytes == frames * FRAME)  # one frame per stored observation, uint8
    assert np.all(total <= 1.2 * pool_bytes)  # the rest of the state is small next to the frames
    assert frames.max() <= 1.1 * 2_000 + 3 * 21  # bounded by the capacity: trimming frees frames
    other = buffer(20, 10, 5, 1, capacity=2_000)
    other.load_state_dict(*buf.state_dict())
    assert other.store.pool.num_frames == buf.store.pool.num_frames
    for slot in buf.store.live_slots()[:5]:
        np.testing.assert_array_equal(other.store.slot_frames(slot), buf.store.slot_frames(slot))


def test_frames_off_the_uint8_grid_are_refused() -> None:
    rng = np.random.default_rng(2)
    traj, _ = frames_traj(30, 0, 0, rng)
    traj.obs = traj.obs + 0.3 / 255  # not k / 255
    with pytest.raises(ValueError, match="not uint8 frames"):
        buffer(20, 5, 5, 1).push([traj])


def test_pool_reference_counts_and_reuse() -> None:
    pool = FramePool((2,), scale=None, capacity=2)
    a = pool.add(np.ones((3, 2), np.float32))  # grows
    pool.retain(np.concatenate([a, a[:1]]))  # a[0] referenced twice
    assert pool.num_frames == 3 and pool.refs[a].tolist() == [2, 1, 1]
    pool.release(a)
    assert pool.num_frames == 1  # a[1], a[2] freed; a[0] still referenced once
    b = pool.add(np.zeros((2, 2), np.float32))
    assert set(b.tolist()) == set(a[1:].tolist())  # freed ids are reused
    with pytest.raises(AssertionError):
        pool.release(np.array([a[1], a[1]]))
