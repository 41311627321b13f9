"""The segment collector against a scripted vector env and a recording policy (and, at the end,
the replay buffer that cuts its pieces)."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from worker_fakes import FakeEnvSpec, RecordingPolicy, StubRun, default_length

from lzkernel import Trajectory
from lzkernel.config.schema import validate
from lzk_workers.collector import EpisodeCollector
from lzk_workers.plugin import SegmentCollectorConfig, lzkernel_register_collectors, make_segment_collector
from lzk_workers.segment_collector import SegmentCollector


def make(spec: FakeEnvSpec, envs: int = 3, num_segments: int = 4, segment_length: int = 3,
         frame_stack: int = 1) -> SegmentCollector:
    return SegmentCollector(spec, envs=envs, num_segments=num_segments, segment_length=segment_length, seed=5,
                            frame_stack=frame_stack, random_rng=np.random.default_rng(0))


def run_calls(col: SegmentCollector, policy: RecordingPolicy, calls: int, **kw: Any) -> list[list[Trajectory]]:
    return [col.collect(policy, temperature=1.0, epsilon=0.0, **kw)[0] for _ in range(calls)]


def episodes_of(pieces: list[Trajectory]) -> dict[tuple[int, int], list[Trajectory]]:
    """(env id, episode index k) -> that episode's pieces in order of emission."""
    out: dict[tuple[int, int], list[Trajectory]] = defaultdict(list)
    for p in pieces:
        out[p.env_id, int(p.obs[0, 1])].append(p)
    return out


def test_no_transition_lost_and_pieces_reproduce_episodes(spec: FakeEnvSpec) -> None:
    col = make(spec)
    policy = RecordingPolicy()
    pieces: list[Trajectory] = []
    for _ in range(6):
        pieces += col.collect(policy, temperature=1.0, epsilon=0.0)[0]
        venv = spec.made[0]
        # every env step is in an emitted piece or in a running one, never in both
        assert sum(len(p) for p in pieces) + col.pending_transitions == venv.steps_per_env.sum()
        assert col.total_env_steps == venv.steps_per_env.sum()
    venv = spec.made[0]
    assert len(spec.made) == 1 and venv.resets == 1  # the envs were never reset between calls
    for i in range(3):
        pending = int(col.player.pending_transitions[i])
        assert sum(len(p) for p in pieces if p.env_id == i) + pending == venv.steps_per_env[i]
    ended_count = 0
    for (i, k), eps in episodes_of(pieces).items():
        for a, b in zip(eps, eps[1:]):  # consecutive pieces share the boundary observation
            assert not a.ended
            assert (a.obs[-1] == b.obs[0]).all() and a.timestep[-1] == b.timestep[0]
            assert (a.legal[-1] == b.legal[0]).all() and a.to_play[-1] == b.to_play[0]
        obs = np.concatenate([eps[0].obs[:1]] + [p.obs[1:] for p in eps])
        actions = np.concatenate([p.actions for p in eps])
        n = len(actions)
        assert obs.tolist() == [[i, k, t] for t in range(n + 1)]  # the episode's own states, in order
        assert np.concatenate([p.timestep[:-1] for p in eps]).tolist() == list(range(n))
        assert np.concatenate([p.rewards for p in eps]).tolist() == list(range(1, n + 1))
        assert actions.tolist() == [int(np.argmax(venv.legal_of(t))) for t in range(n)]  # the policy's choice
        assert np.concatenate([p.root_values for p in eps]).tolist() == [10 * i + t for t in range(n)]
        if eps[-1].ended:
            ended_count += 1
            assert n == default_length(i, k) and eps[-1].episode_return == sum(range(1, n + 1))
            assert eps[-1].terminal == (k % 2 == 0) and eps[-1].legal[-1].all()
        else:  # the running episode: its emitted transitions, then the running piece
            assert k == venv.k[i] and n + col.player.pending_transitions[i] == venv.t[i]
    assert ended_count == col.total_episodes > 0


