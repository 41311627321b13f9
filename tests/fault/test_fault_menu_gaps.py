"""RELIABILITY.md test-menu items that no other test proved (an audit of tests/ against the menu).

Each test names its menu item. Elsewhere: A1's restarts in detail in tests/envs/test_env_restarts.py;
A2 and A3 (env worker processes, ``env.workers``) in detail in tests/envs/test_env_workers.py. Not here: C3
(there are no queues between processes).
"""
from __future__ import annotations

import json
import os
import random
import re
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fault_helpers import (REPO, assert_one_line_error, fault_env, kill_9, loop_config, lzk, popen, read_metrics,
                           wait_for)

# The env module of the A1/B11 cases: written into each test's tmp_path (importable through
# PYTHONPATH in a subprocess, through sys.path in process).
_ENV_MODULE = '''
import os
import gymnasium
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class RaiseCartPoleEnv(CartPoleEnv):
    """CartPole whose step raises at the LZK_RAISE_AT-th step of the process."""
    steps = 0

    def step(self, action):
        RaiseCartPoleEnv.steps += 1
        if RaiseCartPoleEnv.steps == int(os.environ.get("LZK_RAISE_AT", "-1")):
            raise RuntimeError("injected env failure")
        return super().step(action)


class FourTupleEnv(CartPoleEnv):
    """The old gym step API: (obs, reward, done, info)."""

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs, r, term or trunc, info


class NoInfoResetEnv(CartPoleEnv):
    """reset() returns the observation only (no info)."""

    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed)[0]


class WrongShapeEnv(CartPoleEnv):
    """Declares Box(4) but steps return shape (3,)."""

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return np.zeros(3, np.float32), r, term, trunc, info


class NoLegalActionEnv(CartPoleEnv):
    """After a step, info["action_mask"] is all False."""

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs, r, term, trunc, {"action_mask": np.zeros(2, bool)}


for _cls in (RaiseCartPoleEnv, FourTupleEnv, NoInfoResetEnv, WrongShapeEnv, NoLegalActionEnv):
    gymnasium.register(f"Lzk{_cls.__name__}-v0", entry_point=_cls, max_episode_steps=200,
                       disable_env_checker=True)
'''

#: ReZero on CartPole made tiny (the A1 / B9 runs).
_TINY = ["run.progress=false", "run.threads=1", "run.log_every=1", "policy.num_simulations=4",
         "update_schedule.updates_per_collect=2", "collector.envs=2", "collector.n_episode=2",
         "evaluator.envs=2", "evaluator.episodes=2", "evaluator.every_train_iters=1000",
         "policy.batch_size=16", "trainer.reanalyze_min_transitions=100000"]


@pytest.fixture
def env_module(tmp_path: Path) -> Path:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "lzk_gap_envs.py").write_text(_ENV_MODULE, encoding="utf-8")
    return mods


# ---------------------------------------------------------------------------------------------
# A1: an env that raises mid-episode
# ---------------------------------------------------------------------------------------------


def _raising_run(tmp_path: Path, mods: Path, *extra: str) -> tuple[object, float]:
    args = ["run", REPO / "configs" / "cartpole_rezero_fast.yaml", f"run.out_dir={tmp_path / 'out'}", *_TINY,
            "run.max_train_iters=50", "env.id=lzk_gap_envs:LzkRaiseCartPoleEnv-v0", "-p", "lzk_gap_envs", *extra]
    t0 = time.monotonic()
    proc = lzk(args, tmp_path, fault_env(mods, LZK_RAISE_AT="60"), timeout=60)
    return proc, time.monotonic() - t0


def test_a1_an_env_that_raises_fails_fast_naming_the_env(env_module: Path, tmp_path: Path) -> None:
    """A1, the max_restarts=0 half: exit non-zero soon after the failure, one error line naming
    the env id and the env index with the env's own error; summary.json says how it failed."""
    proc, seconds = _raising_run(tmp_path, env_module)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("lzkernel: error: rank 0: ") and "injected env failure" in last, last
    assert "'lzk_gap_envs:LzkRaiseCartPoleEnv-v0'" in last and "env index" in last, last
    assert seconds < 30, seconds  # process start (torch import) included; the failure itself is at once
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "failed" and "injected env failure" in summary["error"]


def test_a1_the_error_of_a_raising_env_names_its_seed_and_step(env_module: Path, tmp_path: Path) -> None:
    proc, _ = _raising_run(tmp_path, env_module)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "seed" in last and re.search(r"\bstep \d+", last), last


