"""Exact resume of the real trainers (issue 15 item 3, RELIABILITY.md A8): on CPU with one thread,
2K iterations straight and K + ``--resume auto`` + K in a new process end with bit-identical
checkpoints (model and target parameters, optimizer moments, learner counters, replay buffer
contents and priorities, cutter tails, the collector's running episodes, every RNG state,
counters) and bit-identical metric records (the evaluations after the resume included).

K falls inside an epoch (10 updates per collect for the episode configs), so the resumed run
also has to finish the interrupted epoch. The runs load numba's fast-math search kernels from
its cache, never compile them in process (``lzk_common.numba_cache.ensure_cached``: a cold
cache is filled by a subprocess first), so a cold cache cannot make the first run differ.

The default run covers ReZero (episode collector, whole-buffer reanalysis; K + resume + K),
AlphaZero against a bot (versus collector and evaluator; K + resume + K) and UniZero (segment
collector: unfinished pieces, cutter tails, per-env histories; resumed from the periodic
checkpoint at K of the 2K run, as after a crash); the other combinations, MuZero,
EfficientZero and a SIGTERM at a random point are ``slow``.
"""
from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import resume_helpers as rh
from fault_helpers import REPO, fault_env, popen, read_metrics, wait_for

K = 15


def _assert_exact(straight: Path, split: Path, step: int, resumed_at: int | None = None) -> None:
    diffs = rh.differences(straight, split, step, resumed_at)
    assert not diffs, f"{len(diffs)} differences, first ones:\n" + "\n".join(diffs[:25])
    records = rh.metrics(split)
    assert any(r["event"] == "eval" and r["train_iter"] > step // 2 for r in records)  # evaluated after the resume
    assert any(r["event"] == "train" and r["train_iter"] > step // 2 for r in records)


def _episode_state_saved(split: Path, step: int) -> None:
    """The resume point's checkpoint holds the collector's running episodes."""
    ckpt = rh.checkpoint(split / f"ckpt/step_{step:012d}")
    assert ckpt["state/trainer/collector_episodes/player/started"] is True
    assert any(k.startswith("arrays/collector/player/env/") for k in ckpt)


def test_rezero_resumes_exactly(tmp_path: Path) -> None:
    extra = ("trainer.reanalyze_min_transitions=50",)
    straight, split = rh.straight_and_split("cartpole_rezero", tmp_path, K, *extra)
    _episode_state_saved(split, K)
    _assert_exact(straight, split, 2 * K)
    assert any("reanalyze/calls" in r for r in rh.metrics(split) if r["train_iter"] > K)


def test_resume_with_the_budget_spent_does_nothing_and_says_so(tmp_path: Path) -> None:
    """``--resume auto`` of a run that has reached its budget: one warning naming the budget and
    how to raise it; no update, no new metric record, checkpoint or TensorBoard file."""
    out = tmp_path / "run"
    rh.run("cartpole_rezero", out, "run.max_train_iters=5")
    metrics, steps = (out / "metrics.jsonl").read_bytes(), sorted(p.name for p in (out / "ckpt").iterdir())
    events = sorted(p.name for p in (out / "tb").iterdir())
    proc = rh.run("cartpole_rezero", out, "run.max_train_iters=5", resume=True)
    assert "nothing to do: train_iter 5 has reached run.max_train_iters=5; raise it to continue" in proc.stderr
    assert (out / "metrics.jsonl").read_bytes() == metrics
    assert sorted(p.name for p in (out / "ckpt").iterdir()) == steps
    assert sorted(p.name for p in (out / "tb").iterdir()) == events


def test_alphazero_against_a_bot_resumes_exactly(tmp_path: Path) -> None:
    """AlphaZero on tic-tac-toe with the versus collector (games against the random bot) and the
    versus evaluator: the bots' moves after the resume are the uninterrupted run's."""
    straight, split = rh.straight_and_split("tictactoe_alphazero_versus", tmp_path, K)
    _episode_state_saved(split, K)
    _assert_exact(straight, split, 2 * K)


def test_unizero_resumes_exactly_from_a_periodic_checkpoint(tmp_path: Path) -> None:
    """The periodic checkpoint at K of a 2K run, resumed in another directory, continues as the
    run did (the resume after a crash: the checkpoint was taken before the decisions that follow
    update K; saving changes nothing either)."""
    straight, resumed = rh.straight_and_resumed("cartpole_unizero", tmp_path, K)
    ckpt = rh.checkpoint(straight / f"ckpt/step_{K:012d}")
    assert any(k.startswith("arrays/collector/player/piece/") for k in ckpt)  # unfinished pieces
    assert any(k.startswith("arrays/buffer/cutter/") for k in ckpt)  # tails waiting for padding
    assert any(k.startswith("state/trainer/policy/env_history/") for k in ckpt)
    _assert_exact(straight, resumed, 2 * K, resumed_at=K)


@pytest.mark.slow
def test_unizero_resumes_exactly_after_stopping_at_k(tmp_path: Path) -> None:
    straight, split = rh.straight_and_split("cartpole_unizero", tmp_path, K)
    _assert_exact(straight, split, 2 * K)


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["cartpole_muzero", "cartpole_efficientzero"])
def test_muzero_and_efficientzero_resume_exactly(stem: str, tmp_path: Path) -> None:
    straight, split = rh.straight_and_split(stem, tmp_path, K)
    _episode_state_saved(split, K)
    _assert_exact(straight, split, 2 * K)


@pytest.mark.slow
def test_rezero_stopped_by_sigterm_anywhere_resumes_exactly(tmp_path: Path) -> None:
    """SIGTERM lands wherever the run is (collect, search, learn, evaluation); the run saves at
    the next boundary, and the resume continues from there as if never stopped."""
    total, extra = 60, ("trainer.reanalyze_min_transitions=50",)
    straight, split = tmp_path / "straight", tmp_path / "split"
    rh.run("cartpole_rezero", straight, f"run.max_train_iters={total}", *extra)
    args = ["run", REPO / "configs" / "cartpole_rezero.yaml", f"run.out_dir={split}", *rh.COMMON,
            *rh.TINY["cartpole_rezero"], f"run.max_train_iters={total}", *extra]
    proc = popen(args, REPO, fault_env())
    try:
        wait_for(lambda: (split / "metrics.jsonl").is_file() and any(
            r["train_iter"] >= 23 for r in read_metrics(split)), 120, "iteration 23", proc)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    stopped = max(int(p.name.split("_")[1]) for p in (split / "ckpt").glob("step_*"))
    assert stopped < total
    rh.run("cartpole_rezero", split, f"run.max_train_iters={total}", *extra, resume=True)
    _assert_exact(straight, split, total)
