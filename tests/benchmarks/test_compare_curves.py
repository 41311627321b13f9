"""benchmarks/compare_curves.py pairs LightZero's TensorBoard scalars with our metrics.jsonl and
samples both at the same train iterations."""
from __future__ import annotations

import json
from pathlib import Path

import compare_curves
from lzk_sinks.tensorboard import EventFile


def _lightzero_dir(root: Path) -> Path:
    serial = root / "rezero_cartpole_seed0" / "log" / "serial"
    writer = EventFile(serial)
    for it, ent in ((0, 0.75), (100, 0.5), (200, 0.25)):  # exact in float32
        writer.scalar("learner_iter/policy_entropy_avg", ent, it)
        writer.scalar("learner_iter/target_value_avg", it / 10, it)
    writer.scalar("evaluator_iter/eval_episode_return_mean", 20.0, 0)
    writer.scalar("evaluator_iter/eval_episode_return_mean", 150.0, 200)
    writer.close()
    return root


def _our_run(run: Path) -> Path:
    run.mkdir()
    records = [
        {"event": "train", "train_iter": 100, "env_steps": 400, "wall_time": 1.0, "train/policy_entropy": 0.65},
        {"event": "eval", "train_iter": 100, "env_steps": 400, "wall_time": 1.1, "eval/return_mean": 90.0},
        {"event": "train", "train_iter": 200, "env_steps": 800, "wall_time": 2.0, "train/policy_entropy": 0.5},
        {"event": "train", "train_iter": 300, "env_steps": 1200, "wall_time": 3.0, "train/policy_entropy": 0.3},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


def _row(result: dict, label: str) -> dict:
    return next(r for r in result["rows"] if r["label"] == label)


def test_both_sides_sampled_at_the_same_iterations(tmp_path: Path) -> None:
    lz = compare_curves.lightzero_series(_lightzero_dir(tmp_path / "lz"))
    ours = compare_curves.ours_series(_our_run(tmp_path / "ours"))
    result = compare_curves.compare(lz, ours, every=100)
    assert result["iterations"] == [100, 200, 300]
    assert _row(result, "policy entropy")["lightzero"] == [0.5, 0.25, None]  # LightZero's run ended at 200
    assert _row(result, "policy entropy")["ours"] == [0.65, 0.5, 0.3]
    # the last value at or before the iteration: LightZero's eval of iteration 0 stands at 100
    assert _row(result, "eval return")["lightzero"] == [20.0, 150.0, None]
    assert _row(result, "eval return")["ours"] == [90.0, 90.0, 90.0]
    assert _row(result, "env steps")["ours"] == [400.0, 800.0, 1200.0]
    assert _row(result, "target value")["lightzero"] == [10.0, 20.0, None]
    assert _row(result, "grad norm")["ours"] == [None, None, None]  # logged by neither


def test_cli_prints_and_writes_json(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cmp.json"
    rc = compare_curves.main(["--lightzero", str(_lightzero_dir(tmp_path / "lz")),
                              "--ours", str(_our_run(tmp_path / "ours")), "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "policy entropy" in text and "LightZero" in text and "lzkernel" in text
    assert json.loads(out.read_text())["iterations"] == [100, 200, 300]