def test_a1_with_max_restarts_the_env_is_recreated_and_training_goes_on(env_module: Path, tmp_path: Path) -> None:
    """A1, the restart half: the env that raised is made anew, its partial episode is not in
    the buffer, the failure is counted once, and the run trains to its end (exit 0)."""
    proc, _ = _raising_run(tmp_path, env_module, "env.max_restarts=2", "env.restart_backoff_s=0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "injected env failure; recreating the env (restart 1 of at most 2 in a row" in proc.stderr, proc.stderr[-3000:]
    records = read_metrics(tmp_path / "out")
    collects = [r for r in records if "collect/env_steps" in r]
    failed = [r for r in collects if "collect/env_failures" in r]
    assert [r["collect/env_failures"] for r in failed] == [1.0], failed
    # Whole episodes only: what the buffer holds is the finished episodes' steps, which fall short
    # of the env steps taken by the dropped episode's steps before the failing one.
    stored = max(r["buffer/transitions"] for r in records if "buffer/transitions" in r)
    finished = sum(round(r["collect/episodes"] * r.get("collect/episode_length_mean", 0.0)) for r in collects)
    taken = sum(r["collect/env_steps"] for r in collects)
    assert stored == finished < taken, (stored, finished, taken)
    assert max(r["train_iter"] for r in records) == 50
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] != "failed", summary


def test_a3_a_hung_env_worker_is_killed_and_its_envs_restart_in_a_new_one(tmp_path: Path) -> None:
    """A3 handled like A1 in a run: an env that hangs its worker (``env.workers``) is killed
    after ``step_timeout_s``; with ``max_restarts`` its envs start anew in a new worker, the
    loss is counted once, and the run trains to its end (exit 0)."""
    flag = tmp_path / "hang"
    flag.touch()
    args = ["run", REPO / "configs" / "cartpole_rezero_fast.yaml", f"run.out_dir={tmp_path / 'out'}", *_TINY,
            "run.max_train_iters=30", "env.id=lzk_fault_envs:HangCartPole-v0",
            "env.workers=2", "env.step_timeout_s=1", "env.max_restarts=1", "env.restart_backoff_s=0"]
    proc = lzk(args, tmp_path, fault_env(LZK_HANG_RANK="0", LZK_HANG_AT="40", LZK_HANG_FLAG=str(flag)), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not flag.exists()
    assert re.search(r"env worker \d+ \(env indices (\d)\.\.\1\) did not answer within 1 s \(env.step_timeout_s\).*"
                     r"starting a new worker for its envs \(restart 1 of at most 1 in a row", proc.stderr), proc.stderr[-3000:]
    records = read_metrics(tmp_path / "out")
    failures = [r[k] for r in records for k in ("collect/env_failures", "eval/env_failures") if k in r]
    assert failures == [1.0], failures
    assert max(r["train_iter"] for r in records) == 30
    # Resumed, a worker hangs while replaying its envs' saved state (the first reset of the
    # load): it too is replaced, its envs start anew, and the run goes on to its new end.
    reset_flag = tmp_path / "hang-reset"
    reset_flag.touch()
    proc = lzk([*args, "run.max_train_iters=40", "--resume", "auto"], tmp_path,
               fault_env(LZK_HANG_RESET_FLAG=str(reset_flag)), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not reset_flag.exists()
    assert "starting a new worker for its envs" in proc.stderr, proc.stderr[-3000:]
    records = read_metrics(tmp_path / "out")
    assert max(r["train_iter"] for r in records) == 40
    assert sum(r[k] for r in records for k in ("collect/env_failures", "eval/env_failures") if k in r) == 2.0


# ---------------------------------------------------------------------------------------------
# A4 variant: a second SIGTERM exits at once; the previous checkpoint still loads
# ---------------------------------------------------------------------------------------------


def test_a4_a_second_sigterm_exits_at_once_and_the_previous_checkpoint_loads(tmp_path: Path) -> None:
    from lzkernel.checkpoint import CheckpointStore, load

    out = tmp_path / "out"
    # 2 s of sleep per iteration: after the first signal the run would go on sleeping before its
    # next boundary; the second one must end it at once.
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 1000, "checkpoint_every": 1},
                      trainer={"sleep_s": 2.0})
    proc = popen(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path)
    try:
        wait_for(lambda: CheckpointStore(out / "ckpt").latest() is not None, 60, "the first checkpoint", proc)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        second = time.monotonic()
        _, err = proc.communicate(timeout=20)
        took = time.monotonic() - second
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert took < 1.5, took  # not after the rest of the 2 s sleep and a save
    assert "received SIGTERM" in err
    latest = CheckpointStore(out / "ckpt").latest()
    assert latest is not None
    state, arrays, meta = load(latest)
    assert state["counters"]["train_iter"] == int(latest.name.split("_")[1]) >= 1
    assert len(arrays["trace"]) == state["counters"]["train_iter"]


# ---------------------------------------------------------------------------------------------
# A5: kill -9 while checkpoints are being written (a real process, random offsets)
# ---------------------------------------------------------------------------------------------


def test_a5_kill_9_at_random_moments_of_checkpoint_writing_never_breaks_resume(tmp_path: Path) -> None:
    """A checkpoint every iteration (the loop is mostly saving), SIGKILL at random moments of
    five runs on one directory: after each, the newest complete checkpoint verifies and loads,
    and ``--resume auto`` goes on from it; no temporary survives the next save."""
    from lzkernel.checkpoint import CheckpointStore, load

    out = tmp_path / "out"
    rng = random.Random(1234)
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 10**6, "checkpoint_every": 1,
                                                     "log_every": 1000})
    last_iter, torn = 0, 0
    for attempt in range(5):
        args = ["run", cfg, "-p", "lzk_fault_plugin"] + (["--resume", "auto"] if attempt else [])
        proc = popen(args, tmp_path)
        try:
            wait_for(lambda: any(int(p.name.split("_")[1]) > last_iter for p in CheckpointStore(out / "ckpt")
                                 .complete_steps()), 60, "a new checkpoint", proc)
            time.sleep(rng.uniform(0.0, 0.3))
        finally:
            kill_9(proc, timeout=20)
        assert proc.returncode == -signal.SIGKILL
        torn += len(list((out / "ckpt").glob(".*.tmp-*")))
        latest = CheckpointStore(out / "ckpt").latest()
        assert latest is not None
        state, arrays, _ = load(latest)
        it = state["counters"]["train_iter"]
        assert it == int(latest.name.split("_")[1]) and len(arrays["trace"]) == it
        assert it >= last_iter  # the resume went on from the previous one
        last_iter = it
    # The last resume ends normally and cleans every temporary left by the kills.
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--resume", "auto", f"run.max_train_iters={last_iter + 2}"],
               tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list((out / "ckpt").glob(".*.tmp-*")) and not list((out / "ckpt").glob(".*.old-*"))
    state, _, _ = load(CheckpointStore(out / "ckpt").latest())
    assert state["counters"]["train_iter"] == last_iter + 2
    print(f"kills that left a temporary directory: {torn} of 5")


