"""``lzkernel status RUN_DIR...`` (lzkernel.runinfo): a live run is "running" with its pid, a
stopped one says how it ended (summary.json), a killed one that it ended without a summary;
counters come from the summary, the metrics or the newest checkpoint, whichever is newest."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fault"))
from fault_helpers import assert_one_line_error, kill_9, loop_config, lzk, popen, read_metrics, wait_for  # noqa: E402

from lzkernel.runinfo import format_solved, format_status, read_history  # noqa: E402


def _status(tmp_path: Path, *dirs: Path) -> list[dict]:
    proc = lzk(["status", "--json", *dirs], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _last_iter(out: Path) -> int:
    """The last record's iteration (a line being written is skipped), -1 before the first."""
    last = read_history(out, lambda rec: False).last if (out / "metrics.jsonl").is_file() else None
    return -1 if last is None else int(last["train_iter"])


def test_running_then_stopped_then_killed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 10**6, "checkpoint_every": 0},
                      trainer={"sleep_s": 0.02})
    proc = popen(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path)
    try:
        wait_for(lambda: _last_iter(out) >= 20, 60, "20 iterations", proc)
        (st,) = _status(tmp_path, out)
        assert st["state"] == "running" and st["pid"] == proc.pid and st["train_iter"] >= 20
        assert st["max_train_iters"] == 10**6
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    (st,) = _status(tmp_path, out)
    last = read_metrics(out)[-1]["train_iter"]
    assert st["state"] == "stopped" and st["train_iter"] == last  # the summary's counters

    # A run killed with kill -9 leaves its lock file and no new summary: not "running".
    proc = popen(["run", cfg, "-p", "lzk_fault_plugin", "--resume", "auto"], tmp_path)
    try:
        wait_for(lambda: _last_iter(out) >= last + 5, 60, "5 more iterations", proc)
    finally:
        kill_9(proc)
    assert (out / ".lock").is_file()
    time.sleep(0.05)
    (st,) = _status(tmp_path, out)
    assert st["state"].startswith("ended without a summary") and st["train_iter"] > last


