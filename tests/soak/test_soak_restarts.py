"""RELIABILITY.md C5, leaks across restarts (soak): ten SIGTERM -> ``--resume auto`` cycles in one
process (:mod:`soak_cycles`), each stopped at a random moment 2-6 s after its start (collect,
search, learning, reanalysis or evaluation), each recreating its envs, model, buffer and sinks.

Pass: every cycle exits 143 (128 + SIGTERM) with status "stopped" and resumes from the checkpoint
the one before saved; the counters only grow; after the last cycle the process holds as many open
file descriptors, Python threads, OS threads and child processes as after the first, and its
resident set grew less than 5% from the second cycle to the last (the replay buffer, 2,000
transitions, is full from the second cycle on, so its growth is not counted as a leak).

Envs are recreated by every cycle; the run itself never recreates a failed env (no
``env.max_restarts``: docs/architecture.md, "An env that raises"), so C5's "100 env recreations"
are the cycles' own. ``python -m pytest -m soak tests/soak``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "fault"))
from fault_helpers import fault_env  # noqa: E402

pytestmark = pytest.mark.soak

CYCLES = 10
_COMMON = ["run.max_train_iters=1000000", "buffer.capacity=2000", "policy.batch_size=32", "policy.num_simulations=8",
           "evaluator.every_train_iters=20", "evaluator.episodes=2", "evaluator.envs=2", "evaluator.stop_value=null",
           "run.checkpoint_every=40", "run.progress=false", "run.threads=1"]
CASES = {
    "rezero": ("cartpole_rezero.yaml", ["update_schedule.updates_per_collect=4",
                                        "trainer.reanalyze_min_transitions=300"]),
    "unizero": ("cartpole_unizero.yaml", ["update_schedule.ratio=0.02"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_c5_no_leak_across_signal_resume_cycles(tmp_path: Path, case: str) -> None:
    config, overrides = CASES[case]
    cmd = [sys.executable, str(HERE / "soak_cycles.py"), str(CYCLES), str(REPO / "configs" / config),
           f"run.out_dir={tmp_path / 'run'}", *_COMMON, *overrides]
    proc = subprocess.run(cmd, env=fault_env(HERE, LZK_SOAK_SIGTERM_AFTER_S="2,6"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    (tmp_path / "cycles.json").write_text(json.dumps(rows, indent=1))
    assert len(rows) == CYCLES
    for i, row in enumerate(rows):
        assert row["rc"] == 143 and row["status"] == "stopped", row
        assert row["last_checkpoint"] is not None, row
        if i:
            assert row["resumed_from"] == rows[i - 1]["last_checkpoint"], (rows[i - 1], row)
            assert row["train_iter"] > rows[i - 1]["train_iter"], (rows[i - 1], row)
            assert row["env_steps"] > rows[i - 1]["env_steps"], (rows[i - 1], row)
    first, last = rows[0], rows[-1]
    for key in ("fds", "py_threads", "os_threads", "children"):
        assert last[key] == first[key], (key, [r[key] for r in rows])
    assert last["rss_mb"] < 1.05 * rows[1]["rss_mb"], [round(r["rss_mb"]) for r in rows]
