"""Learning: ReZero on CartPole-v0 lifts the greedy evaluation return well above a random
policy's (≈ 22) within a small budget. Takes minutes: marked ``slow`` (run with ``-m slow``).

The budget is shrunk (a smaller batch, SSL heads and update count than the shipped config) so
the run fits a few minutes on a 2-core machine; the algorithm and its other settings are the
shipped config's.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RANDOM_RETURN = 22.0  # mean return of a uniformly random CartPole policy


@pytest.mark.slow
def test_rezero_return_rises_clearly_above_random(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "lzkernel", "run", str(ROOT / "configs" / "cartpole_rezero.yaml"),
        f"run.out_dir={out}", "run.max_env_steps=6000", "run.progress=false", "run.threads=1",
        "policy.batch_size=64", "policy.model.proj_hidden=256", "policy.model.proj_out=256",
        "policy.model.pred_hidden=128", "policy.model.pred_out=256",
        "update_schedule.updates_per_collect=25", "evaluator.every_train_iters=100",
        "evaluator.episodes=10", "evaluator.stop_value=100", "trainer.reanalyze_min_transitions=1000",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/return_mean"] for r in records if r["event"] == "eval"]
    assert evals[0] < 2 * RANDOM_RETURN  # the untrained policy is no better than random's ballpark
    assert max(evals) >= 100, f"evaluation returns {evals}"  # > 4x random: it learned


@pytest.mark.slow
def test_unizero_return_rises_clearly_above_random(tmp_path: Path) -> None:
    """UniZero with the shipped CartPole config, evaluated more often and stopped at 100."""
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "lzkernel", "run", str(ROOT / "configs" / "cartpole_unizero.yaml"),
        f"run.out_dir={out}", "run.max_env_steps=12000", "run.progress=false", "run.threads=1",
        "evaluator.every_train_iters=100", "evaluator.episodes=10", "evaluator.stop_value=100",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/return_mean"] for r in records if r["event"] == "eval"]
    assert evals[0] < 2 * RANDOM_RETURN
    assert max(evals) >= 100, f"evaluation returns {evals}"
