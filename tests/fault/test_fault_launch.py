"""Issue 15, items 5 and 6: `lzkernel launch` keeps every listening socket of a 2-rank run on
127.0.0.0/8, and a rank that stops responding is named in the launch's last line.

The multi-process tests are marked ``distributed`` (two gloo ranks on loopback, a few seconds
each); the two real-trainer variants (ReZero with an env that hangs, and plain torchrun) are
``slow``.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from fault_helpers import (CARTPOLE_REZERO, TRACEBACK, alive, assert_one_line_error, fault_env, is_loopback,
                           listening_sockets, loop_config, lzk, popen, process_tree, read_metrics)

gloo = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                          reason="torch.distributed with gloo is not available")
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent))


def _gloo_config(tmp_path: Path, timeout_s: float = 30.0, **run: object) -> Path:
    return loop_config(tmp_path / "c.yaml", tmp_path / "out", run={"max_train_iters": 30, **run},
                       comm={"name": "gloo", "timeout_s": timeout_s})


def _launch(args: list[str], tmp_path: Path, timeout: float = 120, **env: str) -> tuple[subprocess.Popen, str, str,
                                                                                         float, set, set]:
    """Run `lzkernel launch ARGS`, sampling the sockets its process tree listens on (every 0.1 s)
    and every pid it ever had. Returns (proc, stdout, stderr, seconds, sockets, pids)."""
    t0 = time.monotonic()
    proc = popen(["launch", *args], tmp_path, fault_env(**env), start_new_session=True)
    sockets: set = set()
    pids: set = set()
    try:
        while proc.poll() is None and time.monotonic() - t0 < timeout:
            tree = process_tree(proc.pid)
            pids.update(tree)
            sockets |= listening_sockets(tree)
            time.sleep(0.1)
        out, err = proc.communicate(timeout=max(1.0, timeout - (time.monotonic() - t0)))
    finally:
        if proc.poll() is None:
            import os

            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc, out, err, time.monotonic() - t0, sockets, pids


def test_the_socket_check_sees_a_store_on_every_interface() -> None:
    """The check can fail: a TCPStore server binds [::] whatever host it is given (torchrun's
    case); given a socket bound to 127.0.0.1 (lzkernel launch's way) it stays there."""
    import os
    import socket

    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))
    mine = listening_sockets([os.getpid()])
    assert any(not is_loopback(addr) for _, addr, port in mine if port == store.port), mine
    del store
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10),
                     master_listen_fd=sock.detach())
    mine = {(addr, p) for _, addr, p in listening_sockets([os.getpid()]) if p == port}
    assert mine == {("127.0.0.1", port)}
    del store


@pytest.mark.distributed
@gloo
def test_a_two_rank_launch_listens_on_loopback_only(tmp_path: Path) -> None:
    cfg = _gloo_config(tmp_path)
    proc, out, err, _, sockets, pids = _launch(
        ["--nproc", "2", cfg, "-p", "lzk_fault_plugin", "trainer.sleep_s=0.1"], tmp_path)
    assert proc.returncode == 0, err[-3000:]
    owners = {pid for pid, _, _ in sockets}
    assert proc.pid in owners and len(owners) == 3, sockets  # the store (launcher) + gloo in each rank
    outside = sorted(s for s in sockets if not is_loopback(s[1]))
    assert not outside, f"listening outside 127.0.0.0/8: {outside}"
    train = [r["train_iter"] for r in read_metrics(tmp_path / "out") if r["event"] == "collect"]
    assert train == list(range(1, 31))  # one writer (rank 0), every iteration once
    assert not alive(sorted(pids))


@pytest.mark.distributed
@gloo
def test_a_hung_rank_is_named_within_the_timeout(tmp_path: Path) -> None:
    """Rank 1 sleeps in env_step before iteration 4 while rank 0 waits in the all-reduce: the
    launch ends within comm.timeout_s + 15 s and its last line says rank 1 stopped responding."""
    timeout_s = 5.0
    cfg = _gloo_config(tmp_path, timeout_s=timeout_s)
    proc, out, err, seconds, _, pids = _launch(
        ["--nproc", "2", cfg, "-p", "lzk_fault_plugin", "trainer.hang_rank=1", "trainer.hang_at_iter=4"], tmp_path)
    assert proc.returncode == 1, err[-4000:]
    assert seconds < timeout_s + 15, seconds
    last = err.strip().splitlines()[-1]
    assert last.startswith("lzkernel launch: rank 1 stopped responding: it did not reach collective #4 "
                           "(all_reduce_sum)"), err[-4000:]
    assert "lzk_fault_plugin.py:" in last and "in env_step" in last and "(reported by rank 0)" in last
    assert "[rank0]: lzkernel: error: rank 0: CollectiveFailed: rank 1 stopped responding" in err
    assert not alive(sorted(pids))


