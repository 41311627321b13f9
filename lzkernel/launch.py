"""``lzkernel launch --nproc N CONFIG ARGS...``: N ranks of ``lzkernel run`` on this machine.

Why our own launcher rather than ``torchrun --standalone``:

* **Loopback only.** torch's ``TCPStore`` server listens on every interface (``[::]``) whatever
  host it is given, so torchrun's rendezvous store accepts connections from the network in
  every mode (``--standalone``, ``--rdzv-endpoint=127.0.0.1:P``, ``--master-addr=127.0.0.1``).
  The only way to bind it to one address is to hand it a listening socket (``master_listen_fd``).
  This launcher binds that socket to 127.0.0.1 itself and hosts the store; the ranks are its
  clients (``TORCHELASTIC_USE_AGENT_STORE=True``), and the comm backend puts gloo's own sockets
  on the loopback interface, so nothing of the run listens outside 127.0.0.0/8.
* **A hung rank is named.** The ranks publish heartbeats in that store
  (:mod:`lzkernel.heartbeat`); the rank whose collective times out names the rank it waited for,
  and the launcher's last line repeats that verdict. A rank named as not responding is killed
  at once; the others get SIGTERM and :data:`FAIL_GRACE_S` seconds. As a backstop, a rank
  that stays inside one collective :data:`BACKSTOP_S` seconds past its ``comm.timeout_s`` (the
  transport's own deadline did not fire), or that is still running ``comm.timeout_s`` after
  another rank finished cleanly, ends the run with the launcher's own verdict.
* **Fail fast, nothing left behind.** The first rank to fail is the root cause; every rank
  runs in its own session and dies with the launcher (``PR_SET_PDEATHSIG``).
* **Signals.** SIGINT/SIGTERM are forwarded once as SIGTERM (each rank saves at its next safe
  boundary); the ranks get :data:`STOP_GRACE_S` seconds, then SIGKILL. A second signal kills
  them at once.

Exit code: 0 when every rank succeeded; 2 when the root cause was a configuration error (also
found before any rank starts: the config is validated once here); ``128 + signal`` after a
forwarded signal; otherwise the root-cause rank's code (1). The last line of a failed launch is
``lzkernel launch: ...`` naming the rank.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, Sequence

from lzkernel.errors import ConfigError
from lzkernel.heartbeat import blame, key_prefix, read_beats, read_fault, record_fault, stale_after

#: After a forwarded SIGTERM: ranks save and stop (RELIABILITY R3: 20 s), then SIGKILL.
STOP_GRACE_S = 25.0
#: After a rank failed: the others are released by their transport or are stuck; then SIGKILL.
FAIL_GRACE_S = 10.0
#: A rank inside one collective this long past its comm.timeout_s ends the run (backstop).
BACKSTOP_S = 10.0
#: How long the others may run on after one rank finished cleanly, when no heartbeat says
#: comm.timeout_s (a rank that never published one).
FINISH_DEFAULT_S = 120.0
MONITOR_S = 0.2
#: torchrun's variables: never inherited by the ranks (the launcher sets its own).
_LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
                "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_ENABLE_FILE_TIMER", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
_SINGLE_PROCESS = ("local", "threads")
#: Signals a process gets from its own fault (a native crash), not from another process.
_CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL})


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen
    error_line: str = ""
    error_at: float | None = None  # when its ``lzkernel: error:`` line was read
    exited_at: float | None = None
    signalled: bool = False  # the launcher has sent it SIGTERM or SIGKILL
    #: It died of a signal the launcher did not send (kill -9, the OOM killer): a root cause,
    #: though it printed no error line of its own.
    killed_outside: bool = False
    readers: list[threading.Thread] = field(default_factory=list)


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGKILL this rank when the launcher dies (no orphaned ranks after a kill -9)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the launcher's own teardown still runs
        pass


def _check_config(nproc: int, run_args: Sequence[str]) -> None:
    """Validate the run's arguments and config once, here (exit 2 before N ranks start)."""
    from lzkernel.checkpoint import refuse_fresh_run_into
    from lzkernel.cli import _kernel, _parse, _parser
    from lzkernel.config.loader import load_config

    parser = _parser()
    args = _parse(parser, ["run", *run_args])
    if args.seeds or args.grid:
        what = "--seeds" if args.seeds else "--grid"
        raise ConfigError(f"lzkernel launch: {what} runs one process per run (lzkernel run {what}); "
                          "launch each run on its own")
    kernel = _kernel(args)
    kernel.raise_on_errors()
    config = load_config(args.config, args.overrides, kernel.registry)
    name = config.name("comm")
    if nproc > 1 and name in _SINGLE_PROCESS:
        raise ConfigError(f"lzkernel launch --nproc {nproc}: comm.name is '{name}', a single-process backend, so "
                          f"the ranks would be {nproc} separate runs; pass comm.name=gloo (or nccl)")
    if args.resume is None:
        refuse_fresh_run_into(Path(config.run.out_dir))
    if name == "nccl" and (reason := nccl_unavailable_reason(nproc - 1)) is not None:
        raise nccl_error(reason)
    if name == "gloo":
        check_cores(nproc, bool(config.section("comm").oversubscribe))


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. under taskset or a container's
    cpuset; the machine's count where the platform has no mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def check_cores(ranks: int, oversubscribe: bool) -> None:
    """``comm.name=gloo`` with more ranks on this machine than cores is a config error unless
    ``comm.oversubscribe``: every rank collects, searches and learns on the CPU, so ranks that
    share cores make each one slower than a single run, and the collectives' deadlines are met
    by chance (RELIABILITY B5). Asked once by ``lzkernel launch`` and by each rank's backend."""
    cores = available_cores()
    if ranks > cores and not oversubscribe:
        raise ConfigError(f"comm.name=gloo: {ranks} ranks on this machine but {cores} CPU core(s): the ranks would "
                          f"share cores and each run slower than one; run at most {cores} ranks, or set "
                          f"comm.oversubscribe=true to run anyway (debugging)")