# ---------------------------------------------------------------------------------------------
# B5: out-of-range values of the shipped schema (not only the test schema of tests/kernel)
# ---------------------------------------------------------------------------------------------


def test_b5_out_of_range_values_of_a_real_config_are_exit_2_with_their_key_paths(tmp_path: Path) -> None:
    proc = lzk(["config", REPO / "configs" / "cartpole_rezero_fast.yaml", "buffer.capacity=0",
                "policy.num_simulations=0", "policy.discount=1.5"], tmp_path, timeout=60)
    message = assert_one_line_error(proc, "(3 problems)")
    for needle in ("buffer.capacity: must be >= 1, got 0", "policy.num_simulations: must be >= 1, got 0",
                   "policy.discount: must be <= 1.0, got 1.5"):
        assert needle in message, message


# ---------------------------------------------------------------------------------------------
# B9: a gradient (not the loss) turns NaN once
# ---------------------------------------------------------------------------------------------


def _muzero_learner(**cfg_kw):  # noqa: ANN202
    import copy

    sys.path.insert(0, str(REPO / "tests" / "muzero"))
    try:
        from muzero_helpers import make_batch, small_policy_cfg
    finally:
        sys.path.pop(0)
    from lzk_common.support import DiscreteSupport
    from lzk_muzero.learner import Learner
    from lzk_muzero.models import build_model

    support = DiscreteSupport.from_range([-10, 11, 1])
    cfg = small_policy_cfg(learn_dtype="float32", **cfg_kw)
    model = build_model(cfg.model, (4,), 2)
    return Learner(model, copy.deepcopy(model).eval(), cfg, support, support), make_batch


