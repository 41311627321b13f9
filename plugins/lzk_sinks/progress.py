"""A console progress line on stderr: iterations, env steps, speed, last and best eval return,
the run's time and, against ``run.max_train_iters`` / ``run.max_env_steps`` / ``run.max_seconds``, the share of the
budget done and the time to go.

On a terminal the line is redrawn in place at most every 0.5 s (and at every evaluation).
Otherwise (CI, a log file) a new line is printed at most every :func:`log_gap` seconds: 10 s at
first, growing with the run's time to one a minute (a tenth of the time so far), so a day-long
run writes about 1,500 lines; an evaluation waits for the next line, which says its return. The
first line (at once) and the last (why the run ended) are always printed.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Mapping

from lzkernel import hookimpl
from lzkernel.runinfo import budget_clock, eval_text

#: seconds between redraws on a terminal
TTY_GAP_S = 0.5
#: seconds between lines otherwise: from LOG_GAP_S[0], a tenth of the run's time, up to LOG_GAP_S[1]
LOG_GAP_S = (10.0, 60.0)

_state: dict[int, dict[str, Any]] = {}


def log_gap(wall: float) -> float:
    """Seconds between two lines when stderr is not a terminal, ``wall`` seconds into the run."""
    return min(LOG_GAP_S[1], max(LOG_GAP_S[0], wall / 10.0))


def _show(run: Any, force: bool = False, final: bool = False) -> None:
    st = _state.get(id(run))
    if st is None:
        return
    now = time.monotonic()
    tty = sys.stderr.isatty()
    wall = max(run.wall_time, 1e-9)
    if not force and now - st["shown"] < (TTY_GAP_S if tty else log_gap(wall)):
        return
    st["shown"] = now
    # A resume before its checkpoint's counters are loaded: no zeros that read like a fresh start.
    loading = run.resume_path is not None and run.train_iter == 0 and run.env_steps == 0
    parts = [] if loading else [
        f"iter {run.train_iter:,}",
        f"env {run.env_steps:,}",
        f"{run.env_steps / wall:,.0f} env/s",
    ]
    if st["eval"] is not None:
        parts.append(f"eval {eval_text(st['eval'])} (best {eval_text(st['best'])})")
    if run.status_text:
        parts.append(run.status_text)
    elif loading:
        parts.append(f"resuming from {Path(run.resume_path).name}")
    elif st["eval"] is None and run.env_steps == 0:
        # Before the first event. Whether numba kernels will be compiled is not known here (the
        # policy is built later); numba's first compilation in the run is logged where it
        # happens (lzk_common.numba_cache: ensure_cached, announce_compiles).
        parts.append("starting")
    cfg = run.cfg
    parts.append(budget_clock(wall, run.train_iter, run.env_steps,
                              None if final else getattr(cfg, "max_train_iters", None),
                              None if final else getattr(cfg, "max_env_steps", None),
                              None if final else getattr(cfg, "max_seconds", None)))
    line = "[lzkernel] " + " | ".join(parts)
    if tty:
        sys.stderr.write("\r\x1b[K" + line)
    else:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _earlier_evals(run: Any) -> tuple[float | None, float]:
    """The last and best evaluation return of a resumed run's history up to its checkpoint (as
    ``summary.json`` counts them), so that the line shows them before the next evaluation;
    ``metrics.jsonl`` is read once for both sinks where the summary sink has read it already."""
    if run.resume_path is None or run.dir is None:
        return None, float("-inf")
    from lzk_sinks.summary import evals_so_far

    ev = evals_so_far(run)
    if ev["last"] is None:
        return None, float("-inf")
    return ev["last"]["return_mean"], ev["best"]["return_mean"]


@hookimpl
def lzkernel_run_start(run: Any) -> None:
    if run.is_main and run.cfg.progress:
        last, best = _earlier_evals(run)
        _state[id(run)] = {"shown": 0.0, "eval": last, "best": best}
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
    _show(run, force=sys.stderr.isatty())  # a log file gets it with its next line


@hookimpl
def lzkernel_run_end(run: Any, error: BaseException | None) -> None:
    if id(run) in _state:
        _show(run, force=True, final=True)  # the run's time, no time to go
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        del _state[id(run)]
