"""``<run dir>/metrics.jsonl``: one JSON object per event, flushed at once.

Each record holds ``event`` (``collect``, ``train`` or ``eval``), ``train_iter``, ``env_steps``,
``wall_time`` (seconds of the run, continued from the checkpoint's on a resume) and the event's
namespaced metrics (``eval/return_mean`` ...). Scripts read it with one ``json.loads`` per line.

A resumed run writes, before its first record, one ``{"event": "resume", "checkpoint": PATH,
"train_iter", "env_steps", "wall_time"}`` record with the checkpoint's counters: the records
above that ``wall_time`` were logged after the checkpoint was saved, by a process that did not
reach the next one (a crash, a signal, a rewind), and the resumed run logs that stretch again.
:func:`lzkernel.runinfo.read_history` (``lzkernel plot``, ``lzkernel status``) drops them; a
script doing it by hand keeps, at each resume record, the records with ``wall_time`` at most its
own. A resume that records nothing (its budget already spent) writes no resume record either.
"""
from __future__ import annotations

import json
import math
from typing import IO, Any, Mapping

from lzkernel import hookimpl
from lzkernel.runinfo import RESUME_EVENT

_files: dict[int, IO[str]] = {}
#: run → the resume record still to write before its first record (resumed runs only)
_resumed: dict[int, dict[str, Any]] = {}


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/Inf; keep the information as text
    return value


def _write(run: Any, event: str, metrics: Mapping[str, float]) -> None:
    f = _files.get(id(run))
    if f is None:
        return
    record = {"event": event, **run.record(metrics)}
    marker = _resumed.pop(id(run), None)
    lines = ([] if marker is None else [marker]) + [record]
    try:
        f.write("".join(json.dumps({k: _clean(v) for k, v in r.items()}) + "\n" for r in lines))
        f.flush()
    except OSError as exc:  # buffered writes fail without a file name: give it one
        if exc.filename is None:
            exc.filename = f.name
        raise


def _resume_record(run: Any) -> dict[str, Any]:
    """The resume record of ``run``'s checkpoint: its counters and wall time from its ``meta.json``
    (a checkpoint written before meta held ``wall_time`` gives none: readers then go by
    ``train_iter``)."""
    record: dict[str, Any] = {"event": RESUME_EVENT, "checkpoint": str(run.resume_path)}
    meta = run.resume_meta
    for key in ("train_iter", "env_steps", "wall_time"):
        if isinstance(meta.get(key), (int, float)):
            record[key] = meta[key]
    return record


@hookimpl
def lzkernel_run_start(run: Any) -> None:
    if run.dir is not None:
        _files[id(run)] = open(run.dir / "metrics.jsonl", "a", encoding="utf-8")
        if run.resume_path is not None:
            _resumed[id(run)] = _resume_record(run)


@hookimpl
def lzkernel_after_collect(run: Any, metrics: Mapping[str, float]) -> None:
    _write(run, "collect", metrics)


@hookimpl
def lzkernel_after_train(run: Any, metrics: Mapping[str, float]) -> None:
    _write(run, "train", metrics)


@hookimpl
def lzkernel_after_eval(run: Any, metrics: Mapping[str, float]) -> None:
    _write(run, "eval", metrics)


@hookimpl
def lzkernel_run_end(run: Any, error: BaseException | None) -> None:
    _resumed.pop(id(run), None)
    f = _files.pop(id(run), None)
    if f is None:
        return
    try:
        f.close()
    except OSError:
        if error is None:
            raise  # a run that ends because of another error reports that one, not this
