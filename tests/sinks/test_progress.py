"""The console progress line (lzk_sinks.progress)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from lzk_sinks import progress


def _run(**kw) -> SimpleNamespace:
    base = dict(is_main=True, cfg=SimpleNamespace(progress=True), wall_time=0.01, train_iter=0, env_steps=0,
                status_text="")
    base.update(kw)
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
    err = capsys.readouterr().err
    progress.lzkernel_run_end(run=run, error=None)
    assert "eval 39.1 (best 39.1)" in err and "starting" not in err


def test_no_line_when_progress_is_off(capsys: pytest.CaptureFixture[str]) -> None:
    progress.lzkernel_run_start(run=_run(cfg=SimpleNamespace(progress=False)))
    assert capsys.readouterr().err == ""
