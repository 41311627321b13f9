"""Heartbeats over the rendezvous store, so that a rank that stops responding is *named*.

A rank that hangs outside a collective (asleep in ``env.step``, stuck in I/O) is invisible to
the transport: the other ranks simply wait in their next collective until ``comm.timeout_s``
and then report their own timeout, so every launcher blames them. With a heartbeat the waiting
rank can say who it waited for.

Protocol (shared by the multi-rank comm backends, which publish, and by ``lzkernel launch``,
which watches; plain data through a ``torch.distributed.Store``-like object with ``set``,
``get``, ``check`` and ``add``):

* every rank has a daemon thread that writes ``<prefix>hb/<rank>`` every ``interval_s``: JSON
  with ``beat`` (wall time of this write), ``seq`` (collectives entered so far), ``op`` (the
  collective in progress, or null), ``since`` (when the rank entered or left its last
  collective), ``where`` (``file:line in function`` of the main thread now) and ``timeout``
  (its ``comm.timeout_s``);
* the main thread only updates three attributes at each collective (:meth:`Heartbeat.enter`,
  :meth:`Heartbeat.leave`): no I/O on the hot path;
* when a collective fails, the rank reads every heartbeat and :func:`blame` names the ranks that
  never reached that collective (or whose heartbeat stopped); the first rank to do so records
  the verdict under ``<prefix>fault`` for the launcher's summary.

Invariant the blame relies on: every rank calls the same collectives in the same order (the
loop's contract), so collective number ``seq`` is the same operation on every rank.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from lzkernel.errors import LzkernelError

FAULT = "fault"


class CollectiveFailed(LzkernelError, RuntimeError):
    """A collective failed or timed out; the message names the rank(s) to blame when known."""


class PeerFailed(CollectiveFailed):
    """A collective failed early because another rank failed or left first (its connection
    closed): a consequence, never the root cause a launcher reports."""


def key_prefix(env: Mapping[str, str] | None = None) -> str:
    """Store key prefix of one launch attempt (torchrun's run id and restart count, if any)."""
    env = os.environ if env is None else env
    return f"lzkernel/{env.get('TORCHELASTIC_RUN_ID', '')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}/"


def default_interval(timeout_s: float) -> float:
    """Seconds between beats: at most 1, and at least ten beats per timeout."""
    return max(0.05, min(1.0, timeout_s / 10.0))


def stale_after(interval_s: float, timeout_s: float) -> float:
    """A heartbeat older than this means the rank's process is frozen or gone."""
    return max(3.0 * interval_s, min(5.0, timeout_s / 2.0))


def where(thread_id: int | None) -> str:
    """``file:line in function`` of the innermost Python frame of thread ``thread_id``."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        return "?"
    code = frame.f_code
    path = Path(code.co_filename)
    short = "/".join(path.parts[-2:]) if len(path.parts) > 1 else path.name
    return f"{short}:{frame.f_lineno} in {code.co_name}"


class Heartbeat:
    """One rank's heartbeat publisher (see the module docstring).

    Args:
        connect: makes a store client for the publishing thread (each thread owns its client).
        rank, world_size, timeout_s: this rank, the world, and ``comm.timeout_s``.
        interval_s: seconds between beats (default :func:`default_interval`).
        prefix: store key prefix (default :func:`key_prefix`).
    """

    def __init__(self, connect: Callable[[], Any], rank: int, world_size: int, timeout_s: float,
                 interval_s: float | None = None, prefix: str | None = None) -> None:
        self.connect = connect
        self.rank, self.world_size, self.timeout_s = int(rank), int(world_size), float(timeout_s)
        self.interval_s = default_interval(timeout_s) if interval_s is None else float(interval_s)
        self.prefix = key_prefix() if prefix is None else prefix
        # Written by the main thread only, read by the publisher (a torn read costs one beat).
        self.seq = 0
        self.op: str | None = None
        self.since = time.time()
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lzk-heartbeat-{rank}", daemon=True)

    def start(self) -> Heartbeat:
        self._main = threading.get_ident()  # the thread that runs the collectives
        self._thread.start()
        return self

    def enter(self, op: str) -> int:
        """The main thread enters a collective; returns its number."""
        self.seq += 1
        self.op = op
        self.since = time.time()
        return self.seq

    def leave(self) -> None:
        self.op = None
        self.since = time.time()

    def payload(self) -> dict[str, Any]:
        return {"rank": self.rank, "pid": os.getpid(), "host": socket.gethostname(), "beat": time.time(),
                "seq": self.seq, "op": self.op, "since": self.since, "where": where(self._main),
                "timeout": self.timeout_s}

    def _run(self) -> None:
        store = None
        while not self._stop.is_set():
            try:
                if store is None:
                    store = self.connect()
                store.set(f"{self.prefix}hb/{self.rank}", json.dumps(self.payload()))
            except Exception:  # noqa: BLE001 - the store going away must not crash a rank
                store = None
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def diagnose(self, op: str, seq: int, waited_s: float) -> tuple[list[int], str]:
        """``(blamed ranks, text)`` for collective ``seq`` (``op``) that failed after ``waited_s``
        on this rank; records the verdict under ``<prefix>fault`` if it is the first."""
        try:
            store = self.connect()
            beats = read_beats(store, self.prefix, self.world_size)
        except Exception as exc:  # noqa: BLE001 - the store host (launcher) may be gone too
            return [], f"(no heartbeats: the store cannot be reached: {type(exc).__name__}: {exc})"
        ranks, text = blame(beats, self.rank, seq, op, waited_s, stale_after(self.interval_s, self.timeout_s))
        if ranks:
            record_fault(store, self.prefix, {"ranks": ranks, "by": self.rank, "message": text})
        return ranks, text


def read_beats(store: Any, prefix: str, world_size: int) -> dict[int, dict[str, Any] | None]:
    """Every rank's last heartbeat (None for a rank that never sent one)."""
    out: dict[int, dict[str, Any] | None] = {}
    for r in range(world_size):
        key = f"{prefix}hb/{r}"
        try:
            out[r] = json.loads(store.get(key)) if store.check([key]) else None
        except (ValueError, TypeError):
            out[r] = None
    return out


def blame(beats: Mapping[int, Mapping[str, Any] | None], me: int, seq: int, op: str, waited_s: float,
          stale_s: float, now: float | None = None) -> tuple[list[int], str]:
    """Which ranks rank ``me`` waited for in collective ``seq`` (``op``), and why, as
    ``"rank R stopped responding: ..."`` (empty when every other rank was in that collective)."""
    now = time.time() if now is None else now
    found: list[tuple[int, str]] = []
    for r in sorted(beats):
        hb = beats[r]
        if r == me:
            continue
        if hb is None:
            found.append((r, "it never sent a heartbeat (it did not get past start-up, or died at once)"))
            continue
        age = now - float(hb["beat"])
        where = hb.get("where", "?")
        if age > stale_s:
            found.append((r, f"its heartbeat stopped {age:.0f} s ago (its process is frozen or gone); it was "
                             f"at {where}"))
        elif hb.get("op") is None or int(hb["seq"]) < seq:
            found.append((r, f"it did not reach collective #{seq} ({op}), which rank {me} waited in for "
                             f"{waited_s:.1f} s; it has been outside collectives for "
                             f"{now - float(hb['since']):.1f} s, at {where}"))
        elif int(hb["seq"]) > seq:
            found.append((r, f"it is in collective #{hb['seq']} ({hb['op']}) while rank {me} waited in #{seq} "
                             f"({op}): the ranks called different numbers of collectives"))
    if not found:
        return [], ""
    ranks = [r for r, _ in found]
    head = (f"rank {ranks[0]} stopped responding" if len(ranks) == 1
            else f"ranks {', '.join(map(str, ranks))} stopped responding")
    return ranks, head + ": " + "; ".join(f"rank {r}: {why}" if len(ranks) > 1 else why for r, why in found)


def record_fault(store: Any, prefix: str, verdict: Mapping[str, Any]) -> None:
    """Store the first verdict only (``add`` is atomic: later ones are dropped)."""
    try:
        if int(store.add(f"{prefix}{FAULT}/n", 1)) == 1:
            store.set(f"{prefix}{FAULT}", json.dumps(dict(verdict)))
    except Exception:  # noqa: BLE001 - best effort: the rank's own error says the same
        pass


def read_fault(store: Any, prefix: str) -> dict[str, Any] | None:
    key = f"{prefix}{FAULT}"
    try:
        return json.loads(store.get(key)) if store.check([key]) else None
    except Exception:  # noqa: BLE001
        return None
