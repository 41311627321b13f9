"""``run.max_seconds``: the wall-time budget ends a real trainer's loop between two updates (even
inside an epoch) with a checkpoint (exit 0, ``stop_kind`` max_seconds), and a resume with a larger
budget goes on."""
from __future__ import annotations

import json
from pathlib import Path

from fault_helpers import REPO, fault_env, lzk, read_metrics

#: 1,000 updates per collect: an epoch lasts several seconds, longer than the budget.
_TINY = ["run.progress=false", "run.threads=1", "run.log_every=1", "policy.num_simulations=4",
         "update_schedule.updates_per_collect=1000", "collector.envs=2", "collector.n_episode=2", "evaluator.envs=2",
         "evaluator.episodes=2", "evaluator.every_train_iters=100000", "policy.batch_size=16",
         "trainer.reanalyze_min_transitions=100000", "run.checkpoint_every=0"]


def test_the_time_budget_stops_between_updates_and_a_resume_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["run", REPO / "configs" / "cartpole_rezero_fast.yaml", f"run.out_dir={out}", *_TINY]
    proc = lzk([*args, "run.max_seconds=2"], tmp_path, fault_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_kind"] == "max_seconds" and summary["status"] == "finished", summary
    assert "has reached run.max_seconds=2" in summary["stop_reason"]
    first = summary["train_iter"]
    # Checked after every update: the run left inside its first epoch of 1,000 updates, at once.
    assert 0 < first < 1000 and summary["wall_time"] >= 2.0, summary
    late = [r for r in read_metrics(out) if r["event"] == "train" and r["wall_time"] > 2.5]
    assert len(late) <= 1, late  # at most the update that crossed the line (and its record)
    assert (out / "ckpt" / f"step_{first:012d}").is_dir()  # saved where it stopped

    budget = summary["wall_time"] + 2.0  # two more seconds, however long the first start took
    proc = lzk([*args, f"run.max_seconds={budget}", "--resume", "auto"], tmp_path, fault_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_kind"] == "max_seconds" and summary["train_iter"] > first
    assert summary["wall_time"] >= budget  # the clock went on from the first run's
    assert max(r["train_iter"] for r in read_metrics(out)) == summary["train_iter"]