def test_next_episode_starts_at_the_reset_observation(spec: FakeEnvSpec) -> None:
    col = make(spec, frame_stack=1)
    policy = RecordingPolicy()
    pieces = [p for got in run_calls(col, policy, 5) for p in got]
    by_env: dict[int, list[Trajectory]] = defaultdict(list)
    for p in pieces:
        by_env[p.env_id].append(p)
    followed = 0
    for i, ps in by_env.items():
        for a, b in zip(ps, ps[1:]):
            if a.ended:  # the next piece is the next episode's first: reset obs, timestep 0
                k = int(a.obs[0, 1])
                assert b.obs[0].tolist() == [i, k + 1, 0] and b.timestep[0] == 0
                assert (b.legal[0] == spec.made[0].legal_of(0)).all()
                followed += 1
    assert followed > 0
    # the policy acted on each env's current observation, never on a terminal one
    for c in policy.calls:
        assert (c["obs"][:, 2] == c["timestep"]).all() and (c["obs"][:, 0] == c["env_ids"]).all()


def test_unfinished_pieces_survive_across_calls(spec: FakeEnvSpec) -> None:
    col = make(spec, segment_length=4)
    policy = RecordingPolicy()
    col.collect(policy, temperature=1.0, epsilon=0.0)
    venv = spec.made[0]
    pending = col.player.pending_transitions.copy()
    k1, t1 = venv.k.copy(), venv.t.copy()
    assert pending.any()  # a piece is running at the end of the call
    second, _ = col.collect(policy, temperature=1.0, epsilon=0.0)
    for i in np.flatnonzero(pending):
        first = next(p for p in second if p.env_id == i)
        start = int(t1[i] - pending[i])  # the running piece began this many steps before the call ended
        assert first.obs[0].tolist() == [i, k1[i], start] and first.timestep[0] == start
        assert len(first) > pending[i]


@pytest.mark.parametrize("envs, num_segments", [(3, 4), (3, 1), (2, 7), (4, 4)])
def test_returns_at_least_num_segments(envs: int, num_segments: int) -> None:
    spec = FakeEnvSpec()
    col = make(spec, envs=envs, num_segments=num_segments)
    for _ in range(4):
        pieces, m = col.collect(RecordingPolicy(), temperature=1.0, epsilon=0.0)
        # all envs step together, so the last step may finish up to E - 1 extra pieces
        assert num_segments <= len(pieces) < num_segments + envs
        assert m["collect/segments"] == len(pieces)


@pytest.mark.parametrize("segment_length", [1, 2, 3, 5])
def test_pieces_have_segment_length_and_align_with_the_episode_start(segment_length: int) -> None:
    spec = FakeEnvSpec()
    col = make(spec, segment_length=segment_length)
    pieces = [p for got in run_calls(col, RecordingPolicy(), 5) for p in got]
    full = [p for p in pieces if not p.ended]
    assert full and any(p.ended for p in pieces)
    for p in pieces:
        assert p.timestep[0] % segment_length == 0  # starts on a buffer segment boundary
        assert 1 <= len(p) <= segment_length and p.timestep.tolist() == list(range(p.timestep[0], p.timestep[-1] + 1))
    for p in full:
        assert len(p) == segment_length and not p.terminal and p.episode_return == 0.0


def test_reset_envs_at_episode_ends_only(spec: FakeEnvSpec) -> None:
    col = make(spec, segment_length=2)
    policy = RecordingPolicy()
    pieces = [p for got in run_calls(col, policy, 5) for p in got]
    resets = [i for ids, _ in policy.resets for i in ids]
    assert resets == [p.env_id for p in pieces if p.ended]  # one per episode end, in order
    assert len(resets) < len(pieces) and {m for _, m in policy.resets} == {"collect"}


def test_frame_stacking_across_piece_boundaries(spec: FakeEnvSpec) -> None:
    col = make(spec, segment_length=2, frame_stack=3)
    policy = RecordingPolicy()
    pieces = [p for got in run_calls(col, policy, 4) for p in got]
    assert any(p.timestep[0] >= 2 for p in pieces)  # windows span piece boundaries
    for c in policy.calls:
        assert c["obs"].shape == (3, 9)
        for row, (i, t) in enumerate(zip(c["env_ids"], c["timestep"])):
            frames = c["obs"][row].reshape(3, 3)  # oldest first; episode start repeats frame 0
            k = frames[-1, 1]
            assert frames.tolist() == [[i, k, max(t - 2, 0)], [i, k, max(t - 1, 0)], [i, k, t]]
    assert all(p.obs.shape[1:] == (3,) for p in pieces)  # pieces keep unstacked frames