def nccl_unavailable_reason(local_rank: int = 0) -> str | None:
    """Why a process of local rank ``local_rank`` cannot use NCCL (None when it can): asked once
    by ``lzkernel launch`` for its last rank before starting any (one message, not one per rank,
    and no rank left waiting in the rendezvous for a peer without a GPU), and by each rank's comm
    backend (``lzk_comm.torch_dist``) under any other launcher."""
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        return "this torch build has no torch.distributed"
    if not dist.is_nccl_available():
        return f"this torch build ({torch.__version__}) has no NCCL"
    if not torch.cuda.is_available():
        return "CUDA is not available on this machine"
    if local_rank >= torch.cuda.device_count():
        return (f"LOCAL_RANK {local_rank} has no GPU of its own ({torch.cuda.device_count()} visible); "
                "NCCL needs one GPU per rank")
    return None


def nccl_error(reason: str) -> ConfigError:
    return ConfigError(f"comm.name=nccl: NCCL is unavailable ({reason}); use comm.name=gloo (CPU collectives) instead")


def _bind_loopback(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A port of a finished launch in TIME_WAIT is reusable; a port another socket listens on is
    # still refused (Linux semantics of SO_REUSEADDR).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"lzkernel launch: cannot listen on 127.0.0.1:{port} ({exc.strerror}); "
                          "choose another --port (0: any free one)") from None
    return sock


def _forward(stream: IO[str], out: IO[str], prefix: str, rank: _Rank) -> None:
    for line in stream:
        if line.startswith("lzkernel: error:"):
            rank.error_line = line.strip()
            rank.error_at = time.monotonic()
        out.write(prefix + line)
        out.flush()
    stream.close()