@pytest.mark.slow
@pytest.mark.distributed
@gloo
def test_a_rank_hung_after_the_others_finished_is_named(tmp_path: Path) -> None:
    """Rank 1 hangs after its last collective: rank 0 exits 0; comm.timeout_s later the
    launcher kills rank 1 and names it (no collective would ever time out here)."""
    timeout_s = 3.0
    cfg = _gloo_config(tmp_path, timeout_s=timeout_s, max_train_iters=5)
    proc, out, err, seconds, _, pids = _launch(
        ["--nproc", "2", cfg, "-p", "lzk_fault_plugin", "trainer.hang_rank=1", "trainer.hang_at_iter=99"], tmp_path)
    assert proc.returncode == 1, err[-4000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("lzkernel launch: rank 1 stopped responding: still running"), err[-4000:]
    assert "after rank 0 finished" in last and "in env_step" in last and "(detected by the launcher)" in last
    assert seconds < timeout_s + 20, seconds
    assert not alive(sorted(pids))


@pytest.mark.distributed
@gloo
def test_a_raising_rank_is_named(tmp_path: Path) -> None:
    cfg = _gloo_config(tmp_path)
    proc, out, err, seconds, _, pids = _launch(
        ["--nproc", "2", cfg, "-p", "lzk_fault_plugin", "trainer.raise_rank=1", "trainer.raise_at_iter=3"], tmp_path)
    assert proc.returncode == 1, err[-4000:]
    assert err.strip().splitlines()[-1] == ("lzkernel launch: rank 1 exited with code 1: rank 1: RuntimeError: "
                                           "injected fault on rank 1 at iteration 3"), err[-4000:]
    assert seconds < 30, seconds  # rank 0 was released at once (connection closed), not after the timeout
    assert not alive(sorted(pids))


@pytest.mark.distributed
@gloo
def test_sigterm_to_the_launch_stops_every_rank_with_a_checkpoint(tmp_path: Path) -> None:
    from lzkernel.checkpoint import CheckpointStore, load

    cfg = _gloo_config(tmp_path, max_train_iters=10_000, checkpoint_every=1000)
    proc = popen(["launch", "--nproc", "2", cfg, "-p", "lzk_fault_plugin", "trainer.sleep_s=0.02"], tmp_path,
                 start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        metrics = tmp_path / "out" / "metrics.jsonl"
        while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 20):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.05)
        pids = process_tree(proc.pid)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert time.monotonic() - sent < 20
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("lzkernel launch: stopped by SIGTERM")
    state, _, _ = load(CheckpointStore(tmp_path / "out" / "ckpt").latest())
    # 20 lines are 10 iterations (a collect and a train record each): it stopped after those.
    assert state["counters"]["train_iter"] == read_metrics(tmp_path / "out")[-1]["train_iter"] >= 10
    assert not alive(pids)


def test_launch_refuses_a_single_process_backend_before_starting_ranks(tmp_path: Path) -> None:
    cfg = loop_config(tmp_path / "c.yaml", tmp_path / "out")
    proc = lzk(["launch", "--nproc", "2", cfg, "-p", "lzk_fault_plugin"], tmp_path)
    assert_one_line_error(proc, "lzkernel launch --nproc 2: comm.name is 'local'", "comm.name=gloo")
    assert not (tmp_path / "out").exists()


def test_launch_on_a_taken_port_is_exit_2(tmp_path: Path) -> None:
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        proc = lzk(["launch", "--nproc", "2", "--port", str(port), _gloo_config(tmp_path), "-p", "lzk_fault_plugin"],
                   tmp_path)
    finally:
        taken.close()
    assert_one_line_error(proc, f"lzkernel launch: cannot listen on 127.0.0.1:{port}", "choose another --port")


def test_launch_reports_a_config_error_once(tmp_path: Path) -> None:
    cfg = _gloo_config(tmp_path)
    proc = lzk(["launch", "--nproc", "2", cfg, "-p", "lzk_fault_plugin", "trainer.lr=fast"], tmp_path)
    message = assert_one_line_error(proc, "trainer.lr: expected a number, got str 'fast'")
    assert proc.stderr.count("trainer.lr:") == 1 and "[rank" not in proc.stderr, message


# -- slow: the real trainer, and plain torchrun ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.distributed
@gloo
def test_rezero_with_an_env_hanging_on_rank_1_is_named(tmp_path: Path) -> None:
    """The ReZero trainer on CartPole with rank 1 asleep in env.step (its 30th step)."""
    timeout_s = 10.0
    args = ["--nproc", "2", CARTPOLE_REZERO, f"run.out_dir={tmp_path / 'out'}", "comm.name=gloo",
            f"+comm.timeout_s={timeout_s}", "env.id=lzk_fault_envs:HangCartPole-v0", "run.threads=1",
            "run.progress=false", "run.max_train_iters=50", "policy.num_simulations=4", "policy.batch_size=16",
            "policy.model.latent_dim=16", "collector.envs=2", "collector.n_episode=2", "evaluator.envs=2",
            "evaluator.episodes=2", "evaluator.every_train_iters=1000", "update_schedule.updates_per_collect=2",
            "trainer.reanalyze_min_transitions=40"]
    proc, out, err, seconds, _, pids = _launch(args, tmp_path, timeout=240, LZK_HANG_RANK="1", LZK_HANG_AT="30")
    assert proc.returncode == 1, err[-4000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("lzkernel launch: rank 1 stopped responding"), err[-4000:]
    assert "lzk_fault_envs.py:" in last and "in step" in last
    assert not alive(sorted(pids))


@pytest.mark.slow
@pytest.mark.distributed
@gloo
@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed next to this interpreter")
def test_under_torchrun_rank_0_names_the_hung_rank(tmp_path: Path) -> None:
    """torchrun (multi-node runs still use it): rank 0's error line and torchrun's root-cause
    summary name rank 1; torchrun's own 30 s SIGTERM grace comes on top of the timeout."""
    cfg = _gloo_config(tmp_path, timeout_s=5.0)
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", "--max-restarts=0", "--monitor-interval=0.5", "-m",
           "lzkernel", "run", str(cfg), "-p", "lzk_fault_plugin", "trainer.hang_rank=1", "trainer.hang_at_iter=4"]
    proc = subprocess.run(cmd, env=fault_env(), cwd=tmp_path, capture_output=True, text=True, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "lzkernel: error: rank 0: CollectiveFailed: rank 1 stopped responding" in output, output[-4000:]
    assert TRACEBACK in output  # a runtime failure keeps its traceback (exit 1, not a config error)