def test_n_episode_mode(spec: FakeEnvSpec) -> None:
    col = make(spec, num_segments=50, segment_length=2)
    policy = RecordingPolicy()
    pieces, m = col.collect(policy, temperature=1.0, epsilon=0.0, random_policy=True, n_episode=4)
    assert policy.calls == []
    ended = [p for p in pieces if p.ended]
    assert 4 <= len(ended) < 4 + 3 and m["collect/episodes"] == len(ended) == col.total_episodes
    assert len(pieces) < 50 and any(not p.ended for p in pieces)  # num_segments ignored; cuts still emitted
    assert sum(len(p) for p in pieces) + col.pending_transitions == spec.made[0].steps_per_env.sum()
    for p in pieces:
        legal = p.legal[:-1]
        assert legal[np.arange(len(p)), p.actions].all()
        np.testing.assert_allclose(p.visit_dist, legal / legal.sum(1, keepdims=True))
    # metrics of a call in which no episode ended: no return statistics (never NaN)
    quiet = make(FakeEnvSpec(length=lambda i, k: 100), num_segments=3, segment_length=2)
    pieces, m = quiet.collect(policy, temperature=1.0, epsilon=0.0)
    assert len(pieces) == 3 and m["collect/episodes"] == 0 and m["collect/env_steps"] == 6
    assert not any(k.startswith("collect/return") or k.startswith("collect/episode_length") for k in m)
    assert all(np.isfinite(v) for v in m.values())
    with pytest.raises(ValueError, match="n_episode"):
        col.collect(policy, temperature=1.0, epsilon=0.0, n_episode=0)


def test_metrics(spec: FakeEnvSpec) -> None:
    policy = RecordingPolicy(metrics={"search/sims": 25.0, "train/unrelated": 1.0})
    col = make(spec, num_segments=9, segment_length=2)
    pieces, m = col.collect(policy, temperature=0.25, epsilon=0.1)
    assert {c["temperature"] for c in policy.calls} == {0.25} and {c["epsilon"] for c in policy.calls} == {0.1}
    ended = [p for p in pieces if p.ended]
    assert ended and m["collect/episodes"] == len(ended)
    assert m["collect/return_mean"] == pytest.approx(np.mean([p.episode_return for p in ended]))
    assert m["collect/return_min"] == min(p.episode_return for p in ended)
    assert m["collect/episode_length_mean"] == pytest.approx(np.mean([default_length(p.env_id, int(p.obs[0, 1]))
                                                                      for p in ended]))
    assert m["collect/env_steps"] == spec.made[0].steps_per_env.sum() == 3 * len(policy.calls)
    assert m["collect/seconds"] > 0 and m["collect/steps_per_second"] > 0
    assert m["search/sims"] == 25.0 and "train/unrelated" not in m


def test_factory_config_and_state_dict(spec: FakeEnvSpec) -> None:
    run = StubRun()
    col = make_segment_collector(SegmentCollectorConfig(envs=2, num_segments=3, segment_length=4), run,
                                 env_spec=spec, frame_stack=2)
    assert spec.made[0].seed == run.seed("collector", 0) and spec.made[0].num_envs == 2
    assert (col.num_segments, col.segment_length, col.player.window.stack) == (3, 4, 2)
    cfg = SegmentCollectorConfig()
    assert (cfg.envs, cfg.num_segments, cfg.segment_length) == (8, 8, 50)
    _, problems = validate(SegmentCollectorConfig, {"segment_length": 0}, "collector")
    assert problems and "segment_length" in problems[0]
    _, problems = validate(SegmentCollectorConfig, {"num_segment": 8}, "collector")
    assert problems and "num_segments" in problems[0]  # unknown key, with the closest suggested
    with pytest.raises(ValueError, match="segment_length"):
        SegmentCollector(spec, envs=2, num_segments=2, segment_length=0, seed=0)
    col.collect(RecordingPolicy(), temperature=1.0, epsilon=0.0)
    col.collect(RecordingPolicy(), temperature=1.0, epsilon=0.0)
    state = col.state_dict()
    assert state == {"total_env_steps": spec.made[0].steps_per_env.sum(), "total_episodes": col.total_episodes}
    fresh = make(FakeEnvSpec())
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    col.close()
    assert spec.made[0].closed


