"""Learning: ReZero (MuZero and EfficientZero), EfficientZero and UniZero on CartPole-v0 lift the
greedy evaluation return well above a random policy's (≈ 22) within a small budget. Takes minutes: marked ``slow`` (run with ``-m slow``).

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


def _eval_returns(config: str, out: Path, *overrides: str) -> list[float]:
    """Run ``configs/<config>`` in a subprocess (the user's path) and return its evaluation means."""
    cmd = [sys.executable, "-m", "lzkernel", "run", str(ROOT / "configs" / config), f"run.out_dir={out}",
           "run.progress=false", "run.threads=1", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["eval/return_mean"] for r in records if r["event"] == "eval"]


@pytest.mark.slow
def test_rezero_return_rises_clearly_above_random(tmp_path: Path) -> None:
    evals = _eval_returns(
        "cartpole_rezero.yaml", tmp_path / "run", "run.max_env_steps=6000",
        "policy.batch_size=64", "policy.model.proj_hidden=256", "policy.model.proj_out=256",
        "policy.model.pred_hidden=128", "policy.model.pred_out=256",
        "update_schedule.updates_per_collect=25", "evaluator.every_train_iters=100",
        "evaluator.episodes=10", "evaluator.stop_value=100", "trainer.reanalyze_min_transitions=1000",
    )
    assert evals[0] < 2 * RANDOM_RETURN  # the untrained policy is no better than random's ballpark
    assert max(evals) >= 100, f"evaluation returns {evals}"  # > 4x random: it learned


#: The shrunk budget of the MuZero-family runs (the shipped configs otherwise).
_SMALL = ("run.max_env_steps=6000", "policy.batch_size=64", "policy.model.proj_hidden=256", "policy.model.proj_out=256",
          "policy.model.pred_hidden=128", "policy.model.pred_out=256", "update_schedule.updates_per_collect=25",
          "evaluator.every_train_iters=100", "evaluator.episodes=10", "evaluator.stop_value=100")


@pytest.mark.slow
@pytest.mark.parametrize("config, extra", [
    ("cartpole_efficientzero.yaml", ()),
    ("cartpole_rezero_ez.yaml", ("trainer.reanalyze_min_transitions=1000",)),
], ids=["efficientzero", "rezero_ez"])
def test_efficientzero_return_rises_clearly_above_random(tmp_path: Path, config: str, extra: tuple[str, ...]) -> None:
    """EfficientZero (LSTM value prefix) with the plain and the ReZero trainer."""
    evals = _eval_returns(config, tmp_path / "run", *_SMALL, *extra)
    assert evals[0] < 2 * RANDOM_RETURN
    assert max(evals) >= 100, f"evaluation returns {evals}"


@pytest.mark.slow
def test_unizero_return_rises_clearly_above_random(tmp_path: Path) -> None:
    """UniZero with the shipped CartPole config, evaluated more often and stopped at 100."""
    evals = _eval_returns(
        "cartpole_unizero.yaml", tmp_path / "run", "run.max_env_steps=12000",
        "evaluator.every_train_iters=100", "evaluator.episodes=10", "evaluator.stop_value=100",
    )
    assert evals[0] < 2 * RANDOM_RETURN
    assert max(evals) >= 100, f"evaluation returns {evals}"
