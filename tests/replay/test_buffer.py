"""Storage, FIFO trim, sampling, priorities and checkpoints of the game buffer."""
from __future__ import annotations

import json
from dataclasses import fields
from types import SimpleNamespace

import numpy as np
import pytest
from replay_helpers import make_buffer, obs_value, source, traj

from lzk_replay import GameBuffer, SegmentCutter
from lzk_replay.sampling import draw
from lzkernel import TargetSpec
from lzkernel.config.schema import validate

L = 10


def check_invariants(buf: GameBuffer, reference: list[tuple[int, int, int]]) -> None:
    """``reference``: the live (episode, first step, valid_len) per segment, oldest first."""
    st = buf.store
    slots = st.live_slots()
    assert buf.num_transitions <= buf.capacity
    assert buf.num_transitions == int(st.valid_len[slots].sum()) == sum(r[2] for r in reference)
    assert np.count_nonzero(st.weights) == buf.num_transitions  # one sampling weight per transition
    assert np.count_nonzero(st.seg_id >= 0) == len(slots) == len(reference)
    np.testing.assert_array_equal(st.seg_id[slots], st.live_ids())
    got = [(int(st.frames[s, 0, 0]), int(st.timestep[s, 0]), int(st.valid_len[s])) for s in slots]
    assert got == reference
    for s in slots:  # each own position holds its own transition; nothing else is sampleable
        v = int(st.valid_len[s])
        np.testing.assert_array_equal(st.frames[s, buf.S - 1 : buf.S - 1 + v, 1], st.timestep[s, 0] + np.arange(v))
        assert np.all(st.weights[s, :v] > 0) and np.all(st.weights[s, v:] == 0)
        assert np.all(st.prio[s, :v] > 0) and np.all(st.prio[s, v:] == 0)


def test_trim_keeps_every_index_aligned_over_many_pushes() -> None:
    rng = np.random.default_rng(1)
    buf = make_buffer(capacity=137, segment_length=L, use_priority=True)
    cutter = SegmentCutter(L, buf.K + buf.n, buf.S)  # the slow reference: FIFO list of segments
    reference: list[tuple[int, int, int]] = []
    for ep in range(60):
        batch = [traj(int(rng.integers(1, 45)), ep=ep * 3 + j, env_id=j) for j in range(int(rng.integers(1, 4)))]
        added = buf.push(batch)
        new = [(int(s.frames[0, 0]), int(s.timestep[0]), s.valid_len) for tr in batch for s in cutter.cut(tr)]
        assert added == sum(r[2] for r in new)
        reference += new
        while sum(r[2] for r in reference) > buf.capacity:
            reference.pop(0)
        check_invariants(buf, reference)
        if ep % 7 == 0:  # sampled indices point at the right transitions
            b = buf.sample(min(32, buf.num_transitions), rng, source(obs_value))
            g, t = np.divmod(b.indices, L)
            slots = buf.store.slot_of(g)
            np.testing.assert_array_equal(b.obs[:, 0, -1], buf.store.timestep[slots, t])
            np.testing.assert_array_equal(b.obs[:, 0, 0], buf.store.frames[slots, 0, 0])
    assert buf.num_segments < 60 and buf.store.num_slots > 16  # trimmed, grown and wrapped


def test_capacity_is_a_hard_limit_even_for_one_oversized_push() -> None:
    buf = make_buffer(capacity=25, segment_length=L)
    assert buf.push([traj(47)]) == 47
    assert buf.num_transitions == 17  # the last two segments (10 + 7); the first three did not fit
    assert [int(buf.store.timestep[s, 0]) for s in buf.store.live_slots()] == [30, 40]
    with pytest.raises(ValueError):
        make_buffer(capacity=5, segment_length=L)


def test_sampling_covers_every_transition_without_replacement() -> None:
    buf = make_buffer()
    buf.push([traj(23, ep=0), traj(9, ep=1, env_id=1)])
    b = buf.sample(32, np.random.default_rng(0), source(obs_value))
    assert len(np.unique(b.indices)) == 32
    assert sorted(zip(b.obs[:, 0, 0], b.obs[:, 0, 1])) == sorted([(0, t) for t in range(23)] + [(1, t) for t in range(9)])
    np.testing.assert_array_equal(b.weights, 1.0)
    big = buf.sample(50, np.random.default_rng(0), source(obs_value))  # more than stored: with replacement
    assert len(big) == 50 and len(np.unique(big.indices)) <= 32


def test_priority_updates_land_on_the_sampled_positions() -> None:
    buf = make_buffer(use_priority=True, use_max_priority_for_new_data=True)
    buf.push([traj(35, ep=0), traj(12, ep=1, env_id=1)])
    rng = np.random.default_rng(2)
    b = buf.sample(8, rng, source(obs_value))
    new = np.arange(1, 9, dtype=np.float64) * 3.0
    assert buf.update_priorities(b.indices, new) == 8
    np.testing.assert_array_equal(buf.get_priorities(b.indices), new)
    g, t = np.divmod(b.indices, L)
    np.testing.assert_array_equal(buf.store.prio[buf.store.slot_of(g), t], new)
    assert np.count_nonzero(buf.store.prio != 1.0) - np.count_nonzero(buf.store.prio == 0) == 8  # nothing else moved
    np.testing.assert_allclose(buf.store.weights[buf.store.slot_of(g), t], new**0.6 + 1e-6)


