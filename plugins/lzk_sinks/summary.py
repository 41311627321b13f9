"""``<run dir>/summary.json``: how the run ended, in one small file (what a script or a person
reads first; ``metrics.jsonl`` has the history).

Written on rank 0 when the run ends, however it ends (finished, stopped by a signal, failed), by
replacing the file atomically::

    {"status": "finished" | "stopped" | "failed",
     "exit_code": 0 | 128 + signal | 1 | 2,
     "stop_reason": "solved: eval/return_mean 200 has reached evaluator.stop_value",
     "stop_kind": "solved" | "max_train_iters" | "max_env_steps" | "max_seconds" | "signal" | "peer_signal"
                  | "requested" | null,
     "error": "ValueError: ..." | null,
     "train_iter": 1200, "env_steps": 8123, "wall_time": 151.2,
     "eval": {"count": 7, "last": {...}, "best": {...}},   # return_mean, train_iter, env_steps, wall_time
     "last_checkpoint": "runs/x/ckpt/step_000000001200" | null,
     "resumed_from": "runs/x/ckpt/step_000000000600" | null}

``eval`` covers the run directory's whole history: a resumed run starts from the evaluations
``metrics.jsonl`` holds up to the step it resumed from (a resume to an earlier step drops the
later ones, as the run's history does). ``exit_code`` is ``lzkernel run``'s (this process's).
``stop_kind`` is ``run.stop_kind`` (``lzkernel.run.StopKind``), what ``stop_reason`` says in
words, for scripts; null when the loop did not reach its end (an error) or a trainer set only
``stop_reason``. ``status`` follows it: "stopped" for the kinds that end a run early.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from lzkernel import hookimpl
from lzkernel.errors import Stalled, error_line

_evals: dict[int, dict[str, Any]] = {}


def _point(return_mean: float, train_iter: int, env_steps: int, wall_time: float) -> dict[str, Any]:
    return {"return_mean": return_mean, "train_iter": train_iter, "env_steps": env_steps,
            "wall_time": round(wall_time, 3)}


def _add(ev: dict[str, Any], point: dict[str, Any]) -> None:
    # The evaluation at the resumed step is played again when its checkpoint was taken before it
    # (evaluations replay exactly): the same evaluation, not another one.
    if ev["last"] is None or ev["last"]["train_iter"] != point["train_iter"]:
        ev["count"] += 1
    ev["last"] = point
    if ev["best"] is None or point["return_mean"] > ev["best"]["return_mean"]:
        ev["best"] = point


def earlier_evals(run: Any) -> dict[str, Any]:
    """The evaluations ``metrics.jsonl`` holds up to the resumed checkpoint's step (the records
    of an abandoned history dropped, as ``lzkernel plot`` and ``lzkernel status`` read it); none
    for a fresh run."""
    from lzkernel.runinfo import read_history

    ev: dict[str, Any] = {"count": 0, "last": None, "best": None}
    if run.resume_path is None or run.dir is None or not (run.dir / "metrics.jsonl").is_file():
        return ev
    step = run.resume_meta.get("train_iter")
    if not isinstance(step, int):
        return ev
    records = read_history(run.dir, lambda r: r.get("event") == "eval").records
    for r in records:
        value = r.get("eval/return_mean")
        if isinstance(value, (int, float)) and r.get("train_iter", 0) <= step:
            _add(ev, _point(float(value), r.get("train_iter", 0), r.get("env_steps", 0), r.get("wall_time", 0.0)))
    return ev


def evals_so_far(run: Any) -> dict[str, Any]:
    """The evaluations this sink holds for ``run`` (read at its run_start), else
    :func:`earlier_evals` (the sink is off, or its run_start has not run yet)."""
    ev = _evals.get(id(run))
    return ev if ev is not None else earlier_evals(run)


@hookimpl
def lzkernel_run_start(run: Any) -> None:
    if run.is_main and run.dir is not None:
        _evals[id(run)] = earlier_evals(run)


@hookimpl
def lzkernel_after_eval(run: Any, metrics: Mapping[str, float]) -> None:
    ev = _evals.get(id(run))
    value = metrics.get("eval/return_mean")
    if ev is not None and isinstance(value, (int, float)):
        _add(ev, _point(float(value), run.train_iter, run.env_steps, run.wall_time))


def _status(run: Any, error: BaseException | None) -> str:
    """"failed" for an error, "stopped" for Ctrl-C, a signal to this process or a stop of the
    kinds that end a run early (another rank's signal, a request: ``run.stop_kind``), else
    "finished" (solved, a budget reached, or a trainer that set no kind)."""
    from lzkernel.run import INTERRUPTED_KINDS

    if error is not None:  # a stall's interruption (lzkernel.errors.Stalled) is a failure
        return "stopped" if isinstance(error, KeyboardInterrupt) and not isinstance(error, Stalled) else "failed"
    if run.stop_signal is not None or run.stop_kind in INTERRUPTED_KINDS:
        return "stopped"
    return "finished"


@hookimpl
def lzkernel_run_end(run: Any, error: BaseException | None) -> None:
    from lzkernel.checkpoint import write_text_atomic
    from lzkernel.config.redact import scrub
    from lzkernel.errors import exit_code

    ev = _evals.pop(id(run), None)
    if ev is None:
        return
    # this process's checkpoint, else the one it resumed from (a resume with nothing to do)
    last = run.last_checkpoint if run.last_checkpoint is not None else run.resume_path
    summary = {
        "status": _status(run, error), "exit_code": exit_code(error, run.stop_signal), "stop_reason": run.stop_reason,
        "stop_kind": run.stop_kind,
        "error": None if error is None else scrub(error_line(error)),
        "train_iter": run.train_iter, "env_steps": run.env_steps, "wall_time": round(run.wall_time, 3),
        "eval": ev,
        "last_checkpoint": None if last is None else str(last),
        "resumed_from": None if run.resume_path is None else str(run.resume_path),
    }
    try:
        write_text_atomic(run.dir / "summary.json", json.dumps(summary, indent=1) + "\n")
    except OSError:
        if error is None:
            raise  # a run that ends because of another error reports that one, not this
