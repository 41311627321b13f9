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
    assert (result.status, result.stop_kind, result.train_iter, result.run_dir) == ("finished", "max_train_iters", 20,
                                                                                     tmp_path / "run")
    assert "max_train_iters" in result.stop_reason and result.best_eval is not None and result.env_steps > 0
    assert result.summary is not None and result.summary["train_iter"] == 20 and result.last_checkpoint.is_dir()
    assert (result.run_dir / "command.txt").read_text().startswith("lzkernel run ")
    again = api.train(CONFIG, [*TINY, "run.max_train_iters=30"], out_dir=tmp_path / "run", resume="auto")
    assert again.train_iter == 30 and again.summary["resumed_from"] is not None
    assert (result.run_dir / "command.txt").read_text().rstrip().endswith("--resume auto")

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
    with pytest.raises(ValueError, match=r"expected \(4,\) or \[B, 4\], one row per env id, distinct ids in 0\.\.1"):
        agent.act(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="not a list of action indices"):
        agent.act(obs, legal=[0, 1, 1])

    report = api.evaluate(result.run_dir, episodes=3, seed=1)
    assert report["metrics"]["eval/episodes"] == 3 and report["train_iter"] == 30

    # A sweep's directory (seed_<S> runs): runs() lists them for a loop; load/evaluate take one run.
    import shutil

    sweep = tmp_path / "sweep"
    for seed in (1, 0):
        shutil.copytree(result.run_dir, sweep / f"seed_{seed}")
    assert api.runs(sweep) == [sweep / "seed_0", sweep / "seed_1"] and api.runs(result.run_dir) == [result.run_dir]
    for call in (api.evaluate, api.load):
        with pytest.raises(ConfigError, match=r"sweep's directory \(2 runs\): .* takes one run's; loop over "
                                              r"lzkernel\.api\.runs"):
            call(sweep)
    reports = [api.evaluate(r, episodes=2, seed=1) for r in api.runs(sweep)]
    assert [r["metrics"]["eval/episodes"] for r in reports] == [2, 2]
    assert reports[0]["metrics"]["eval/return_mean"] == reports[1]["metrics"]["eval/return_mean"]  # the same weights, seed
    shutil.rmtree(sweep / "seed_1")  # a sweep of one run is taken as that run, as lzkernel eval takes it
    alone = api.evaluate(sweep, episodes=2, seed=1)["metrics"]
    assert alone["eval/return_mean"] == reports[0]["metrics"]["eval/return_mean"] and alone["eval/episodes"] == 2
    (sweep / "sweep.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"sweep\.json: not a sweep's record"):
        api.runs(sweep)


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


def test_ctrl_c_saves_then_raises_and_the_run_resumes(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT, sent once the run writes metrics) stops the run at its next boundary with a
    checkpoint, then KeyboardInterrupt leaves train(); resume='auto' goes on from there."""
    import os
    import signal
    import threading
    import time

    out = tmp_path / "run"

    def interrupt() -> None:
        deadline = time.monotonic() + 60
        while not (out / "metrics.jsonl").is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt, daemon=True)
    sender.start()
    with pytest.raises(KeyboardInterrupt, match=r"stopped at train_iter \d+ on Ctrl-C .*resume='auto'"):
        api.train(CONFIG, [*TINY, "run.max_train_iters=100000"], out_dir=out)
    sender.join()
    stopped = __import__("json").loads((out / "summary.json").read_text())
    assert stopped["status"] == "stopped" and stopped["stop_kind"] == "signal" and stopped["last_checkpoint"]
    again = api.train(CONFIG, [*TINY, f"run.max_train_iters={stopped['train_iter'] + 5}"], out_dir=out, resume="auto")
    assert again.status == "finished" and again.train_iter == stopped["train_iter"] + 5


def test_mapping_values_are_made_plain_or_named_and_secrets_stay_out_of_errors(tmp_path: Path) -> None:
    assert api.plain({"a": (1, np.int64(2)), "b": Path("x"), "c": {"d": np.float32(0.5)}}) == {
        "a": [1, 2], "b": "x", "c": {"d": 0.5}}
    with pytest.raises(ConfigError, match=r"env\.kwargs\.flag: a config value must be .* got object"):
        api.plain({"env": {"kwargs": {"flag": object()}}})
    with pytest.raises(ConfigError) as err:  # the env refuses the keyword: its value must not be printed
        api.train(CONFIG, [*TINY, "env.kwargs={api_token: sk-SECRET-0003}"], out_dir=tmp_path / "run")
    chain, e = [], err.value
    while e is not None:  # the messages a traceback shows: the error's and its causes'
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    shown = "\n".join(chain)
    assert len(chain) > 1  # the env's own error is chained
    assert "sk-SECRET-0003" not in shown and "sk-SECRET-0003" not in str(err.value.problems)
    assert "api_token" in str(err.value)


@dataclass
class _Spec:
    id: str = "fake"
    obs_shape: tuple[int, ...] = (2,)
    num_actions: int = 3
    two_player: bool = False
    truncation_as_terminal: bool = True

    def make_vector(self, num_envs: int, seed: int) -> Any:  # the EnvSpec contract; not used here
        raise NotImplementedError


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
    agent.act(np.stack([o[1], o[2]]), env_ids=[1, 0])  # rows name their envs: env 1 starts, env 0 goes on
    assert policy.seen[-1][0].tolist() == [[1, 1, 1, 1, 1, 1], [3, 3, 3, 3, 2, 2]]


@dataclass
class _FrameSpec(_Spec):
    frame_scale: float = 255.0


class _Raising(_Policy):
    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, **kw: Any) -> ActResult:
        raise RuntimeError("the policy failed")


def test_uint8_frames_are_decoded_and_a_failed_act_leaves_the_window_as_it_was() -> None:
    policy = _Policy()
    agent = api.Agent(policy, _FrameSpec(), num_envs=1)
    agent.act(np.array([255, 51], np.uint8))
    assert np.allclose(policy.seen[-1][0][0, -2:], [1.0, 0.2])  # decoded at frame_scale 255
    raising = api.Agent(_Raising(), _Spec(), num_envs=1)
    with pytest.raises(RuntimeError):
        raising.act(np.ones(2, np.float32))
    assert raising._fresh[0] and not raising.window.frames.any()  # the next act starts the episode again


def test_embedded_runs_are_interrupted_not_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a process that lives on, the stall watchdog raises Stalled in the run's thread (the run
    fails with it, exit code 1 in summary.json) and a second signal raises KeyboardInterrupt,
    instead of ending the process (os._exit)."""
    import json
    import signal
    import sys
    import time
    from types import SimpleNamespace

    from lzkernel import Stalled
    from lzkernel.run import RunContext
    from lzkernel.watchdog import StallWatchdog

    dog = StallWatchdog(0.3, embedded=True).start()
    try:
        t0 = time.monotonic()
        with pytest.raises(Stalled, match=r"no progress for 0\.3 s"):
            while time.monotonic() - t0 < 10:  # no progress for longer than the timeout
                time.sleep(0.05)
        assert time.monotonic() - t0 < 5
    finally:
        dog.stop()
    second = SimpleNamespace(embedded=True, _signals_seen=1)
    with pytest.raises(KeyboardInterrupt, match="a second SIGINT"):
        RunContext._on_signal(second, signal.SIGINT, None)  # type: ignore[arg-type]

    # A run whose env hangs 3 s in one step, with a 1 s deadline: the run fails with Stalled.
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fault"))
    import lzk_fault_envs

    flag = tmp_path / "hang"
    flag.touch()
    for key, value in (("LZK_HANG_RANK", "0"), ("LZK_HANG_AT", str(lzk_fault_envs.HangCartPoleEnv.steps + 30)),
                       ("LZK_HANG_S", "3"), ("LZK_HANG_FLAG", str(flag))):
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(Stalled):
        api.train(CONFIG, [*TINY, "env.id=lzk_fault_envs:HangCartPole-v0", "run.stall_timeout_s=1"],
                  out_dir=tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["exit_code"] == 1 and "no progress for 1 s" in summary["error"]
    assert not flag.exists() and "lzk_fault_envs" in sys.modules


def test_eval_at_end_evaluates_the_last_weights_of_a_run_that_spent_its_budget(tmp_path: Path) -> None:
    """trainer.eval_at_end: a run ending on max_train_iters evaluates once more at its last
    iteration (evaluations otherwise at 0 only, every_train_iters being 1000); the summary's
    last evaluation is that one."""
    import json

    for at_end, iters in ((False, [0]), (True, [0, 20])):
        out = tmp_path / f"run_{at_end}"
        result = api.train(CONFIG, [*TINY, "evaluator.every_train_iters=1000", f"trainer.eval_at_end={str(at_end).lower()}"],
                           out_dir=out)
        assert result.status == "finished" and result.stop_kind == "max_train_iters" and result.train_iter == 20
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["train_iter"] for r in records if "eval/return_mean" in r] == iters
    # It shapes no state: a resume may turn it on.
    again = api.train(CONFIG, [*TINY, "evaluator.every_train_iters=1000", "trainer.eval_at_end=true",
                               "run.max_train_iters=30"], out_dir=tmp_path / "run_False", resume="auto")
    assert again.train_iter == 30 and again.summary["eval"]["last"]["train_iter"] == 30
