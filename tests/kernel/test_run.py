"""`lzkernel run` end to end with the demo trainer of the separate distribution lzkernel-demo:
dispatch, run directory, metrics, TensorBoard, checkpoints, resume, SIGTERM and seeding."""
from __future__ import annotations

import logging

import json
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from lzkernel.cli import main

from ._util import (TIMEOUT, assert_config_error, assert_no_traceback, clean_env, demo_config, lzk, read_metrics,
                    read_tb_scalars, without_wall_time)

LR = 3e-2  # given as the override trainer.lr=3e-2 (PyYAML reads it as the string '3e-2')


def _param_after(steps: int, lr: float = LR, start: float = 0.0, target: float = 3.0) -> float:
    """The demo trainer's parameter after ``steps`` gradient steps on (p - target)^2."""
    p = start
    for _ in range(steps):
        p -= lr * 2 * (p - target)
    return p


@pytest.fixture(scope="module")
def demo_run(plugin_site: SimpleNamespace, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """One `lzkernel run` of demo_counter in a subprocess: 20 iterations, a checkpoint every 5."""
    tmp = tmp_path_factory.mktemp("demo_run")
    out = tmp / "out"
    cfg = demo_config(tmp / "demo.yaml", out, run={"seed": 3, "log_every": 2, "keep_last": 3},
                      trainer={"eval_every": 5})
    proc = lzk(["run", cfg, "trainer.lr=3e-2"], clean_env(plugin_site.demo), cwd=tmp)
    return SimpleNamespace(proc=proc, out=out, cfg=cfg, tmp=tmp, env=clean_env(plugin_site.demo))


def test_run_succeeds(demo_run: SimpleNamespace) -> None:
    assert demo_run.proc.returncode == 0, demo_run.proc.stderr
    assert_no_traceback(demo_run.proc)


def test_run_directory_files(demo_run: SimpleNamespace) -> None:
    out = demo_run.out
    for name in ("config.yaml", "overrides.txt", "command.txt", "versions.json", "metrics.jsonl", "seeds.json"):
        assert (out / name).is_file(), name
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["trainer"] == {"name": "demo_counter", "steps_per_iter": 10, "lr": LR, "target": 3.0,
                                   "eval_every": 5, "noise": 0.0, "sleep_s": 0.0}
    assert type(resolved["trainer"]["lr"]) is float
    assert resolved["run"]["seed"] == 3 and resolved["run"]["out_dir"] == str(out)
    assert resolved["run"]["max_env_steps"] == 100_000  # defaults are filled in
    assert resolved["comm"] == {"name": "local"}
    assert (out / "overrides.txt").read_text() == "trainer.lr=3e-2\n"
    command = (out / "command.txt").read_text()
    assert "-m lzkernel run" in command and str(demo_run.cfg) in command and "trainer.lr=3e-2" in command
    seeds = json.loads((out / "seeds.json").read_text())
    assert seeds["root"] == 3


def test_versions_json(demo_run: SimpleNamespace) -> None:
    import importlib.metadata as metadata

    versions = json.loads((demo_run.out / "versions.json").read_text())
    assert versions["python"] == platform.python_version()
    assert versions["torch"] == metadata.version("torch")
    assert versions["lzkernel"] == "0.1.0"
    assert versions["device"] == "cpu" and versions["world_size"] == 1
    plugins = versions["plugins"]
    assert plugins["demo"] == {"dist": "lzkernel-demo", "version": "0.3.1", "module": "lzkernel_demo.plugin"}
    assert {"comm", "jsonl", "tensorboard", "progress"} <= set(plugins)
    for name, info in plugins.items():
        assert info["dist"] and info["version"], name  # every loaded plugin with dist and version
    listed = json.loads(lzk(["plugins", "--json"], demo_run.env, cwd=demo_run.tmp).stdout)
    assert set(plugins) == {e["name"] for e in listed["plugins"]}


def test_metrics_jsonl(demo_run: SimpleNamespace) -> None:
    records = read_metrics(demo_run.out)
    for r in records:
        assert type(r["train_iter"]) is int and type(r["env_steps"]) is int
        assert isinstance(r["wall_time"], float) and r["wall_time"] >= 0
        assert r["env_steps"] == 10 * r["train_iter"]
        namespaced = [k for k in r if "/" in k]
        assert namespaced and all(k.startswith(r["event"] + "/") for k in namespaced), r
    by_event = {e: [r for r in records if r["event"] == e] for e in ("collect", "train", "eval")}
    assert [r["train_iter"] for r in by_event["collect"]] == list(range(1, 21))
    assert [r["train_iter"] for r in by_event["train"]] == list(range(2, 21, 2))  # log_every: 2
    assert [r["train_iter"] for r in by_event["eval"]] == [5, 10, 15, 20]  # eval_every: 5
    assert len(records) == 20 + 10 + 4
    assert all("eval/return_mean" in r and "eval/episodes" in r for r in by_event["eval"])
    # the override reached the trainer as the float 0.03: the parameter follows p -= 2 lr (p - 3)
    for r in by_event["train"]:
        assert r["train/param"] == pytest.approx(_param_after(r["train_iter"]), rel=1e-5)
    returns = [r["eval/return_mean"] for r in by_event["eval"]]
    assert returns == sorted(returns)  # the loss goes down
    wall = [r["wall_time"] for r in records]
    assert wall == sorted(wall)


def test_tensorboard_events(demo_run: SimpleNamespace) -> None:
    tb = demo_run.out / "tb"
    files = list(tb.glob("events.out.tfevents.*"))
    assert len(files) == 1 and files[0].stat().st_size > 0
    scalars = read_tb_scalars(tb)
    evals = [r for r in read_metrics(demo_run.out) if r["event"] == "eval"]
    assert [s for s, _ in scalars["eval/return_mean"]] == [r["env_steps"] for r in evals]  # x: env steps
    assert [s for s, _ in scalars["by_iter/eval/return_mean"]] == [5, 10, 15, 20]  # x: train iterations
    assert [v for _, v in scalars["eval/return_mean"]] == pytest.approx([r["eval/return_mean"] for r in evals])
    assert len(scalars["by_iter/train/loss"]) == 10 and len(scalars["collect/env_steps"]) == 20


def test_checkpoints_of_the_run(demo_run: SimpleNamespace) -> None:
    from lzkernel.checkpoint import CheckpointStore, load

    root = demo_run.out / "ckpt"
    assert sorted(p.name for p in root.iterdir()) == [f"step_{s:012d}" for s in (10, 15, 20)]  # keep_last 3
    latest = CheckpointStore(root).latest()
    assert latest == root / "step_000000000020"
    state, arrays, meta = load(latest)
    assert state["counters"] == {"train_iter": 20, "env_steps": 200}
    assert float(state["trainer"]["param"]) == pytest.approx(_param_after(20), rel=1e-5)
    assert set(state["rng"]) == {"python", "numpy", "torch"}
    assert meta["trainer"] == "demo_counter" and meta["versions"]["plugins"]["demo"]["version"] == "0.3.1"
    for step_dir in root.iterdir():  # the resolved config is inside each checkpoint
        assert (step_dir / "config.yaml").read_text() == (demo_run.out / "config.yaml").read_text()


def test_resume_auto_in_a_new_process(demo_run: SimpleNamespace, tmp_path: Path) -> None:
    out = tmp_path / "copy"
    shutil.copytree(demo_run.out, out)
    before = read_metrics(out)
    proc = lzk(["run", demo_run.cfg, "trainer.lr=3e-2", f"run.out_dir={out}", "run.max_train_iters=30",
                "--resume", "auto"], demo_run.env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "resumed from" in proc.stderr and "step_000000000020" in proc.stderr
    records = read_metrics(out, resumes=True)
    assert records[:len(before)] == before  # appended to
    resume, new = records[len(before)], records[len(before) + 1:]
    assert resume["event"] == "resume" and resume["checkpoint"].endswith("step_000000000020")
    assert (resume["train_iter"], resume["env_steps"]) == (20, 200)
    assert new[0]["train_iter"] == 21 and new[0]["env_steps"] == 210  # counters continue
    assert [r["train_iter"] for r in new if r["event"] == "collect"] == list(range(21, 31))
    for r in (r for r in new if r["event"] == "train"):  # the parameter continues
        assert r["train/param"] == pytest.approx(_param_after(r["train_iter"]), rel=1e-5)
    from lzkernel.checkpoint import CheckpointStore, load

    state, _, _ = load(CheckpointStore(out / "ckpt").latest())
    assert state["counters"] == {"train_iter": 30, "env_steps": 300}
    # Provenance: the first invocation's overrides stay, each invocation's command line is kept.
    assert (out / "overrides.txt").read_text() == "trainer.lr=3e-2\n"
    commands = (out / "command.txt").read_text().splitlines()
    assert len(commands) == 2 and "--resume auto" not in commands[0] and "--resume auto" in commands[1]


# ---------------------------------------------------------------------------------------------
# In-process runs (faster): restarts, exact resume, seeding
# ---------------------------------------------------------------------------------------------


def _run(cfg: Path, *args: str) -> int:
    return main(["run", str(cfg), *args])


def test_rerun_into_a_directory_with_checkpoints_is_refused(demo_path: SimpleNamespace, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out, run={"max_train_iters": 5})
    assert _run(cfg) == 0
    before = (out / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert _run(cfg) == 2
    assert "already holds checkpoints; resume it with --resume auto" in capsys.readouterr().err
    assert (out / "metrics.jsonl").read_text() == before


def test_resume_auto_without_checkpoint_starts_fresh(demo_path: SimpleNamespace, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out, run={"max_train_iters": 3})
    with caplog.at_level("INFO", logger="lzkernel"):
        assert _run(cfg, "--resume", "auto") == 0
    assert any("no checkpoint" in r.getMessage() and "starting fresh" in r.getMessage() for r in caplog.records)
    assert read_metrics(out)[0]["train_iter"] == 1


def test_resume_from_an_explicit_older_checkpoint(demo_path: SimpleNamespace, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out, run={"max_train_iters": 10, "keep_last": 5})
    assert _run(cfg) == 0
    out2 = tmp_path / "out2"
    assert _run(cfg, f"run.out_dir={out2}", "--resume", str(out / "ckpt" / "step_000000000005")) == 0
    records = read_metrics(out2)
    assert records[0]["train_iter"] == 6
    assert without_wall_time(records) == without_wall_time([r for r in read_metrics(out) if r["train_iter"] > 5])


def test_rewinding_a_run_sets_its_later_checkpoints_aside(demo_path: SimpleNamespace, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Train to 20 (checkpoints 10, 15, 20), rewind into the same run dir from step 10 up to 12:
    steps 15 and 20 belong to the abandoned history and are moved aside (not deleted), so a
    later --resume auto continues the new history from 12, and the rotation keeps 12."""
    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out, run={"keep_last": 3})
    assert _run(cfg) == 0
    ckpt = out / "ckpt"
    assert sorted(p.name for p in ckpt.glob("step_*")) == [f"step_{s:012d}" for s in (10, 15, 20)]
    with caplog.at_level(logging.WARNING):
        assert _run(cfg, "run.max_train_iters=12", "--resume", str(ckpt / "step_000000000010")) == 0
    assert "were moved into" in caplog.text
    assert sorted(p.name for p in ckpt.glob("step_*")) == [f"step_{s:012d}" for s in (10, 12)]
    aside = list(ckpt.glob("abandoned-*"))
    assert len(aside) == 1 and sorted(p.name for p in aside[0].iterdir()) == [f"step_{s:012d}" for s in (15, 20)]
    before = len(read_metrics(out))
    assert _run(cfg, "run.max_train_iters=14", "--resume", "auto") == 0
    # Continued from 12 (from 20 the budget of 14 would have been spent: nothing logged).
    assert {r["train_iter"] for r in read_metrics(out)[before:]} == {13, 14}
    assert sorted(p.name for p in ckpt.glob("step_*")) == [f"step_{s:012d}" for s in (10, 12, 14)]


def test_a_resumed_clock_goes_on_and_plots_drop_the_abandoned_history(demo_path: SimpleNamespace,
                                                                       tmp_path: Path) -> None:
    """wall_time continues from the resumed checkpoint's (it restarted at 0 in every process), and
    after a rewind `lzkernel plot` reads the new history only, not the abandoned records after
    the rewound step (a line drawn back across the figure)."""
    from lzkernel import plot

    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out, run={"max_train_iters": 15, "keep_last": 5},
                      trainer={"sleep_s": 0.02})
    assert _run(cfg) == 0
    step10 = json.loads((out / "ckpt" / "step_000000000010" / "meta.json").read_text())["wall_time"]
    assert step10 >= 9 * 0.02  # the demo trainer sleeps after each save: nine sleeps precede step 10
    before = len(read_metrics(out))
    assert _run(cfg, "run.max_train_iters=12", "--resume", str(out / "ckpt" / "step_000000000010")) == 0
    resumed = read_metrics(out)[before:]
    assert resumed[0]["train_iter"] == 11 and resumed[0]["wall_time"] >= step10
    series = plot.load_series(out, "train/param")
    iters = [int(r) for r in series.x["env_steps"] // 10]
    assert iters == sorted(iters) and iters[-1] == 12 and max(iters) == 12  # 13-15 abandoned
    assert np.all(np.diff(series.x["wall_time"]) >= 0)


def test_resume_auto_skips_a_corrupt_latest(demo_path: SimpleNamespace, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out, run={"max_train_iters": 10})
    assert _run(cfg) == 0
    newest = out / "ckpt" / "step_000000000010"
    data = bytearray((newest / "state.pt").read_bytes())
    data[-30] ^= 0xFF
    (newest / "state.pt").write_bytes(bytes(data))
    with caplog.at_level("WARNING"):
        assert _run(cfg, "run.max_train_iters=12", "--resume", "auto") == 0
    assert any("skipping checkpoint" in r.getMessage() and newest.name in r.getMessage() for r in caplog.records)
    resumed = [r for r in read_metrics(out) if r["event"] == "collect"][10:]
    assert [r["train_iter"] for r in resumed] == [6, 7, 8, 9, 10, 11, 12]  # from step 5, the previous one


def test_resume_auto_with_only_corrupt_checkpoints_is_exit_2(demo_path: SimpleNamespace, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out, run={"max_train_iters": 5})
    assert _run(cfg) == 0
    (out / "ckpt" / "step_000000000005" / "manifest.json").unlink()
    capsys.readouterr()
    assert _run(cfg, "--resume", "auto") == 2
    err = capsys.readouterr().err
    assert "--resume auto: no checkpoint in" in err and "passes its integrity check" in err


def test_exact_resume_matches_an_uninterrupted_run(demo_path: SimpleNamespace, tmp_path: Path) -> None:
    """20 iterations straight == 10, then --resume auto for 10 more (torch RNG noise included)."""
    noisy = {"noise": 0.1, "lr": 0.05}
    straight = demo_config(tmp_path / "a.yaml", tmp_path / "a", run={"seed": 11}, trainer=noisy)
    assert _run(straight) == 0
    split = demo_config(tmp_path / "b.yaml", tmp_path / "b", run={"seed": 11, "max_train_iters": 10}, trainer=noisy)
    assert _run(split) == 0
    assert _run(split, "run.max_train_iters=20", "--resume", "auto") == 0
    a, b = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert len(a) == len(b) > 40
    assert without_wall_time(a) == without_wall_time(b)  # bit for bit, including the noise
    from lzkernel.checkpoint import load

    sa, _, _ = load(tmp_path / "a" / "ckpt" / "step_000000000020")
    sb, _, _ = load(tmp_path / "b" / "ckpt" / "step_000000000020")
    assert sa["trainer"]["param"].tolist() == sb["trainer"]["param"].tolist()
    assert sa["counters"] == sb["counters"] == {"train_iter": 20, "env_steps": 200}


def test_same_seed_same_metrics(demo_path: SimpleNamespace, tmp_path: Path) -> None:
    runs = {}
    for label, seed in (("a", 5), ("b", 5), ("c", 6)):
        cfg = demo_config(tmp_path / f"{label}.yaml", tmp_path / label, run={"seed": seed}, trainer={"noise": 0.1})
        assert _run(cfg) == 0
        runs[label] = without_wall_time(read_metrics(tmp_path / label))
        seeds = json.loads((tmp_path / label / "seeds.json").read_text())
        assert seeds["root"] == seed
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]  # the seed matters (the check above can fail)


# ---------------------------------------------------------------------------------------------
# SIGTERM: save at the next safe boundary, exit 128 + 15
# ---------------------------------------------------------------------------------------------


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        if path.is_file() and len(path.read_text().splitlines()) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"run ended early: rc={proc.returncode}\n{proc.communicate()[1]}")
        time.sleep(0.05)
    pytest.fail(f"{path} did not reach {n} lines in time")


def test_sigterm_leaves_a_loadable_checkpoint(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    from lzkernel.checkpoint import CheckpointStore, load

    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out, run={"max_train_iters": 10**6, "checkpoint_every": 1000},
                      trainer={"sleep_s": 0.01})
    proc = subprocess.Popen([sys.executable, "-m", "lzkernel", "run", str(cfg)], env=clean_env(plugin_site.demo),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_lines(out / "metrics.jsonl", 20, proc, time.monotonic() + TIMEOUT)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert time.monotonic() - sent < 20
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "received SIGTERM" in err and "Traceback" not in err
    latest = CheckpointStore(out / "ckpt").latest()
    assert latest is not None
    # The last line says where it stopped and the command that continues it.
    assert err.splitlines()[-1] == (f"lzkernel: stopped at train_iter {int(latest.name.split('_')[1])}, saved in "
                                    f"{latest}; continue with: lzkernel run {cfg} --resume auto")
    state, _, _ = load(latest)
    last = read_metrics(out)[-1]
    assert state["counters"]["train_iter"] == last["train_iter"] >= 10  # the last completed iteration
    assert state["counters"]["train_iter"] < 10**6
    train = [r for r in read_metrics(out) if r["event"] == "train"]
    assert float(state["trainer"]["param"]) == pytest.approx(train[-1]["train/param"], rel=1e-6)
    assert (out / "seeds.json").is_file()  # the run closed normally
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["exit_code"] == 128 + signal.SIGTERM
    assert summary["last_checkpoint"] == str(latest) and summary["train_iter"] == state["counters"]["train_iter"]


def test_unknown_trainer_after_blocking_in_run_is_exit_2(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    """`--disable-plugin-autoload` keeps the demo trainer out, named in the error."""
    cfg = demo_config(tmp_path / "demo.yaml", tmp_path / "out")
    proc = lzk(["run", cfg, "--disable-plugin-autoload", "-p", "comm"], clean_env(plugin_site.demo), cwd=tmp_path)
    assert_config_error(proc, "unknown trainer 'demo_counter'; available: (none registered)")
