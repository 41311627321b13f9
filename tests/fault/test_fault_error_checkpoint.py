"""An error that ends a run keeps what it learned (issue 15 item 7): an env that returns NaN after
many iterations, with no periodic checkpoint due yet, leaves a checkpoint of the last completed
iteration; ``--resume auto`` continues from it."""
from __future__ import annotations

import json
from pathlib import Path

from fault_helpers import REPO, fault_env, lzk


def test_an_env_error_leaves_the_last_completed_iteration_resumable(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", REPO / "configs" / "cartpole_rezero_fast.yaml", f"run.out_dir={out}", "run.progress=false",
            "run.checkpoint_every=0", "run.log_every=5", "run.threads=1", "env.id=lzk_fault_envs:NanCartPole-v0",
            "run.max_env_steps=1500", "policy.num_simulations=4", "update_schedule.updates_per_collect=10",
            "evaluator.envs=2", "evaluator.episodes=2", "evaluator.every_train_iters=1000"]
    failed = lzk([*args, "-p", "lzk_fault_envs"], REPO, fault_env(LZK_NAN_AT="700"), timeout=300)
    assert failed.returncode == 1 and "non-finite" in failed.stderr, failed.stderr[-2000:]
    trained = max(json.loads(line)["train_iter"] for line in (out / "metrics.jsonl").read_text().splitlines())
    ckpts = sorted((out / "ckpt").glob("step_*"))
    assert ckpts and (ckpts[-1] / "DONE").is_file()
    meta = json.loads((ckpts[-1] / "meta.json").read_text())
    assert 0 < meta["train_iter"] and meta["train_iter"] >= trained  # every completed iteration kept
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["exit_code"] == 1 and "non-finite" in summary["error"]
    assert summary["last_checkpoint"] == str(ckpts[-1]) and summary["train_iter"] == meta["train_iter"]
    resumed = lzk([*args, "-p", "lzk_fault_envs", "--resume", "auto"], REPO, fault_env(), timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r["env_steps"] for r in records) >= 1500 and max(r["train_iter"] for r in records) > meta["train_iter"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["error"] is None
    assert summary["stop_reason"].startswith("env_steps ") and "run.max_env_steps=1500" in summary["stop_reason"]