@pytest.mark.parametrize("policy", ["skip", "raise"])
def test_b9_a_nan_gradient_with_a_finite_loss_is_skipped_or_raised(policy: str) -> None:
    import torch

    from lzk_common.learner import NonFiniteLossError

    torch.manual_seed(0)
    learner, make_batch = _muzero_learner(on_nonfinite=policy)
    params = [p for p in learner.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    poisoned = {"left": 1}

    def once(grad: torch.Tensor) -> torch.Tensor:
        if poisoned["left"]:
            poisoned["left"] -= 1
            return grad * float("nan")
        return grad

    handle = params[0].register_hook(once)
    batch = make_batch(8, 3, 2, (4,))
    try:
        if policy == "raise":
            with pytest.raises(NonFiniteLossError):
                learner.step(batch)
            return
        metrics, prio, _ = learner.step(batch)
    finally:
        handle.remove()
    assert np.isfinite(metrics["train/loss_total"])  # the loss was finite: only the gradient was not
    assert metrics["train/skipped_nonfinite"] == 1.0 and learner.steps == 0
    assert all(torch.equal(b, p.detach()) for b, p in zip(before, params))
    assert np.isfinite(prio).all()
    metrics, _, _ = learner.step(make_batch(8, 3, 2, (4,)))
    assert metrics["train/skipped_nonfinite"] == 0.0 and learner.steps == 1
    assert all(torch.isfinite(p).all() for p in params)


# ---------------------------------------------------------------------------------------------
# B10 / B11: wrong spaces and API misuse by a gymnasium env
# ---------------------------------------------------------------------------------------------


def _vector_env(env_module: Path, name: str):  # noqa: ANN202
    sys.path.insert(0, str(env_module))
    try:
        import lzk_gap_envs  # noqa: F401  (registers the envs)
    finally:
        sys.path.pop(0)
    from lzk_envs.plugin import GymEnvConfig, make_gym_env

    return make_gym_env(GymEnvConfig(id=f"Lzk{name}-v0"), None).make_vector(2, seed=0)


@pytest.mark.parametrize(("name", "needle"), [
    ("WrongShapeEnv", r"'LzkWrongShapeEnv-v0' \(env index 0\) returned an observation of shape \(3,\), expected \(4,\)"),
    ("NoLegalActionEnv", r"'LzkNoLegalActionEnv-v0' \(env index 0\) gave info\['action_mask'\].*with a legal action"),
])
def test_b10_a_wrong_observation_shape_or_no_legal_action_names_env_and_space(env_module: Path, name: str,
                                                                              needle: str) -> None:
    from lzk_envs.gym import EnvError

    venv = _vector_env(env_module, name)
    venv.reset()
    with pytest.raises(EnvError, match=needle):
        venv.step(np.array([0, 1]))
    venv.close()


@pytest.mark.parametrize(("name", "call"), [("FourTupleEnv", "step(1)"), ("NoInfoResetEnv", "reset(seed=")])
def test_b11_gym_api_misuse_is_an_error_naming_the_env_and_the_call(env_module: Path, name: str, call: str) -> None:
    """An old-gym 4-tuple step and a reset() without info fail at the first call, naming the env."""
    from lzk_envs.gym import EnvError

    venv = _vector_env(env_module, name)
    with pytest.raises(EnvError) as info:
        venv.reset()
        venv.step(np.array([1, 1]))
    message = str(info.value)
    assert f"'Lzk{name}-v0' (env index 0" in message and call in message, message
    assert "unpack" in message, message  # the API mismatch itself (a 4-tuple, no info)
    venv.close()


# ---------------------------------------------------------------------------------------------
# B13: a file that is not a checkpoint directory
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["lightzero .pth.tar", "random zip"])
def test_b13_a_checkpoint_file_of_another_kind_is_exit_2_naming_it(kind: str, tmp_path: Path) -> None:
    import zipfile

    if kind == "random zip":
        bad = tmp_path / "random.zip"
        with zipfile.ZipFile(bad, "w") as z:
            z.writestr("data.pkl", b"\x80\x04N.")
    else:
        import torch

        bad = tmp_path / "iteration_100.pth.tar"  # LightZero's layout: one torch.save'd dict
        torch.save({"model": {"w": torch.zeros(2)}, "last_iter": 100}, bad)
    cfg = loop_config(tmp_path / "c.yaml", tmp_path / "out")
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--resume", bad], tmp_path)
    message = assert_one_line_error(proc, f"--resume {bad}", "is not a checkpoint directory")
    assert "Unpickling" not in proc.stderr, message
    assert not (tmp_path / "out" / "ckpt").exists()  # never a silent fresh start