def test_finished_run_line_and_bad_directories(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 7, "checkpoint_every": 0, "log_every": 100})
    assert lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path).returncode == 0
    proc = lzk(["status", out], tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith(f"{out}: finished") and "| iter 7 |" in proc.stdout
    assert "| fault_loop, seed 0 | iter 7 |" in proc.stdout  # what ran (no policy, no env in this config)
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").write_text(json.dumps({**summary, "stop_kind": "max_train_iters"}))  # fault_loop sets none
    (st,) = _status(tmp_path, out)
    assert (st["stop_kind"], st["trainer"], st["policy"], st["env"], st["seed"]) == (
        "max_train_iters", "fault_loop", None, None, 0)
    (out / "summary.json").unlink()  # an lzkernel before summary.json: counters from the checkpoint
    (st,) = _status(tmp_path, out)
    assert st["state"].startswith("ended without a summary") and st["train_iter"] == 7
    # A bad directory among good ones: its error line, the others' lines, exit 2 at the end.
    proc = lzk(["status", tmp_path / "missing", out], tmp_path)
    assert proc.returncode == 2 and proc.stdout.startswith(f"{out}: ended without a summary"), proc.stderr
    assert proc.stderr.strip() == f"lzkernel: error: {tmp_path / 'missing'}: no such run directory"
    assert_one_line_error(lzk(["status", tmp_path], tmp_path), "no config.yaml")
    assert_one_line_error(lzk(["status", out / "config.yaml"], tmp_path), "config.yaml: not a run directory (a file)")
    assert_one_line_error(lzk(["config", out], tmp_path), f"a run directory: its config is {out / 'config.yaml'}")

    # Damaged files: a cut summary is no summary; bytes that are not UTF-8 and records that are
    # not objects are skipped.
    (out / "summary.json").write_text('{"status": "fin')
    with open(out / "metrics.jsonl", "ab") as f:
        f.write(b'[1, 2]\n{"event": "eval", "train_iter": 7, "env_steps": 70, "eval/return_mean": 3.5, "x": "\xff"}\n')
    (st,) = _status(tmp_path, out)
    assert st["state"].startswith("ended without a summary") and st["eval_last"] == 3.5


def test_a_run_that_holds_its_lock_but_wrote_no_run_file_yet_is_starting(tmp_path: Path) -> None:
    import socket

    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").write_text(f"{os.getpid()}\n{socket.gethostname()}\n{time.time():.3f}\n")
    (st,) = _status(tmp_path, out)
    assert st["state"] == "starting" and st["pid"] == os.getpid()
    assert format_status(st).startswith(f"{out}: starting (pid {os.getpid()}) | iter 0 |")


def test_the_line_of_a_running_run_estimates_the_time_left() -> None:
    st = {"run_dir": "runs/x", "state": "running", "pid": 42, "train_iter": 250, "env_steps": 20_000,
          "wall_time": 600.0, "eval_last": 187.25, "eval_best": 200.0, "max_train_iters": 1000,
          "max_env_steps": 100_000}
    assert format_status(st) == ("runs/x: running (pid 42) | iter 250 | env 20,000 | eval 187.2 (best 200.0) | "
                                 "0:10:00, 25% of the budget, ~0:30:00 to go")


def test_the_line_names_the_algorithm_env_and_seed() -> None:
    st = {"run_dir": "runs/x", "state": "finished", "stop_reason": "solved: eval 195.3 >= 195", "stop_kind": "solved",
          "train_iter": 1100, "env_steps": 10_901, "wall_time": 150.5, "eval_last": 195.3, "eval_best": 195.3,
          "max_train_iters": None, "max_env_steps": 100_000}
    rows = {("rezero", "muzero", "CartPole-v0", 3): "rezero/muzero on CartPole-v0, seed 3",
            ("muzero", "muzero", "CartPole-v0", 0): "muzero on CartPole-v0, seed 0",  # the same name once
            ("alphazero", "alphazero", "connect_four", None): "alphazero on connect_four",
            (None, None, None, 7): "seed 7"}
    for (trainer, policy, env, seed), label in rows.items():
        line = format_status({**st, "trainer": trainer, "policy": policy, "env": env, "seed": seed})
        assert line == f"runs/x: finished: solved: eval 195.3 >= 195 | {label} | iter 1,100 | env 10,901 | " \
                       "eval 195.3 (best 195.3) | 0:02:30", line
    # A board game's returns in [-1, 1] keep their places: 0.25 is not shown as 0.2.
    board = format_status({**st, "eval_last": 0.25, "eval_best": -0.125, "trainer": None, "policy": None, "env": None,
                           "seed": None})
    assert "eval 0.25 (best -0.125)" in board, board


def test_several_runs_get_a_line_saying_how_many_solved_and_how_fast() -> None:
    base = {"state": "finished", "stop_kind": "solved", "max_train_iters": None, "max_env_steps": None}
    runs = [{**base, "wall_time": 100.0, "train_iter": 800, "env_steps": 4_000},
            {**base, "wall_time": 300.0, "train_iter": 1_200, "env_steps": 9_000},
            {**base, "state": "stopped", "stop_kind": "signal", "wall_time": 50.0, "train_iter": 100, "env_steps": 10}]
    assert format_solved(runs) == "solved 2 of 3; median of the solved: 0:03:20 | iter 1,000 | env 6,500"
    assert format_solved(runs[2:]) is None  # one run: its own line says it all
    assert format_solved([runs[2], {**runs[2], "state": "failed", "stop_kind": None}]) == "solved 0 of 2"
    assert format_solved([{**runs[0], "state": "running"}, {**runs[1], "state": "running"}]) is None
    assert format_solved([runs[2], {**runs[1], "state": "running", "stop_kind": None}]) == \
        "solved 0 of 2 so far (1 still running)"


def test_watch_shows_the_lines_until_every_run_has_ended(tmp_path: Path) -> None:
    """``status --watch``: rounds of lines until every run has ended in two rounds with the same
    runs; a run that appears in a sweep's directory meanwhile is watched too; Ctrl-C ends it."""
    import io
    import shutil

    from lzkernel.runinfo import watch

    sweep = tmp_path / "sweep"
    cfg = loop_config(tmp_path / "c.yaml", sweep / "seed_0", run={"max_train_iters": 3})
    assert lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path).returncode == 0
    naps: list[float] = []

    def sleep(seconds: float) -> None:  # the sweep's next seed appears during the first wait
        naps.append(seconds)
        if len(naps) == 1:
            shutil.copytree(sweep / "seed_0", sweep / "seed_1")

    out = io.StringIO()
    assert watch([str(sweep)], 5.0, out=out, sleep=sleep) == 0
    text = out.getvalue()
    assert naps == [5.0, 5.0]  # round 2 saw a new run, round 3 the same runs all ended: done
    assert text.count("0 of 1 runs running (every 5 s; Ctrl-C to stop)") == 1
    assert text.count("0 of 2 runs running") == 2 and text.count(f"{sweep / 'seed_1'}: finished") == 2
    assert "\033[H" not in text  # not a terminal: nothing cleared

    out = io.StringIO()
    assert watch([str(tmp_path / "nothing")], 1.0, out=out, sleep=lambda s: None) == 2
    assert out.getvalue().count("nothing: no such run directory") == 1  # nothing to watch: at once
    out = io.StringIO()
    assert watch([str(tmp_path / "nothing"), str(sweep)], 1.0, out=out, sleep=lambda s: None) == 2
    assert out.getvalue().count("nothing: no such run directory") == 2  # each round says so, beside the runs

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    assert watch([str(sweep)], 1.0, out=io.StringIO(), sleep=interrupt) == 0

    proc = lzk(["status", "--watch", sweep, "--every", "0.1"], tmp_path)
    assert proc.returncode == 0 and proc.stdout.count("0 of 2 runs running") == 2, proc.stdout + proc.stderr
    assert_one_line_error(lzk(["status", "--watch", "--json", sweep], tmp_path), "--json is for scripts")
    for bad in (["--watch", "--every", "0"], ["--watch", "--every", "nan"], ["--watch", "--every", "inf"], ["--every", "5"]):
        assert_one_line_error(lzk(["status", *bad, sweep], tmp_path), "the interval of --watch")


