"""Same seed, same result (issue 15 item 9): the README's algorithm with two torch threads gives
identical metrics in a run that compiles numba's kernels (cold cache) and in a later run that
loads them, while another process loads both cores."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fault_helpers import REPO, fault_env, lzk

_VOLATILE = ("time/", "sys/")
_VOLATILE_END = ("seconds", "_ms", "/ms", "steps_per_second", "network_share")


def _metrics(out: Path) -> list[dict]:
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "wall_time" and not k.startswith(_VOLATILE)
             and not k.endswith(_VOLATILE_END)} for r in recs]


@pytest.mark.slow  # compiles every numba kernel into an empty cache: about a minute on two cores
def test_a_fixed_seed_repeats_from_a_cold_numba_cache_and_under_load(tmp_path: Path) -> None:
    env = fault_env(NUMBA_CACHE_DIR=str(tmp_path / "numba_cache"), OMP_NUM_THREADS="2")
    args = ["run", REPO / "configs" / "cartpole_rezero_fast.yaml", "run.max_env_steps=900", "run.threads=2",
            "run.progress=false", "run.log_every=10", "update_schedule.updates_per_collect=10"]
    cold = lzk([*args, f"run.out_dir={tmp_path / 'cold'}"], REPO, env, timeout=300)
    assert cold.returncode == 0, cold.stderr[-2000:]
    hog = subprocess.Popen([sys.executable, "-c", "import itertools\nfor _ in itertools.count(): pass"])
    hog2 = subprocess.Popen([sys.executable, "-c", "import itertools\nfor _ in itertools.count(): pass"])
    try:
        warm = lzk([*args, f"run.out_dir={tmp_path / 'warm'}"], REPO, env, timeout=300)
    finally:
        hog.kill()
        hog2.kill()
    assert warm.returncode == 0, warm.stderr[-2000:]
    a, b = _metrics(tmp_path / "cold"), _metrics(tmp_path / "warm")
    assert any(r["event"] == "train" for r in a)
    assert a == b
