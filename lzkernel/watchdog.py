"""A deadline on the progress of a run's process (RELIABILITY R4: no silent hangs).

Multi-rank runs name a hung rank through the collectives' timeouts and heartbeats
(:mod:`lzkernel.heartbeat`); a single process has no peer to notice that it stopped. So the run
context keeps a :class:`StallWatchdog` while it runs. The work reports progress with
:func:`progressed` (the episode players at every env step, the loop at every update, the
reanalysis at every search call, a resumed env at every replayed step, the run context at every
metrics record and checkpoint), and when none came for
``run.stall_timeout_s`` seconds, a daemon thread prints one line naming where the main thread is
(``file:line in function``: the env's ``step`` of a hung env), then every thread's stack, and ends
the process with exit code 1. The last committed checkpoint is what remains, as after any crash;
a stall cannot save (the main thread is the one that is stuck). A run embedded in a process that
lives on (:mod:`lzkernel.api`) is not ended: :class:`Stalled` is raised in the run's thread as
soon as it runs Python code again (a call blocked in C, a sleep or a read, returns first), again
after every further ``run.stall_timeout_s`` without progress, and the run fails with it.

Progress is process-wide, like the signal handlers: :func:`progressed` stores one float in this
module (no lock, no system call), cheap enough for every env step, and needs no handle passed
down to the players. The thread wakes every ``min(1 s, timeout / 10)``.
"""
from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from typing import Callable

from lzkernel.errors import Stalled

#: The exit code of a process the watchdog ended (a failure, as for an uncaught exception).
STALL_EXIT_CODE = 1

_last_progress = [time.monotonic()]  # monotonic time of the last progressed() of this process


def progressed() -> None:
    """Tell the watchdog (if one runs) that the process made progress now."""
    _last_progress[0] = time.monotonic()


def last_progress() -> float:
    """The monotonic time of this process's last :func:`progressed` (an env worker reports it)."""
    return _last_progress[0]


def interrupt_thread(ident: int, timeout_s: float) -> None:
    """Raise :class:`Stalled` in thread ``ident`` as soon as it runs Python code again (not
    through the SIGINT handler, which during a run only asks for a stop at the next boundary,
    and a stalled run never reaches one)."""
    import ctypes

    Stalled.timeout_s = timeout_s
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(Stalled))


class StallWatchdog:
    """Ends the process when :func:`progressed` was not called for ``timeout_s`` seconds
    (``timeout_s`` ≤ 0: never). ``exit`` is what ends it (``os._exit``; tests pass their own);
    with ``embedded``, the run's thread ``thread`` (default: the main thread) is interrupted
    instead (:func:`interrupt_thread`), again after each further ``timeout_s`` without progress."""

    def __init__(self, timeout_s: float, exit: Callable[[int], object] | None = None, *, embedded: bool = False,
                 thread: int | None = None) -> None:
        self.timeout_s = float(timeout_s)
        self._main = thread if thread is not None else threading.main_thread().ident
        self.embedded = embedded
        self._exit = exit if exit is not None else os._exit
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> StallWatchdog:
        if self.timeout_s > 0 and self._thread is None:
            progressed()
            self._thread = threading.Thread(target=self._watch, name="lzkernel-stall-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def _watch(self) -> None:
        tick = max(0.01, min(1.0, self.timeout_s / 10.0))
        while not self._stop.wait(tick):
            idle = time.monotonic() - _last_progress[0]
            if idle < self.timeout_s:
                continue
            from lzkernel.heartbeat import where  # only now: `import lzkernel` stays without socket

            print(f"lzkernel: error: no progress for {idle:.0f} s (run.stall_timeout_s = {self.timeout_s:g}); "
                  f"the run's thread is at {where(self._main)}; every thread's stack follows",
                  file=sys.stderr, flush=True)
            try:
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            except (OSError, ValueError, AttributeError):  # a stderr without a file descriptor (captured)
                pass
            if not self.embedded:
                self._exit(STALL_EXIT_CODE)
                return
            interrupt_thread(self._main, self.timeout_s)
            progressed()  # the next interruption, if this one is lost, after another timeout
