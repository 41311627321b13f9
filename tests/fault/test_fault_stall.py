"""RELIABILITY R4 in one process: no silent hang. A run whose env hangs in ``step`` ends after
``run.stall_timeout_s`` with exit code 1 and one line naming where it is stuck
(:mod:`lzkernel.watchdog`); progress keeps the deadline away."""
from __future__ import annotations

import io
import sys
import time
from pathlib import Path

from fault_helpers import CARTPOLE_REZERO, fault_env, lzk

from lzkernel.watchdog import STALL_EXIT_CODE, StallWatchdog, progressed


def _watch(timeout_s: float, beat_every: float | None, seconds: float) -> tuple[list[int], str]:
    exits: list[int] = []
    err, old = io.StringIO(), sys.stderr
    sys.stderr = err
    dog = StallWatchdog(timeout_s, exit=exits.append).start()
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not exits:
            if beat_every is not None:
                progressed()
            time.sleep(beat_every or 0.01)
    finally:
        dog.stop()
        sys.stderr = old
    return exits, err.getvalue()


def test_no_progress_ends_the_process_naming_where_the_main_thread_is() -> None:
    exits, err = _watch(0.3, None, seconds=3.0)
    assert exits == [STALL_EXIT_CODE]
    line = err.splitlines()[0]
    assert line.startswith("lzkernel: error: no progress for") and "run.stall_timeout_s = 0.3" in line
    assert "test_fault_stall.py:" in line and "in _watch" in line  # the main thread sleeps in _watch


def test_progress_keeps_the_deadline_away_and_zero_disables_it() -> None:
    assert _watch(0.3, 0.02, seconds=1.0) == ([], "")
    assert _watch(0.0, None, seconds=0.5) == ([], "")


def test_a_run_with_a_hung_env_ends_with_the_env_named(tmp_path: Path) -> None:
    """ReZero on CartPole whose env sleeps 600 s at its 40th step: the run ends 3 s later, exit 1."""
    t0 = time.monotonic()
    proc = lzk(["run", CARTPOLE_REZERO, f"run.out_dir={tmp_path / 'out'}", "env.id=lzk_fault_envs:HangCartPole-v0",
                "run.stall_timeout_s=3", "run.threads=1", "run.progress=false", "policy.num_simulations=4",
                "policy.batch_size=16", "policy.model.latent_dim=16", "collector.envs=2", "collector.n_episode=2",
                "evaluator.envs=2", "evaluator.episodes=2", "trainer.eval_at_start=false"],
               tmp_path, fault_env(LZK_HANG_RANK="0", LZK_HANG_AT="40"), timeout=120)
    assert proc.returncode == STALL_EXIT_CODE, proc.stderr[-3000:]
    assert time.monotonic() - t0 < 100
    line = next(x for x in proc.stderr.splitlines() if x.startswith("lzkernel: error: no progress"))
    assert "lzk_fault_envs.py:" in line and "in step" in line, line
