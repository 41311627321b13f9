"""Issue 15, item 1: one run per directory (lzkernel.rundir), and checkpoint temporaries of
other live processes are never cleaned away."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fault_helpers import assert_one_line_error, dead_pid, fault_env, loop_config, lzk, popen, read_metrics, wait_for


def test_two_runs_started_together_on_one_out_dir(tmp_path: Path) -> None:
    """The second exits 2 at once naming the first's pid; the first's files are its own only."""
    out = tmp_path / "out"
    common = {"max_train_iters": 40, "checkpoint_every": 5, "keep_last": 10}
    cfg_a = loop_config(tmp_path / "a.yaml", out, run={"seed": 1, **common}, trainer={"sleep_s": 0.05})
    cfg_b = loop_config(tmp_path / "b.yaml", out, run={"seed": 2, **common}, trainer={"sleep_s": 0.05})
    first = popen(["run", cfg_a, "-p", "lzk_fault_plugin"], tmp_path)
    time.sleep(0.1)
    t0 = time.monotonic()
    second = popen(["run", cfg_b, "-p", "lzk_fault_plugin"], tmp_path)
    try:
        _, err_b = second.communicate(timeout=60)
        second_s = time.monotonic() - t0
        _, err_a = first.communicate(timeout=120)
    finally:
        for p in (first, second):
            if p.poll() is None:
                p.kill()
                p.communicate()
    # Whichever process reached the lock first is "the first"; with a 0.1 s head start it is a.
    assert {first.returncode, second.returncode} == {0, 2}, (err_a[-2000:], err_b[-2000:])
    winner, loser, loser_err, seed = ((first, second, err_b, 1) if first.returncode == 0
                                      else (second, first, err_a, 2))
    assert f"is in use by another run (pid {winner.pid}" in loser_err, loser_err
    assert "Traceback" not in loser_err and str(out) in loser_err
    if loser is second:
        assert second_s < 2.0, second_s  # refused at start-up, before torch (0.5 s here), not after a run
    records = read_metrics(out)
    assert [r["train_iter"] for r in records if r["event"] == "collect"] == list(range(1, 41))  # one run only
    assert yaml.safe_load((out / "config.yaml").read_text())["run"]["seed"] == seed
    steps = sorted((out / "ckpt").glob("step_*"))
    assert [p.name for p in steps] == [f"step_{s:012d}" for s in range(5, 41, 5)]
    for step in steps:  # every checkpoint was written by the winner, under its own config
        assert yaml.safe_load((step / "config.yaml").read_text())["run"]["seed"] == seed
    assert not list((out / "ckpt").glob(".*"))  # no temporaries left
    assert not (out / ".lock").exists()  # released at the end


def test_lock_is_released_on_error_and_recovered_after_kill_9(tmp_path: Path) -> None:
    """An exception releases the lock; a SIGKILLed run leaves a stale `.lock` naming a dead pid,
    which the next run (its resume) recovers."""
    out = tmp_path / "out"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 400, "checkpoint_every": 2},
                      trainer={"sleep_s": 0.02, "raise_rank": 0, "raise_at_iter": 3})
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path)
    assert proc.returncode == 1 and "injected fault on rank 0" in proc.stderr, proc.stderr[-2000:]
    assert not (out / ".lock").exists()

    killed = popen(["run", cfg, "-p", "lzk_fault_plugin", "--resume", "auto", "trainer.raise_rank=-1"], tmp_path)
    try:
        wait_for(lambda: len(list((out / "ckpt").glob("step_*"))) >= 3, 60, "new checkpoints", killed)
        holder = (out / ".lock").read_text().split()
        assert holder[0] == str(killed.pid)
        killed.send_signal(signal.SIGKILL)
        killed.communicate(timeout=30)
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.communicate()
    assert (out / ".lock").exists()  # left behind, but no longer a lock
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin", "--resume", "auto", "trainer.raise_rank=-1",
                "run.max_train_iters=30"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"recovered the lock of a run that ended without releasing it (pid {killed.pid}" in proc.stderr
    assert "resumed from" in proc.stderr
    assert not (out / ".lock").exists()


def test_a_stale_lock_file_of_a_dead_pid_does_not_block(tmp_path: Path) -> None:
    from lzkernel import rundir

    out = tmp_path / "out"
    out.mkdir()
    pid = dead_pid()
    (out / ".lock").write_text(f"{pid}\nsomehost\n0\n")
    lock = rundir.acquire(out)
    try:
        assert (out / ".lock").read_text().split()[0] == str(os.getpid())
        assert rundir.acquire(out) is lock  # a rank-thread of this process shares it
        rundir.release(lock)
        assert (out / ".lock").exists()  # still held by the first sharer
    finally:
        rundir.release(lock)
    assert not (out / ".lock").exists()


def test_a_second_process_is_refused_while_the_lock_is_held(tmp_path: Path) -> None:
    from lzkernel import rundir

    out = tmp_path / "out"
    lock = rundir.acquire(out)
    try:
        code = ("import sys\nfrom lzkernel import rundir\nfrom lzkernel.errors import ConfigError\n"
                f"try:\n    rundir.acquire({str(out)!r})\nexcept ConfigError as e:\n    print(e)\n    sys.exit(2)\n")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env=fault_env())
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"is in use by another run (pid {os.getpid()} on " in proc.stdout
    finally:
        rundir.release(lock)
    assert not out.exists()  # it made the directory, wrote nothing else: nothing is left


def test_checkpoint_cleanup_never_removes_a_live_process_temporary(tmp_path: Path) -> None:
    import torch

    from lzkernel.checkpoint import CheckpointStore, load

    root = tmp_path / "ckpt"
    store = CheckpointStore(root, keep_last=3)
    store.save(1, {"x": torch.zeros(1)}, tag="best")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live_tmp = root / f".step_000000000007.tmp-{sleeper.pid}"
        live_tmp.mkdir()
        (live_tmp / "state.pt").write_bytes(b"in progress")
        dead_tmp = root / f".step_000000000006.tmp-{dead_pid()}"
        dead_tmp.mkdir()
        own_tmp = root / f".step_000000000005.tmp-{os.getpid()}"
        own_tmp.mkdir()
        # Another live process between the two renames of its `best` swap: not "restored".
        os.replace(root / "best", root / f".best.old-{sleeper.pid}")
        store.save(2, {"x": torch.ones(1)})
        names = sorted(p.name for p in root.iterdir())
        assert live_tmp.name in names and (live_tmp / "state.pt").read_bytes() == b"in progress"
        assert dead_tmp.name not in names and own_tmp.name not in names
        assert f".best.old-{sleeper.pid}" in names and "best" not in names
    finally:
        sleeper.kill()
        sleeper.wait()
    store.save(3, {"x": torch.ones(1)})  # now that process is gone: its leftovers are cleaned
    names = sorted(p.name for p in root.iterdir())
    assert names == ["best", "step_000000000002", "step_000000000003"], names
    assert load(root / "best")[0]["x"].tolist() == [0.0]


@pytest.mark.parametrize("kind", ["file", "proc", "read-only"])
def test_an_out_dir_that_cannot_be_written_is_one_line(kind: str, tmp_path: Path) -> None:
    """Item 8: an existing file, a path under /proc, a read-only directory → exit 2 naming it."""
    if kind == "file":
        out = tmp_path / "taken"
        out.write_text("not a directory")
        needle = "is an existing file, not a directory"
    elif kind == "proc":
        out = Path("/proc/self/lzk-run")
        needle = "cannot create the directory"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories; the tmpfs case in test_fault_inputs covers it")
        out = tmp_path / "ro"
        out.mkdir()
        out.chmod(0o555)
        needle = "is not writable"
    cfg = loop_config(tmp_path / "c.yaml", out)
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path)
    assert_one_line_error(proc, f"run.out_dir '{out}'", needle)
    if kind == "file":
        assert out.read_text() == "not a directory"


def test_a_start_that_failed_on_a_config_error_leaves_nothing_to_the_next_run(tmp_path: Path) -> None:
    """A config error found while building the components (a keyword the env's constructor
    rejects: the config check cannot know it) exits 2 after the run files were written; the
    corrected run into the same directory writes its own overrides.txt and command.txt, not the
    failed start's."""
    out = tmp_path / "out"
    proc = lzk(["run", Path(__file__).parents[2] / "configs" / "cartpole_rezero_fast.yaml", f"run.out_dir={out}",
                "env.kwargs={CartPol: 1}", "run.progress=false"], tmp_path)
    assert_one_line_error(proc, "env.kwargs", "CartPol")
    assert (out / "overrides.txt").is_file()  # the failed start wrote its run files
    failed = json.loads((out / "summary.json").read_text())
    assert failed["status"] == "failed" and failed["exit_code"] == 2 and "CartPol" in failed["error"]
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 3})
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "overrides.txt").read_text() == ""  # this run's (none), not env.kwargs={CartPol: 1}
    assert "CartPol" not in (out / "command.txt").read_text()
    assert not list(out.glob("abandoned-*")) and "earlier start" not in proc.stderr  # nothing to keep
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"


