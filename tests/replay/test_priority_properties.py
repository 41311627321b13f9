"""Property test of the game buffer's priorities against a dict reference: random pushes (whole
episodes and in-flight pieces of several envs), FIFO trims, samples, priority updates from old
(possibly stale) batches, reanalyses and checkpoint round trips, in random order.

The reference keys every stored transition by its observation (episode, step) and holds its
priority. After every operation the buffer must hold exactly the reference's transitions with
the reference's priorities, sampling weights p^α + 1e-6 on them and 0 everywhere else; every
sampled row is a stored transition whose IS weight is (N·P)^-β / max over the batch with
P = (p^α + 1e-6) / Σ (p^α + 1e-6); and an update through an index whose segment has been
trimmed writes nothing (a trimmed index never reaches newer data).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from replay_helpers import A, make_buffer, obs_value, source, traj

from lzk_replay import GameBuffer, SegmentCutter
from lzk_replay.sampling import PRIORITY_EPS, draw

L, K, N_TD, ALPHA, BETA = 10, 3, 3, 0.6, 0.4
Key = tuple[int, int]


def fake_search(obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, true_action: np.ndarray,
                reuse_value: Any) -> tuple[np.ndarray, np.ndarray]:
    """A reanalysis search stand-in: uniform visits, root value = step / 7."""
    r = obs.shape[0]
    return np.full((r, A), 1.0 / A, np.float32), (obs[:, -1] / 7).astype(np.float32)


class Reference:
    """FIFO of segments (mirror cutters) and a priority per stored transition."""

    def __init__(self, capacity: int, max_prio: bool) -> None:
        self.capacity, self.max_prio = capacity, max_prio
        self.cutters: dict[int, SegmentCutter] = {}
        self.segments: list[list[Key]] = []  # own positions' keys per stored segment, oldest first
        self.prio: dict[Key, float] = {}

    def push(self, trajectories: list) -> None:
        new = []
        for tr in trajectories:
            cutter = self.cutters.setdefault(tr.env_id, SegmentCutter(L, K + N_TD, 1, tr.env_id))
            new += cutter.cut(tr)
        old = len(self.segments)
        self.segments += [[(int(f[0]), int(f[1])) for f in seg.frames[: seg.valid_len]] for seg in new]
        dropped = 0  # the smallest FIFO prefix (old segments, then new ones) that fits the capacity
        while sum(len(s) for s in self.segments) > self.capacity:
            for k in self.segments.pop(0):
                self.prio.pop(k, None)
            dropped += 1
        kept_old = self.segments[: max(0, old - dropped)]
        # Max-priority mode: the largest priority the buffer still holds once the old data is trimmed.
        top = max((self.prio[k] for s in kept_old for k in s), default=1.0)
        kept_new = new[max(0, dropped - old):]
        for seg, keys in zip(kept_new, self.segments[len(kept_old):]):
            own = np.abs(seg.pred_values - seg.root_values)[: seg.valid_len] + 1e-6
            for k, p in zip(keys, own):
                self.prio[k] = top if self.max_prio else float(p)

    def weights(self, keys: list[Key]) -> np.ndarray:
        """Expected IS weights of ``keys`` (one batch)."""
        total = sum(p**ALPHA + PRIORITY_EPS for p in self.prio.values())
        prob = np.array([(self.prio[k] ** ALPHA + PRIORITY_EPS) / total for k in keys])
        w = (len(self.prio) * prob) ** -BETA
        return w / w.max()


def stored(buf: GameBuffer) -> dict[Key, tuple[int, int]]:
    """Key -> (slot, position) of every own position the buffer holds."""
    st, out = buf.store, {}
    for s in st.live_slots():
        frames = st.slot_frames(int(s))  # S = 1: frame i is the observation at step i
        for pos in range(int(st.valid_len[s])):
            out[(int(frames[pos, 0]), int(frames[pos, 1]))] = (int(s), pos)
    return out


def check(buf: GameBuffer, ref: Reference) -> None:
    st = buf.store
    where = stored(buf)
    assert set(where) == set(ref.prio) and buf.num_transitions == len(ref.prio) <= buf.capacity
    slots = np.array([w[0] for w in where.values()], np.int64)
    pos = np.array([w[1] for w in where.values()], np.int64)
    prio = np.array([ref.prio[k] for k in where])
    np.testing.assert_allclose(st.prio[slots, pos], prio, rtol=1e-6)
    np.testing.assert_allclose(st.weights[slots, pos], prio**ALPHA + PRIORITY_EPS, rtol=1e-6)
    assert np.count_nonzero(st.weights) == len(where)  # nothing else can be drawn: no padding, no free slot


@pytest.mark.parametrize("max_prio", [False, True])
def test_priorities_stay_consistent_through_random_push_trim_sample_update_sequences(max_prio: bool) -> None:
    rng = np.random.default_rng(11 if max_prio else 7)
    kwargs = dict(capacity=120, segment_length=L, unroll_steps=K, td_steps=N_TD, use_priority=True,
                  priority_alpha=ALPHA, priority_beta=BETA, use_max_priority_for_new_data=max_prio)
    buf = make_buffer(**kwargs)
    ref = Reference(120, max_prio)
    open_eps: dict[int, tuple[int, int]] = {}  # env -> (episode, next step) of its running episode
    batches: list[tuple[np.ndarray, list[Key]]] = []
    next_ep, stale_rows = 0, 0
    for _ in range(150):
        op = rng.choice(["push", "push", "sample", "update", "reanalyze", "restore"])
        if op == "push":
            pieces = []
            for env in rng.choice(3, size=int(rng.integers(1, 4)), replace=False):
                ep, t0 = open_eps.get(int(env), (next_ep, 0))
                if t0 == 0:
                    next_ep += 1
                T, ended = int(rng.integers(1, 25)), bool(rng.random() < 0.5)
                pieces.append(traj(T, ep=ep, env_id=int(env), t0=t0, ended=ended))
                if ended:
                    open_eps.pop(int(env), None)
                else:
                    open_eps[int(env)] = (ep, t0 + T)
            buf.push(pieces)
            ref.push(pieces)
        elif op == "sample" and buf.num_transitions >= 8:
            b = buf.sample(8, rng, source(obs_value))
            keys = [(int(o[0]), int(o[1])) for o in b.obs[:, 0]]
            assert len(set(keys)) == 8 and set(keys) <= set(ref.prio)  # stored, without replacement
            np.testing.assert_array_equal(buf.get_priorities(b.indices), [ref.prio[k] for k in keys])
            np.testing.assert_allclose(b.weights, ref.weights(keys), rtol=1e-5)
            batches.append((b.indices, keys))
        elif op == "update" and batches:
            indices, keys = batches[int(rng.integers(len(batches)))]
            new = rng.uniform(0.01, 5.0, size=len(keys))
            live = [k in ref.prio for k in keys]
            assert buf.update_priorities(indices, new) == sum(live)
            stale_rows += len(keys) - sum(live)
            for k, p, ok in zip(keys, new, live):
                if ok:
                    ref.prio[k] = float(p)
        elif op == "reanalyze" and buf.num_transitions:
            buf.reanalyze(source(fake_search), rng)  # rewrites visits and root values, not priorities
        elif op == "restore":
            meta, arrays = buf.state_dict()
            buf = make_buffer(**kwargs)
            buf.load_state_dict(meta, arrays)
        check(buf, ref)
    assert stale_rows > 0 and buf.store.base_id > 0  # trims happened and stale updates were exercised


def test_single_draw_frequencies_follow_p_alpha_after_updates() -> None:
    """Drawing one root at a time, each stored transition comes up with probability
    (p^α + 1e-6) / Σ (p^α + 1e-6) over the stored ones (chi-square bound over 30,000 draws)."""
    buf = make_buffer(segment_length=L, use_priority=True, priority_alpha=ALPHA)
    buf.push([traj(23, ep=0), traj(9, ep=1, env_id=1)])
    rng = np.random.default_rng(4)
    b = buf.sample(32, rng, source(obs_value))
    prio = rng.uniform(0.05, 20.0, size=32)
    buf.update_priorities(b.indices, prio)
    flat = buf.store.weights.reshape(-1)
    counts = np.zeros(flat.shape[0])
    for _ in range(30_000):
        counts[draw(flat, 1, rng)[0][0]] += 1
    g, t = np.divmod(b.indices, L)
    cells = buf.store.slot_of(g) * L + t
    expected = (prio**ALPHA + PRIORITY_EPS) / (prio**ALPHA + PRIORITY_EPS).sum() * 30_000
    chi2 = float((((counts[cells] - expected) ** 2) / expected).sum())
    assert counts.sum() == counts[cells].sum()  # nothing outside the stored transitions
    assert chi2 < 61.1  # 31 degrees of freedom: p < 0.001
