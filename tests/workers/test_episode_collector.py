"""The episode collector against a scripted vector env and a recording policy."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from worker_fakes import FakeEnvSpec, RecordingPolicy, StubRun, default_length

from lzkernel.config.schema import validate
from lzk_workers.collector import EpisodeCollector
from lzk_workers.plugin import EpisodeCollectorConfig, make_episode_collector
from lzk_workers.rollout import NonFiniteEnvOutput, balanced_quotas


def make(spec: FakeEnvSpec, envs: int = 3, n_episode: int = 7, frame_stack: int = 1) -> EpisodeCollector:
    return EpisodeCollector(spec, envs=envs, n_episode=n_episode, seed=5, frame_stack=frame_stack,
                            random_rng=np.random.default_rng(0))


def test_balanced_quotas() -> None:
    assert balanced_quotas(7, 3).tolist() == [3, 2, 2]
    assert balanced_quotas(8, 8).tolist() == [1] * 8
    assert balanced_quotas(2, 3).tolist() == [1, 1, 0]


def test_returns_n_episode_whole_episodes_per_quota(spec: FakeEnvSpec) -> None:
    col = make(spec)
    trajs, metrics = col.collect(RecordingPolicy(), temperature=0.25, epsilon=0.0)
    venv = spec.made[0]
    assert venv.seed == 5 and len(trajs) == 7
    assert Counter(t.env_id for t in trajs) == {0: 3, 1: 2, 2: 2}
    for t in trajs:  # whole episodes: one episode index k, steps 0..T, T = the scripted length
        i, k = int(t.obs[0, 0]), int(t.obs[0, 1])
        assert (t.obs[:, 0] == i).all() and (t.obs[:, 1] == k).all()
        assert len(t) == default_length(i, k)
        assert t.obs[:, 2].tolist() == list(range(len(t) + 1))
    # every env step taken belongs to a returned transition
    transitions = sum(len(t) for t in trajs)
    assert transitions == metrics["collect/env_steps"] == venv.steps_per_env.sum()
    for i in range(3):
        assert venv.steps_per_env[i] == sum(len(t) for t in trajs if t.env_id == i)
    assert (col.total_env_steps, col.total_episodes) == (transitions, 7)


@pytest.mark.parametrize("truncation_as_terminal", [False, True])
def test_trajectory_fields_align(truncation_as_terminal: bool) -> None:
    spec = FakeEnvSpec(truncation_as_terminal=truncation_as_terminal)
    trajs, _ = make(spec).collect(RecordingPolicy(), temperature=1.0, epsilon=0.0)
    venv = spec.made[0]
    for t in trajs:
        n, i, k = len(t), t.env_id, int(t.obs[0, 1])
        assert t.obs.shape == (n + 1, 3) and t.obs.dtype == np.float32
        assert t.obs[n].tolist() == [i, k, n]  # obs[T] is the final observation of the episode
        assert t.rewards.tolist() == list(range(1, n + 1))  # reward of the step into t+1 is t+1
        assert t.episode_return == sum(range(1, n + 1))
        for s in range(n):  # legal masks belong to the observations they sit next to
            assert (t.legal[s] == venv.legal_of(s)).all()
            assert t.legal[s, t.actions[s]]
        assert t.legal[n].all() and t.legal.shape == (n + 1, 3)
        assert (t.visit_dist == np.eye(3, dtype=np.float32)[t.actions]).all()
        assert t.root_values.tolist() == [10 * i + s for s in range(n)]
        assert (t.pred_values == -t.root_values).all()
        assert t.timestep.tolist() == list(range(n + 1)) and (t.to_play == -1).all()
        assert t.ended
        # scripted: even episodes terminate, odd ones are truncated
        assert t.terminal == (k % 2 == 0 or truncation_as_terminal)


def test_finished_envs_stop_acting_and_the_next_collect_continues(spec: FakeEnvSpec) -> None:
    col = make(spec)
    policy = RecordingPolicy()
    col.collect(policy, temperature=1.0, epsilon=0.0)
    venv = spec.made[0]
    # env i acts in every call until its quota is met (after venv.steps_per_env[i] steps), then
    # leaves the batch: env 1 (7 steps) drops out before envs 0 and 2 (9 steps each)
    assert venv.steps_per_env.tolist() == [9, 7, 9]
    for c, call in enumerate(policy.calls):
        assert call["env_ids"].tolist() == [i for i in range(3) if venv.steps_per_env[i] > c]
    assert (venv.t == 0).all()  # every env sits at the first state of a fresh episode
    acted = Counter(int(i) for c in policy.calls for i in c["env_ids"])
    assert [acted[i] for i in range(3)] == venv.steps_per_env.tolist()
    ended = [i for ids, mode in policy.resets for i in ids]
    assert Counter(ended) == {0: 3, 1: 2, 2: 2} and {m for _, m in policy.resets} == {"collect"}

    trajs, _ = col.collect(policy, temperature=1.0, epsilon=0.0)
    assert venv.resets == 1 and len(spec.made) == 1  # same envs, never reset again
    for i, q in enumerate([3, 2, 2]):
        ks = [int(t.obs[0, 1]) for t in trajs if t.env_id == i]
        assert sorted(ks) == list(range(q, 2 * q))  # episodes continue where the last call stopped
    assert col.total_episodes == 14


def test_policy_kwargs_and_metrics(spec: FakeEnvSpec) -> None:
    policy = RecordingPolicy(metrics={"search/sims": 25.0, "train/unrelated": 1.0})
    trajs, m = make(spec).collect(policy, temperature=0.25, epsilon=0.1)
    assert {c["mode"] for c in policy.calls} == {"collect"}
    assert {c["temperature"] for c in policy.calls} == {0.25} and {c["epsilon"] for c in policy.calls} == {0.1}
    returns = [t.episode_return for t in trajs]
    assert m["collect/episodes"] == 7
    assert m["collect/return_mean"] == pytest.approx(np.mean(returns))
    assert m["collect/return_max"] == max(returns)
    assert m["collect/episode_length_mean"] == pytest.approx(np.mean([len(t) for t in trajs]))
    assert m["collect/seconds"] > 0 and m["collect/steps_per_second"] > 0
    assert m["search/sims"] == 25.0 and "train/unrelated" not in m


def test_random_policy(spec: FakeEnvSpec) -> None:
    policy = RecordingPolicy()
    trajs, m = make(spec).collect(policy, temperature=1.0, epsilon=0.0, random_policy=True)
    assert policy.calls == [] and len(trajs) == 7
    actions = np.concatenate([t.actions for t in trajs])
    assert len(np.unique(actions)) == 3  # not a fixed choice
    for t in trajs:
        legal = t.legal[:-1]
        assert legal[np.arange(len(t)), t.actions].all()
        np.testing.assert_allclose(t.visit_dist, legal / legal.sum(1, keepdims=True))
        assert (t.root_values == 0).all() and (t.pred_values == 0).all()


def test_frame_stacking_windows(spec: FakeEnvSpec) -> None:
    policy = RecordingPolicy()
    trajs, _ = make(spec, frame_stack=3).collect(policy, temperature=1.0, epsilon=0.0)
    checked = 0
    for c in policy.calls:
        assert c["obs"].shape == (len(c["env_ids"]), 9)
        for row, (i, t) in enumerate(zip(c["env_ids"], c["timestep"])):
            frames = c["obs"][row].reshape(3, 3)  # oldest first; episode start repeats frame 0
            k = frames[-1, 1]
            assert frames.tolist() == [[i, k, max(t - 2, 0)], [i, k, max(t - 1, 0)], [i, k, t]]
            checked += 1
    assert checked == sum(len(t) for t in trajs)
    assert all(t.obs.shape[1:] == (3,) for t in trajs)  # trajectories keep unstacked frames


def test_factory_seeds_and_config(spec: FakeEnvSpec) -> None:
    run = StubRun()
    col = make_episode_collector(EpisodeCollectorConfig(envs=2, n_episode=4), run, env_spec=spec, frame_stack=1)
    assert spec.made[0].seed == run.seed("collector", 0) and spec.made[0].num_envs == 2
    _, problems = validate(EpisodeCollectorConfig, {"envs": 8, "n_episode": 4}, "collector")
    assert problems and "n_episode" in problems[0]
    with pytest.raises(ValueError, match="n_episode"):
        EpisodeCollector(spec, envs=4, n_episode=2, seed=0)
    col.collect(RecordingPolicy(), temperature=1.0, epsilon=0.0)
    state = col.state_dict()
    fresh = make(FakeEnvSpec())
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state == {"total_env_steps": col.total_env_steps, "total_episodes": 4}


def test_cartpole_end_to_end() -> None:
    """Real gymnasium CartPole through the env plugin: episodes end where CartPole ends them."""
    from lzk_envs.plugin import GymEnvConfig, make_gym_env

    env_spec = make_gym_env(GymEnvConfig(id="CartPole-v0"), None)
    col = make_episode_collector(EpisodeCollectorConfig(envs=2, n_episode=3), StubRun(), env_spec=env_spec,
                                 frame_stack=1)
    trajs, m = col.collect(RecordingPolicy(num_actions=2), temperature=1.0, epsilon=0.0, random_policy=True)
    col.close()
    assert len(trajs) == 3 and sum(len(t) for t in trajs) == m["collect/env_steps"]
    for t in trajs:
        x, theta = t.obs[-1, 0], t.obs[-1, 2]
        assert abs(x) > 2.4 or abs(theta) > 0.2095 or len(t) == 200  # CartPole's termination rule
        assert abs(t.obs[:-1, 2]).max() <= 0.2095  # ...and not before the end
        assert t.episode_return == len(t) and t.terminal


def test_n_episode_override(spec: FakeEnvSpec) -> None:
    col = make(spec)
    trajs, _ = col.collect(RecordingPolicy(), temperature=1.0, epsilon=0.0, random_policy=True, n_episode=2)
    assert Counter(t.env_id for t in trajs) == {0: 1, 1: 1}
    assert spec.made[0].steps_per_env[2] == 0  # no quota: never stepped, waits at its episode start
    trajs, _ = col.collect(RecordingPolicy(), temperature=1.0, epsilon=0.0)
    assert len(trajs) == 7 and col.total_episodes == 9
    assert [int(t.obs[0, 1]) for t in trajs if t.env_id == 2] == [0, 1]  # env 2 starts at episode 0
    with pytest.raises(ValueError, match="n_episode"):
        col.collect(RecordingPolicy(), temperature=1.0, epsilon=0.0, n_episode=0)


@pytest.mark.parametrize("field, where", [("reward", "reward"), ("obs", "observation")])
def test_a_non_finite_env_output_stops_the_collect_before_any_trajectory(field: str, where: str) -> None:
    """Whatever env plugin returns a NaN (here the scripted env at env 1's 3rd step), the player
    raises naming the env id, the row and the field; no trajectory carries it."""

    class NaNEnv(FakeEnvSpec):
        def make_vector(self, num_envs: int, seed: int):  # noqa: ANN201
            venv = super().make_vector(num_envs, seed)
            step = venv.step

            def poisoned(actions, active=None):  # noqa: ANN001, ANN202
                batch = step(actions, active)
                if venv.steps_per_env[1] == 3:
                    bad = getattr(batch, field)
                    bad[1] = np.nan
                return batch

            venv.step = poisoned
            return venv

    col = make(NaNEnv(length=lambda i, k: 50), envs=2, n_episode=2)
    with pytest.raises(NonFiniteEnvOutput, match=rf"env 'fake' \(env index 1\) returned a non-finite {where}"):
        col.collect(RecordingPolicy(), temperature=1.0, epsilon=0.0)
