"""The console progress line (lzk_sinks.progress)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from lzk_sinks import progress


def _run(**kw) -> SimpleNamespace:
    base = dict(is_main=True, cfg=SimpleNamespace(progress=True, max_train_iters=10**9, max_env_steps=100_000),
                wall_time=0.01, train_iter=0, env_steps=0, status_text="", resume_path=None, dir=None)
    base.update(kw)
    resume = base["resume_path"]  # RunContext.resume_meta: the checkpoint's meta.json, {} when fresh
    base.setdefault("resume_meta", {} if resume is None else json.loads((Path(resume) / "meta.json").read_text()))
    return SimpleNamespace(**base)


def test_a_line_appears_at_run_start_before_any_event(capsys: pytest.CaptureFixture[str]) -> None:
    run = _run()
    progress.lzkernel_run_start(run=run)
    err = capsys.readouterr().err
    progress.lzkernel_run_end(run=run, error=None)
    assert err.startswith("[lzkernel] iter 0 | env 0") and "starting" in err


def test_the_starting_note_claims_no_compiling(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing is known about numba's cache at run start: a plain "starting" (the compiling is
    announced where it happens, lzk_common.numba_cache)."""
    run = _run()
    progress.lzkernel_run_start(run=run)
    err = capsys.readouterr().err
    progress.lzkernel_run_end(run=run, error=None)
    assert err.strip() == "[lzkernel] iter 0 | env 0 | 0 env/s | starting | 0:00:00"


def test_the_starting_note_gives_way_to_the_eval_return(capsys: pytest.CaptureFixture[str]) -> None:
    run = _run()
    progress.lzkernel_run_start(run=run)
    capsys.readouterr()
    run.train_iter, run.env_steps, run.wall_time = 100, 480, 30.0
    progress.lzkernel_after_eval(run=run, metrics={"eval/return_mean": 39.1})
    progress.lzkernel_run_end(run=run, error=None)
    err = capsys.readouterr().err
    assert "eval 39.1 (best 39.1)" in err and "starting" not in err


def test_no_line_when_progress_is_off(capsys: pytest.CaptureFixture[str]) -> None:
    progress.lzkernel_run_start(run=_run(cfg=SimpleNamespace(progress=False)))
    assert capsys.readouterr().err == ""


class _Clock:
    """A settable ``time.monotonic`` for the sink's rate limit."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_line_gives_the_share_of_the_budget_and_the_time_to_go(capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(cfg=SimpleNamespace(progress=True, max_train_iters=10**9, max_env_steps=1000))
    progress.lzkernel_run_start(run=run)
    capsys.readouterr()
    run.train_iter, run.env_steps, run.wall_time = 40, 250, 30.0
    progress.lzkernel_run_end(run=run, error=None)  # the last line: the run's time only
    assert capsys.readouterr().err.strip().endswith("| 0:00:30")
    progress.lzkernel_run_start(run=run)
    run.train_iter = 300  # iterations further along than env steps
    progress.lzkernel_after_eval(run=run, metrics={"eval/return_mean": 20.0})
    progress.lzkernel_after_collect(run=run, metrics={})
    err = capsys.readouterr().err
    progress.lzkernel_run_end(run=run, error=None)
    assert "| 0:00:30, 25% of the budget, ~0:01:30 to go" in err.splitlines()[-1]


def test_a_log_file_gets_a_line_per_gap_not_one_per_evaluation(capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a terminal (capsys): evaluations every second do not force lines; the next line after
    the gap carries the latest return; the gap grows with the run's time up to a minute."""
    clock = _Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    run = _run()
    progress.lzkernel_run_start(run=run)
    capsys.readouterr()
    for i in range(9):
        clock.now += 1.0
        run.train_iter, run.wall_time = 10 * (i + 1), 1.0 + i
        progress.lzkernel_after_eval(run=run, metrics={"eval/return_mean": float(i)})
        progress.lzkernel_after_collect(run=run, metrics={})
    assert capsys.readouterr().err == ""  # 9 s: within the first 10 s gap
    clock.now += 1.5
    progress.lzkernel_after_train(run=run, metrics={})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "iter 90" in lines[0] and "eval 8.0 (best 8.0)" in lines[0]
    assert progress.log_gap(5.0) == 10.0 and progress.log_gap(300.0) == 30.0 and progress.log_gap(86_400.0) == 60.0
    run.wall_time = 3600.0
    clock.now += 30.0  # half the gap an hour in
    progress.lzkernel_after_collect(run=run, metrics={})
    assert capsys.readouterr().err == ""
    progress.lzkernel_run_end(run=run, error=None)
    assert len(capsys.readouterr().err.splitlines()) == 1  # the last line, always


def test_a_terminal_is_redrawn_at_every_evaluation(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    run = _run()
    progress.lzkernel_run_start(run=run)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    capsys.readouterr()
    progress.lzkernel_after_eval(run=run, metrics={"eval/return_mean": 3.0})
    err = capsys.readouterr().err
    progress.lzkernel_run_end(run=run, error=None)
    assert err.startswith("\r\x1b[K[lzkernel]") and "eval 3.0" in err and "\n" not in err


def test_a_resumed_run_says_so_and_shows_its_earlier_evaluations(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "ckpt" / "step_000000000020"
    ckpt.mkdir(parents=True)
    (ckpt / "meta.json").write_text(json.dumps({"train_iter": 20, "env_steps": 200, "wall_time": 2.0}))
    records = [{"event": "eval", "train_iter": 10, "env_steps": 100, "wall_time": 1.0, "eval/return_mean": 50.0},
               {"event": "eval", "train_iter": 20, "env_steps": 200, "wall_time": 2.0, "eval/return_mean": 30.0},
               {"event": "eval", "train_iter": 30, "env_steps": 300, "wall_time": 3.0, "eval/return_mean": 90.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run = _run(resume_path=ckpt, dir=tmp_path)
    progress.lzkernel_run_start(run=run)
    err = capsys.readouterr().err
    progress.lzkernel_run_end(run=run, error=None)
    # the evaluation at 30 followed the checkpoint: the resumed run plays it again
    assert "resuming from step_000000000020" in err and "eval 30.0 (best 50.0)" in err
    assert "iter 0" not in err and "env 0" not in err  # not read as a fresh start