def test_a_fresh_run_sets_aside_the_records_of_a_start_without_checkpoint(tmp_path: Path) -> None:
    """An earlier start that recorded metrics but saved no checkpoint (killed before its first):
    a fresh run moves its files into abandoned-*/ with a warning, and starts its own records."""
    out = tmp_path / "out"
    (out / "tb").mkdir(parents=True)
    old = '{"event": "collect", "train_iter": 7, "env_steps": 70, "wall_time": 1.0}\n'
    (out / "metrics.jsonl").write_text(old)
    (out / "overrides.txt").write_text("trainer.lr=0.5\n")
    (out / "tb" / "events.out.tfevents.1.old").write_bytes(b"x" * 40)
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 3})
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "held the files of an earlier start that saved no checkpoint" in proc.stderr
    (aside,) = out.glob("abandoned-*")
    assert (aside / "metrics.jsonl").read_text() == old and (aside / "overrides.txt").read_text() == "trainer.lr=0.5\n"
    assert [p.name for p in (aside / "tb").iterdir()] == ["events.out.tfevents.1.old"]
    assert [r["train_iter"] for r in read_metrics(out) if r["event"] == "collect"] == [1, 2, 3]
    assert (out / "overrides.txt").read_text() == ""
    assert "events.out.tfevents.1.old" not in [p.name for p in (out / "tb").iterdir()]
