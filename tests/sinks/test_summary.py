"""``summary.json`` (lzk_sinks.summary): how a run ended — a solved run, its resume (nothing to do
unless the stop value is raised), and the evaluations counted over the directory's history."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fault"))
import resume_helpers as rh  # noqa: E402


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _evals(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["event"] == "eval"]


def test_a_solved_run_and_its_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # Solved at the first evaluation after training started (iteration 10): stop value 1.
    rh.run("cartpole_rezero", out, "evaluator.stop_value=1", "run.max_train_iters=100")
    s = _summary(out)
    evals = _evals(out)
    assert s["status"] == "finished" and s["exit_code"] == 0 and s["error"] is None
    assert s["stop_reason"] == f"solved: eval/return_mean {evals[-1]['eval/return_mean']:g} has reached evaluator.stop_value"
    assert s["train_iter"] == 10 and s["eval"]["count"] == len(evals) == 2  # at iterations 0 and 10
    best = max(evals, key=lambda r: r["eval/return_mean"])
    assert s["eval"]["best"]["return_mean"] == best["eval/return_mean"]
    assert s["eval"]["last"]["train_iter"] == 10 and s["last_checkpoint"].endswith("step_000000000010")

    # Resumed as it is: solved already, nothing to do, nothing recorded.
    proc = rh.run("cartpole_rezero", out, "evaluator.stop_value=1", "run.max_train_iters=100", resume=True)
    assert "nothing to do: solved: eval/return_mean" in proc.stderr
    assert len(_evals(out)) == 2 and _summary(out)["resumed_from"].endswith("step_000000000010")

    # With the stop value out of reach it trains on to its budget; the evaluations count on.
    rh.run("cartpole_rezero", out, "evaluator.stop_value=1e9", "run.max_train_iters=30", resume=True)
    s = _summary(out)
    assert s["stop_reason"] == "train_iter 30 has reached run.max_train_iters=30" and s["train_iter"] == 30
    assert s["eval"]["count"] == len(_evals(out)) == 4 and s["eval"]["last"]["train_iter"] == 30
