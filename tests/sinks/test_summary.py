"""``summary.json`` (lzk_sinks.summary): how a run ended — a solved run, its resume (nothing to do
unless the stop value is raised), and the evaluations counted over the directory's history."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

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
    assert s["status"] == "finished" and s["exit_code"] == 0 and s["error"] is None and s["stop_kind"] == "solved"
    assert s["stop_reason"] == f"solved: eval/return_mean {evals[-1]['eval/return_mean']:g} has reached evaluator.stop_value"
    assert s["train_iter"] == 10 and s["eval"]["count"] == len(evals) == 2  # at iterations 0 and 10
    best = max(evals, key=lambda r: r["eval/return_mean"])
    assert s["eval"]["best"]["return_mean"] == best["eval/return_mean"]
    assert s["eval"]["last"]["train_iter"] == 10 and s["last_checkpoint"].endswith("step_000000000010")

    # Resumed as it is: solved already, nothing to do, nothing recorded.
    proc = rh.run("cartpole_rezero", out, "evaluator.stop_value=1", "run.max_train_iters=100", resume=True)
    assert "nothing to do: solved: eval/return_mean" in proc.stderr
    assert len(_evals(out)) == 2 and _summary(out)["resumed_from"].endswith("step_000000000010")
    assert _summary(out)["last_checkpoint"].endswith("step_000000000010")  # saved nothing: the one it resumed

    # With the stop value out of reach it trains on to its budget; the evaluations count on.
    rh.run("cartpole_rezero", out, "evaluator.stop_value=1e9", "run.max_train_iters=30", resume=True)
    s = _summary(out)
    assert s["stop_reason"] == "train_iter 30 has reached run.max_train_iters=30" and s["train_iter"] == 30
    assert s["stop_kind"] == "max_train_iters"
    assert s["eval"]["count"] == len(_evals(out)) == 4 and s["eval"]["last"]["train_iter"] == 30


def test_a_rewind_keeps_the_evaluations_up_to_its_step(tmp_path: Path) -> None:
    """Resumed from an earlier checkpoint, the summary counts the evaluations up to that step once
    (the one at the step itself is played again when its checkpoint preceded it) and the new ones."""
    out = tmp_path / "run"
    common = ("run.max_train_iters=30", "run.checkpoint_every=10", "run.keep_last=10")
    rh.run("cartpole_rezero", out, *common)
    assert [r["train_iter"] for r in _evals(out)] == [0, 10, 20, 30] and _summary(out)["eval"]["count"] == 4
    proc = rh.lzk(["run", rh.REPO / "configs" / "cartpole_rezero.yaml", f"run.out_dir={out}", *rh.COMMON,
                   *rh.TINY["cartpole_rezero"], *common, "--resume", out / "ckpt" / "step_000000000010"],
                  rh.REPO, rh.fault_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = _summary(out)
    assert s["eval"]["count"] == 4 and s["eval"]["last"]["train_iter"] == 30
    assert s["resumed_from"].endswith("step_000000000010") and s["last_checkpoint"].endswith("step_000000000030")


def test_status_and_exit_code_of_the_ways_a_run_ends() -> None:
    from types import SimpleNamespace

    from lzk_sinks.summary import _status
    from lzkernel.errors import exit_code
    from lzkernel.errors import ConfigError

    def run(kind: str | None, signum: int | None = None, reason: str = "") -> SimpleNamespace:
        return SimpleNamespace(stop_signal=signum, stop_kind=kind, stop_reason=reason)

    assert (_status(run("max_train_iters"), None), exit_code(None, None)) == ("finished", 0)
    assert [_status(run(k), None) for k in ("solved", "max_env_steps", None)] == ["finished"] * 3
    # The kind decides, not the words: a trainer's reason text may say anything.
    assert _status(run("peer_signal", reason="rank 3 was told to stop"), None) == "stopped"
    assert _status(run("requested", reason="stopped"), None) == "stopped"
    assert _status(run("max_train_iters", reason="stopped by the budget"), None) == "finished"
    assert (_status(run("signal", 15, "stopped by SIGTERM"), None), exit_code(None, 15)) == ("stopped", 143)
    assert _status(run(None, 15), None) == "stopped"  # a signal, with a trainer that sets no kind
    assert _status(run("solved"), KeyboardInterrupt()) == "stopped"
    assert _status(run("solved"), ValueError("x")) == "failed"
    from lzkernel.run import RunContext

    with pytest.raises(ValueError, match=r"^stop kind 'budget' is not one of solved, max_train_iters, "):
        RunContext.set_stop(SimpleNamespace(), "budget", "the budget")  # type: ignore[arg-type]
    full = OSError(28, "No space left on device")
    wrapped = RuntimeError("sink failed")
    wrapped.__cause__ = full
    assert [exit_code(e) for e in (ConfigError("x"), full, wrapped, ValueError("x"), KeyboardInterrupt())] \
        == [2, 2, 2, 1, 130]
