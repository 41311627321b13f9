"""``<run dir>/summary.json``: how the run ended, in one small file (what a script or a person
reads first; ``metrics.jsonl`` has the history).

Written on rank 0 when the run ends, however it ends (finished, stopped by a signal, failed), by
replacing the file atomically::

    {"status": "finished" | "stopped" | "failed",
     "exit_code": 0 | 128 + signal | 1 | 2,
     "stop_reason": "solved: eval/return_mean 200 reached the evaluator's stop value",
     "error": "ValueError: ..." | null,
     "train_iter": 1200, "env_steps": 8123, "wall_time": 151.2,
     "eval": {"count": 7, "last": {...}, "best": {...}},   # return_mean, train_iter, env_steps, wall_time
     "last_checkpoint": "runs/x/ckpt/step_000000001200" | null,
     "resumed_from": "runs/x/ckpt/step_000000000600" | null}

``eval`` covers the run directory's whole history: a resumed run starts from the previous
``summary.json``'s evaluations up to the step it resumed from (a resume to an earlier step drops
the later ones, as the run's history does).
"""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, Mapping

from lzkernel import ConfigError, hookimpl

#: Exit code of a run that ended with an error of this kind (``lzkernel run``'s).
_EXIT_CONFIG, _EXIT_FAILURE = 2, 1

_evals: dict[int, dict[str, Any]] = {}


def _point(run: Any, value: float) -> dict[str, Any]:
    return {"return_mean": value, "train_iter": run.train_iter, "env_steps": run.env_steps,
            "wall_time": round(run.wall_time, 3)}


def _earlier(run: Any) -> dict[str, Any]:
    """The previous ``summary.json``'s evaluations up to the resumed checkpoint's step."""
    fresh = {"count": 0, "last": None, "best": None}
    resumed = run.resume_path
    if resumed is None or run.dir is None:
        return fresh
    try:
        step = int(json.loads((Path(resumed) / "meta.json").read_text(encoding="utf-8"))["train_iter"])
        prior = json.loads((run.dir / "summary.json").read_text(encoding="utf-8"))["eval"]
    except (OSError, ValueError, KeyError, TypeError):
        return fresh  # no summary yet (an interrupted first run), or another run dir's checkpoint
    if not isinstance(prior, dict) or prior.get("last") is None or prior["last"].get("train_iter", 0) > step:
        return fresh  # a rewind: the later evaluations belong to an abandoned history
    return prior


@hookimpl
def lzkernel_run_start(run: Any) -> None:
    if run.is_main and run.dir is not None:
        _evals[id(run)] = _earlier(run)


@hookimpl
def lzkernel_after_eval(run: Any, metrics: Mapping[str, float]) -> None:
    ev = _evals.get(id(run))
    value = metrics.get("eval/return_mean")
    if ev is None or not isinstance(value, (int, float)):
        return
    ev["count"] += 1
    ev["last"] = _point(run, float(value))
    if ev["best"] is None or float(value) > ev["best"]["return_mean"]:
        ev["best"] = ev["last"]


def _outcome(run: Any, error: BaseException | None) -> tuple[str, int]:
    if error is not None:
        if isinstance(error, KeyboardInterrupt):
            return "stopped", 128 + signal.SIGINT
        return "failed", _EXIT_CONFIG if isinstance(error, ConfigError) else _EXIT_FAILURE
    if run.stop_signal is not None:
        return "stopped", 128 + run.stop_signal
    return "finished", 0


@hookimpl
def lzkernel_run_end(run: Any, error: BaseException | None) -> None:
    ev = _evals.pop(id(run), None)
    if ev is None:
        return
    status, code = _outcome(run, error)
    summary = {
        "status": status, "exit_code": code, "stop_reason": run.stop_reason,
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "train_iter": run.train_iter, "env_steps": run.env_steps, "wall_time": round(run.wall_time, 3),
        "eval": ev,
        "last_checkpoint": None if run.last_checkpoint is None else str(run.last_checkpoint),
        "resumed_from": None if run.resume_path is None else str(run.resume_path),
    }
    path = run.dir / "summary.json"
    tmp = path.with_name(f".summary.json.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        if error is None:
            raise  # a run that ends because of another error reports that one, not this