def test_stale_priority_updates_are_dropped_after_a_trim_reuses_the_slots() -> None:
    buf = make_buffer(capacity=160, use_priority=True)
    buf.push([traj(150, ep=0)])  # ids 0..14 in slots 0..14 of 16
    old = buf.sample(150, np.random.default_rng(3), source(obs_value))
    buf.push([traj(30, ep=1)])  # ids 15..17: ids 0, 1 are dropped and 16, 17 reuse their slots
    st = buf.store
    assert st.num_slots == 16 and list(st.seg_id[:2]) == [16, 17]
    survivors = np.divmod(old.indices, L)[0] >= 2
    assert survivors.sum() == 130
    before = st.prio.copy()
    assert buf.update_priorities(old.indices, np.full(150, 7.0)) == 130
    assert np.isnan(buf.get_priorities(old.indices[~survivors])).all()
    np.testing.assert_array_equal(buf.get_priorities(old.indices[survivors]), 7.0)
    np.testing.assert_array_equal(st.prio[:2], before[:2])  # the reused slots' new data is untouched
    assert np.count_nonzero(st.prio != before) == 130


def test_new_data_priorities() -> None:
    buf = make_buffer(use_priority=True, use_max_priority_for_new_data=True)
    buf.push([traj(5)])
    np.testing.assert_array_equal(buf.store.prio[0, :5], 1.0)  # empty buffer: 1
    b = buf.sample(5, np.random.default_rng(0), source(obs_value))
    buf.update_priorities(b.indices, np.array([0.5, 4.0, 2.0, 1.0, 0.1]))
    buf.push([traj(3, ep=1, env_id=1)])
    np.testing.assert_array_equal(buf.store.prio[1, :3], 4.0)  # the max stored priority
    buf2 = make_buffer(use_priority=True)  # the default: LightZero 0.2.0's collector priorities
    tr = traj(12)
    buf2.push([tr])
    expected = np.abs(tr.pred_values - tr.root_values) + 1e-6
    np.testing.assert_allclose(buf2.store.prio[0, :10], expected[:10], rtol=1e-6)
    np.testing.assert_allclose(buf2.store.prio[1, :2], expected[10:], rtol=1e-6)


def test_prioritised_sampling_follows_p_alpha() -> None:
    buf = make_buffer(use_priority=True, priority_alpha=0.6)
    buf.push([traj(4)])
    idx = buf.sample(4, np.random.default_rng(0), source(obs_value)).indices
    p = np.array([1.0, 2.0, 4.0, 8.0])
    buf.update_priorities(idx, p)
    counts = np.zeros(4)
    rng = np.random.default_rng(5)
    for _ in range(10):  # batch > stored: with replacement, so frequencies are single-draw probabilities
        b = buf.sample(2000, rng, source(obs_value))
        counts += np.bincount(np.divmod(b.indices, L)[1], minlength=4)
    expected = (p**0.6 + 1e-6) / (p**0.6 + 1e-6).sum()
    np.testing.assert_allclose(counts / counts.sum(), expected, atol=0.01)


def test_draw_without_replacement_is_unique_and_favours_heavy_positions() -> None:
    w = np.zeros(1000)
    w[::2] = 1.0
    w[:10] = 1e4  # heavy positions: the rejection rounds must fall back to the exact draw
    rng = np.random.default_rng(0)
    pos, prob = draw(w, 300, rng)
    assert len(np.unique(pos)) == 300 and np.all(w[pos] > 0)
    assert set(range(0, 10, 2)) <= set(pos.tolist())
    np.testing.assert_allclose(prob, w[pos] / w.sum())


def test_importance_weights_formula() -> None:
    buf = make_buffer(use_priority=True, priority_beta=0.4)
    buf.push([traj(20)])
    idx = buf.sample(20, np.random.default_rng(0), source(obs_value)).indices
    buf.update_priorities(idx, np.linspace(0.1, 5.0, 20))
    b = buf.sample(6, np.random.default_rng(1), source(obs_value))
    p = buf.get_priorities(b.indices)
    all_w = (np.linspace(0.1, 5.0, 20) ** 0.6 + 1e-6).sum()
    w = (20 * (p**0.6 + 1e-6) / all_w) ** -0.4
    np.testing.assert_allclose(b.weights, w / w.max(), rtol=1e-5)
    assert b.weights.dtype == np.float32 and b.weights.max() == 1.0


