"""Launching several ranks from a test: torchrun, or our own spawner with a loopback TCPStore.

Every launch runs in its own session (process group) and is killed in ``finally``; the caller
checks with :func:`leftover_processes` that nothing survived. Ranks get ``OMP_NUM_THREADS=1``
and ``run.threads=1`` (2 cores on the CI machine).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CARTPOLE_REZERO = REPO / "configs" / "cartpole_rezero.yaml"
CARTPOLE_UNIZERO = REPO / "configs" / "cartpole_unizero.yaml"
BIN = Path(sys.executable).parent
TORCHRUN = str(BIN / "torchrun") if (BIN / "torchrun").exists() else None

#: A few real training steps of the CartPole ReZero config (seconds, not minutes).
TINY = [
    "run.threads=1", "run.progress=false", "run.max_train_iters=12", "run.max_env_steps=100000",
    "run.checkpoint_every=6", "run.log_every=3",
    "policy.num_simulations=4", "policy.batch_size=32", "policy.model.latent_dim=32",
    "policy.target_update_freq=4",
    "collector.envs=2", "collector.n_episode=2",
    "evaluator.envs=2", "evaluator.episodes=2", "evaluator.every_train_iters=6",
    "update_schedule.updates_per_collect=4", "trainer.reanalyze_min_transitions=40",
]


def clean_env(**extra: str) -> dict[str, str]:
    """Environment of a rank: tests/distributed importable (the probe plugin), one thread, no
    inherited plugin switches or torchrun variables."""
    drop = {"LZKERNEL_DISABLE_PLUGIN_AUTOLOAD", "LZKERNEL_PLUGINS", "PYTHONPATH", "RANK", "WORLD_SIZE",
            "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "ROLE_RANK",
            "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = str(HERE)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
    env.update(extra)
    return env


@dataclass
class Launch:
    returncode: int
    output: str  # stdout and stderr together
    seconds: float
    pids: list[int]


def _kill_session(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _descendants(proc: subprocess.Popen) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        return []


def torchrun(args: Sequence[str], nproc: int = 2, *, env: Mapping[str, str] | None = None, timeout: float = 120,
             module: bool = True, cwd: Path = REPO) -> Launch:
    """``torchrun --standalone --nproc_per_node=N -m lzkernel ARGS`` (``module=False``: the
    ``lzkernel`` console script through ``--no-python``)."""
    assert TORCHRUN is not None, "torchrun is not installed next to this interpreter"
    head = [TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", "--max-restarts=0", "--monitor-interval=0.5"]
    if module:
        cmd = [*head, "-m", "lzkernel", *args]
    else:
        cmd = [*head, "--no-python", str(BIN / "lzkernel"), *args]
    return _run(cmd, dict(env or clean_env()), timeout, cwd)


def _run(cmd: Sequence[str], env: dict[str, str], timeout: float, cwd: Path) -> Launch:
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    pids: set[int] = set()
    try:
        chunks = []
        deadline = t0 + timeout
        while True:
            pids.update(_descendants(proc))
            try:
                out, _ = proc.communicate(timeout=0.5)
                chunks.append(out)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    _kill_session(proc)
                    out, _ = proc.communicate()
                    raise AssertionError(f"{cmd[:4]}... did not finish within {timeout} s:\n{out[-4000:]}")
        return Launch(proc.returncode, "".join(chunks), time.monotonic() - t0, sorted(pids | {proc.pid}))
    finally:
        if proc.poll() is None:
            _kill_session(proc)
            proc.wait()


def spawn_ranks(argv: Sequence[str], world_size: int = 2, *, env: Mapping[str, str] | None = None,
                timeout: float = 120, fail_fast_grace: float = 10.0) -> list[Launch]:
    """Our own launcher: ``world_size`` processes running ``python ARGV`` with torchrun's
    variables, rendezvousing through a TCPStore that this (test) process hosts on 127.0.0.1 with
    a port the OS picked (no port race: every rank is a client, as under torchrun's agent).

    When one rank exits non-zero the others get SIGTERM, then SIGKILL after ``fail_fast_grace``
    seconds. Returns one :class:`Launch` per rank.
    """
    from datetime import timedelta

    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True, timeout=timedelta(seconds=timeout),
                          wait_for_workers=False)
    base = dict(env or clean_env())
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), WORLD_SIZE=str(world_size),
                LOCAL_WORLD_SIZE=str(world_size), TORCHELASTIC_USE_AGENT_STORE="True")
    t0 = time.monotonic()
    procs = []
    try:
        for r in range(world_size):
            procs.append(subprocess.Popen(
                [sys.executable, *argv], env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}, cwd=str(REPO),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True))
        ends: dict[int, float] = {}
        failed_at: float | None = None
        while len(ends) < world_size:
            now = time.monotonic()
            for r, p in enumerate(procs):
                if r not in ends and p.poll() is not None:
                    ends[r] = now - t0
                    if p.returncode != 0 and failed_at is None:
                        failed_at = now
                        for q in procs:
                            if q.poll() is None:
                                q.send_signal(signal.SIGTERM)
            if failed_at is not None and now - failed_at > fail_fast_grace:
                for q in procs:
                    _kill_session(q)
            if now - t0 > timeout:
                raise AssertionError(f"ranks did not finish within {timeout} s")
            time.sleep(0.1)
        return [Launch(p.returncode, p.stdout.read() if p.stdout else "", ends[r], [p.pid])
                for r, p in enumerate(procs)]
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_session(p)
                p.wait()
            if p.stdout:
                p.stdout.close()
        del store


def leftover_processes(pids: Sequence[int], marker: str = "") -> list[str]:
    """Processes of a finished launch that still exist (by pid, and any whose command line
    contains ``marker``, e.g. the run's unique out_dir)."""
    alive = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{pid}: {' '.join(p.cmdline())[:200]}")
        except psutil.Error:
            pass
    if marker:
        me = os.getpid()
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if p.info["pid"] != me and marker in " ".join(p.info["cmdline"] or []):
                    alive.append(f"{p.info['pid']}: {' '.join(p.info['cmdline'])[:200]}")
            except psutil.Error:
                pass
    return sorted(set(alive))
