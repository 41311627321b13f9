"""A test-only lzkernel plugin (``-p lzk_soak_probe``, ``tests/soak`` on ``PYTHONPATH``): what a
long run holds, sampled from inside the run.

After every ``LZK_SOAK_EVERY``-th collect (default 10) it appends one JSON line to
``<run dir>/soak_probe.jsonl``::

    {"collects": 120, "env_steps": 9870, "train_iter": 240,
     "buffer": 5000,            # transitions the replay buffer holds (the collect's metric)
     "rss_mb": 530.1,           # resident set size (the collect's own sys/rss_mb)
     "fds": 31, "threads": 9,   # open file descriptors, OS threads of the process
     "traced_mb": 61.2,         # tracemalloc's traced memory after gc.collect() (only while tracing, else null)
     "top": [["file.py:123", bytes], ...]}   # tracemalloc's 30 largest sites by line (or [])

With ``LZK_SOAK_TRACE_FROM=N`` it starts ``tracemalloc`` at the first collect at or past N env steps
(tracing the whole run would slow it several times over), and then fills ``traced_mb`` and ``top``:
what was allocated since then and is still held.

With ``LZK_SOAK_SIGTERM_AFTER_S=a,b`` it also sends this process SIGTERM once, a uniformly random
number of seconds in [a, b] after the run starts (the run's own handler is installed by then),
so an in-process harness can stop runs at random points of collect, search, learn and eval.
Nothing here ships.
"""
from __future__ import annotations

import gc
import json
import os
import random
import signal
import threading
import tracemalloc
from typing import Any, Mapping

from lzkernel import hookimpl

_collects: dict[int, int] = {}
_timers: dict[int, threading.Timer] = {}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _top_sites() -> tuple[float | None, list[list[Any]]]:
    if not tracemalloc.is_tracing():
        return None, []
    # What is held, not what waits for the cycle collector: with torch loaded, Python's full
    # collections are rare, and cyclic garbage would read as slow growth.
    gc.collect()
    stats = tracemalloc.take_snapshot().statistics("lineno")[:30]
    top = [[f"{s.traceback[0].filename}:{s.traceback[0].lineno}", s.size] for s in stats]
    return tracemalloc.get_traced_memory()[0] / 2**20, top


@hookimpl
def lzkernel_run_start(run: Any) -> None:
    _collects[id(run)] = 0
    window = os.environ.get("LZK_SOAK_SIGTERM_AFTER_S")
    if window:
        lo, hi = (float(x) for x in window.split(","))
        timer = threading.Timer(random.uniform(lo, hi), os.kill, (os.getpid(), signal.SIGTERM))
        timer.daemon = True
        timer.start()
        _timers[id(run)] = timer


@hookimpl
def lzkernel_after_collect(run: Any, metrics: Mapping[str, float]) -> None:
    n = _collects[id(run)] = _collects.get(id(run), 0) + 1
    trace_from = os.environ.get("LZK_SOAK_TRACE_FROM")
    if trace_from is not None and run.env_steps >= int(trace_from) and not tracemalloc.is_tracing():
        tracemalloc.start()
    if run.dir is None or n % int(os.environ.get("LZK_SOAK_EVERY", "10")):
        return
    traced, top = _top_sites()
    record = {"collects": n, "env_steps": run.env_steps, "train_iter": run.train_iter,
              "buffer": metrics.get("buffer/transitions"), "rss_mb": metrics["sys/rss_mb"], "fds": open_fds(),
              "threads": os_threads(), "traced_mb": traced, "top": top}
    with open(run.dir / "soak_probe.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


@hookimpl
def lzkernel_run_end(run: Any, error: BaseException | None) -> None:
    _collects.pop(id(run), None)
    timer = _timers.pop(id(run), None)
    if timer is not None:
        timer.cancel()
