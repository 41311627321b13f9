"""Done-when 1: the update schedule and the stop decisions under the in-process ``threads``
backend with 4 ranks that collect different numbers of transitions.

Each rank runs the real kernel path (RunContext → comm → ReZero trainer on the loop skeleton →
replay_ratio schedule) in its own thread; only env/policy/buffer/collector/evaluator are fakes
(``lzk_fakes``). The fake policy averages real gradients each update, so any disagreement on
the number of updates would make ranks call different collectives, which the threads backend
turns into an immediate error instead of a hang.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from lzk_comm.threads import RankFailed, run_ranks
from lzkernel.config.loader import load_config
from lzkernel.pluginmanager import Kernel
from lzkernel.run import RunContext

W = 4


def _config(tmp_path: Path, **sections: dict[str, Any]) -> Path:
    tree: dict[str, Any] = {
        "run": {"seed": 3, "out_dir": str(tmp_path / "run"), "max_env_steps": 10**6, "max_train_iters": 10**6,
                "checkpoint_every": 0, "log_every": 2, "progress": False, "threads": 1},
        "trainer": {"name": "rezero", "buffer_reanalyze_freq": 1.0, "reanalyze_min_transitions": 12,
                    "eval_at_start": True},
        "env": {"name": "fake"},
        "policy": {"name": "fake", "batch_size": 8},
        "buffer": {"name": "fake"},
        "collector": {"name": "fake", "base": 5, "extra": 4},
        "evaluator": {"name": "fake", "every_train_iters": 4},
        "update_schedule": {"name": "replay_ratio", "ratio": 0.1, "min_updates": 1},
        "comm": {"name": "threads"},
    }
    for role, values in sections.items():
        tree[role].update(values)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _train(tmp_path: Path, overrides: list[str] = (), timeout_s: float = 20, resume: str | None = None,
           catch: type[BaseException] | None = None, **sections: dict[str, Any]) -> list[dict]:
    """Every rank's results (below), or ``{"error": message}`` from a rank that raised ``catch``."""
    kernel = Kernel(["lzk_fakes"])
    kernel.raise_on_errors()
    config = load_config(_config(tmp_path, **sections), list(overrides), kernel.registry)

    def rank_main(comm: Any) -> dict[str, Any]:
        run = RunContext(kernel, config, argv=["test"], resume=resume)
        with run:
            assert run.comm is comm and run.rank == comm.rank and run.world_size == W
            trainer = run.build("trainer")
            try:
                trainer.train()
            except catch or () as exc:
                return {"error": f"{type(exc).__name__}: {exc}"}
        p = trainer.policy
        return {
            "train_iter": run.train_iter, "env_steps": run.env_steps, "epoch": trainer.epoch,
            "learn_calls": p.learn_calls, "reanalyses": trainer.buffer.reanalyses,
            "collected": trainer.collector.total, "buffer": trainer.buffer.num_transitions,
            "stop_requested": run.stop_requested, "stop_kind": run.stop_kind, "stop_reason": run.stop_reason,
            "run_dir": run.dir, "last_eval": trainer.last_eval,
            "evaluator": trainer.evaluator, "progress": trainer._progress,
            "params": [t.detach().clone() for t in p.model.parameters()],
            "buffers": [t.detach().clone() for t in p.model.buffers()],
            "target": [t.detach().clone() for t in p.target_model.state_dict().values()],
            "comm_seconds": comm.seconds,
        }

    return run_ranks(W, rank_main, timeout_s=timeout_s)


def _agree(results: list[dict], *keys: str) -> None:
    for key in keys:
        values = [r[key] for r in results]
        assert len(set(values)) == 1, f"ranks disagree on {key}: {values}"


def _identical_weights(results: list[dict]) -> None:
    for key in ("params", "buffers", "target"):
        for r in results[1:]:
            assert all(torch.equal(a, b) for a, b in zip(results[0][key], r[key])), f"{key} differ across ranks"


