"""ReZero whole-buffer reanalysis: coverage, backward order, value reuse, write-back, padding refresh."""
from __future__ import annotations

import numpy as np
import pytest
from replay_helpers import NO_RNG, A, make_buffer, obs_value, source, traj

from lzk_replay import GameBuffer
from lzk_replay import buffer as buffer_module
from lzk_replay.reanalyze import reanalyze_segments, select_round_robin


class FakeSearch:
    """Records every root; returns a visit distribution and a root value unique to (ep, step)."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.value: dict[tuple[int, int], float] = {}

    @staticmethod
    def result(ep: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        value = (1000 * ep + step).astype(np.float32)
        visits = np.zeros((len(ep), A), np.float32)
        visits[np.arange(len(ep)), (step + 1) % A] = 0.75
        visits[:, A - 1] += 0.25
        return visits, value

    def __call__(self, obs, legal, to_play, true_action, reuse_value):
        assert obs.dtype == np.float32 and legal.shape == (len(obs), A) and to_play.shape == (len(obs),)
        ep, step = obs[:, -2].astype(int), obs[:, -1].astype(int)
        visits, value = self.result(ep, step)
        self.calls.append(dict(ep=ep, step=step, true_action=true_action.copy(),
                               reuse=None if reuse_value is None else reuse_value.copy()))
        for e, s, v in zip(ep, step, value):
            self.value[(e, s)] = float(v)
        return visits, value


def stored_transitions(buf: GameBuffer) -> list[tuple[int, int]]:
    st = buf.store
    return sorted((int(st.slot_frames(s)[0, 0]), int(st.timestep[s, 0]) + i)
                  for s in st.live_slots() for i in range(int(st.valid_len[s])))


def test_every_transition_is_searched_once_backwards_with_reuse() -> None:
    buf = make_buffer(capacity=120, frame_stack=2)
    episodes = [traj(T, ep=ep, env_id=ep % 3) for ep, T in enumerate([37, 4, 25, 60, 11])]
    buf.push(episodes)
    fake = FakeSearch()
    stats = buf.reanalyze(source(fake), NO_RNG)
    searched = [(int(e), int(s)) for c in fake.calls for e, s in zip(c["ep"], c["step"])]
    assert sorted(searched) == stored_transitions(buf)  # all of them, each once
    assert stats["roots"] == buf.num_transitions and stats["groups"] == 10 and stats["calls"] == 10
    order = {key: i for i, c in enumerate(fake.calls) for key in zip(c["ep"].tolist(), c["step"].tolist())}
    for i, c in enumerate(fake.calls):
        for e, s, a, reuse_row in zip(c["ep"], c["step"], c["true_action"],
                                      c["reuse"] if c["reuse"] is not None else [None] * len(c["ep"])):
            if i == 0:  # each segment's last own position: no searched successor
                assert a == -1 and reuse_row is None
                continue
            assert order[(e, s + 1)] == i - 1  # c + 1 was searched in the previous group
            assert a == episodes[e].actions[s]
            assert reuse_row == fake.value[(e, s + 1)]


def test_write_back_lands_in_visits_root_values_and_padding() -> None:
    buf = make_buffer(capacity=1000)  # L = 10, K + n = 6
    buf.push([traj(26, ep=2)])
    buf.reanalyze(source(FakeSearch()), NO_RNG)
    st = buf.store
    for s in st.live_slots():
        first, D = int(st.timestep[s, 0]), int(st.n_data[s])
        steps = first + np.arange(D)  # own positions and padding alike hold the fresh results
        visits, values = FakeSearch.result(np.full(D, 2), steps)
        np.testing.assert_array_equal(st.visit_dist[s, :D], visits)
        np.testing.assert_array_equal(st.root_values[s, :D], values)
    assert int(st.n_data[st.live_slots()[0]]) == 16  # segment 0 does have padding
    # and the learner's policy targets (including those read from padding) are the new ones
    b = buf.sample(26, np.random.default_rng(0), source(obs_value))
    for row in range(26):
        for k in range(buf.K + 1):
            step = int(b.obs[row, 0, 1]) + k
            if step < 26:
                np.testing.assert_array_equal(b.target_policy[row, k], FakeSearch.result(np.array([2]), np.array([step]))[0][0])


def test_padding_longer_than_a_segment_is_refreshed_through_chains() -> None:
    buf = make_buffer(segment_length=3, unroll_steps=3, td_steps=4)  # pad 7 > L
    buf.push([traj(20, ep=1)])
    buf.reanalyze(source(FakeSearch()), NO_RNG)
    st = buf.store
    for s in st.live_slots():
        D = int(st.n_data[s])
        _, values = FakeSearch.result(np.full(D, 1), int(st.timestep[s, 0]) + np.arange(D))
        np.testing.assert_array_equal(st.root_values[s, :D], values)


def test_capped_reanalysis_cycles_round_robin_over_whole_segments() -> None:
    buf = make_buffer(capacity=1000, reanalyze_max_roots=25, reanalyze_batch_size=4)
    buf.push([traj(57, ep=0), traj(8, ep=1, env_id=1)])  # segments 10,10,10,10,10,7 | 8
    seen: list[tuple[int, int]] = []
    for _ in range(4):
        fake = FakeSearch()
        stats = buf.reanalyze(source(fake), NO_RNG)
        assert stats["roots"] <= 25 and all(len(c["ep"]) <= 4 for c in fake.calls)
        seen += [(int(e), int(s)) for c in fake.calls for e, s in zip(c["ep"], c["step"])]
    total = buf.num_transitions
    assert len(seen) >= total and sorted(set(seen)) == stored_transitions(buf)
    assert sorted(seen[:total]) == stored_transitions(buf)  # the first cycle covers each once


def test_split_calls_give_the_same_result_as_one_call_per_group() -> None:
    a, b = make_buffer(reanalyze_batch_size=0), make_buffer(reanalyze_batch_size=3)
    for buf in (a, b):
        buf.push([traj(33, ep=0), traj(14, ep=1, env_id=1)])
        buf.reanalyze(source(FakeSearch()), NO_RNG)
    np.testing.assert_array_equal(a.store.root_values, b.store.root_values)
    np.testing.assert_array_equal(a.store.visit_dist, b.store.visit_dist)


def test_reuse_can_be_switched_off() -> None:
    """reuse=False: every root is searched without a true action or a reuse value."""
    buf = make_buffer(capacity=120)
    buf.push([traj(12, ep=0)])
    seen: list[tuple[np.ndarray, object]] = []

    def fn(obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, true_action: np.ndarray,
           reuse_value: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        seen.append((np.asarray(true_action).copy(), reuse_value))
        return np.full((len(obs), A), 1.0 / A, np.float32), np.zeros(len(obs), np.float32)

    buf.reanalyze(source(fn), NO_RNG, reuse=False)
    assert seen and all((ta == -1).all() and rv is None for ta, rv in seen)
    seen.clear()
    buf.reanalyze(source(fn), NO_RNG, reuse=True)
    assert any((ta >= 0).any() and rv is not None for ta, rv in seen)  # reuse on: true actions and values


def test_reuse_chains_restart_every_chunk() -> None:
    """chain = C: position c (in its segment) reuses c + 1 unless c + 1 is a multiple of C, so the
    backward walk is cut into LightZero's chunks of C positions; every transition is still searched
    once, and where reuse happens it is the successor's freshly searched value."""
    buf = make_buffer(capacity=200, segment_length=10)
    episodes = [traj(T, ep=ep, env_id=ep) for ep, T in enumerate([37, 25, 8])]
    buf.push(episodes)
    ids, _ = select_round_robin(buf.store, 0, 0)
    fake = FakeSearch()
    reanalyze_segments(buf.store, ids, fake, chain=3)
    searched = [(int(e), int(s)) for c in fake.calls for e, s in zip(c["ep"], c["step"])]
    assert sorted(searched) == stored_transitions(buf)
    last: dict[tuple[int, int], int] = {}  # each segment's last own step (segments start at steps 0, 10, ...)
    for e, s in searched:
        last[(e, s // 10)] = max(s, last.get((e, s // 10), s))
    reused = fresh = 0
    for c in fake.calls:
        for i, (e, s, a) in enumerate(zip(c["ep"], c["step"], c["true_action"])):
            p = s % 10
            if s == last[(e, s // 10)] or (p + 1) % 3 == 0:
                assert a == -1, (e, s)
                fresh += 1
            else:
                assert a == episodes[e].actions[s] and c["reuse"][i] == fake.value[(e, s + 1)], (e, s)
                reused += 1
    assert reused > 0 and fresh > len(ids)  # chains were cut inside segments, not only at their ends


def test_lightzero_reuse_chain_follows_the_buffer_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """buffer.reuse_chain='lightzero': C = max(1, N // 2000); below 4000 transitions nothing is reused."""
    buf = make_buffer(capacity=200, reuse_chain="lightzero")
    buf.push([traj(60, ep=0)])
    assert make_buffer().reuse_chain_length() == 0  # 'segment': one chain per segment
    assert buf.reuse_chain_length() == 1
    fake = FakeSearch()
    buf.reanalyze(source(fake), NO_RNG)
    assert all((c["true_action"] == -1).all() for c in fake.calls)
    monkeypatch.setattr(buffer_module, "LIGHTZERO_REANALYZE_CHUNKS", 20)  # 60 transitions -> chunks of 3
    assert buf.reuse_chain_length() == 3
    with pytest.raises(ValueError, match="reuse_chain"):
        make_buffer(reuse_chain="whole")