def _signal_all(ranks: Sequence[_Rank], sig: int) -> None:
    for r in ranks:
        if r.proc.poll() is None:
            r.signalled = True
            try:
                os.killpg(r.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _backstop(store: Any, prefix: str, nproc: int) -> str | None:
    """The launcher's own verdict when a rank has sat in one collective past its deadline."""
    beats = read_beats(store, prefix, nproc)
    now = time.time()
    for r, hb in beats.items():
        if hb is None or hb.get("op") is None:
            continue
        waited = now - float(hb["since"])
        timeout = float(hb.get("timeout", 0) or 0)
        if timeout and waited > timeout + BACKSTOP_S:
            ranks, text = blame(beats, r, int(hb["seq"]), str(hb["op"]), waited, stale_after(1.0, timeout), now)
            if not ranks:
                text = (f"rank {r} has been inside collective #{hb['seq']} ({hb['op']}) for {waited:.0f} s, "
                        f"{BACKSTOP_S:.0f} s past comm.timeout_s={timeout:g}, although every rank reached it")
                ranks = [r]
            record_fault(store, prefix, {"ranks": ranks, "by": "launcher", "message": text})
            return text
    return None


def _straggler(store: Any, prefix: str, nproc: int, running: Sequence[int], done: int, waited: float) -> str | None:
    """The launcher's verdict on ranks still running ``comm.timeout_s`` after rank ``done``
    finished cleanly (every rank runs the same collectives, so they end together)."""
    beats = read_beats(store, prefix, nproc)
    timeouts = [float(hb.get("timeout", 0) or 0) for hb in beats.values() if hb]
    limit = max(timeouts, default=0.0) or FINISH_DEFAULT_S
    if waited <= limit:
        return None
    where = {r: (beats.get(r) or {}).get("where", "?") for r in running}
    head = (f"rank {running[0]} stopped responding" if len(running) == 1
            else f"ranks {', '.join(map(str, running))} stopped responding")
    text = (f"{head}: still running {waited:.0f} s after rank {done} finished (comm.timeout_s={limit:g}); at "
            + "; ".join(f"rank {r}: {w}" if len(running) > 1 else w for r, w in where.items()))
    record_fault(store, prefix, {"ranks": list(running), "by": "launcher", "message": text})
    return text


def launch(nproc: int, run_args: Sequence[str], *, port: int = 0, env: dict[str, str] | None = None) -> int:
    """Run ``lzkernel run RUN_ARGS`` as ``nproc`` ranks; return the launch's exit code."""
    if nproc < 1:
        raise ConfigError(f"lzkernel launch: --nproc must be >= 1, got {nproc}")
    _check_config(nproc, run_args)
    sock = _bind_loopback(port)
    port = sock.getsockname()[1]

    import torch.distributed as dist

    # The store owns (and closes) the descriptor: detach it from the Python socket.
    store = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=30), master_listen_fd=sock.detach())
    run_id = f"lzk-{os.getpid()}-{int(time.time())}"
    base = {k: v for k, v in (os.environ if env is None else env).items() if k not in _LAUNCH_VARS}
    base.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: N ranks share the cores
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(nproc),
                LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK="0", GROUP_WORLD_SIZE="1", ROLE_NAME="default",
                ROLE_WORLD_SIZE=str(nproc), TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RUN_ID=run_id,
                TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0")
    prefix = key_prefix(base)
    cmd = [sys.executable, "-m", "lzkernel", "run", *run_args]

    ranks: list[_Rank] = []
    signals: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: signals.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for r in range(nproc):
            proc = subprocess.Popen(
                cmd, env={**base, "RANK": str(r), "LOCAL_RANK": str(r), "ROLE_RANK": str(r)},
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                start_new_session=True, preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
            ranks.append(_Rank(r, proc))
        for rk in ranks:
            tag = f"[rank{rk.rank}]: " if nproc > 1 else ""
            assert rk.proc.stdout is not None and rk.proc.stderr is not None
            rk.readers = [threading.Thread(target=_forward, args=(rk.proc.stdout, sys.stdout, tag, rk), daemon=True),
                          threading.Thread(target=_forward, args=(rk.proc.stderr, sys.stderr, tag, rk), daemon=True)]
            for t in rk.readers:
                t.start()
        verdict = _supervise(ranks, store, prefix, signals)
    finally:
        _signal_all(ranks, signal.SIGKILL)
        for rk in ranks:
            rk.proc.wait()
        for s, handler in old.items():
            signal.signal(s, handler)
    for rk in ranks:  # every line of the ranks' output comes before the summary
        for t in rk.readers:
            t.join(timeout=2.0)
    fault = read_fault(store, prefix)
    del store
    return _summary(ranks, fault, verdict, signals)


def _supervise(ranks: list[_Rank], store: Any, prefix: str, signals: list[int]) -> str | None:
    """Wait for every rank; fail fast, forward signals, run the backstop. Returns the
    backstop's verdict (None when the ranks ended by themselves)."""
    kill_at: float | None = None
    forwarded = 0
    root_seen = False
    while True:
        now = time.monotonic()
        running = [rk for rk in ranks if rk.proc.poll() is None]
        for rk in ranks:
            if rk.exited_at is None and rk.proc.returncode is not None:
                rk.exited_at = now
                rk.killed_outside = rk.proc.returncode < 0 and not rk.signalled
        if not running:
            return None
        if len(signals) > forwarded:
            forwarded = len(signals)
            if forwarded == 1:
                _signal_all(ranks, signal.SIGTERM)
                kill_at = min(kill_at or float("inf"), now + STOP_GRACE_S)
            else:
                _signal_all(ranks, signal.SIGKILL)
        if not root_seen and any(rk.proc.returncode not in (None, 0) for rk in ranks) and not signals:
            root_seen = True
            fault = read_fault(store, prefix)
            blamed = set(fault.get("ranks", [])) if fault else set()
            for rk in running:  # a rank named as not responding will not answer SIGTERM either
                if rk.rank in blamed:
                    rk.signalled = True
                    os.killpg(rk.proc.pid, signal.SIGKILL)
            _signal_all(ranks, signal.SIGTERM)
            kill_at = min(kill_at or float("inf"), now + FAIL_GRACE_S)
        if not root_seen and not signals:
            verdict = _backstop(store, prefix, len(ranks))
            finished = [rk for rk in ranks if rk.proc.returncode == 0 and rk.exited_at is not None]
            if verdict is None and finished:
                first = min(finished, key=lambda rk: rk.exited_at or 0.0)
                verdict = _straggler(store, prefix, len(ranks), [rk.rank for rk in running], first.rank,
                                     now - (first.exited_at or now))
            if verdict is not None:
                _signal_all(ranks, signal.SIGKILL)
                for rk in ranks:
                    rk.proc.wait()
                return verdict
        if kill_at is not None and now >= kill_at:
            _signal_all(ranks, signal.SIGKILL)
        time.sleep(MONITOR_S)


def _summary(ranks: list[_Rank], fault: dict[str, Any] | None, verdict: str | None, signals: list[int]) -> int:
    """Print the last line of a failed launch and return the exit code."""
    codes = [rk.proc.returncode for rk in ranks]
    if all(c == 0 for c in codes):
        return 0
    # The root cause is the first rank to fail that did not fail *because of* another: a rank
    # released by a closed connection (PeerFailed) or killed by the teardown without an error of
    # its own comes after every other (two ranks often end within one monitor tick). A rank that
    # reported its own error and was killed while shutting down is still a root cause, timed by
    # its error line, and so is a rank killed by a signal the launcher did not send (kill -9 or
    # the OOM killer: no error line, and its peers' PeerFailed lines often come first). Ranks
    # killed by the teardown have no exit time.
    def order(rk: _Rank) -> tuple[bool, float]:
        consequence = ": PeerFailed: " in rk.error_line or (
            rk.proc.returncode < 0 and not rk.error_line and not rk.killed_outside)
        at = rk.error_at if rk.error_at is not None else rk.exited_at
        return consequence, at if at is not None else float("inf")

    failed = sorted((rk for rk in ranks if rk.proc.returncode != 0), key=order)
    root = failed[0]
    if signals:
        sig = signals[0]
        print(f"lzkernel launch: stopped by {signal.Signals(sig).name}; rank exit codes {codes}", file=sys.stderr)
        return 128 + sig
    if verdict is not None:
        print(f"lzkernel launch: {verdict} (detected by the launcher)", file=sys.stderr)
        return 1
    if fault is not None and root.proc.returncode != 2:
        print(f"lzkernel launch: {fault.get('message', '')} (reported by rank {fault.get('by')})", file=sys.stderr)
        return 1
    code = root.proc.returncode
    if code < 0 and root.error_line:
        how = f"failed (then was killed by {signal.Signals(-code).name} while it shut down)"
    elif code < 0 and root.killed_outside and -code in _CRASH_SIGNALS:
        how = f"crashed ({signal.Signals(-code).name})"
    elif code < 0 and root.killed_outside:
        who = "another process or the OOM killer" if -code == signal.SIGKILL else "another process"
        how = f"was killed by {signal.Signals(-code).name}, not sent by the launcher ({who})"
    elif code < 0:
        how = f"was killed by {signal.Signals(-code).name}"
    else:
        how = f"exited with code {code}"
    detail = f": {root.error_line[len('lzkernel: error: '):]}" if root.error_line else " (see its output above)"
    print(f"lzkernel launch: rank {root.rank} {how}{detail}", file=sys.stderr)
    return 2 if code == 2 else 1