def test_state_dict_round_trip_is_exact() -> None:
    buf = make_buffer(capacity=60, use_priority=True, frame_stack=2)
    rng = np.random.default_rng(0)
    for ep in range(8):
        buf.push([traj(int(rng.integers(3, 30)), ep=ep, env_id=ep % 2)])
        b = buf.sample(8, rng, source(obs_value))
        buf.update_priorities(b.indices, rng.random(8) * 3)
    meta, arrays = buf.state_dict()
    meta = json.loads(json.dumps(meta))  # JSON-able
    other = make_buffer(capacity=60, use_priority=True, frame_stack=2)
    other.load_state_dict(meta, {k: v.copy() for k, v in arrays.items()})
    assert other.num_transitions == buf.num_transitions and other.num_segments == buf.num_segments
    live = buf.store.live_slots()  # free slots may hold stale bytes; only live ones matter
    np.testing.assert_array_equal(other.store.live_slots(), live)
    for name in buf.store.array_names:
        if name == "frame_ids":  # pool ids are renumbered by a state; the frames they name are compared
            continue
        np.testing.assert_array_equal(getattr(other.store, name)[live], getattr(buf.store, name)[live], err_msg=name)
    for slot in live:
        np.testing.assert_array_equal(other.store.slot_frames(slot), buf.store.slot_frames(slot))
    np.testing.assert_array_equal(other.store.weights, buf.store.weights)
    b1 = buf.sample(16, np.random.default_rng(9), source(obs_value))
    b2 = other.sample(16, np.random.default_rng(9), source(obs_value))
    for f in fields(b1):
        np.testing.assert_array_equal(getattr(b1, f.name), getattr(b2, f.name), err_msg=f.name)
    with pytest.raises(ValueError):
        make_buffer(frame_stack=1).load_state_dict(meta, arrays)


def test_plugin_registers_the_game_buffer() -> None:
    from lzk_replay.plugin import GameBufferConfig, lzkernel_register_buffers

    comp = next(c for c in lzkernel_register_buffers() if c.name == "game")
    assert comp.config is GameBufferConfig and comp.doc
    cfg = GameBufferConfig()
    assert (cfg.capacity, cfg.segment_length, cfg.use_priority, cfg.priority_alpha, cfg.priority_beta,
            cfg.use_max_priority_for_new_data) == (1_000_000, 50, False, 0.6, 0.4, False)
    parsed, problems = validate(GameBufferConfig, {"capacity": "1e5", "use_priority": True}, "buffer")
    assert problems == [] and parsed.capacity == 100_000 and parsed.use_priority
    assert "buffer.capacity" in validate(GameBufferConfig, {"capacity": 10}, "buffer")[1][0]
    assert "buffer.reanalyze_max_roots" in validate(GameBufferConfig, {"reanalyze_max_roots": -1}, "buffer")[1][0]
    buf = comp.factory(cfg, object(), env_spec=SimpleNamespace(obs_shape=(4,), num_actions=2),
                       target_spec=TargetSpec(unroll_steps=5, td_steps=5, discount=0.997,
                                              frame_stack=1, batch_size=256))
    assert isinstance(buf, GameBuffer) and (buf.K, buf.n, buf.L, buf.capacity) == (5, 5, 50, 1_000_000)


def test_state_dict_keeps_the_cutters_tails_so_a_stream_continues() -> None:
    """Pieces that have not ended leave tails in the cutters (waiting for padding) and an env
    tail (the last stored segment, whose successor shares its frames): a restored buffer
    continues those streams as the original does."""
    buf = make_buffer(frame_stack=2)
    pieces = {env: [traj(12, ep=env, env_id=env, t0=t0, ended=False) for t0 in (0, 12)] for env in (0, 1)}
    for env in (0, 1):
        buf.push(pieces[env])
    assert buf.stats()["pending"] > 0 and buf._env_tail
    meta, arrays = buf.state_dict()
    other = make_buffer(frame_stack=2)
    other.load_state_dict(json.loads(json.dumps(meta)), {k: v.copy() for k, v in arrays.items()})
    for b in (buf, other):
        b.push([traj(9, ep=env, env_id=env, t0=24, ended=True) for env in (0, 1)])
    assert other.num_segments == buf.num_segments and other.stats() == buf.stats()
    m1, a1 = buf.state_dict()
    m2, a2 = other.state_dict()
    assert m1 == m2 and sorted(a1) == sorted(a2)
    for k in a1:
        np.testing.assert_array_equal(a1[k], a2[k], err_msg=k)
    for slot in buf.store.live_slots():
        np.testing.assert_array_equal(other.store.slot_frames(slot), buf.store.slot_frames(slot))


def test_batch_rows_are_oldest_first_after_the_slots_wrap() -> None:
    """LightZero sorts a batch by age and reanalyses its first rows (the most outdated targets);
    once trimming wraps the ring of slots, slot order is no longer age order."""
    buf = make_buffer(capacity=100, segment_length=10)
    for ep in range(38):  # only the 10 newest segments stay, in wrapped slots
        buf.push([traj(10, ep=ep)])
    st = buf.store
    assert not np.all(np.diff(st.live_slots()) > 0)  # the wrap this test is about
    batch = buf.sample(32, np.random.default_rng(0), source(obs_value))
    assert np.all(np.diff(batch.indices) > 0)
    assert batch.indices[0] // buf.L == min(st.live_ids()[np.isin(st.live_ids(), batch.indices // buf.L)])
