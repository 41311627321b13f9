"""Helpers of the fault tests (RELIABILITY.md style: every case a subprocess with a hard timeout).

The runs use the test-only trainer ``fault_loop`` of :mod:`lzk_fault_plugin` (``-p
lzk_fault_plugin`` with this directory on ``PYTHONPATH``) unless a test needs a real config.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CARTPOLE_REZERO = REPO / "configs" / "cartpole_rezero.yaml"
#: Hard limit of one CLI subprocess.
TIMEOUT = 90
TRACEBACK = "Traceback (most recent call last)"
_DROP = {"LZKERNEL_DISABLE_PLUGIN_AUTOLOAD", "LZKERNEL_PLUGINS", "LZKERNEL_TRACEBACK", "PYTHONPATH", "RANK",
         "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
         "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "GLOO_SOCKET_IFNAME"}


def fault_env(*paths: str | Path, **extra: str) -> dict[str, str]:
    """Environment of a CLI subprocess: this directory (and ``paths``) importable, one thread,
    no inherited plugin, traceback or launcher switches."""
    env = {k: v for k, v in os.environ.items() if k not in _DROP}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (HERE, *paths))
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a hang killed by the timeout still shows its stacks
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
    env.update(extra)
    return env


def lzk(args: Sequence[str | Path], cwd: str | Path, env: Mapping[str, str] | None = None,
        timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """``python -m lzkernel ARGS`` in a fresh interpreter, killed after ``timeout`` seconds."""
    return subprocess.run([sys.executable, "-m", "lzkernel", *map(str, args)], env=dict(env or fault_env()),
                          cwd=str(cwd), capture_output=True, text=True, timeout=timeout)


def popen(args: Sequence[str | Path], cwd: str | Path, env: Mapping[str, str] | None = None,
          **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "lzkernel", *map(str, args)], env=dict(env or fault_env()),
                            cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def loop_config(path: Path, out_dir: Path, run: Mapping[str, Any] | None = None,
                trainer: Mapping[str, Any] | None = None, **sections: Any) -> Path:
    """A config of the ``fault_loop`` trainer (load it with ``-p lzk_fault_plugin``)."""
    body = {"run": {"out_dir": str(out_dir), "max_train_iters": 10, "checkpoint_every": 5, "log_every": 1,
                    "threads": 1, "progress": False, **(run or {})},
            "trainer": {"name": "fault_loop", **(trainer or {})}, **sections}
    path.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    return path


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str, code: int = 2) -> str:
    """Exit ``code``, no traceback anywhere, and the last stderr line is ``lzkernel: error: ...``
    holding every needle (the one line that names the file, key, plugin or path)."""
    out = f"rc={proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == code, out
    assert TRACEBACK not in proc.stderr and TRACEBACK not in proc.stdout, out
    assert "Exception in thread" not in proc.stderr, out
    lines = proc.stderr.strip().splitlines()
    assert lines, out
    error_lines = [i for i, line in enumerate(lines) if line.startswith("lzkernel: error:")]
    assert error_lines, out
    message = "\n".join(lines[error_lines[-1]:])
    for needle in needles:
        assert needle in message, f"{needle!r} not in the error:\n{message}\n\n{out}"
    return message


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r for r in records if r.get("event") != "resume"]  # a resumed run's record naming its checkpoint


def wait_for(predicate: Any, timeout: float, what: str, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"run ended before {what}: rc={proc.returncode}\n{proc.communicate()[1][-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def rehash_manifest(step: Path) -> None:
    """Rewrite a checkpoint step's ``manifest.json`` to match its files as they are now (what
    someone who edits the files would do to hide it)."""
    import hashlib

    manifest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(step.iterdir())
                if p.name not in ("DONE", "manifest.json")}
    (step / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def kill_9(proc: subprocess.Popen[str], timeout: float = 30) -> None:
    """SIGKILL ``proc`` unless it has ended, and reap it (killed again and reaped if it outlives
    ``timeout``)."""
    try:
        proc.kill()  # Popen sends nothing to a process it has already reaped
        proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=30)
    return int(proc.stdout)


def _addr(hexaddr: str) -> str:
    """An address of /proc/net/tcp{,6} (little-endian hex words) as text."""
    import ipaddress

    if len(hexaddr) == 8:
        return str(ipaddress.IPv4Address(bytes.fromhex(hexaddr)[::-1]))
    raw = b"".join(bytes.fromhex(hexaddr[i:i + 8])[::-1] for i in range(0, 32, 8))
    return str(ipaddress.IPv6Address(raw))


def listening_sockets(pids: Sequence[int]) -> set[tuple[int, str, int]]:
    """``(pid, address, port)`` of every TCP socket in state LISTEN that one of ``pids`` holds,
    read from ``/proc/<pid>/fd`` and ``/proc/net/tcp``/``tcp6``."""
    owner: dict[str, int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                owner[link[8:-1]] = pid
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] == "0A" and f[9] in owner:  # 0A = TCP_LISTEN
                addr, port = f[1].split(":")
                found.add((owner[f[9]], _addr(addr), int(port, 16)))
    return found


def is_loopback(address: str) -> bool:
    """Inside 127.0.0.0/8 (also as an IPv4-mapped IPv6 address)."""
    import ipaddress

    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return isinstance(ip, ipaddress.IPv4Address) and ip in ipaddress.ip_network("127.0.0.0/8")


def process_tree(pid: int) -> list[int]:
    import psutil

    try:
        return [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return [pid]


def alive(pids: Sequence[int]) -> list[int]:
    """The pids that still exist (zombies excluded)."""
    import psutil

    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            pass
    return out
