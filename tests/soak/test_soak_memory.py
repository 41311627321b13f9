"""RELIABILITY.md C1, bounded replay memory (soak): a run of 20 x K env steps into a replay buffer
of capacity K = 5,000 transitions, sampled from inside the run by :mod:`lzk_soak_probe` every ten
collects, with ``tracemalloc`` on from 20% of the run: by 50% everything the run replaces from
time to time (the buffer's content, the search snapshots of the online and the target network,
workspaces grown to their high-water mark) was allocated under it, so the traced memory is what
the run holds, not what it happened to allocate since tracing began.

Pass: the buffer never holds more than K transitions and does fill; over the second half of the
run (the buffer full throughout) the resident set grows less than 5%, the memory tracemalloc
traces less than 5% + 1 MiB, no site among the ten largest grows by more than 1 MiB, and the open
file descriptors and threads stay as they were.

One run per replay family: MuZero's game buffer with ReZero's whole-buffer reanalysis and reuse
(``cartpole_rezero.yaml``), UniZero's segment buffer and its search's KV cache
(``cartpole_unizero.yaml``), AlphaZero's outcome buffer with OpenSpiel's simulator in the search
(``tictactoe_alphazero.yaml``). Learning is cut to a few small updates per collect (memory does not
depend on the update count, and the budget goes to env steps). Minutes each:
``python -m pytest -m soak tests/soak``.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "fault"))
from fault_helpers import fault_env  # noqa: E402

pytestmark = pytest.mark.soak

CAPACITY = 5_000
ENV_STEPS = 20 * CAPACITY
#: Small learning, rare evaluation and checkpoints: the budget goes to env steps.
_COMMON = [f"buffer.capacity={CAPACITY}", f"run.max_env_steps={ENV_STEPS}", "policy.batch_size=32",
           "policy.num_simulations=8", "evaluator.every_train_iters=1000000", "run.checkpoint_every=1000000",
           "run.progress=false", "run.threads=1"]
CASES = {
    "rezero": ("cartpole_rezero.yaml", ["update_schedule.updates_per_collect=2", "evaluator.stop_value=null",
                                        "trainer.reanalyze_min_transitions=1000"]),
    "unizero": ("cartpole_unizero.yaml", ["update_schedule.ratio=0.01", "evaluator.stop_value=null"]),
    "alphazero": ("tictactoe_alphazero.yaml", ["update_schedule.updates_per_collect=1"]),
}


def _probe(tmp_path: Path, config: str, overrides: list[str]) -> list[dict[str, Any]]:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "lzkernel", "run", str(REPO / "configs" / config), f"run.out_dir={out}",
           *_COMMON, *overrides, "-p", "lzk_soak_probe"]
    proc = subprocess.run(cmd, env=fault_env(HERE, LZK_SOAK_TRACE_FROM=str(int(0.2 * ENV_STEPS)), LZK_SOAK_EVERY="10"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in (out / "soak_probe.jsonl").read_text(encoding="utf-8").splitlines()]


def _at(records: list[dict[str, Any]], fraction: float, key: str) -> float:
    """The median of ``key`` over the records within 5% of the run's env steps around ``fraction``."""
    lo, hi = (fraction - 0.05) * ENV_STEPS, (fraction + 0.05) * ENV_STEPS
    return statistics.median(r[key] for r in records if lo <= r["env_steps"] <= hi)


@pytest.mark.parametrize("case", sorted(CASES))
def test_c1_replay_memory_is_bounded(tmp_path: Path, case: str) -> None:
    records = _probe(tmp_path, *CASES[case])
    (tmp_path / "probe.json").write_text(json.dumps(records))  # kept for a failing run's post-mortem
    assert records[-1]["env_steps"] >= 0.95 * ENV_STEPS  # the probe samples every tenth collect
    assert max(r["buffer"] for r in records) <= CAPACITY
    half = [r for r in records if r["env_steps"] >= ENV_STEPS / 2]
    assert min(r["buffer"] for r in half) >= 0.9 * CAPACITY, "the buffer should be full in the second half"

    rss = _at(records, 0.5, "rss_mb"), _at(records, 0.95, "rss_mb")
    assert rss[1] < 1.05 * rss[0], rss
    traced = _at(records, 0.5, "traced_mb"), _at(records, 0.95, "traced_mb")
    assert traced[1] < 1.05 * traced[0] + 1.0, traced

    # The probe lists the 30 largest sites. A site of the last list that the first did not hold
    # was at most as large as the first list's smallest then: its growth is at least the difference.
    first = min(half, key=lambda r: r["env_steps"])["top"]
    start = {site: size for site, size in first}
    floor = first[-1][1]
    grown = {site: (start.get(site, floor), size) for site, size in records[-1]["top"][:10]
             if size - start.get(site, floor) > 2**20}
    assert not grown, f"allocation sites that grew by > 1 MiB over the second half: {grown}"

    assert {r["fds"] for r in half} == {half[0]["fds"]}, [r["fds"] for r in half]
    assert {r["threads"] for r in half} == {half[0]["threads"]}, [r["threads"] for r in half]
