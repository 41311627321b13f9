"""The episode collector and evaluator on real gymnasium envs report what a plain gymnasium loop
on the same seeds measures: the same episodes (returns, lengths, final observations, ends), with
env i seeded ``seed + i`` at its first reset only."""
from __future__ import annotations

from typing import Any, Sequence

import gymnasium
import numpy as np
import pytest

from lzkernel import ActResult
from lzk_envs.plugin import GymEnvConfig, make_gym_env
from lzk_workers.collector import EpisodeCollector
from lzk_workers.evaluator import EpisodeEvaluator, evaluation_seed
from lzk_workers.rollout import balanced_quotas


def act_of(obs: np.ndarray, t: int, n: int) -> int:
    """A deterministic action from the float32 observation [O] and the episode step: both the
    workers and the plain loop can compute it, and episodes end at varied lengths."""
    return int(np.frombuffer(np.asarray(obs, np.float32).tobytes(), np.uint8).sum() + t) % n


class ObsPolicy:
    """An :class:`~lzkernel.ActingPolicy` acting with :func:`act_of`."""

    def __init__(self, num_actions: int) -> None:
        self.n = num_actions

    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, *, mode: str, env_ids: np.ndarray,
            temperature: float = 1.0, epsilon: float = 0.0, timestep: np.ndarray | None = None,
            states: Sequence[Any] | None = None) -> ActResult:
        assert timestep is not None
        action = np.array([act_of(o, int(t), self.n) for o, t in zip(obs, timestep)], np.int64)
        zeros = np.zeros(len(action), np.float32)
        return ActResult(action, np.eye(self.n, dtype=np.float32)[action], zeros, zeros.copy())

    def reset_envs(self, env_ids: Sequence[int], mode: str) -> None:
        """Stateless."""


def plain_episodes(env_id: str, max_steps: int, seed: int, quota: np.ndarray, n: int) -> list[dict[str, Any]]:
    """Env i (seeded ``seed + i`` at its first reset) plays ``quota[i]`` episodes in a plain loop."""
    out = []
    for i, q in enumerate(quota.tolist()):
        env = gymnasium.make(env_id, max_episode_steps=max_steps)
        for k in range(q):
            obs, _ = env.reset(seed=seed + i if k == 0 else None)
            ret, t, term, trunc = 0.0, 0, False, False
            while not (term or trunc):
                obs, r, term, trunc, _ = env.step(act_of(obs, t, n))
                ret, t = ret + float(r), t + 1
            out.append(dict(env=i, ret=ret, len=t, final=np.asarray(obs, np.float32), terminated=bool(term)))
        env.close()
    return out


@pytest.mark.parametrize("env_id, max_steps, n", [("CartPole-v1", 20, 2), ("Acrobot-v1", 15, 3)])
def test_collector_episodes_and_metrics_match_a_plain_loop(env_id: str, max_steps: int, n: int) -> None:
    spec = make_gym_env(GymEnvConfig(id=env_id, max_episode_steps=max_steps, truncation_as_terminal=False), None)
    col = EpisodeCollector(spec, envs=3, n_episode=7, seed=11)
    trajs, m = col.collect(ObsPolicy(n), temperature=1.0, epsilon=0.0)
    col.close()
    ref = plain_episodes(env_id, max_steps, 11, balanced_quotas(7, 3), n)
    for i in range(3):  # per env, in order: the same episodes
        ours, theirs = [t for t in trajs if t.env_id == i], [e for e in ref if e["env"] == i]
        assert [(len(t), t.episode_return, t.terminal) for t in ours] == \
            [(e["len"], e["ret"], e["terminated"]) for e in theirs]
        for t, e in zip(ours, theirs):
            np.testing.assert_array_equal(t.obs[-1], e["final"])
            assert t.rewards.sum() == e["ret"]
    rets, lens = np.array([e["ret"] for e in ref]), np.array([e["len"] for e in ref])
    assert (m["collect/return_mean"], m["collect/return_min"], m["collect/return_max"]) == \
        (rets.mean(), rets.min(), rets.max())
    assert m["collect/episode_length_mean"] == lens.mean() and m["collect/env_steps"] == lens.sum()


def test_evaluations_match_a_plain_loop_on_their_seeds() -> None:
    spec = make_gym_env(GymEnvConfig(id="CartPole-v1", max_episode_steps=30), None)
    ev = EpisodeEvaluator(spec, envs=3, episodes=5, seed=4, every_train_iters=1)
    for index in range(2):
        m = ev.evaluate(ObsPolicy(2))
        ref = plain_episodes("CartPole-v1", 30, evaluation_seed(4, index), balanced_quotas(5, 3), 2)
        rets, lens = np.array([e["ret"] for e in ref]), np.array([e["len"] for e in ref])
        assert m["eval/index"] == index and m["eval/episodes"] == 5
        assert (m["eval/return_mean"], m["eval/return_min"], m["eval/return_max"]) == \
            (rets.mean(), rets.min(), rets.max())
        assert m["eval/return_std"] == pytest.approx(rets.std(), abs=1e-9)
        assert m["eval/episode_length_mean"] == lens.mean()
    ev.close()