def test_watch_waits_for_a_sweep_that_is_still_going(tmp_path: Path) -> None:
    """A sweep's sweep.json names its live process: watch goes on while it lives, though every
    run listed has ended; a run that holds only its lock (starting) is one of the sweep's runs."""
    import io
    import socket

    from lzkernel.runinfo import watch
    from lzkernel.sweep import sweep_runs

    sweep = tmp_path / "sweep"
    cfg = loop_config(tmp_path / "c.yaml", sweep / "seed_0", run={"max_train_iters": 2})
    assert lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path).returncode == 0
    (sweep / "seed_1").mkdir()
    (sweep / "seed_1" / ".lock").write_text("")  # the next run, before its config.yaml
    live = {"runs": ["seed_0", "seed_1", "seed_2"], "pid": os.getpid(), "host": socket.gethostname()}
    (sweep / "sweep.json").write_text(json.dumps(live))
    assert sweep_runs(sweep) == [sweep / "seed_0", sweep / "seed_1"]
    (sweep / "seed_1" / ".lock").unlink()
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 3:  # the sweep ends
            (sweep / "sweep.json").write_text(json.dumps({**live, "pid": None, "host": None}))

    out = io.StringIO()
    assert watch([str(sweep)], 1.0, out=out, sleep=sleep) == 0
    assert len(naps) == 4 and out.getvalue().count("a sweep going on") == 3, out.getvalue()


def test_status_of_a_grid_with_seeds_sums_up_each_point(tmp_path: Path) -> None:
    from lzkernel.runinfo import status_lines

    grid = tmp_path / "grid"
    for point in ("lr=1", "lr=2"):
        for seed in (0, 1):
            cfg = loop_config(tmp_path / f"{point}_{seed}.yaml", grid / point / f"seed_{seed}", run={"max_train_iters": 1})
            assert lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path).returncode == 0
    dirs = [str(grid / p / f"seed_{s}") for p in ("lr=1", "lr=2") for s in (0, 1)]
    _, lines, errors = status_lines(dirs)
    assert not errors and lines[-2:] == ["lr=1: solved 0 of 2", "lr=2: solved 0 of 2"]
    _, lines, _ = status_lines(dirs[:2])
    assert lines[-1] == "solved 0 of 2"  # one point: one line, as for a seeds sweep