def test_registered_and_listed_by_the_cli() -> None:
    comps = {c.name: c for c in lzkernel_register_collectors()}
    assert comps["segment"].config is SegmentCollectorConfig and comps["segment"].factory is make_segment_collector
    proc = subprocess.run([sys.executable, "-m", "lzkernel", "plugins", "--json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    workers = {e["name"]: e for e in json.loads(proc.stdout)["plugins"]}["workers"]
    assert {"episode", "segment"} <= set(workers["components"]["collector"])


# ---------------------------------------------------------------------------------------------
# End to end with the replay buffer: pieces over several calls == whole episodes at once
# ---------------------------------------------------------------------------------------------


def _stored(buf: Any) -> dict[tuple[float, ...], dict[str, Any]]:
    """Every stored segment keyed by its first own observation [i, k, t0], the fields that do not
    depend on push order (ids, successors and priorities do)."""
    st, out = buf.store, {}
    for slot in st.live_slots():
        key = tuple(st.frames[slot, st.S - 1].tolist())
        assert key not in out
        out[key] = {name: getattr(st, name)[slot].tolist() for name in (
            "frames", "actions", "rewards", "visit_dist", "root_values", "legal", "to_play", "timestep",
            "n_data", "valid_len", "done", "terminal", "is_last")}
    return out


def test_buffer_stores_the_same_segments_as_from_whole_episodes() -> None:
    from lzk_replay import GameBuffer

    L, K, n, S = 3, 2, 2, 2  # padding K + n = 4 > L reaches into a second successor

    def length(i: int, k: int) -> int:
        return 5 + 3 * i + (k % 4)  # 5..14 steps: several pieces per episode

    def buffer() -> GameBuffer:
        return GameBuffer(capacity=100_000, segment_length=L, unroll_steps=K, td_steps=n, discount=0.99,
                          frame_stack=S, obs_shape=(3,), num_actions=3)

    seg_spec, ep_spec = FakeEnvSpec(length=length), FakeEnvSpec(length=length)
    col = make(seg_spec, envs=3, num_segments=2, segment_length=L, frame_stack=S)
    by_pieces = buffer()
    for _ in range(15):  # several calls, each pushed as it comes (pieces cross call boundaries)
        pieces, _ = col.collect(RecordingPolicy(), temperature=1.0, epsilon=0.0)
        by_pieces.push(pieces)
    seg_venv = seg_spec.made[0]
    assert seg_venv.k.min() >= 2  # several episodes per env, and a running one

    whole = buffer()  # the same scripted episodes (same envs, same deterministic policy), whole
    trajs, _ = EpisodeCollector(ep_spec, envs=3, n_episode=3 * (int(seg_venv.k.max()) + 1), seed=5,
                                frame_stack=S).collect(RecordingPolicy(), temperature=1.0, epsilon=0.0)
    whole.push(trajs)

    a, b = _stored(by_pieces), _stored(whole)
    assert a and all(a[key] == b[key] for key in a)  # every segment stored from pieces is the same
    ended = {(i, k) for i in range(3) for k in range(int(seg_venv.k[i]))}
    from_ended = {key for key in b if (int(key[0]), int(key[1])) in ended}
    assert from_ended == {key for key in a if (int(key[0]), int(key[1])) in ended}  # and none is missing
    # nothing lost: stored + kept back by the buffer's cutters + running in the collector == env steps
    kept = sum(c.pending_transitions for c in by_pieces._cutters.values())
    assert by_pieces.num_transitions + kept + col.pending_transitions == seg_venv.steps_per_env.sum()
