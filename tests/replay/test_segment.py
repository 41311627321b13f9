"""Game segments: the SPEC §2.4 pad lengths, frame stacks, no lost transitions, in-flight pieces."""
from __future__ import annotations

import numpy as np
import pytest
from replay_helpers import traj

from lzk_replay import SegmentCutter, stacked_shape

L, K, N = 10, 3, 4  # segment length, unroll, td steps
PAD = K + N


@pytest.mark.parametrize("S", [1, 4])
def test_full_segment_lengths_match_the_spec_table(S: int) -> None:
    segs = SegmentCutter(L, PAD, S).cut(traj(3 * L))
    assert [s.index for s in segs] == [0, 1, 2]
    for seg in segs[:2]:  # full, non-final, fully padded
        assert seg.frames.shape[0] == S + L + K + N
        assert len(seg.actions) == L + K + N
        assert len(seg.rewards) == L + K + N - 1
        assert len(seg.root_values) == L + K + N
        assert seg.visit_dist.shape == (L + K + N, 3)
        assert seg.legal.shape[0] == seg.to_play.shape[0] == seg.timestep.shape[0] == L + K + N + 1
        assert (seg.valid_len, seg.done, seg.is_last, seg.terminal) == (L, False, False, False)
    last = segs[2]  # final segment of an ended episode: unpadded
    assert (len(last.actions), len(last.rewards), last.frames.shape[0]) == (L, L, S + L)
    assert (last.valid_len, last.done, last.is_last, last.terminal) == (L, True, True, True)


def test_final_partial_segment_is_unpadded_and_short_padding_marks_done() -> None:
    segs = SegmentCutter(L, PAD, 2).cut(traj(2 * L + 3, terminal=False))
    assert [len(s) for s in segs] == [L + PAD, L + 3, 3]
    mid, last = segs[1], segs[2]
    assert (mid.valid_len, mid.done, mid.is_last, mid.terminal) == (L, True, False, False)
    assert len(mid.rewards) == L + 3 and mid.frames.shape[0] == 2 + L + 3
    assert (last.valid_len, last.done, last.is_last, last.frames.shape[0]) == (3, True, True, 2 + 3)
    np.testing.assert_array_equal(mid.frames[-1], last.frames[-1])  # both end at the final obs


@pytest.mark.parametrize("S", [1, 3])
def test_frame_stacks_repeat_the_first_frame_and_cross_segments(S: int) -> None:
    segs = SegmentCutter(L, PAD, S).cut(traj(2 * L + 5, ep=7))
    for seg in segs:
        start = int(seg.timestep[0])
        for i in range(len(seg) + 1):
            stacked_steps = seg.frames[i : i + S, 1]
            expected = np.maximum(np.arange(start + i - S + 1, start + i + 1), 0)
            np.testing.assert_array_equal(stacked_steps, expected)
            assert np.all(seg.frames[i : i + S, 0] == 7)


def test_stacked_shape() -> None:
    assert stacked_shape((4,), 3) == (12,)
    assert stacked_shape((3, 8, 8), 4) == (12, 8, 8)


def test_cutting_loses_and_duplicates_no_transition() -> None:
    rng = np.random.default_rng(0)
    seen: list[tuple[int, int]] = []
    expected: list[tuple[int, int]] = []
    cutter = SegmentCutter(L, PAD, 2)
    for ep in range(30):
        T = int(rng.integers(1, 4 * L))
        expected += [(ep, t) for t in range(T)]
        for seg in cutter.cut(traj(T, ep=ep)):
            seen += [(int(seg.frames[1 + i, 0]), int(seg.timestep[i])) for i in range(seg.valid_len)]
    assert sorted(seen) == expected
    assert cutter.pending_transitions == 0


def _as_tuple(seg) -> tuple:
    return (seg.frames.tobytes(), seg.actions.tobytes(), seg.rewards.tobytes(), seg.root_values.tobytes(),
            seg.visit_dist.tobytes(), seg.legal.tobytes(), seg.timestep.tobytes(), seg.valid_len, seg.done,
            seg.terminal, seg.is_last, seg.index)


def _pieces(T: int, cuts: list[int], ep: int = 0) -> list:
    """Episode ``ep`` of T steps split at ``cuts``; contiguous pieces, only the last ended."""
    whole = traj(T, ep=ep)
    bounds = [0, *cuts, T]
    out = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        p = traj(b - a, ep=ep, t0=a, ended=b == T)
        p.obs, p.legal, p.to_play, p.timestep = whole.obs[a : b + 1], whole.legal[a : b + 1], \
            whole.to_play[a : b + 1], whole.timestep[a : b + 1]
        out.append(p)
    return out


def test_in_flight_pieces_give_the_same_segments_as_the_whole_episode() -> None:
    T = 4 * L + 6
    whole = SegmentCutter(L, PAD, 3).cut(traj(T))
    cutter = SegmentCutter(L, PAD, 3)
    got = []
    for p in _pieces(T, [3, 17, 18, 30, 44]):
        got += cutter.cut(p)
    assert [_as_tuple(s) for s in got] == [_as_tuple(s) for s in whole]


def test_incomplete_segment_is_kept_back_until_its_padding_exists() -> None:
    cutter = SegmentCutter(L, PAD, 1)
    first, second = _pieces(L + PAD + 5, [L + PAD - 1])
    second.ended = False
    assert cutter.cut(first) == []
    assert cutter.pending_transitions == L + PAD - 1
    out = cutter.cut(second)  # one more transition completes segment 0's padding
    assert [(len(s), s.done) for s in out] == [(L + PAD, False)]
    assert cutter.pending_transitions == PAD + 5


def test_a_new_episode_flushes_the_kept_stream_as_truncated() -> None:
    cutter = SegmentCutter(L, PAD, 1)
    assert cutter.cut(traj(L + 2, ep=0, ended=False)) == []
    out = cutter.cut(traj(5, ep=1))  # timestep restarts at 0: the old stream is abandoned
    assert [(int(s.frames[0, 0]), len(s), s.done, s.terminal, s.is_last) for s in out] == [
        (0, L + 2, True, False, False), (0, 2, True, False, True), (1, 5, True, True, True)]


def test_padding_longer_than_a_segment_spans_several_successors() -> None:
    segs = SegmentCutter(3, 7, 1).cut(traj(20))  # K + n = 7 > L = 3
    assert [len(s) for s in segs] == [10, 10, 10, 10, 8, 5, 2]
    np.testing.assert_array_equal(segs[0].actions, traj(20).actions[:10])
