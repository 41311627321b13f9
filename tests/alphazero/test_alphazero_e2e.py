"""AlphaZero end to end through ``lzkernel run``: a tiny run writes metrics with win/draw/loss
rates and a checkpoint and resumes; the learning test (slow) shows the win rate against random
play rising."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["run.progress=false", "run.threads=1", "run.log_every=5", "run.checkpoint_every=20",
        "policy.num_simulations=8", "policy.eval_num_simulations=8", "policy.batch_size=32",
        "collector.envs=2", "collector.n_episode=2", "evaluator.envs=2", "evaluator.games=2",
        "evaluator.every_train_iters=20", "update_schedule.updates_per_collect=5"]


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lzkernel", "run", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_tictactoe_run_reports_win_draw_loss_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _run(str(ROOT / "configs" / "tictactoe_alphazero.yaml"), f"run.out_dir={out}", "run.max_env_steps=150",
                *TINY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = [r for r in _records(out) if r["event"] == "eval"]
    assert evals
    for r in evals:
        for who in ("random", "perfect"):
            for side in ("first", "second"):
                rates = [r[f"eval/vs_{who}/{side}/{k}_rate"] for k in ("win", "draw", "loss")]
                assert abs(sum(rates) - 1.0) < 1e-9
        assert -1.0 <= r["eval/return_mean"] <= 1.0
    assert (out / "ckpt" / "best" / "DONE").is_file() and sorted((out / "ckpt").glob("step_*"))
    n = len(_records(out))
    proc = _run(str(ROOT / "configs" / "tictactoe_alphazero.yaml"), f"run.out_dir={out}", "run.max_env_steps=250",
                *TINY, "--resume", "auto")
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = _records(out)[n:]
    assert resumed and max(r["env_steps"] for r in resumed) >= 250


@pytest.mark.slow
def test_self_play_raises_the_win_rate_against_random_play(tmp_path: Path) -> None:
    """With a weak evaluation search (5 simulations) the greedy policy's wins against random play
    come from what the network learned: they must rise clearly within a few thousand moves."""
    out = tmp_path / "run"
    proc = _run(str(ROOT / "configs" / "tictactoe_alphazero.yaml"), f"run.out_dir={out}", "run.max_env_steps=4000",
                "run.progress=false", "policy.eval_num_simulations=5", "evaluator.every_train_iters=150",
                "evaluator.games=50", "evaluator.envs=25", "evaluator.opponents=[{name: random}]", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wins = [r["eval/vs_random/win_rate"] for r in _records(out) if r["event"] == "eval"]
    assert len(wins) >= 3
    assert max(wins[-2:]) >= wins[0] + 0.2, wins
