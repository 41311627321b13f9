"""A console progress line on stderr: iterations, env steps, speed, last and best eval return.

On a terminal the line is redrawn in place at most every 0.5 s; otherwise (CI, a log file) a
line is printed at most every 10 s, and at every evaluation.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Mapping

from lzkernel import hookimpl
from lzkernel.runinfo import clock

_state: dict[int, dict[str, Any]] = {}


def _show(run: Any, force: bool = False) -> None:
    st = _state.get(id(run))
    if st is None:
        return
    now = time.monotonic()
    tty = sys.stderr.isatty()
    if not force and now - st["shown"] < (0.5 if tty else 10.0):
        return
    st["shown"] = now
    wall = max(run.wall_time, 1e-9)
    parts = [
        f"iter {run.train_iter:,}",
        f"env {run.env_steps:,}",
        f"{run.env_steps / wall:,.0f} env/s",
    ]
    if st["eval"] is not None:
        parts.append(f"eval {st['eval']:.1f} (best {st['best']:.1f})")
    if run.status_text:
        parts.append(run.status_text)
    elif st["eval"] is None and run.env_steps == 0:
        # Before the first event. Whether numba kernels will be compiled is not known here (the
        # policy is built later); the code that compiles them says so when it does
        # (lzk_common.numba_cache.ensure_cached logs it).
        parts.append("starting")
    parts.append(clock(wall))
    line = "[lzkernel] " + " | ".join(parts)
    if tty:
        sys.stderr.write("\r\x1b[K" + line)
    else:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


@hookimpl
def lzkernel_run_start(run: Any) -> None:
    if run.is_main and run.cfg.progress:
        _state[id(run)] = {"shown": 0.0, "eval": None, "best": float("-inf")}
        _show(run, force=True)  # at once: the first event may be many seconds away


@hookimpl
def lzkernel_after_collect(run: Any, metrics: Mapping[str, float]) -> None:
    _show(run)


@hookimpl
def lzkernel_after_train(run: Any, metrics: Mapping[str, float]) -> None:
    _show(run)


@hookimpl
def lzkernel_after_eval(run: Any, metrics: Mapping[str, float]) -> None:
    st = _state.get(id(run))
    if st is not None and "eval/return_mean" in metrics:
        st["eval"] = float(metrics["eval/return_mean"])
        st["best"] = max(st["best"], st["eval"])
    _show(run, force=True)


@hookimpl
def lzkernel_run_end(run: Any, error: BaseException | None) -> None:
    if id(run) in _state:
        _show(run, force=True)
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        del _state[id(run)]
