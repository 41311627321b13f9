"""``<run dir>/metrics.jsonl``: one JSON object per event, flushed at once.

Each record holds ``event`` (``collect``, ``train`` or ``eval``), ``train_iter``, ``env_steps``,
``wall_time`` (seconds since the run started) and the event's namespaced metrics
(``eval/return_mean`` ...). Scripts read it with one ``json.loads`` per line.
"""
from __future__ import annotations

import json
import math
from typing import IO, Any, Mapping

from lzkernel import hookimpl

_files: dict[int, IO[str]] = {}


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/Inf; keep the information as text
    return value


def _write(run: Any, event: str, metrics: Mapping[str, float]) -> None:
    f = _files.get(id(run))
    if f is None:
        return
    record = {"event": event, **run.record(metrics)}
    try:
        f.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        f.flush()
    except OSError as exc:  # buffered writes fail without a file name: give it one
        if exc.filename is None:
            exc.filename = f.name
        raise


@hookimpl
def lzkernel_run_start(run: Any) -> None:
    if run.dir is not None:
        _files[id(run)] = open(run.dir / "metrics.jsonl", "a", encoding="utf-8")


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
    f = _files.pop(id(run), None)
    if f is None:
        return
    try:
        f.close()
    except OSError:
        if error is None:
            raise  # a run that ends because of another error reports that one, not this
