"""The Python API (lzkernel.api): train from a file or a mapping, resume, load an agent that acts
on raw observations (stacking frames itself), evaluate; errors raised, not exit codes."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lzkernel import ActResult, ConfigError, api

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "cartpole_rezero_fast.yaml"
TINY = ["run.progress=false", "run.threads=1", "run.log_every=5", "policy.num_simulations=4",
        "update_schedule.updates_per_collect=5", "collector.envs=2", "collector.n_episode=2", "evaluator.envs=2",
        "evaluator.episodes=2", "evaluator.every_train_iters=10", "policy.batch_size=16", "run.max_train_iters=20",
        "run.checkpoint_every=10"]


@pytest.fixture(autouse=True)
def _threads() -> Any:
    """A run sets torch's thread count (run.threads); the test process gets its own back."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_train_resume_load_act_and_evaluate(tmp_path: Path) -> None:
    import gymnasium

    result = api.train(CONFIG, TINY, out_dir=tmp_path / "run")
    assert (result.status, result.train_iter, result.run_dir) == ("finished", 20, tmp_path / "run")
    assert "max_train_iters" in result.stop_reason and result.best_eval is not None and result.env_steps > 0
    assert (result.run_dir / "command.txt").read_text().startswith("lzkernel run ")
    again = api.train(CONFIG, [*TINY, "run.max_train_iters=30"], out_dir=tmp_path / "run", resume="auto")
    assert again.train_iter == 30 and again.summary["resumed_from"] is not None

    agent = api.load(result.run_dir, num_envs=2)
    env = gymnasium.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    agent.reset()
    first = agent.act(obs)
    agent.reset()
    assert agent.act(obs) == first and first in (0, 1)  # greedy: the same state, the same action
    length, done = 1, False
    obs, _, done, truncated, _ = env.step(first)
    while not (done or truncated) and length < 500:
        obs, _, done, truncated, _ = env.step(agent.act(obs))
        length += 1
    assert length > 5
    both = agent.act(np.stack([obs, obs]))
    assert both.shape == (2,) and set(both.tolist()) <= {0, 1}
    with pytest.raises(ValueError, match=r"expected \(4,\) or \[B, 4\] with B <= num_envs = 2"):
        agent.act(np.zeros((3, 4)))

    report = api.evaluate(result.run_dir, episodes=3, seed=1)
    assert report["metrics"]["eval/episodes"] == 3 and report["train_iter"] == 30


def test_train_from_a_mapping_which_stays_unchanged_and_config_errors_raise(tmp_path: Path) -> None:
    from lzkernel.config.loader import load_tree

    tree = load_tree(CONFIG)[0]  # the file with the config it extends merged (a mapping has no base:)
    before = yaml.safe_dump(tree)
    result = api.train(tree, [*TINY, "run.max_train_iters=5"], out_dir=tmp_path / "run")
    assert result.status == "finished" and result.train_iter == 5 and yaml.safe_dump(tree) == before
    written = yaml.safe_load((result.run_dir / "config.yaml").read_text())
    assert written["policy"]["num_simulations"] == 4  # the run's config, reusable with `lzkernel run`
    with pytest.raises(ConfigError, match=r"policy\.num_simulatons: unknown key.*did you mean 'num_simulations'"):
        api.train(tree, ["policy.num_simulatons=4"], out_dir=tmp_path / "bad")
    with pytest.raises(ConfigError, match="no such"):
        api.load(tmp_path / "missing")


@dataclass
class _Spec:
    id: str = "fake"
    obs_shape: tuple[int, ...] = (2,)
    num_actions: int = 3
    two_player: bool = False


class _Policy:
    """Records what the agent hands it; acts 2."""

    @dataclass
    class target_spec:  # noqa: N801 - the attribute policies expose
        frame_stack: int = 3

    def __init__(self) -> None:
        self.seen: list[tuple[np.ndarray, np.ndarray]] = []
        self.resets: list[list[int]] = []

    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, **kw: Any) -> ActResult:
        assert kw["mode"] == "eval" and legal.all() and (to_play == -1).all()
        self.seen.append((obs.copy(), kw["timestep"].copy()))
        b = len(obs)
        return ActResult(np.full(b, 2, np.int64), np.zeros((b, 3), np.float32), np.zeros(b, np.float32),
                         np.zeros(b, np.float32), None)

    def reset_envs(self, env_ids: list[int], mode: str) -> None:
        self.resets.append(env_ids)


def test_the_agent_stacks_frames_per_env_and_restarts_them_at_reset() -> None:
    policy = _Policy()
    agent = api.Agent(policy, _Spec(), num_envs=2)
    o = [np.full(2, float(k), np.float32) for k in range(4)]
    assert agent.act(o[1]) == 2
    agent.act(o[2])
    agent.reset([0])
    agent.act(o[3])
    stacks = [obs[0].tolist() for obs, _ in policy.seen]
    assert stacks == [[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 2, 2], [3, 3, 3, 3, 3, 3]]  # [S*O], oldest first
    assert [t.tolist() for _, t in policy.seen] == [[0], [1], [0]] and policy.resets == [[0]]
    with pytest.raises(ValueError, match="two-player game: give to_play"):
        api.Agent(policy, _Spec(two_player=True)).act(o[0])
    with pytest.raises(ValueError, match=r"env ids must be in 0\.\.1"):
        agent.reset([2])
