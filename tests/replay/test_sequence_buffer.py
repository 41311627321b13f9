"""The UniZero buffer: sequence bootstrap values against a per-sample reference, buffer reanalysis
(selection, write-back, padding refresh, history windows), checkpoints and registration."""
from __future__ import annotations

import json
from dataclasses import fields
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from replay_helpers import A, make_buffer, obs_value, source, traj

from lzk_replay import GameBuffer, SequenceGameBuffer
from lzk_replay.sequence_reanalyze import select_segments
from lzkernel import TargetSpec, Trajectory
from lzkernel.config.schema import validate

GAMMA = 0.9


def make_seq(**kw: Any) -> SequenceGameBuffer:
    args: dict[str, Any] = dict(capacity=10_000, segment_length=10, unroll_steps=3, td_steps=3,
                                discount=GAMMA, frame_stack=1, obs_shape=(2,), num_actions=A)
    args.update(kw)
    return SequenceGameBuffer(**args)


def newest(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(episode, step) of the newest frame of stacked self-describing observations [..., S*2]."""
    return obs[..., -2].astype(int), obs[..., -1].astype(int)


def seq_value(ep: Any, step: Any, pos: Any, first_step: Any) -> Any:
    """The fake target model: depends on the observation, its sequence position and the
    sequence's first observation (its context), so any wrong gather or index changes it."""
    return ep + step / 10 + 0.01 * pos + 0.001 * first_step


class FakeSequenceModel:
    """``value_fn(obs [M, K+1, *O'], actions [M, K]) -> [M, K+1]``, recording its inputs."""

    def __init__(self) -> None:
        self.calls: list[tuple[np.ndarray, np.ndarray]] = []

    def __call__(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        self.calls.append((obs.copy(), actions.copy()))
        ep, step = newest(obs)
        pos = np.arange(obs.shape[1])[None, :]
        return seq_value(ep, step, pos, step[:, :1]).astype(np.float32)


def ref_targets(tr: Trajectory, e: int, K: int, n: int, ep: int) -> list[float]:
    """Per-sample reference on the whole episode (T transitions) for the root at step e: the
    bootstrap sequence holds steps min(e + n + j, T); offset k bootstraps from step c + m and
    reads the first sequence position holding that step. Signs compare absolute to_play."""
    T = len(tr)
    seq_steps = [min(e + n + j, T) for j in range(K + 1)]
    out = []
    for k in range(K + 1):
        c = e + k
        if c > T:
            out.append(0.0)
            continue
        m = min(n, T - c)
        sign = lambda j: 1.0 if tr.to_play[j] == tr.to_play[c] else -1.0  # noqa: E731
        z = sum(GAMMA**i * sign(c + i) * float(tr.rewards[c + i]) for i in range(m))
        if not (c + m == T and tr.terminal):
            pos = seq_steps.index(c + m)
            z += GAMMA**m * sign(c + m) * seq_value(ep, c + m, pos, seq_steps[0])
        out.append(z)
    return out


def sample_all(buf: GameBuffer, value_fn: Any, seed: int = 0):
    return buf.sample(buf.num_transitions, np.random.default_rng(seed), source(value_fn))


# ---------------------------------------------------------------------------------- bootstrap values
@pytest.mark.parametrize("K,n,S", [(3, 3, 1), (0, 2, 1), (5, 2, 2), (2, 7, 1)])
def test_sequence_targets_match_the_per_sample_reference(K: int, n: int, S: int) -> None:
    buf = make_seq(segment_length=6, unroll_steps=K, td_steps=n, frame_stack=S)
    episodes = [traj(T, ep=ep, env_id=ep, terminal=ep % 2 == 0) for ep, T in enumerate([1, 2, 6, 13, 20, 9])]
    buf.push(episodes)
    b = sample_all(buf, FakeSequenceModel())
    ep, e = newest(b.obs[:, 0])
    every = sorted((i, s) for i, tr in enumerate(episodes) for s in range(len(tr)))
    assert sorted(zip(ep.tolist(), e.tolist())) == every
    for row in range(len(b)):
        expected = ref_targets(episodes[ep[row]], int(e[row]), K, n, int(ep[row]))
        np.testing.assert_allclose(b.target_value[row], expected, rtol=1e-5, atol=1e-6,
                                   err_msg=f"episode {ep[row]} step {e[row]}")


def test_two_player_signs_with_sequence_values() -> None:
    T = 11
    to_play = np.where(np.arange(T + 1) % 2 == 0, 1, 2).astype(np.int64)
    episodes = [traj(T, to_play=to_play, terminal=False), traj(T, ep=1, env_id=1, to_play=to_play, terminal=True)]
    buf = make_seq(segment_length=4, unroll_steps=3, td_steps=3)
    buf.push(episodes)
    b = sample_all(buf, FakeSequenceModel())
    ep, e = newest(b.obs[:, 0])
    for row in range(len(b)):
        np.testing.assert_allclose(b.target_value[row], ref_targets(episodes[ep[row]], int(e[row]), 3, 3, int(ep[row])),
                                   rtol=1e-5, atol=1e-6)
    row = int(np.nonzero((ep == 0) & (e == 1))[0][0])  # root player 2: odd-step bootstrap sign flips
    v = seq_value(0, 4, 0, 4)
    r = episodes[0].rewards
    assert b.target_value[row, 0] == pytest.approx(r[1] - GAMMA * r[2] + GAMMA**2 * r[3] - GAMMA**3 * v, rel=1e-6)


def test_value_fn_gets_one_teacher_forced_sequence_per_sample() -> None:
    K, n, T = 4, 3, 12
    buf = make_seq(segment_length=5, unroll_steps=K, td_steps=n)
    tr = traj(T, ep=3, terminal=False)  # truncated: every alive entry bootstraps, so M = B
    buf.push([tr])
    fake = FakeSequenceModel()
    b = buf.sample(T, np.random.default_rng(1), source(fake))
    assert len(fake.calls) == 1
    obs, actions = fake.calls[0]
    assert obs.shape == (T, K + 1, 2) and obs.dtype == np.float32
    assert actions.shape == (T, K) and actions.dtype == np.int64
    padded = []
    for m, e in enumerate(newest(b.obs[:, 0])[1]):
        steps = [min(e + n + j, T) for j in range(K + 1)]
        np.testing.assert_array_equal(obs[m], [[3, s] for s in steps])
        for j in range(K):
            if e + n + j < T:
                assert actions[m, j] == tr.actions[e + n + j]
            else:
                padded.append(actions[m, j])
    assert padded and set(padded) <= set(range(A)) and len(set(padded)) > 1  # uniformly random padding


def test_sequence_padding_actions_are_uniform_from_the_final_observation_on() -> None:
    buf = make_seq(unroll_steps=3, td_steps=1)
    buf.push([traj(1, terminal=False)])  # one root: the sequence is o_1 repeated, all actions padding
    fake = FakeSequenceModel()
    buf.sample(3000, np.random.default_rng(0), source(fake))  # with replacement: 3000 copies of the root
    actions = fake.calls[0][1]
    assert actions.shape == (3000, 3)
    for j in range(3):  # including j = 0, the action right after the final observation (step D)
        np.testing.assert_allclose(np.bincount(actions[:, j], minlength=A) / 3000, 1 / A, atol=0.03)


def test_value_fn_is_skipped_when_nothing_bootstraps() -> None:
    def fail(obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        raise AssertionError("value_fn must not be called")

    buf = make_seq(td_steps=3)
    buf.push([traj(2, terminal=True)])  # every root reaches the terminal end within n steps
    b = sample_all(buf, fail)
    np.testing.assert_allclose(b.target_value[:, 0], [1 + GAMMA * 1.1, 1.1], rtol=1e-6)

    fake = FakeSequenceModel()  # one bootstrapping sample among non-bootstrapping ones: M = 1
    buf.push([traj(2, ep=1, env_id=1, terminal=False)])
    sample_all(buf, fake)
    assert len(fake.calls) == 1 and fake.calls[0][0].shape[0] == 2  # the truncated episode's 2 roots


@pytest.mark.parametrize("use_priority", [False, True])
def test_every_non_value_field_equals_game_buffer(use_priority: bool) -> None:
    seq, game = make_seq(use_priority=use_priority), make_buffer(use_priority=use_priority)
    episodes = [traj(T, ep=ep, env_id=ep % 2, terminal=ep != 1) for ep, T in enumerate([27, 4, 16, 33])]
    for buf in (seq, game):
        buf.push(episodes)
        if use_priority:
            value_fn = obs_value if buf is game else FakeSequenceModel()
            idx = buf.sample(buf.num_transitions, np.random.default_rng(0), source(value_fn)).indices
            buf.update_priorities(idx, np.linspace(0.1, 3.0, idx.shape[0]))
    for seed in range(3):
        a = seq.sample(24, np.random.default_rng(seed), source(FakeSequenceModel()))
        b = game.sample(24, np.random.default_rng(seed), source(obs_value))
        for f in fields(a):
            if f.name != "target_value":
                np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)
        assert not np.allclose(a.target_value, b.target_value)  # (the values do differ)


# ---------------------------------------------------------------------------------- reanalysis
class FakeSearch:
    """Records every root window; returns visits / values unique to the root's (episode, step)."""

    def __init__(self) -> None:
        self.roots: list[tuple[int, int]] = []
        self.windows: list[tuple[np.ndarray, np.ndarray, int]] = []
        self.batch_sizes: list[int] = []

    @staticmethod
    def result(ep: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        base = np.array([0.5, 0.3, 0.2], np.float32)  # never one-hot: differs from the collected visits
        visits = np.stack([np.roll(base, int(s)) for s in step]).reshape(len(step), A)
        return visits, (1000 * ep + step).astype(np.float32)

    def __call__(self, obs, actions, n_obs, legal, to_play):
        R, W = obs.shape[:2]
        assert actions.shape == (R, W - 1) and n_obs.shape == (R,) and legal.shape == (R, A) and to_play.shape == (R,)
        assert obs.dtype == np.float32 and actions.dtype == np.int64 and np.all((n_obs >= 1) & (n_obs <= W))
        ep, step = newest(obs[np.arange(R), n_obs - 1])  # the current observation: last real entry
        self.batch_sizes.append(R)
        for r in range(R):
            self.roots.append((int(ep[r]), int(step[r])))
            self.windows.append((obs[r].copy(), actions[r].copy(), int(n_obs[r])))
        return self.result(ep, step)


def own_positions(buf: GameBuffer, ids: np.ndarray) -> list[tuple[int, int]]:
    st = buf.store
    return sorted((int(st.slot_frames(s)[0, 0]), int(st.timestep[s, 0]) + i)
                  for s in st.slot_of(ids) for i in range(int(st.valid_len[s])))


def test_reanalysis_draws_only_from_the_oldest_fraction_and_balances_counts() -> None:
    buf = make_seq(segment_length=5, unroll_steps=5, reanalyze_partition=0.5, reanalyze_sequences=2)
    buf.push([traj(60, ep=0), traj(40, ep=1, env_id=1)])  # 20 segments: the oldest 10 are candidates
    assert buf.num_segments == 20 and buf.segments_per_reanalysis == 2
    rng = np.random.default_rng(0)
    for i in range(1, 31):
        before = buf.reanalyze_counts
        fake = FakeSearch()
        stats = buf.reanalyze(source(fake, history_pairs=2), rng)
        counts = buf.reanalyze_counts
        drawn = buf.store.live_ids()[counts != before]
        assert np.all(counts - before <= 1) and drawn.shape == (2,) and np.all(drawn < buf.store.base_id + 10)
        assert sorted(fake.roots) == own_positions(buf, drawn) and len(fake.roots) == len(set(fake.roots))
        assert stats["segments"] == 2 and stats["roots"] == len(fake.roots) and stats["candidates"] == 10
        # exp(-(100/10) * count) weights: a segment reanalysed once more than another is e^-10 less likely
        assert counts[:10].max() - counts[:10].min() <= 1 and counts[:10].sum() == 2 * i
    np.testing.assert_array_equal(buf.reanalyze_counts[10:], 0)


def test_reanalysis_draws_the_oldest_live_segments_after_many_trims() -> None:
    """After more segments were trimmed than are stored (where LightZero's draw, shifted by its
    trim count, indexes the newest segments or raises IndexError), the drawn segments are still
    among the oldest P of the live ones, and the counts land on them."""
    buf = make_seq(capacity=50, segment_length=5, unroll_steps=5, reanalyze_partition=0.5, reanalyze_sequences=3)
    for ep in range(8):
        buf.push([traj(25, ep=ep)])  # 5 segments per episode; 10 live after each push
    st = buf.store
    assert buf.num_segments == 10 and st.base_id == 30
    rng = np.random.default_rng(1)
    for _ in range(5):
        buf.reanalyze(source(FakeSearch(), history_pairs=1), rng)
    counts = buf.reanalyze_counts
    assert counts[:5].sum() == 15 and np.all(counts[5:] == 0)  # 3 segments a call, the oldest 5 only


def test_selection_probability_follows_exp_minus_scaled_count() -> None:
    buf = make_seq(segment_length=2, unroll_steps=1, td_steps=1, reanalyze_partition=1.0)
    buf.push([traj(200)])  # 100 segments, all candidates: weight exp(-(100/100) * count)
    st = buf.store
    st.reanalyze_count[st.live_slots()] = np.repeat([0, 1, 3], [20, 40, 40])
    rng = np.random.default_rng(7)
    hits = np.zeros(100)
    for _ in range(6000):
        (g,) = select_segments(st, 1.0, 1, rng)
        hits[g - st.base_id] += 1
    w = np.exp(-np.repeat([0.0, 1.0, 3.0], [20, 40, 40]))
    group = lambda x: [x[:20].sum(), x[20:60].sum(), x[60:].sum()]  # noqa: E731
    np.testing.assert_allclose(np.array(group(hits)) / 6000, np.array(group(w)) / w.sum(), atol=0.02)
    many = select_segments(st, 0.3, 50, rng)  # capped at the 30 candidates, without replacement
    np.testing.assert_array_equal(many, st.base_id + np.arange(30))


def test_write_back_covers_exactly_the_drawn_segments_and_refreshes_padding() -> None:
    buf = make_seq(segment_length=4, unroll_steps=2, td_steps=3, reanalyze_partition=0.75, reanalyze_sequences=4)
    buf.push([traj(30, ep=0), traj(9, ep=1, env_id=1)])  # 8 + 3 segments; pad K + n = 5 > L
    st = buf.store
    before = {name: getattr(st, name).copy() for name in ("visit_dist", "root_values")}
    buf.reanalyze(source(FakeSearch(), history_pairs=3), np.random.default_rng(3))
    drawn = set(buf.store.live_ids()[buf.reanalyze_counts == 1].tolist())
    assert len(drawn) == 2  # ceil(4 / floor(4 / 2))
    fresh_steps: dict[int, set[int]] = {0: set(), 1: set()}  # (episode) -> steps reanalysed
    for g in drawn:
        s = int(st.slot_of(g))
        fresh_steps[int(st.slot_frames(s)[0, 0])] |= set(int(st.timestep[s, 0]) + np.arange(int(st.valid_len[s])))
    for g in st.live_ids():
        s = int(st.slot_of(g))
        ep, first, D = int(st.slot_frames(s)[0, 0]), int(st.timestep[s, 0]), int(st.n_data[s])
        for pos in range(D):  # own positions and padding alike: fresh iff its step was reanalysed
            if first + pos in fresh_steps[ep]:
                visits, values = FakeSearch.result(np.array([ep]), np.array([first + pos]))
                np.testing.assert_array_equal(st.visit_dist[s, pos], visits[0])
                assert st.root_values[s, pos] == values[0]
            else:
                np.testing.assert_array_equal(st.visit_dist[s, pos], before["visit_dist"][s, pos])
                assert st.root_values[s, pos] == before["root_values"][s, pos]
    # some padding was refreshed: a drawn segment with a stored predecessor exists for this rng
    assert any(int(st.succ[st.slot_of(p)]) in drawn for p in st.live_ids())


def test_empty_buffer_does_nothing() -> None:
    buf = make_seq()
    fake = FakeSearch()
    stats = buf.reanalyze(source(fake, history_pairs=4), np.random.default_rng(0))
    assert stats["roots"] == 0 and stats["calls"] == 0 and fake.roots == []


def ref_window(tr: Trajectory, e: int, first_available: int, history: int,
               S: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The window the acting policy would build at step e of ``tr`` whose history reaches back to
    step ``first_available`` (episode start or the oldest live step of this stream)."""
    M = min(history, e - first_available)
    obs = np.zeros((history + 1, 2 * S), np.float32)
    actions = np.zeros(history, np.int64)
    ep = int(tr.obs[0, 0])
    for j in range(M + 1):
        step = e - M + j
        frames = [max(step - (S - 1) + f, int(tr.timestep[0])) for f in range(S)]  # stack: repeat the first obs
        obs[j] = np.concatenate([[ep, f] for f in frames])
        if j < M:
            actions[j] = tr.actions[step - int(tr.timestep[0])]
    return obs, actions, M + 1


@pytest.mark.parametrize("history,S", [(3, 1), (9, 2), (0, 1)])
def test_history_windows_match_the_raw_episodes(history: int, S: int) -> None:
    L = 4
    buf = make_seq(segment_length=L, unroll_steps=2, td_steps=2, frame_stack=S, reanalyze_partition=1.0,
                   reanalyze_sequences=10_000, reanalyze_batch_size=7)
    # env 0: an episode pushed in two pieces (segment-collector style), then a new episode on the
    # same env (its windows must not reach back into the previous one); env 1: a short episode.
    first = traj(22, ep=0, ended=False)
    rest = traj(9, ep=0, t0=22)
    buf.push([first, traj(6, ep=1, env_id=1)])
    buf.push([rest, traj(13, ep=2)])
    full0 = traj(31, ep=0)
    episodes = {0: full0, 1: traj(6, ep=1, env_id=1), 2: traj(13, ep=2)}
    fake = FakeSearch()
    stats = buf.reanalyze(source(fake, history_pairs=history), np.random.default_rng(0))
    assert sorted(fake.roots) == sorted((ep, s) for ep, tr in episodes.items() for s in range(len(tr)))
    assert max(fake.batch_sizes) <= 7 and stats["calls"] == len(fake.batch_sizes)
    for (ep, e), (obs, actions, n_obs) in zip(fake.roots, fake.windows):
        w_obs, w_act, w_n = ref_window(episodes[ep], e, 0, history, S)
        assert n_obs == w_n, (ep, e)
        np.testing.assert_array_equal(obs, w_obs, err_msg=f"{ep}, {e}")
        np.testing.assert_array_equal(actions, w_act, err_msg=f"{ep}, {e}")
    # windows did reach back across segment boundaries (several of them when history > L)
    reach = [n - 1 - e % L for (_, e), (_, _, n) in zip(fake.roots, fake.windows)]  # steps before position 0
    assert max(reach) == history and (history < L or max(reach) > L)


def test_history_windows_stop_at_a_trimmed_predecessor() -> None:
    buf = make_seq(capacity=30, segment_length=10, reanalyze_partition=1.0, reanalyze_sequences=100)
    tr = traj(35, ep=4)
    buf.push([tr])  # segments 0-9 | 10-19 | 20-29 | 30-34: the first one is trimmed
    assert [int(buf.store.timestep[s, 0]) for s in buf.store.live_slots()] == [10, 20, 30]
    fake = FakeSearch()
    buf.reanalyze(source(fake, history_pairs=5), np.random.default_rng(0))
    assert sorted(fake.roots) == [(4, s) for s in range(10, 35)]
    for (_, e), (obs, actions, n_obs) in zip(fake.roots, fake.windows):
        w_obs, w_act, w_n = ref_window(tr, e, 10, 5, 1)
        assert n_obs == w_n and n_obs == min(6, e - 9)
        np.testing.assert_array_equal(obs, w_obs)
        np.testing.assert_array_equal(actions, w_act)


# ---------------------------------------------------------------------------------- state, registration
def test_state_round_trip_keeps_counts_and_old_states_load_zeros() -> None:
    buf = make_seq(capacity=60, segment_length=5, reanalyze_partition=1.0, reanalyze_sequences=3, use_priority=True)
    rng = np.random.default_rng(0)
    for ep in range(6):
        buf.push([traj(int(rng.integers(3, 25)), ep=ep, env_id=ep % 2)])
        buf.reanalyze(source(FakeSearch(), history_pairs=2), rng)
    assert len(set(buf.reanalyze_counts.tolist())) > 1  # the counts to restore are not all alike
    meta, arrays = buf.state_dict()
    meta = json.loads(json.dumps(meta))
    other = make_seq(capacity=60, segment_length=5, reanalyze_partition=1.0, reanalyze_sequences=3, use_priority=True)
    other.load_state_dict(meta, {k: v.copy() for k, v in arrays.items()})
    np.testing.assert_array_equal(other.reanalyze_counts, buf.reanalyze_counts)
    live = buf.store.live_slots()
    for name in buf.store.array_names:
        if name == "frame_ids":  # pool ids are renumbered by a state; the frames they name are compared
            continue
        np.testing.assert_array_equal(getattr(other.store, name)[live], getattr(buf.store, name)[live], err_msg=name)
    for slot in live:
        np.testing.assert_array_equal(other.store.slot_frames(slot), buf.store.slot_frames(slot))
    s1 = buf.reanalyze(source(FakeSearch(), history_pairs=2), np.random.default_rng(5))  # same selection after the round trip
    s2 = other.reanalyze(source(FakeSearch(), history_pairs=2), np.random.default_rng(5))
    np.testing.assert_array_equal(other.reanalyze_counts, buf.reanalyze_counts)
    assert s1["roots"] == s2["roots"]

    older = {k: v for k, v in arrays.items() if k != "reanalyze_count"}  # a state from before the counter
    fresh = make_seq(capacity=60, segment_length=5)
    fresh.load_state_dict(meta, older)
    assert fresh.num_transitions == buf.num_transitions and np.all(fresh.reanalyze_counts == 0)
    game = make_buffer(capacity=60, segment_length=5)  # and GameBuffer ignores the extra array
    game.load_state_dict(meta, arrays)
    assert game.num_transitions == buf.num_transitions
    with pytest.raises(ValueError):
        make_seq(capacity=60, segment_length=6).load_state_dict(meta, arrays)


def test_a_reused_slot_starts_with_a_zero_count() -> None:
    buf = make_seq(capacity=160, segment_length=10, reanalyze_partition=1.0, reanalyze_sequences=1000)
    buf.push([traj(160, ep=0)])  # 16 segments fill the 16 initial slots
    buf.reanalyze(source(FakeSearch(), history_pairs=1), np.random.default_rng(0))
    assert np.all(buf.reanalyze_counts == 1) and buf.store.num_slots == 16
    buf.push([traj(20, ep=1, env_id=1)])  # drops ids 0, 1; ids 16, 17 reuse their slots 0, 1
    assert list(buf.store.live_slots()[-2:]) == [0, 1]
    np.testing.assert_array_equal(buf.reanalyze_counts, [1] * 14 + [0, 0])


def test_unizero_buffer_is_registered_and_its_config_validates() -> None:
    import lzk_replay.plugin as plugin
    from lzkernel.pluginmanager import Kernel

    comp = Kernel(autoload=False, plugins=[plugin]).registry.get("buffer", "unizero")
    assert comp.config is plugin.SequenceGameBufferConfig and comp.doc and comp.plugin
    cfg = plugin.SequenceGameBufferConfig()
    assert (cfg.capacity, cfg.segment_length, cfg.reanalyze_partition, cfg.reanalyze_sequences,
            cfg.reanalyze_batch_size, cfg.use_priority) == (1_000_000, 50, 0.75, 160, 256, False)
    parsed, problems = validate(plugin.SequenceGameBufferConfig, {"reanalyze_partition": 1.0, "capacity": "1e4"},
                                "buffer")
    assert problems == [] and parsed.reanalyze_partition == 1.0 and parsed.capacity == 10_000
    for bad, key in [({"reanalyze_partition": 0.0}, "buffer.reanalyze_partition"),
                     ({"reanalyze_partition": 1.5}, "buffer.reanalyze_partition"),
                     ({"reanalyze_sequences": 0}, "buffer.reanalyze_sequences"),
                     ({"reanalyze_max_roots": 10}, "buffer.reanalyze_max_roots"),  # ReZero-only: unknown here
                     ({"capacity": 10}, "buffer.capacity")]:
        problems = validate(plugin.SequenceGameBufferConfig, bad, "buffer")[1]
        assert len(problems) == 1 and key in problems[0], (bad, problems)
    buf = comp.factory(parsed, object(), env_spec=SimpleNamespace(obs_shape=(4,), num_actions=2),
                       target_spec=TargetSpec(unroll_steps=5, td_steps=5, discount=0.997, frame_stack=1,
                                              batch_size=256))
    assert isinstance(buf, SequenceGameBuffer) and (buf.K, buf.n, buf.L, buf.capacity) == (5, 5, 50, 10_000)
    assert buf.reanalyze_partition == 1.0 and buf.segments_per_reanalysis == 16  # ceil(160 / (50 // 5))
    with pytest.raises(ValueError):
        make_seq(reanalyze_partition=0.0)


def test_capacity_is_a_hard_limit_over_many_pushes() -> None:
    """RELIABILITY R6 for UniZero's buffer: capacity counts transitions, and however many
    episodes of whatever lengths arrive, the stored count never exceeds it (oldest segments go
    first), nor does the store's slot count grow past what the capacity needs."""
    buf = make_seq(capacity=57, segment_length=10)
    rng = np.random.default_rng(5)
    peak, slots = 0, set()
    for ep in range(60):
        buf.push([traj(int(rng.integers(1, 40)), ep=ep)])
        peak = max(peak, buf.num_transitions)
        slots.add(buf.store.num_slots)
    assert peak <= 57 and buf.num_transitions > 57 - 10
    # At most `capacity` live segments (one transition each at worst), in a doubling store:
    # bounded by the capacity, not by the 60 episodes pushed.
    assert max(slots) <= 2 * 57 and len(buf.store.live_slots()) <= 57
