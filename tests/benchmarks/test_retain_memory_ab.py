"""``benchmarks/retain_memory_ab.py``: both sides run the same seeded run and report the learner's
time per update and the run process's page faults."""
from __future__ import annotations

from pathlib import Path

import retain_memory_ab

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "cartpole_muzero.yaml")


def test_one_run_each_way_reports_positive_figures() -> None:
    off = retain_memory_ab.run_once(CONFIG, iters=2, retain=False)
    on = retain_memory_ab.run_once(CONFIG, iters=2, retain=True)
    for row in (off, on):
        assert row["wall_s"] > 0 and row["learn_ms_per_update"] > 0 and row["faults_per_update"] > 0