def test_update_count_and_stop_after_eval_agree(tmp_path: Path) -> None:
    """Ranks collect 5/9/13/17 transitions per collect; rank 0's evaluation stops the run."""
    res = _train(tmp_path, evaluator={"stop_value": 10})
    assert [r["collected"] // (r["epoch"] or 1) for r in res] == [5, 9, 13, 17]  # local counts differ
    _agree(res, "train_iter", "env_steps", "epoch", "learn_calls", "reanalyses", "stop_kind")
    assert res[0]["stop_kind"] == "solved"
    # replay_ratio on the summed count: int(44 * 0.1) = 4 updates per epoch on every rank; the
    # first epoch trains nobody (rank 0 holds 5 <= batch_size 8 transitions although rank 3 is ready).
    assert res[0]["env_steps"] == 44 * res[0]["epoch"]
    assert res[0]["train_iter"] == 4 * (res[0]["epoch"] - 1)
    # Evaluations at 0, 4, 8, 12: the fake return reaches 10 at train_iter 12, decided on rank 0.
    assert res[0]["train_iter"] == 12 and res[0]["last_eval"] == 12.0
    assert all(r["last_eval"] is None for r in res[1:])  # only rank 0 evaluates
    # Reanalysis follows rank 0's buffer (> 12 transitions from its 3rd collect: epochs 2 and 3),
    # not each rank's own (rank 3 holds 17 from the start and would reanalyse in all 4 epochs).
    assert res[0]["epoch"] == 4 and res[0]["reanalyses"] == 2
    # Weights: rank-dependent initialisation was replaced by rank 0's; BN statistics averaged.
    _identical_weights(res)
    assert res[0]["run_dir"] == tmp_path / "run" and all(r["run_dir"] is None for r in res[1:])
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


def test_a_solved_run_resumed_is_solved_on_every_rank(tmp_path: Path) -> None:
    """Only rank 0 evaluates; its "solved" holds on every rank: when it ends the run, and when a
    resume finds it solved already (nothing to do), or no longer (a higher stop value: train on)."""
    res = _train(tmp_path, evaluator={"stop_value": 8})
    assert [r["stop_kind"] for r in res] == ["solved"] * W and res[0]["train_iter"] == 8
    assert len({r["stop_reason"] for r in res}) == 1
    again = _train(tmp_path, resume="auto", evaluator={"stop_value": 8})
    assert [(r["stop_kind"], r["train_iter"]) for r in again] == [("solved", 8)] * W
    more = _train(tmp_path, resume="auto", evaluator={"stop_value": 12})
    assert [(r["stop_kind"], r["train_iter"]) for r in more] == [("solved", 12)] * W


def test_stop_on_budget_agrees(tmp_path: Path) -> None:
    res = _train(tmp_path, ["run.max_env_steps=150"])
    _agree(res, "train_iter", "env_steps", "epoch", "learn_calls")
    assert res[0]["env_steps"] == 176 and res[0]["epoch"] == 4  # 44 per epoch: the first >= 150
    assert [r["stop_kind"] for r in res] == ["max_env_steps"] * W
    _identical_weights(res)


def test_a_signal_on_one_rank_stops_every_rank(tmp_path: Path) -> None:
    """SIGTERM seen by rank 2 only (after its 3rd collect): every rank leaves after that epoch."""
    res = _train(tmp_path, ["collector.signal_rank=2", "collector.signal_epoch=3"])
    _agree(res, "train_iter", "env_steps", "epoch", "learn_calls")
    assert res[0]["epoch"] == 3
    assert [r["stop_requested"] for r in res] == [False, False, True, False]
    # Each rank knows whose signal stopped it, as a kind (summary.json's status reads it, not the words).
    assert [r["stop_kind"] for r in res] == ["peer_signal", "peer_signal", "signal", "peer_signal"]
    assert [r["stop_reason"] for r in res] == ["stopped by another rank's signal"] * 2 + ["stopped by SIGTERM",
                                                                                      "stopped by another rank's signal"]


def test_one_rank_raising_releases_the_others(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(RankFailed, match=r"^rank 3: ValueError: fake learn failed on call 3") as info:
        _train(tmp_path, ["policy.fault_rank=3"], timeout_s=20)
    assert time.monotonic() - t0 < 10  # released at once, not after the 20 s deadline
    assert info.value.rank == 3 and isinstance(info.value.__cause__, ValueError)


def test_ranks_that_disagree_on_the_update_count_fail_at_once_naming_the_counts(tmp_path: Path) -> None:
    """RELIABILITY.md D5: a schedule that counts each rank's own transitions (5/9/13/17 × 0.25)
    gives rank 1 one update more than rank 0. The epoch's all-reduce (with "enough data") catches
    it before any update, on every rank, and names every rank's values; without it the ranks
    would reach different collectives in the second epoch."""
    from lzk_loop.ranks import RanksDiverged

    t0 = time.monotonic()
    res = _train(tmp_path, update_schedule={"name": "rank_local", "ratio": 0.25}, catch=RanksDiverged)
    assert time.monotonic() - t0 < 10  # at once, not after the 20 s collective deadline
    assert [r["error"] for r in res] == [  # every rank raised it itself
        "RanksDiverged: ranks disagree on the learner updates of this epoch, by rank: train_iter [0, 0, 0, 0], "
        "updates [1, 2, 3, 4] (update_schedule 'rank_local' must return the same count on every rank: sum a "
        "rank-local count over ranks first, as replay_ratio does)"] * W


def test_a_signal_during_an_evaluation_stops_every_rank_before_the_next_collect(tmp_path: Path) -> None:
    """Evaluations at 0 (eval_at_start), 4 and 8; the one at 8 receives the signal part-way and
    gives up (rank 0). Every rank stops there: no further collect or update, the evaluator's
    state as before that evaluation (8 is due again after a resume), and the epoch's decisions
    after its last update left untaken in the checkpointed progress."""
    res = _train(tmp_path, evaluator={"every_train_iters": 4, "signal_at": 3})
    _agree(res, "train_iter", "env_steps", "epoch", "learn_calls")
    ev = res[0]["evaluator"]
    assert ev.calls == 3 and ev.evaluated == [0, 4] and ev.last == 4 and res[0]["stop_requested"]
    assert res[0]["train_iter"] == 8 and res[0]["last_eval"] == 4.0
    assert [r["collected"] for r in res] == [3 * (5 + 4 * r) for r in range(W)]  # 3 collects, not 4
    assert res[0]["progress"] == (4, 4, False)


def test_eval_at_start_false_skips_the_evaluation_at_iteration_0(tmp_path: Path) -> None:
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    off = _train(tmp_path / "off", ["run.max_train_iters=12", "trainer.eval_at_start=false"])
    on = _train(tmp_path / "on", ["run.max_train_iters=12"])
    assert on[0]["evaluator"].evaluated == [0, 4, 8, 12]
    assert off[0]["evaluator"].evaluated == [4, 8, 12]
