"""``lzkernel plot`` of run directories: the metric against env steps, train iterations and wall
time, sparse series with their points marked, and a resumed run's abandoned records left out."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lzkernel import plot


def _run_dir(path: Path, records: list[dict], lr: float) -> Path:
    path.mkdir()
    (path / "config.yaml").write_text(f"run:\n  seed: 0\npolicy:\n  lr: {lr}\n", encoding="utf-8")
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _evals(its: list[int], wall0: float = 0.0) -> list[dict]:
    return [{"event": "eval", "train_iter": it, "env_steps": 7 * it, "wall_time": wall0 + it / 10,
             "eval/return_mean": float(it)} for it in its]


def test_three_axes_one_line_per_run_with_points_marked(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    a = _run_dir(tmp_path / "rezero", _evals([0, 50, 100]), 0.003)
    resume = {"event": "resume", "checkpoint": "ckpt/step_000000000100", "train_iter": 100, "env_steps": 700,
              "wall_time": 10.0}
    b = _run_dir(tmp_path / "unizero", _evals([0, 100, 200, 300]) + [resume] + _evals([200, 300], 0.5), 0.0001)
    fig = plot.plot_runs([a, b])
    assert [ax.get_xlabel() for ax in fig.axes] == ["env steps", "train iterations", "wall time (s)"]
    iters = fig.axes[1]
    assert [line.get_label() for line in iters.lines] == ["rezero", "unizero"]
    np.testing.assert_array_equal(iters.lines[0].get_xdata(), [0, 50, 100])
    np.testing.assert_array_equal(iters.lines[1].get_xdata(), [0, 100, 200, 300])  # 200 and 300 once
    np.testing.assert_array_equal(fig.axes[0].lines[1].get_xdata(), [0, 700, 1400, 2100])
    assert all(line.get_marker() == "o" for ax in fig.axes for line in ax.lines)
    out = plot.save(fig, tmp_path / "cmp.png")
    assert out.stat().st_size > 0


def test_a_long_series_is_a_plain_line(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = _run_dir(tmp_path / "long", _evals(list(range(plot.MARKERS_UP_TO + 1))), 0.003)
    fig = plot.plot_runs([run])
    assert fig.axes[0].lines[0].get_marker() in (None, "None", "")


def test_the_seeds_of_a_sweep_are_one_line_named_by_the_sweep(tmp_path: Path) -> None:
    """``lzkernel run --seeds`` writes <out_dir>/seed_<S>: plotted together they are one median
    line named by the sweep's directory; seeds of one config elsewhere keep the first one's name."""
    pytest.importorskip("matplotlib")
    (tmp_path / "sweep").mkdir()
    seeds = [_run_dir(tmp_path / "sweep" / f"seed_{s}", _evals([0, 50, 100]), 0.003) for s in (0, 1, 2)]
    fig = plot.plot_runs(seeds)
    assert [line.get_label() for line in fig.axes[1].lines] == ["sweep/seed_* (3 seeds: median, min–max)"]
    other = _run_dir(tmp_path / "elsewhere", _evals([0, 50, 100]), 0.003)
    fig = plot.plot_runs([other, seeds[0]])
    assert [line.get_label() for line in fig.axes[1].lines] == ["elsewhere … (2 seeds: median, min–max)"]


def test_several_metrics_are_rows_and_list_names_what_was_logged(tmp_path: Path) -> None:
    """``--metric`` repeated: one row of the three axes per metric, in the order given; ``--list``
    names every metric logged and in how many of the runs (no matplotlib needed)."""
    records = _evals([0, 50, 100]) + [{"event": "train", "train_iter": it, "env_steps": 7 * it, "wall_time": it / 10,
                                       "train/loss_value": 1.0 / (1 + it)} for it in (10, 20, 30)]
    a = _run_dir(tmp_path / "a", records, 0.003)
    b = _run_dir(tmp_path / "b", _evals([0, 50]), 0.001)
    assert plot.metric_names([a, b]) == {"eval/return_mean": 2, "train/loss_value": 1}
    pytest.importorskip("matplotlib")
    fig = plot.plot_runs([a], ["eval/return_mean", "train/loss_value"])
    assert len(fig.axes) == 6
    assert [ax.get_ylabel() for ax in fig.axes] == ["eval/return_mean"] * 3 + ["train/loss_value"] * 3
    np.testing.assert_array_equal(fig.axes[4].lines[0].get_xdata(), [10, 20, 30])  # loss against train iterations
    with pytest.raises(Exception, match="train/loss_valu"):
        plot.plot_runs([a, b], ["train/loss_value"])  # b logs no loss: the error names the metric


def test_plot_list_on_the_command_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    a = _run_dir(tmp_path / "a", _evals([0, 50]), 0.003)
    proc = subprocess.run([sys.executable, "-m", "lzkernel", "plot", "--list", str(a)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines() == ["eval/return_mean  (1 of 1 runs)"], proc.stderr
    assert not (tmp_path / "plot.png").exists()
    bad = subprocess.run([sys.executable, "-m", "lzkernel", "plot", "--list", "--metric", "x", str(a)], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "give run directories and no --metric" in bad.stderr, bad.stderr


def test_list_leaves_out_metrics_of_an_abandoned_history(tmp_path: Path) -> None:
    """A metric logged only after the checkpoint a resume went back to is not listed (plotting it
    would find nothing)."""
    gone = {"event": "train", "train_iter": 150, "env_steps": 1050, "wall_time": 15.0, "x/abandoned": 1.0}
    resume = {"event": "resume", "checkpoint": "ckpt/step_000000000100", "train_iter": 100, "env_steps": 700,
              "wall_time": 10.0}
    run = _run_dir(tmp_path / "r", _evals([0, 100]) + [gone, resume] + _evals([200], 0.0), 0.003)
    assert plot.metric_names([run]) == {"eval/return_mean": 1}
